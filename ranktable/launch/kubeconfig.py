"""Where the launcher's API mode connects, and with which credentials, on the standard library.

``ring-launch --from-api`` must run in any training image, so it cannot lean
on the ``kubernetes`` package to find the API server. Two sources, tried in
this order by :func:`load_client_config`:

* ``--kubeconfig FILE`` when given;
* **in cluster** (``$KUBERNETES_SERVICE_HOST`` set): the server is
  ``KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT`` (an IPv6 address is
  bracketed in the URL and the ``Host`` header), the CA bundle and the
  service-account token are the files the kubelet projects into
  ``/var/run/secrets/kubernetes.io/serviceaccount``. The token is a *bound*
  token that expires and is rotated in place, so it is never cached: the
  client reads the file again for every request (:attr:`ClientConfig.token`);
* else ``$KUBECONFIG`` (its first file) or ``~/.kube/config``.

A kubeconfig is read by :func:`parse_yaml`, which reads what ``kubectl`` and
``yaml.safe_dump`` write (block mappings and sequences, plain values folded
over several lines, quoted and block scalars) as ``yaml.safe_load`` reads
it and refuses anything else with the line and the reason (the launcher
cannot carry PyYAML); JSON kubeconfigs are read as JSON.
Its current context's cluster (``server``, ``certificate-authority``
[``-data``], ``insecure-skip-tls-verify``) and user
(``token``, ``tokenFile``, ``client-certificate`` [``-data``] with
``client-key`` [``-data``]) are used; ``exec`` and ``auth-provider``
plugins are not run: such a kubeconfig is refused with a message that says
so. Paths are relative to the kubeconfig's directory, as kubectl reads them.

Every problem here is a :class:`ApiConfigError` (``ring-launch`` exits 78):
waiting cannot fix a missing token file or CA bundle.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ranktable.frozen import record

if TYPE_CHECKING:
    from typing import Any, NoReturn, Union

#: Where the kubelet projects the service account's token, CA bundle and namespace.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_FILE = "token"
CA_FILE = "ca.crt"
HOST_ENV = "KUBERNETES_SERVICE_HOST"
PORT_ENV = "KUBERNETES_SERVICE_PORT"


class ApiConfigError(RuntimeError):
    """No usable API server configuration: the message names the file or variable to fix."""


class PluginUserError(ApiConfigError):
    """The kubeconfig's user authenticates through an ``exec`` or ``auth-provider`` plugin, which is not run here.

    ``path`` and ``context`` name the kubeconfig and its current context, for
    a caller that can run such plugins (the daemon hands them to
    kubernetes-asyncio's loader: :mod:`ringcontroller.kubeconfig`).
    """

    def __init__(self, message: str, *, path: str, context: str) -> None:
        super().__init__(message)
        self.path = path
        self.context = context


@record
class ClientConfig:
    """How to reach the API server.

    ``host``/``port`` are the TCP peer (an IPv6 address without brackets);
    ``authority`` is the URL's host part (bracketed IPv6) for the ``Host``
    header. Exactly one of ``ca_file``/``ca_data`` names the trusted CA
    unless ``insecure``; ``token_file`` is re-read for every request,
    ``token`` is a fixed bearer token; ``cert``/``key`` are PEM bytes of a
    client certificate. ``where`` says where all this came from, for messages.

    A :func:`~ranktable.frozen.record`, not a dataclass: ``dataclasses``
    loads ``inspect``, which the one-file launcher's early registration
    (:mod:`ranktable.launch.earlyreg`) would pay for before its PATCH.
    """

    host: str
    port: int
    where: str
    tls: bool = True
    ca_file: str | None = None
    ca_data: str | None = None
    insecure: bool = False
    token: str | None = None
    token_file: str | None = None
    cert: bytes | None = None
    key: bytes | None = None

    @property
    def authority(self) -> str:
        """``host:port`` as a URL and a ``Host`` header write it."""
        return f"{_bracketed(self.host)}:{self.port}"

    def bearer(self) -> str | None:
        """The bearer token for the next request: the token file read now (it rotates), else the fixed token."""
        if self.token_file:
            try:
                with open(self.token_file, encoding="utf-8") as handle:
                    token = handle.read().strip()
            except OSError as err:
                raise ApiConfigError(f"cannot read the token file {self.token_file}: {err.strerror}") from None
            if not token:
                raise ApiConfigError(f"the token file {self.token_file} is empty")
            return token
        return self.token


def load_client_config(
    kubeconfig: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    service_account_dir: str = SERVICE_ACCOUNT_DIR,
) -> ClientConfig:
    """The configuration ``ring-launch --from-api`` uses (order in the module docstring)."""
    env = os.environ if environ is None else environ
    if kubeconfig:
        return kubeconfig_config(kubeconfig)
    if env.get(HOST_ENV):
        return in_cluster_config(env, service_account_dir=service_account_dir)
    path = (env.get("KUBECONFIG") or "").split(os.pathsep)[0] or os.path.join(
        os.path.expanduser("~"), ".kube", "config"
    )
    if not os.path.exists(path):
        raise ApiConfigError(
            f"not in a pod (${HOST_ENV} is not set) and no kubeconfig at {path}: "
            "run in a pod with a service account, or pass --kubeconfig"
        )
    return kubeconfig_config(path)


def in_cluster_config(environ: Mapping[str, str], *, service_account_dir: str = SERVICE_ACCOUNT_DIR) -> ClientConfig:
    """The pod's service account: ``$KUBERNETES_SERVICE_HOST``/``PORT``, its CA bundle and token file."""
    host = environ.get(HOST_ENV, "").strip()
    port_text = environ.get(PORT_ENV, "").strip() or "443"
    if not host:
        raise ApiConfigError(f"${HOST_ENV} is not set: not running in a pod")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise ApiConfigError(f"${PORT_ENV}={port_text!r} is not a port number") from None
    token_file = os.path.join(service_account_dir, TOKEN_FILE)
    ca_file = os.path.join(service_account_dir, CA_FILE)
    for what, path in (("service account token", token_file), ("CA bundle", ca_file)):
        if not os.path.isfile(path):
            raise ApiConfigError(
                f"in-cluster API access needs the {what} at {path}, which is missing "
                "(automountServiceAccountToken: false on the pod or its service account?)"
            )
    config = ClientConfig(
        host=host, port=port, ca_file=ca_file, token_file=token_file, where=f"service account ({service_account_dir})"
    )
    config.bearer()  # unreadable now: say so now, not at the first request
    return config


def kubeconfig_config(path: str) -> ClientConfig:
    """The current context of the kubeconfig at ``path`` (see the module docstring for what is read)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as err:
        raise ApiConfigError(f"cannot read kubeconfig {path}: {err.strerror}") from None
    try:
        doc = json.loads(text) if text.lstrip().startswith("{") else parse_yaml(text)
    except (ValueError, YamlError) as err:
        raise ApiConfigError(f"kubeconfig {path}: {err}") from None
    if not isinstance(doc, dict):
        raise ApiConfigError(f"kubeconfig {path}: not a mapping")
    base = os.path.dirname(os.path.abspath(path))
    context_name = doc.get("current-context")
    context = _named(doc, "contexts", "context", context_name, path)
    cluster = _named(doc, "clusters", "cluster", context.get("cluster"), path)
    user = _named(doc, "users", "user", context.get("user"), path) if context.get("user") else {}
    for plugin in ("exec", "auth-provider"):
        if user.get(plugin):
            raise PluginUserError(
                f"kubeconfig {path}: user {context.get('user')!r} authenticates through {plugin!r}, which ring-launch "
                "does not run: use a token or client-certificate kubeconfig, or run in a pod",
                path=path,
                context=str(context_name or ""),
            )
    server = str(cluster.get("server") or "")
    match = re.fullmatch(r"(https?)://(\[[^\]]+\]|[^:/\[\]]+)(?::(\d+))?/?", server)
    if not match:
        raise ApiConfigError(f"kubeconfig {path}: cluster server {server!r} is not http(s)://HOST[:PORT]")
    scheme, host, port = match.group(1), match.group(2).strip("[]"), match.group(3)
    where = f"kubeconfig {path}"
    ca_file, ca_data = _file_or_data(cluster, "certificate-authority", base, path)
    cert_file, cert_data = _file_or_data(user, "client-certificate", base, path)
    key_file, key_data = _file_or_data(user, "client-key", base, path)
    cert = cert_data.encode() if cert_data is not None else _read_bytes(cert_file, path) if cert_file else None
    key = key_data.encode() if key_data is not None else _read_bytes(key_file, path) if key_file else None
    if (cert is None) != (key is None):
        raise ApiConfigError(f"kubeconfig {path}: a client certificate needs both client-certificate and client-key")
    token_file = user.get("tokenFile")
    return ClientConfig(
        host=host,
        port=int(port) if port else (443 if scheme == "https" else 80),
        where=where,
        tls=scheme == "https",
        ca_file=ca_file,
        ca_data=ca_data,
        insecure=_truthy(cluster.get("insecure-skip-tls-verify")),
        token=str(user["token"]) if user.get("token") else None,
        token_file=os.path.join(base, str(token_file)) if token_file else None,
        cert=cert,
        key=key,
    )


def _named(doc: dict[str, Any], section: str, field: str, name: Any, path: str) -> dict[str, Any]:
    entries = doc.get(section) or []
    if not isinstance(entries, list):
        raise ApiConfigError(f"kubeconfig {path}: {section} is not a list")
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name and isinstance(entry.get(field) or {}, dict):
            return dict(entry.get(field) or {})
    if name is None and len(entries) == 1 and isinstance(entries[0], dict):
        return dict(entries[0].get(field) or {})
    raise ApiConfigError(f"kubeconfig {path}: no {field} named {name!r} (current-context)")


def _file_or_data(entry: dict[str, Any], key: str, base: str, path: str) -> tuple[str | None, str | None]:
    data = entry.get(f"{key}-data")
    if data:
        try:
            return None, base64.b64decode(str(data), validate=True).decode("ascii")
        except (binascii.Error, UnicodeDecodeError):
            raise ApiConfigError(f"kubeconfig {path}: {key}-data is not base64 of a PEM text") from None
    name = entry.get(key)
    return (os.path.join(base, str(name)) if name else None), None


def _read_bytes(file: str, path: str) -> bytes:
    try:
        with open(file, "rb") as handle:
            return handle.read()
    except OSError as err:
        raise ApiConfigError(f"kubeconfig {path}: cannot read {file}: {err.strerror}") from None


def _truthy(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


def _bracketed(host: str) -> str:
    try:
        return f"[{host}]" if isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address) else host
    except ValueError:
        return host


# --- a reader for kubeconfig's YAML -------------------------------------------------------------

if TYPE_CHECKING:
    Yaml = Union[dict[str, Any], list[Any], str, int, bool, None]


class YamlError(ValueError):
    """Text outside the YAML :func:`parse_yaml` reads; the message names the line and what to change."""


#: Plain words YAML 1.1 (PyYAML's ``safe_load``) reads as booleans and null, in their exact spellings.
_BOOLS = {
    form: value
    for word, value in (("yes", True), ("no", False), ("true", True), ("false", False), ("on", True), ("off", False))
    for form in (word, word.capitalize(), word.upper())
}
_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
_DECIMAL = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")
#: Plain words PyYAML reads as anything else but a string: other integer forms, floats,
#: timestamps, ``<<`` and ``=``. The reader refuses them (quoted, they are strings).
_NOT_A_STRING = re.compile(
    r"[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+"
    r"|[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
    r"|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"
    r"|[0-9]{4}-[0-9]{2}-[0-9]{2}"
    r"|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]*)?"
    r"(?:[ \t]*(?:Z|[-+][0-9]{1,2}(?::[0-9]{2})?))?"
    r"|<<|="
)
#: What YAML forbids in a document at all (PyYAML refuses it too).
_NOT_PRINTABLE = re.compile("[^\t\n\r\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_ESCAPES = {
    "0": "\0",
    "a": "\a",
    "b": "\b",
    "t": "\t",
    "\t": "\t",
    "n": "\n",
    "v": "\v",
    "f": "\f",
    "r": "\r",
    "e": "\x1b",
    " ": " ",
    '"': '"',
    "/": "/",
    "\\": "\\",
    "N": "\x85",
    "_": "\xa0",
    "L": "\u2028",
    "P": "\u2029",
}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_UNREAD = "flow collections with content, anchors (&), aliases (*), tags (!) and directives are not read"


def parse_yaml(text: str) -> Yaml:
    """Parse the block-style YAML kubeconfig writers produce, as ``yaml.safe_load`` would, or raise :class:`YamlError`.

    Read: one document (an optional ``---`` first, an optional ``...``
    last); nested block mappings and ``-`` sequences (also at their key's
    indent, as kubectl and PyYAML write them); ``{}`` and ``[]``; plain
    scalars over several lines (what a writer folds at 80 columns), single-
    and double-quoted scalars over several lines with YAML's folding and
    every escape, literal (``|``) and folded (``>``) block scalars with
    chomping and indentation indicators; comments. Plain words are read as
    YAML 1.1 reads them: ``true``/``yes``/``on`` (and ``false``...) as
    booleans, ``null``/``~``/nothing as None, decimal integers as ints, the
    rest as strings.

    Refused, with the line and the reason: flow collections with content,
    anchors, aliases, tags, directives, ``?`` keys, a second document, tabs
    outside quoted and block scalars, duplicate keys, keys that are not
    strings, and plain words YAML 1.1 reads as anything but a string, an
    int, a boolean or null (``1.5``, ``0x1f``, ``2026-01-31``, ``<<``:
    quoted, they are strings). ``tests/unit/test_kubeconfig_yaml.py``
    checks the reader against ``yaml.safe_load`` on what ``yaml.safe_dump``
    and kubectl write.
    """
    if text.startswith("\ufeff"):
        text = text[1:]
    text = text.replace("\r\n", "\n")
    bad = _NOT_PRINTABLE.search(text) or re.search("[\r\x85\u2028\u2029]", text)
    if bad:
        line = text.count("\n", 0, bad.start()) + 1
        raise YamlError(
            f"line {line}: character U+{ord(bad.group()):04X}: a control character or a line break "
            "other than \\n (in a double-quoted value, write it as an escape)"
        )
    return _Reader(text.split("\n")).document()


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _is_marker(line: str) -> bool:
    return line[:3] in ("---", "...") and line[3:4] in ("", " ", "\t")


def _is_entry(content: str) -> bool:
    return content == "-" or content[:2] in ("- ", "-\t")


def _resolved(word: str, number: int) -> Yaml:
    if word in _NULLS:
        return None
    if word in _BOOLS:
        return _BOOLS[word]
    if _DECIMAL.fullmatch(word):
        return int(word)
    if _NOT_A_STRING.fullmatch(word):
        raise YamlError(f"line {number}: {word!r} is a number, date or merge key to YAML 1.1 readers: quote it")
    return word


class _Reader:
    """One pass over a document's lines; ``self.i`` is the next line not yet read."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.i = 0

    def error(self, index: int, message: str) -> YamlError:
        return YamlError(f"line {index + 1}: {message}")

    def peek(self) -> int | None:
        """The index of the next line with content or a document marker (blank and comment lines skipped)."""
        while self.i < len(self.lines):
            line = self.lines[self.i]
            body = line.lstrip(" ")
            if "\t" in line[: len(line) - len(line.lstrip(" \t"))]:
                raise self.error(self.i, "tab in indentation")
            if body and not body.startswith("#"):
                return self.i
            self.i += 1
        return None

    def next_content(self) -> int | None:
        """:meth:`peek`, but None at a document marker (a node ends there)."""
        index = self.peek()
        return None if index is None or _is_marker(self.lines[index]) else index

    def marker_line(self, index: int) -> None:
        rest = self.lines[index][3:].strip(" \t")
        if rest and not rest.startswith("#"):
            raise self.error(index, f"text after {self.lines[index][:3]!r}: {rest[:20]!r}")
        self.i = index + 1

    def document(self) -> Yaml:
        index = self.peek()
        if index is not None and self.lines[index].startswith("%"):
            raise self.error(index, _UNREAD)
        if index is not None and self.lines[index].startswith("---") and _is_marker(self.lines[index]):
            self.marker_line(index)
        value = self.node(-1)
        index = self.peek()
        if index is not None and self.lines[index].startswith("...") and _is_marker(self.lines[index]):
            self.marker_line(index)
            index = self.peek()
            if index is not None:
                raise self.error(index, "more than one document (a kubeconfig is one)")
        if index is not None:
            if _is_marker(self.lines[index]):
                raise self.error(index, "more than one document (a kubeconfig is one)")
            raise self.error(
                index, "unexpected indentation (no mapping or sequence of the lines above is at this indent)"
            )
        return value

    def node(self, parent: int) -> Yaml:
        """The node on the next content line when it is indented more than ``parent``, else None (an empty value)."""
        index = self.next_content()
        if index is None or _indent(self.lines[index]) <= parent:
            return None
        return self.node_at(index, parent)

    def node_at(self, index: int, parent: int) -> Yaml:
        column = _indent(self.lines[index])
        content = self.lines[index][column:]
        if _is_entry(content):
            return self.sequence(column)
        if content[:1] == "?" and content[1:2] in ("", " ", "\t"):
            raise self.error(index, "`?` keys are not read")
        if self.key(index, column) is not None:
            return self.mapping(column)
        return self.scalar(index, column, parent)

    def sequence(self, column: int) -> list[Any]:
        items: list[Any] = []
        while True:
            index = self.next_content()
            if index is None:
                return items
            line = self.lines[index]
            if _indent(line) != column or not _is_entry(line[column:]):
                return items
            rest = line[column + 1 :]
            if not rest.strip(" ") or rest.lstrip(" ").startswith("#"):
                self.i = index + 1
                items.append(self.node(column))
                continue
            if rest.startswith("\t") or "\t" in rest[: len(rest) - len(rest.lstrip(" \t"))]:
                raise self.error(index, "tab after `-`")
            self.lines[index] = " " * (column + 1) + rest  # the item's own node, at its own column
            items.append(self.node_at(index, column))

    def mapping(self, column: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        while True:
            index = self.next_content()
            if index is None:
                return result
            line = self.lines[index]
            if _indent(line) != column or _is_entry(line[column:]):
                return result
            split = self.key(index, column)
            if split is None:
                raise self.error(index, "expected `key: value` (or a value's line is indented less than its key)")
            key, start = split
            if key in result:
                raise self.error(index, f"duplicate key {key!r}")
            rest = line[start:]
            if rest and not rest.startswith("#"):
                result[key] = self.scalar(index, start, column)
                continue
            self.i = index + 1
            below = self.next_content()
            if below is not None and _indent(self.lines[below]) == column and _is_entry(self.lines[below][column:]):
                result[key] = self.sequence(column)  # a sequence at its key's indent
            else:
                result[key] = self.node(column)

    def key(self, index: int, column: int) -> tuple[str, int] | None:
        """(key, column where its value starts) when the line at ``column`` opens with ``key:``, else None."""
        line = self.lines[index]
        content = line[column:]
        if content[:1] in ("'", '"'):
            saved = self.i
            key, end_index, end = self.quoted(index, column)
            self.i = saved
            after = line[end:].lstrip(" ")
            if end_index != index or after[:1] != ":" or after[1:2] not in ("", " ", "\t"):
                return None
            start = len(line) - len(after) + 1
        else:
            position = 0
            while position < len(content):
                char = content[position]
                if char == "#" and position and content[position - 1] in " \t":
                    return None
                if char == ":" and content[position + 1 : position + 2] in ("", " ", "\t"):
                    break
                position += 1
            else:
                return None
            word = content[:position].rstrip(" ")
            if not word or not _plain_start(word):
                return None  # not a key: the value reader says why
            if "\t" in word:
                raise self.error(index, "tab in a key")
            resolved = _resolved(word, index + 1)
            if not isinstance(resolved, str):
                raise self.error(index, f"key {word!r} is not a string to YAML 1.1 readers: quote it")
            key, start = resolved, column + position + 1
        rest = line[start:]
        if rest.lstrip(" ").startswith("\t"):
            raise self.error(index, "tab after `:`")
        return key, len(line) - len(rest.lstrip(" "))

    def _unread(self, index: int, text: str) -> NoReturn:
        raise self.error(index, f"{text[:20]!r}: {_UNREAD}")

    def scalar(self, index: int, column: int, parent: int) -> Yaml:
        """The scalar whose text starts at ``column`` of line ``index``; lines below it belong to it when indented more than ``parent``."""
        text = self.lines[index][column:]
        if text[0] in "|>":
            return self.block(index, column, parent)
        if text[0] in "'\"":
            value, end_index, end = self.quoted(index, column)
            after = self.lines[end_index][end:].lstrip(" ")
            if after and not after.startswith("#"):
                raise self.error(end_index, f"text after a quoted value: {after[:20]!r}")
            self.i = end_index + 1
            return value
        if text[:2] in ("{}", "[]") and (not text[2:].strip(" ") or text[2:].lstrip(" ").startswith("#")):
            self.i = index + 1
            return {} if text[0] == "{" else []
        if not _plain_start(text):
            if text[0] in "-?:":
                raise self.error(index, f"{text[:20]!r}: `{text[0]} ` where a value was expected")
            self._unread(index, text)
        return self.plain(index, column, parent)

    def plain(self, index: int, column: int, parent: int) -> Yaml:
        """A plain scalar, folded over its continuation lines (indented more than ``parent``)."""
        words: list[str] = []
        text, breaks = self.lines[index][column:], 0
        while True:
            comment = re.search(r"[ \t]#", text)
            part = (text[: comment.start()] if comment else text).rstrip(" ")
            if "\t" in part:
                raise self.error(index, "tab in a plain value (quote the value)")
            if ": " in part or part.endswith(":"):
                raise self.error(index, f"{part[:40]!r}: `: ` in a plain value (quote the value)")
            words.append(("\n" * breaks if breaks else " ") + part if words else part)
            if comment:
                break
            below, breaks = index + 1, 0
            while below < len(self.lines) and not self.lines[below].strip(" "):
                below, breaks = below + 1, breaks + 1
            if below >= len(self.lines) or _is_marker(self.lines[below]):
                break
            line = self.lines[below]
            if _indent(line) <= parent or line.lstrip(" ").startswith("#"):
                break
            if line[_indent(line)] == "\t":
                raise self.error(below, "tab in indentation")
            index, text = below, line[_indent(line) :]
        self.i = index + 1
        value = "".join(words)
        return _resolved(value, index + 1) if "\n" not in value else value

    def quoted(self, index: int, column: int) -> tuple[str, int, int]:
        """A quoted scalar from ``column`` of line ``index``: (value, line index and column after its closing quote)."""
        lines = self.lines
        quote = lines[index][column]
        double = quote == '"'
        out: list[str] = []
        spaces: list[str] = []  # literal blanks not yet known to be inside the line
        position = column + 1
        while True:
            text = lines[index]
            escaped_break = False
            while position < len(text):
                char = text[position]
                if char in " \t":
                    spaces.append(char)
                    position += 1
                    continue
                out += spaces
                spaces = []
                if char == quote:
                    if not double and text[position + 1 : position + 2] == "'":
                        out.append("'")
                        position += 2
                        continue
                    return "".join(out), index, position + 1
                if double and char == "\\":
                    code = text[position + 1 : position + 2]
                    if not code:
                        escaped_break = True
                        position += 1
                        break
                    if code in _ESCAPES:
                        out.append(_ESCAPES[code])
                        position += 2
                        continue
                    width = _HEX_ESCAPES.get(code)
                    digits = text[position + 2 : position + 2 + width] if width else ""
                    if not width or len(digits) != width or not re.fullmatch(r"[0-9A-Fa-f]+", digits):
                        raise self.error(index, f"unknown escape \\{code}{digits} in a double-quoted value")
                    try:
                        out.append(chr(int(digits, 16)))
                    except ValueError:
                        raise self.error(index, f"escape \\{code}{digits} is no character") from None
                    position += 2 + width
                    continue
                out.append(char)
                position += 1
            spaces = []  # blanks before a line break are not part of the value
            breaks = 0
            index += 1
            while True:
                if index >= len(lines):
                    raise self.error(index - 1, f"the {quote}-quoted value does not end")
                if _is_marker(lines[index]):
                    raise self.error(index, "a document marker inside a quoted value")
                if lines[index].strip(" \t"):
                    break
                breaks += 1
                index += 1
            if escaped_break:
                out.append("\n" * breaks)
            else:
                out.append("\n" * breaks if breaks else " ")
            position = len(lines[index]) - len(lines[index].lstrip(" \t"))

    def block(self, index: int, column: int, parent: int) -> str:
        """A literal (``|``) or folded (``>``) block scalar, as YAML 1.1 reads it (PyYAML's folding)."""
        lines = self.lines
        header = lines[index][column:]
        match = re.match(r"([|>])(?:([-+])([1-9])?|([1-9])([-+])?)?(?=$| )", header)
        rest = header[match.end() :].strip(" ") if match else ""
        if not match or (rest and not rest.startswith("#")):
            raise self.error(index, f"{header[:20]!r}: a block scalar's header is `|` or `>`, then `-`/`+` and a digit")
        folded = match.group(1) == ">"
        chomp = match.group(2) or match.group(5)
        increment = match.group(3) or match.group(4)
        minimum = max(parent + 1, 1)
        last = len(lines) - 1  # the last line has no line break after it

        def is_break(i: int, width: int | None) -> bool:
            return i < last and not lines[i].strip(" ") and (width is None or len(lines[i]) <= width)

        below = index + 1
        breaks: list[str] = []
        if increment is None:
            widest = 0
            while is_break(below, None):
                widest = max(widest, len(lines[below]))
                breaks.append("\n")
                below += 1
            if below <= last:
                widest = max(widest, _indent(lines[below]) if lines[below].strip(" ") else len(lines[below]))
            indent = max(minimum, widest)
        else:
            indent = minimum + int(increment) - 1
            while is_break(below, indent):
                breaks.append("\n")
                below += 1

        def is_content(i: int) -> bool:
            return i <= last and lines[i][:indent] == " " * indent and len(lines[i]) > indent

        chunks: list[str] = []
        line_break = ""
        while is_content(below):
            chunks += breaks
            leading_non_space = lines[below][indent] not in " \t"
            chunks.append(lines[below][indent:])
            line_break = "\n" if below < last else ""
            below += 1
            breaks = []
            while is_break(below, indent):
                breaks.append("\n")
                below += 1
            if not is_content(below):
                break
            if folded and line_break == "\n" and leading_non_space and lines[below][indent] not in " \t":
                if not breaks:
                    chunks.append(" ")
            else:
                chunks.append(line_break)
        if chomp != "-":
            chunks.append(line_break)
        if chomp == "+":
            chunks += breaks
        self.i = below
        return "".join(chunks)


def _plain_start(text: str) -> bool:
    """Whether a plain scalar may start with ``text`` (YAML's rule in block context)."""
    first, second = text[0], text[1:2]
    if first in "-?:":
        return second not in ("", " ", "\t")
    return first not in ",[]{}#&*!|>'\"%@`"
