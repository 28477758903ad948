"""The launcher's HTTP to the API server, on ``_socket`` and ``_ssl`` (the C modules under ``socket``, ``ssl``).

:class:`KubeClient` sends GET requests (and the launcher's one merge PATCH)
for one :class:`~ranktable.launch.kubeconfig.ClientConfig` over one kept-alive
connection (opened again after any error), with the bearer token read for
each request (bound service-account tokens rotate) and the client
certificate, if any, loaded into the TLS context once. It knows nothing of
ConfigMaps: :mod:`ranktable.launch.apiwatch` builds the paths and runs the
list/watch loop.

Why not ``http.client``: the one-file launcher starts in every training
container, eight at once on a two-core node, and its CPU at start is the
job's discovery overhead. Importing ``http.client`` (it loads the ``email``
package) cost about 11 ms of CPU there, of a launcher start of about 75 ms,
and ``urllib.parse`` about 1 ms more (``python3 -I -S -c "import ..."``,
CPU from ``wait4``, 30 runs); a whole ``--from-api --print json`` run of
the one-file launcher went from 69 to 55 ms of CPU (p50 of 30, dev cluster,
2026-12-02). The little HTTP/1.1 the launcher needs is here instead:
:func:`request_head` writes a request, :class:`Response` reads the status
line, the headers (names case-insensitive) and the body, delimited by
``Content-Length``, by ``Transfer-Encoding: chunked`` (a watch streams its
events as chunked JSON lines: :meth:`Response.lines` yields each line as
soon as it is complete) or by the end of the connection. :func:`quote` and
:func:`query_string` percent-encode path segments and query values. What it
does not do, as the API server never asks for it: content codings (refused;
no ``Accept-Encoding`` is sent), redirects, upgrades, proxies.

The first request can go out before the launcher is even loaded
(:meth:`KubeClient.send_first`, then :meth:`KubeClient.answer_first`): the
one-file launcher's self-registration (:mod:`ranktable.launch.earlyreg`) writes
its PATCH, loads the rest of the launcher while the API server works, reads
the answer and keeps the connection for the list and watch that follow.

Errors, so the loop can tell them apart: :class:`ApiStatusError` for an
HTTP status other than 200 (``status``, ``reason`` and the ``Status``
message the server sent), ``OSError`` for transport trouble (``_ssl.SSLError``,
timeouts, a connection closed early, and :class:`HttpProtocolError` for an
answer this reader cannot frame), and
:class:`~ranktable.launch.kubeconfig.ApiConfigError` from the configuration.
"""

from __future__ import annotations

import _socket
import _ssl
import io
import json
import os
import sys
from typing import TYPE_CHECKING

from ranktable.launch.kubeconfig import ApiConfigError, ClientConfig

if TYPE_CHECKING:
    import socket
    import ssl
    from collections.abc import Iterator
    from io import BufferedIOBase
    from typing import Any, Union

    Tls = Union[ssl.SSLContext, "_TlsContext"]

USER_AGENT = "ring-launch"
#: Seconds to connect (TCP and TLS) and, for :meth:`KubeClient.send_first`, to send.
CONNECT_TIMEOUT = 10.0
MERGE_PATCH = "application/merge-patch+json"
#: Longest status, header, chunk-size or trailer line read, and most header lines taken.
MAX_LINE = 65536
MAX_HEADERS = 100
#: Most bytes read from the socket at once, and of a refusal's body (its ``Status`` message).
BLOCK = 65536
#: The characters :func:`quote` leaves as they are (RFC 3986's unreserved set).
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_HEX = frozenset("0123456789abcdefABCDEF")


