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

A kubeconfig is read by :func:`parse_yaml`, a reader for the block-style YAML
subset that ``kubectl``, client-go and PyYAML write (mappings, sequences,
plain and quoted scalars, ``{}``/``[]``); JSON kubeconfigs are read as JSON.
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

from ranktable.frozen import record

TYPE_CHECKING = False  # typing is not imported at run time (see ranktable.frozen)
if TYPE_CHECKING:
    from typing import Any, Union

#: Where the kubelet projects the service account's token, CA bundle and namespace.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_FILE = "token"
CA_FILE = "ca.crt"
HOST_ENV = "KUBERNETES_SERVICE_HOST"
PORT_ENV = "KUBERNETES_SERVICE_PORT"


class ApiConfigError(RuntimeError):
    """No usable API server configuration: the message names the file or variable to fix."""


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
            raise ApiConfigError(
                f"kubeconfig {path}: user {context.get('user')!r} authenticates through {plugin!r}, which ring-launch "
                "does not run: use a token or client-certificate kubeconfig, or run in a pod"
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
    Yaml = Union[dict[str, Any], list[Any], str, int, float, bool, None]


class YamlError(ValueError):
    """Text outside the YAML subset :func:`parse_yaml` reads; the message names the line."""


_PLAIN_WORDS: dict[str, Yaml] = {"true": True, "false": False, "null": None, "~": None, "": None}


def parse_yaml(text: str) -> Yaml:
    """Parse block-style YAML: nested mappings and ``-`` sequences of scalars, ``{}``, ``[]``.

    Scalars: plain (``true``/``false``/``null``, integers, else a string),
    single- and double-quoted (with ``\\``-escapes in double quotes).
    Comments, ``---`` and ``...`` are skipped. Anchors, tags, flow
    collections with content and block scalars (``|``, ``>``) raise
    :class:`YamlError`: kubeconfig writers do not produce them.
    """
    lines: list[tuple[int, int, str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = _strip_comment(raw).rstrip()
        if not stripped.strip() or stripped.strip() in ("---", "..."):
            continue
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise YamlError(f"line {number}: tab in indentation")
        lines.append((number, len(stripped) - len(stripped.lstrip(" ")), stripped.strip()))
    if not lines:
        return None
    value, end = _block(lines, 0, lines[0][1])
    if end != len(lines):
        raise YamlError(f"line {lines[end][0]}: unexpected indentation")
    return value


def _block(lines: list[tuple[int, int, str]], start: int, indent: int) -> tuple[Yaml, int]:
    if lines[start][2].startswith("- ") or lines[start][2] == "-":
        return _sequence(lines, start, indent)
    return _mapping(lines, start, indent)


def _sequence(lines: list[tuple[int, int, str]], start: int, indent: int) -> tuple[list[Any], int]:
    items: list[Any] = []
    i = start
    while i < len(lines) and lines[i][1] == indent and (lines[i][2].startswith("- ") or lines[i][2] == "-"):
        number, _, content = lines[i]
        rest = content[1:].lstrip(" ")
        if not rest:
            if i + 1 < len(lines) and lines[i + 1][1] > indent:
                value, i = _block(lines, i + 1, lines[i + 1][1])
            else:
                value, i = None, i + 1
            items.append(value)
            continue
        if _mapping_key(rest) is not None:
            # "- key: value" opens a mapping whose further keys align with "key".
            inner = indent + (len(content) - len(rest))
            value, i = _mapping(lines[:i] + [(number, inner, rest)] + lines[i + 1 :], i, inner)
            items.append(value)
            continue
        items.append(_scalar(rest, number))
        i += 1
    return items, i


def _mapping(lines: list[tuple[int, int, str]], start: int, indent: int) -> tuple[dict[str, Any], int]:
    result: dict[str, Any] = {}
    i = start
    while i < len(lines) and lines[i][1] == indent:
        number, _, content = lines[i]
        split = _mapping_key(content)
        if split is None:
            raise YamlError(f"line {number}: expected `key: value`")
        key, rest = split
        if key in result:
            raise YamlError(f"line {number}: duplicate key {key!r}")
        if rest:
            result[key] = _scalar(rest, number)
            i += 1
        elif i + 1 < len(lines) and (
            lines[i + 1][1] > indent or (lines[i + 1][1] == indent and lines[i + 1][2].startswith("- "))
        ):
            result[key], i = _block(lines, i + 1, lines[i + 1][1])
        else:
            result[key] = None
            i += 1
    return result, i


def _mapping_key(content: str) -> tuple[str, str] | None:
    if content[:1] in ("'", '"'):
        end = _quoted_end(content)
        if end is None or content[end : end + 1] != ":" or content[end + 1 : end + 2] not in ("", " "):
            return None
        return str(_scalar(content[:end], 0)), content[end + 1 :].strip()
    if content[0] in "{[&*!|>%@`#,":
        return None
    colon = content.find(":")
    while colon >= 0:  # a plain key ends at the first ":" followed by a space or the end
        if colon + 1 == len(content) or content[colon + 1] == " ":
            key = content[:colon].rstrip()
            return (key, content[colon + 1 :].strip()) if key else None
        colon = content.find(":", colon + 1)
    return None


def _quoted_end(content: str) -> int | None:
    quote, i = content[0], 1
    while i < len(content):
        if quote == '"' and content[i] == "\\":
            i += 2
            continue
        if content[i] == quote:
            if quote == "'" and content[i + 1 : i + 2] == "'":
                i += 2
                continue
            return i + 1
        i += 1
    return None


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", '"': '"', "\\": "\\", "/": "/", " ": " "}


def _scalar(text: str, number: int) -> Yaml:
    if text in ("{}", "[]"):
        return {} if text == "{}" else []
    if text[0] in "{[&*!|>%@`":
        raise YamlError(f"line {number}: {text[:20]!r}: flow collections, anchors, tags, block scalars unsupported")
    if text[0] in ("'", '"'):
        if _quoted_end(text) != len(text):
            raise YamlError(f"line {number}: unterminated or trailing text after {text[:20]!r}")
        body = text[1:-1]
        if text[0] == "'":
            return body.replace("''", "'")
        out, i = [], 0
        while i < len(body):
            if body[i] != "\\":
                out.append(body[i])
                i += 1
                continue
            code = body[i + 1 : i + 2]
            if code in _ESCAPES:
                out.append(_ESCAPES[code])
                i += 2
            elif code in ("x", "u", "U"):
                width = {"x": 2, "u": 4, "U": 8}[code]
                try:
                    out.append(chr(int(body[i + 2 : i + 2 + width], 16)))
                except ValueError:
                    raise YamlError(f"line {number}: bad escape in {text[:20]!r}") from None
                i += 2 + width
            else:
                raise YamlError(f"line {number}: unsupported escape \\{code}")
        return "".join(out)
    if text in _PLAIN_WORDS or text.lower() in ("true", "false", "null"):
        return _PLAIN_WORDS[text.lower()]
    if re.fullmatch(r"[-+]?[0-9]+", text):
        return int(text)
    return text


def _strip_comment(line: str) -> str:
    """``line`` without a trailing ``# comment`` (a ``#`` that starts the line or follows a space, outside quotes)."""
    quote: str | None = None
    i = 0
    while i < len(line):
        char = line[i]
        if quote:
            if quote == '"' and char == "\\":
                i += 1
            elif char == quote and quote == "'" and line[i + 1 : i + 2] == "'":
                i += 1
            elif char == quote:
                quote = None
        elif char in ("'", '"') and (i == 0 or line[i - 1] in " -:[{,"):
            quote = char
        elif char == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
        i += 1
    return line