class ApiStatusError(RuntimeError):
    """The API server answered ``status`` (not 200); ``message`` is its ``Status`` object's message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.message = message


class HttpProtocolError(OSError):
    """An answer that is not HTTP/1.x as :class:`Response` reads it (status line, headers, body framing)."""


class ServerClosedError(ConnectionResetError):
    """The server closed the connection before the first byte of an answer (a kept-alive connection it dropped)."""


def quote(text: str) -> str:
    """``text`` with every UTF-8 byte outside RFC 3986's unreserved characters percent-encoded (``/`` too)."""
    return "".join(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in text.encode("utf-8"))


def query_string(query: dict[str, str]) -> str:
    """``name=value&...`` of ``query``, names and values as :func:`quote` encodes them."""
    return "&".join(f"{quote(name)}={quote(value)}" for name, value in query.items())


def request_head(method: str, target: str, headers: dict[str, str]) -> bytes:
    """The request line and ``headers`` of an HTTP/1.1 request, up to and with the empty line.

    ValueError for a line break in the target or a header (a token file
    with one inside would otherwise add a header of its own).
    """
    for text in (target, *headers, *headers.values()):
        if "\r" in text or "\n" in text:
            raise ValueError(f"a line break in the request's {'target' if text == target else 'headers'}")
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return f"{method} {target} HTTP/1.1\r\n{lines}\r\n".encode("latin-1")


class Response:
    """One HTTP/1.x answer read from ``file`` (a buffered binary reader: ``sock.makefile("rb")``).

    Creating it reads the status line and the headers (skipping ``1xx``
    interim answers); :meth:`read` or :meth:`lines` then read the body.
    ``done`` is true once the body was read to its end; ``will_close`` when
    the server will not take another request on this connection
    (``Connection: close``, HTTP/1.0, or a body that ends with the
    connection). Raises :class:`ServerClosedError` when the connection ends
    before the status line, :class:`HttpProtocolError` for anything
    malformed, and whatever the reader raises (``OSError``, timeouts).
    """

    def __init__(self, file: BufferedIOBase) -> None:
        self._file = file
        first = True
        while True:
            version, self.status, self.reason = self._status_line(first)
            first = False
            self.headers = self._header_block()
            if not 100 <= self.status < 200:
                break
        self.done = False
        connection = {token.strip().lower() for token in self.headers.get("connection", "").split(",")}
        self.will_close = version == "HTTP/1.0" or "close" in connection
        coding = self.headers.get("content-encoding", "identity").strip().lower()
        if coding != "identity":
            raise HttpProtocolError(f"unsupported Content-Encoding {coding!r}")
        self._chunked = False
        self._length: int | None = None
        transfer = self.headers.get("transfer-encoding")
        if self.status in (204, 304):
            self._length = 0
        elif transfer is not None:
            if transfer.strip().lower() != "chunked":
                raise HttpProtocolError(f"unsupported Transfer-Encoding {transfer!r}")
            self._chunked = True
        elif "content-length" in self.headers:
            text = self.headers["content-length"].strip()
            if not text.isdigit() or not text.isascii():
                raise HttpProtocolError(f"bad Content-Length {text!r}")
            self._length = int(text)
        else:  # the body ends with the connection
            self.will_close = True

    def read(self, limit: int | None = None) -> bytes:
        """The body (its first ``limit`` bytes when given: the rest is left unread)."""
        parts: list[bytes] = []
        size = 0
        if limit is None or limit > 0:
            for piece in self.pieces():
                parts.append(piece)
                size += len(piece)
                if limit is not None and size >= limit:
                    break
        return b"".join(parts)[:limit]

    def lines(self) -> Iterator[bytes]:
        """The body's lines (with their ``\\n``; the last one may have none), each as soon as it is complete."""
        pending: list[bytes] = []
        for piece in self.pieces():
            start = 0
            end = piece.find(b"\n")
            while end >= 0:
                pending.append(piece[start : end + 1])
                yield b"".join(pending)
                pending = []
                start = end + 1
                end = piece.find(b"\n", start)
            if start < len(piece):
                pending.append(piece[start:])
        if pending:
            yield b"".join(pending)

    def pieces(self) -> Iterator[bytes]:
        """The body in pieces as they arrive (at most :data:`BLOCK` bytes each); sets ``done`` at its end."""
        if self._chunked:
            while True:
                size = self._chunk_size()
                if size == 0:
                    break
                yield from self._exactly(size, "chunk")
                if self._file.readline(MAX_LINE) not in (b"\r\n", b"\n"):
                    raise HttpProtocolError("a chunk is not followed by CRLF")
            while self._line("trailer"):  # trailer fields, up to the empty line: not used
                pass
        elif self._length is not None:
            yield from self._exactly(self._length, "body")
        else:
            while True:
                piece = self._file.read1(BLOCK)
                if not piece:
                    break
                yield piece
        self.done = True

    def _exactly(self, size: int, what: str) -> Iterator[bytes]:
        while size > 0:
            piece = self._file.read1(min(size, BLOCK))
            if not piece:
                raise HttpProtocolError(f"the connection ended {size} bytes before the end of the {what}")
            size -= len(piece)
            yield piece

    def _chunk_size(self) -> int:
        text = self._line("chunk size").split(";", 1)[0].strip()  # chunk extensions (";name=value") ignored
        if not text or not all(c in _HEX for c in text):
            raise HttpProtocolError(f"bad chunk size {text[:40]!r}")
        return int(text, 16)

    def _line(self, what: str, *, ended: type[OSError] = HttpProtocolError) -> str:
        """One line without its CRLF; raises past :data:`MAX_LINE` and, ``ended``, at the end of the connection."""
        line = self._file.readline(MAX_LINE + 1)
        if not line.endswith(b"\n"):
            if len(line) > MAX_LINE:
                raise HttpProtocolError(f"{what} line longer than {MAX_LINE} bytes")
            if not line:
                raise ended(f"the connection ended before the {what} line")
            raise HttpProtocolError(f"the connection ended in a {what} line")
        return line.rstrip(b"\r\n").decode("latin-1")

    def _status_line(self, first: bool) -> tuple[str, int, str]:
        line = self._line("status", ended=ServerClosedError if first else HttpProtocolError)
        version, _, rest = line.partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit() or not code.isascii():
            raise HttpProtocolError(f"bad status line {line[:80]!r}")
        return version, int(code), reason.strip()

    def _header_block(self) -> dict[str, str]:
        """The header fields up to the empty line: lower-case names; repeated fields joined with ``, ``."""
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            line = self._line("header")
            if not line:
                return headers
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise HttpProtocolError(f"bad header line {line[:80]!r}")
            key = name.lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        raise HttpProtocolError(f"more than {MAX_HEADERS} header lines")


def tls_context(config: ClientConfig) -> Tls:
    """The TLS context of ``config``: its CA (or none when ``insecure``) and its client certificate.

    Normally a :class:`_TlsContext` (OpenSSL through ``_ssl`` itself); the
    ``ssl`` module's context for a client certificate, or where ``_ssl``
    lacks what :class:`_TlsContext` uses.
    """
    if config.cert is None and config.key is None:
        try:
            return _TlsContext(config)
        except _Unavailable:
            pass
    import ssl

    try:
        if config.insecure:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            context = ssl.create_default_context(cafile=config.ca_file, cadata=config.ca_data)
    except (OSError, ssl.SSLError, ValueError) as err:
        raise ApiConfigError(f"{config.where}: cannot load the CA bundle: {err}") from None
    if config.cert is not None and config.key is not None:
        import tempfile

        # ssl loads a certificate chain only from files: a private, short-lived copy.
        with tempfile.TemporaryDirectory(prefix="ring-launch-") as directory:
            cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
            for path, data in ((cert, config.cert), (key, config.key)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
            try:
                context.load_cert_chain(cert, key)
            except (OSError, ssl.SSLError) as err:
                raise ApiConfigError(f"{config.where}: cannot load the client certificate: {err}") from None
    return context


class _Unavailable(Exception):
    """This Python's ``_ssl`` lacks what :class:`_TlsContext` uses: the ``ssl`` module is used instead."""


class _TlsContext:
    """A TLS client context made with ``_ssl``, the C module under ``ssl``, without loading ``ssl`` itself.

    Why: ``ssl`` (with ``socket``, which it needs) turns every OpenSSL
    constant into enums at import, about 7 ms of CPU of a launcher start on
    the dev node (``python3 -I -S -c "import ..."``: 25.9 ms with ``socket``
    and ``ssl``, 18.6 ms with ``_socket`` and ``_ssl``, p50 of 40); the
    early registration pays it before its PATCH. What it sets is what
    ``ssl.create_default_context`` sets for a client: ``PROTOCOL_TLS_CLIENT``
    (whose C defaults are certificate verification, host name checking, no
    SSLv2/3, no compression), the CA file or data (else the system's), and
    on Python 3.13 and newer the strict X.509 flags that function adds. It
    refuses to run unless the context verifies (or the configuration is
    ``insecure``); anything missing raises :class:`_Unavailable`.
    """

    def __init__(self, config: ClientConfig) -> None:
        try:
            make = _ssl._SSLContext
            context = make(_ssl.PROTOCOL_TLS_CLIENT)
            wrap = getattr(context, "_wrap_socket")  # noqa: B009 - private (not in the type stubs): checked here
        except (AttributeError, TypeError, OSError, ValueError) as err:  # OSError: _ssl.SSLError (a FIPS build...)
            raise _Unavailable(str(err)) from None
        try:
            if config.insecure:
                context.check_hostname = False
                context.verify_mode = _ssl.CERT_NONE
            elif config.ca_file is None and config.ca_data is None:
                context.set_default_verify_paths()
            else:
                context.load_verify_locations(config.ca_file, None, config.ca_data)
        except (OSError, ValueError) as err:  # _ssl.SSLError is an OSError
            raise ApiConfigError(f"{config.where}: cannot load the CA bundle: {err}") from None
        if not config.insecure:
            if context.verify_mode != _ssl.CERT_REQUIRED or not context.check_hostname:
                raise _Unavailable("the C context does not verify by default")
            if sys.version_info >= (3, 13):
                strict = getattr(_ssl, "VERIFY_X509_STRICT", 0) | getattr(_ssl, "VERIFY_X509_PARTIAL_CHAIN", 0)
                try:
                    context.verify_flags |= strict
                except (OSError, ValueError) as err:
                    raise _Unavailable(str(err)) from None
        self._context = context
        self._wrap: Any = wrap

    def wrap_socket(self, sock: _socket.socket, *, server_hostname: str) -> _TlsStream:
        """The TLS connection over connected ``sock`` to ``server_hostname`` (handshake done; its timeout bounds it)."""
        tls = self._wrap(sock, False, server_hostname, owner=None, session=None)
        tls.do_handshake()
        return _TlsStream(sock, tls)


class _TlsStream:
    """What :class:`Connection` uses of a socket, for a :class:`_TlsContext` connection."""

    def __init__(self, sock: _socket.socket, tls: Any) -> None:
        self._sock = sock
        self._tls = tls

    def settimeout(self, timeout: float | None) -> None:
        self._sock.settimeout(timeout)  # _ssl reads the socket's timeout at every read and write

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self._tls.write(view) :]

    def makefile(self, mode: str = "rb") -> BufferedIOBase:
        return io.BufferedReader(_TlsReader(self._tls), BLOCK)

    def close(self) -> None:
        self._sock.close()


class _TlsReader(io.RawIOBase):
    def __init__(self, tls: Any) -> None:
        self._tls = tls

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not len(buffer):
            return 0
        try:
            return int(self._tls.read(len(buffer), buffer))
        except _ssl.SSLEOFError:  # the server closed the connection without TLS's close_notify
            return 0


class _Socket(_socket.socket):
    """``_socket.socket`` that ``_ssl`` can refer to (it keeps a weak reference; the C type takes none)."""

    __slots__ = ("__weakref__",)


def _connect(host: bytes, port: int, timeout: float) -> _socket.socket:
    """A TCP connection to the first address of ``host`` that takes it (``socket.create_connection``'s way)."""
    error: OSError | None = None
    for family, kind, proto, _, address in _socket.getaddrinfo(host, port, 0, _socket.SOCK_STREAM):
        sock = _Socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(address)
        except OSError as err:
            sock.close()
            error = err
            continue
        return sock
    raise error if error is not None else OSError(f"no address for {host.decode('ascii', 'replace')}")


class Connection:
    """An open socket (TLS or plain) and the buffered reader of its answers."""

    def __init__(self, sock: socket.socket | _TlsStream) -> None:
        self.sock = sock
        self.file: BufferedIOBase = sock.makefile("rb")

    def close(self) -> None:
        self.file.close()
        self.sock.close()


class KubeClient:
    """GET requests (and the launcher's one merge PATCH) to one API server; not thread-safe (one launcher, one loop).

    The first request may be sent in two steps (:meth:`send_first`, then
    :meth:`answer_first` before any other call); every other request is one
    call that returns its answer.
    """

    def __init__(self, config: ClientConfig, *, connect_timeout: float) -> None:
        self.config = config
        self.connect_timeout = connect_timeout
        self._context = tls_context(config) if config.tls else None
        #: The kept-alive connection (None: the next request opens one).
        self._conn: Connection | None = None
        #: The connection, method and path of a request :meth:`send_first` sent, its answer not read yet.
        self._first: tuple[Connection, str, str] | None = None

    def get_json(self, path: str, query: dict[str, str], *, timeout: float) -> dict[str, Any]:
        """GET ``path?query`` and return the JSON object of a 200 answer (raises otherwise)."""
        return self._json_object(self._request(path, query, timeout=timeout), f"GET {path}")

    def patch_merge(self, path: str, body: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        """PATCH ``path`` with a JSON merge patch and return the object (raises :class:`ApiStatusError` otherwise)."""
        response = self._request(
            path, {}, timeout=timeout, method="PATCH", body=_payload(body), content_type=MERGE_PATCH
        )
        return self._json_object(response, f"PATCH {path}")

    def send_first(self, path: str, body: dict[str, Any]) -> None:
        """Connect and send :meth:`patch_merge`'s request, without waiting for its answer.

        Only as the client's first request; :meth:`answer_first` reads the
        answer and keeps the connection. Raises OSError (``_ssl.SSLError``
        included) when it cannot connect or send, :class:`ApiConfigError`
        when the token file cannot be read.
        """
        if self._conn is not None or self._first is not None:
            raise RuntimeError("send_first must be the client's first request")
        request = self._request_bytes("PATCH", path, _payload(body), MERGE_PATCH)
        conn = Connection(self._open())
        try:
            conn.sock.sendall(request)
        except BaseException:
            conn.close()
            raise
        self._first = (conn, "PATCH", path)

    def answer_first(self, *, timeout: float) -> dict[str, Any]:
        """The answer to :meth:`send_first`'s request, as :meth:`patch_merge` returns it (or raises).

        The connection becomes the client's kept-alive connection, so the
        list that follows goes out on it without a new TLS handshake.
        """
        if self._first is None:
            raise RuntimeError("answer_first without send_first")
        conn, method, path = self._first
        self._first = None
        self._conn = conn
        try:
            conn.sock.settimeout(timeout)
            response = Response(conn.file)
        except BaseException:
            self.close()
            raise
        return self._json_object(self._checked(response), f"{method} {path}")

    def stream(self, path: str, query: dict[str, str], *, timeout: float) -> Iterator[dict[str, Any]]:
        """GET a watch: yield each JSON event line; ends when the server ends the stream.

        ``timeout`` bounds each socket read, so a half-open connection
        raises instead of hanging. The connection is closed after a stream
        (watch responses are not reused).
        """
        response = self._request(path, query, timeout=timeout)
        try:
            for line in response.lines():
                if line.strip():
                    event = json.loads(line)
                    if isinstance(event, dict):
                        yield event
        finally:
            self.close()

    def close(self) -> None:
        """Drop the connection (and a request :meth:`send_first` sent); the next request opens a new one."""
        if self._first is not None:
            self._first[0].close()
            self._first = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _open(self) -> socket.socket | _TlsStream:
        """A new connection to the API server (TLS when configured), ``connect_timeout`` bounding each step.

        The host goes to the resolver as bytes, which skips Python's
        ``idna`` codec for an ASCII name.
        """
        name = self.config.host
        host = name.encode("ascii") if name.isascii() else name.encode("idna")
        address = (host, self.config.port)
        if self._context is None:  # plain HTTP: tests, a local proxy
            import socket

            # getaddrinfo takes bytes too (typeshed says str only).
            return socket.create_connection(address, timeout=self.connect_timeout)  # type: ignore[arg-type]
        if isinstance(self._context, _TlsContext):
            raw = _connect(host, self.config.port, self.connect_timeout)
            try:
                return self._context.wrap_socket(raw, server_hostname=host.decode("ascii"))
            except BaseException:
                raw.close()
                raise
        import socket

        sock = socket.create_connection(address, timeout=self.connect_timeout)  # type: ignore[arg-type]
        try:
            return self._context.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise

    def _request_bytes(self, method: str, target: str, body: bytes | None, content_type: str) -> bytes:
        headers = {"Host": self.config.authority, "Accept": "application/json", "User-Agent": USER_AGENT}
        token = self.config.bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if body is not None:
            headers["Content-Type"] = content_type
            headers["Content-Length"] = str(len(body))
        return request_head(method, target, headers) + (body or b"")

    def _request(
        self,
        path: str,
        query: dict[str, str],
        *,
        timeout: float,
        method: str = "GET",
        body: bytes | None = None,
        content_type: str = "",
    ) -> Response:
        if self._first is not None:
            raise RuntimeError("the answer to send_first's request is still unread (answer_first)")
        request = self._request_bytes(method, path + ("?" + query_string(query) if query else ""), body, content_type)
        for attempt in (1, 2):
            fresh = self._conn is None
            if self._conn is None:
                self._conn = Connection(self._open())
            conn = self._conn
            try:
                conn.sock.settimeout(timeout)
                conn.sock.sendall(request)
                response = Response(conn.file)
            except (BrokenPipeError, ConnectionResetError):
                self.close()
                if fresh or attempt == 2:  # a kept-alive connection the server closed: once more on a new one
                    raise
                continue
            except BaseException:
                self.close()
                raise
            return self._checked(response)
        raise AssertionError("unreachable")

    def _checked(self, response: Response) -> Response:
        """``response`` if its status is 200; else the connection is closed and :class:`ApiStatusError` raised."""
        if response.status != 200:
            try:
                body = response.read(BLOCK)
            finally:
                self.close()
            raise ApiStatusError(response.status, response.reason, _status_message(body))
        return response

    def _json_object(self, response: Response, what: str) -> dict[str, Any]:
        """The JSON object of ``response``'s body; the connection is kept only when the server keeps it."""
        try:
            body = response.read()
        except BaseException:
            self.close()
            raise
        if response.will_close:
            self.close()
        value = json.loads(body)
        if not isinstance(value, dict):
            raise ValueError(f"{what}: expected a JSON object")
        return value


def _payload(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def _status_message(body: bytes) -> str:
    try:
        status = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:200]
    return str(status.get("message", "")) if isinstance(status, dict) else ""
