"""The launcher's HTTP to the API server: ``http.client`` over ``ssl`` and ``socket``.

:class:`KubeClient` sends GET requests (and the launcher's one merge PATCH)
for one :class:`~ranktable.launch.kubeconfig.ClientConfig` over one kept-alive
``http.client`` connection (opened again after any error), with the bearer
token read for each request (bound service-account tokens rotate) and the
client certificate, if any, loaded into the TLS context once. It knows
nothing of ConfigMaps: :mod:`ranktable.launch.apiwatch` builds the paths and
runs the list/watch loop. Only the standard library's public modules are
used; ``ranktable`` imports no ``_ssl`` or ``_socket`` (a unit test walks
the product's imports).

**TLS.** :func:`tls_context` is ``ssl.create_default_context`` with the
configuration's CA (certificate verification required, host names and IP
addresses checked, the strict X.509 flags of Python 3.13 and newer), plus
``load_cert_chain`` for a client certificate. A context that does not verify
both the chain and the host name is refused before any connection
(:func:`checked_context`), unless the kubeconfig says
``insecure-skip-tls-verify: true``. A certificate that fails verification
(another CA, a name or address it does not carry, expired) raises
:class:`TlsVerifyError`, an :class:`ApiConfigError` (exit 78): waiting does
not fix it. A Python whose ``ssl`` does not load is an :class:`ApiConfigError`
too, with a line that says so.

**Caps.** ``http.client`` bounds each status, header, chunk-size and trailer
line (``_MAXLINE``, 64 KiB) and the header lines of one answer
(``_MAXHEADERS``, 100); it bounds neither the body, nor a line read with no
limit, nor the ``100 Continue`` answers it skips, nor the number of trailer
lines. So every answer is read through a meter (:class:`_Meter`, on
``http.client``'s ``response_class`` hook) that counts the bytes taken from
the socket against a budget:

* the head (status lines, header lines, skipped ``100`` answers):
  :data:`MAX_HEAD`, 1 MiB; the API server's heads are under 1 KiB;
* a body (a list, a PATCH's answer) and each watch line (one event, one
  object): :data:`MAX_BODY` and :data:`MAX_LINE`, 16 MiB, each with
  :data:`FRAMING` more for its chunk framing and trailers. Why 16 MiB: a
  ConfigMap holds at most 1 MiB of ``data`` and ``binaryData``, and etcd
  takes an object of at most 1.5 MiB as stored; the JSON the API server
  sends is bigger (``binaryData`` is base64, 4/3 of its bytes; JSON escapes
  a control character, ``<``, ``>`` or ``&`` as ``\\u00XX``, 6 bytes for
  one), so the worst object is about 9 MiB of JSON, and 16 MiB leaves room;
* a refusal's body, for its ``Status`` message: :data:`MAX_REFUSAL`.

An answer past its budget raises :class:`AnswerTooLarge` with one line that
names the request and the cap; the watch loop logs it and retries with
backoff. Memory stays within the caps whatever the server sends.

The first request can go out before the launcher is loaded
(:meth:`KubeClient.send_first`, then :meth:`KubeClient.answer_first`): the
one-file launcher's self-registration (:mod:`ranktable.launch.earlyreg`)
writes its PATCH, loads the rest of the launcher while the API server
works, reads the answer and keeps the connection for the list and watch
that follow.

Errors, so the loop can tell them apart: :class:`ApiStatusError` for an
HTTP status other than 200 (``status``, ``reason`` and the ``Status``
message the server sent); ``OSError`` for transport trouble (timeouts, a
connection closed early, TLS errors other than a failed verification, and
:class:`HttpProtocolError` for an answer that cannot be framed or is over a
cap); :class:`~ranktable.launch.kubeconfig.ApiConfigError` (and
:class:`TlsVerifyError`) from the configuration.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import urllib.parse
from typing import TYPE_CHECKING

from ranktable.launch.kubeconfig import ApiConfigError, ClientConfig

if TYPE_CHECKING:
    import socket
    import ssl
    from collections.abc import Iterator
    from typing import Any

USER_AGENT = "ring-launch"
#: Seconds to connect (TCP and TLS) and, for :meth:`KubeClient.send_first`, to send.
CONNECT_TIMEOUT = 10.0
MERGE_PATCH = "application/merge-patch+json"
_MIB = 1 << 20
#: Most bytes of an answer's head: status lines, header lines, skipped ``100 Continue`` answers.
MAX_HEAD = _MIB
#: Longest body read (a list's answer, a PATCH's object) and longest watch line (one event).
MAX_BODY = 16 * _MIB
MAX_LINE = 16 * _MIB
#: Room for the chunk-size lines, trailers and read-ahead around a body or a watch line.
FRAMING = _MIB
#: Most bytes read of a refusal's body (its ``Status`` message).
MAX_REFUSAL = 65536
#: Bytes read from the socket at once.
BUFFER = 65536


class ApiStatusError(RuntimeError):
    """The API server answered ``status`` (not 200); ``message`` is its ``Status`` object's message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.message = message


class HttpProtocolError(OSError):
    """An answer that cannot be framed as HTTP/1.x, or one over a cap: transport trouble, retried."""


class AnswerTooLarge(HttpProtocolError):
    """An answer's head, body or watch line ran past its cap (see the module docstring)."""


class TlsVerifyError(ApiConfigError):
    """The server's certificate failed verification: another CA, a name or address it lacks, expired."""


def quote(text: str) -> str:
    """``text`` with every UTF-8 byte outside RFC 3986's unreserved characters percent-encoded (``/`` too)."""
    return urllib.parse.quote(text, safe="")


def query_string(query: dict[str, str]) -> str:
    """``name=value&...`` of ``query``, names and values as :func:`quote` encodes them."""
    return urllib.parse.urlencode(query, safe="", quote_via=urllib.parse.quote)


def tls_context(config: ClientConfig) -> ssl.SSLContext:
    """The TLS context of ``config``: its CA (or none when ``insecure``) and its client certificate.

    Raises :class:`ApiConfigError` when ``ssl`` does not load, the CA bundle
    or the client certificate cannot be loaded, or the context would not
    verify (:func:`checked_context`).
    """
    try:
        import ssl
    except ImportError as err:
        raise ApiConfigError(
            f"{config.where}: this Python cannot speak TLS to the API server: its ssl module does not load ({err})"
        ) from None
    try:
        if config.insecure:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            context = ssl.create_default_context(cafile=config.ca_file, cadata=config.ca_data)
    except (OSError, ValueError) as err:  # ssl.SSLError is an OSError
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
            except (OSError, ValueError) as err:
                raise ApiConfigError(f"{config.where}: cannot load the client certificate: {err}") from None
    return checked_context(context, config)


def checked_context(context: ssl.SSLContext, config: ClientConfig) -> ssl.SSLContext:
    """``context`` if it verifies the server's chain (``CERT_REQUIRED``) and host name, or ``config`` is insecure.

    Raises :class:`ApiConfigError` otherwise: :class:`KubeClient` calls it
    before every connection, so such a context is never used.
    """
    import ssl

    if not config.insecure and (context.verify_mode != ssl.CERT_REQUIRED or not context.check_hostname):
        raise ApiConfigError(
            f"{config.where}: this Python's TLS context does not verify the server's certificate and host name "
            f"(verify_mode {context.verify_mode!r}, check_hostname {context.check_hostname}); not connecting"
        )
    return context


class _Meter(io.RawIOBase):
    """The socket as one answer reads it, counting the bytes against a budget (:meth:`allow`).

    ``http.client.HTTPResponse`` asks its socket for ``makefile("rb")``:
    this is that socket, and the buffered reader it returns reads from here.
    It reads through the socket's own unbuffered file, which keeps the socket
    open until the answer is read even when the connection closes it first
    (an answer that ends with the connection), as ``http.client``'s file does.
    """

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._raw = sock.makefile("rb", buffering=0)
        self.allow(MAX_HEAD, "the answer's head (status lines, header lines, 100 Continue answers)")

    def allow(self, size: int, what: str) -> None:
        """Take at most ``size`` more bytes from the socket; past them, reading raises :class:`AnswerTooLarge`."""
        self._left = self._size = size
        self._what = what

    def makefile(self, *_: object, **__: object) -> io.BufferedReader:
        return io.BufferedReader(self, BUFFER)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._left <= 0:
            raise AnswerTooLarge(f"{self._what} ran past {self._size} bytes")
        with memoryview(buffer) as view:
            count = self._raw.readinto(view[: self._left]) or 0
        self._left -= count
        return count

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


class _Response(http.client.HTTPResponse):
    """``http.client``'s answer, read from the socket through a :class:`_Meter` (``meter``)."""

    def __init__(self, sock: socket.socket, *args: Any, **kwargs: Any) -> None:
        self.meter = _Meter(sock)
        super().__init__(self.meter, *args, **kwargs)  # type: ignore[arg-type]  # what it uses of a socket: makefile


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
        #: The kept-alive connection (None, or its ``sock`` None: the next request opens one).
        self._conn: http.client.HTTPConnection | None = None
        #: Method and path of the request :meth:`send_first` sent, its answer not read yet.
        self._first: tuple[str, str] | None = None

    def get_json(self, path: str, query: dict[str, str], *, timeout: float) -> dict[str, Any]:
        """GET ``path?query`` and return the JSON object of a 200 answer (raises otherwise)."""
        return self._json_object(self._request("GET", path, query, timeout=timeout), f"GET {path}")

    def patch_merge(self, path: str, body: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        """PATCH ``path`` with a JSON merge patch and return the object (raises :class:`ApiStatusError` otherwise)."""
        response = self._request("PATCH", path, {}, timeout=timeout, body=_payload(body))
        return self._json_object(response, f"PATCH {path}")

    def send_first(self, path: str, body: dict[str, Any]) -> None:
        """Connect and send :meth:`patch_merge`'s request, without waiting for its answer.

        Only as the client's first request; :meth:`answer_first` reads the
        answer and keeps the connection. Raises OSError (``ssl.SSLError``
        included) when it cannot connect or send, :class:`ApiConfigError`
        (:class:`TlsVerifyError` included) for the configuration.
        """
        if self._conn is not None or self._first is not None:
            raise RuntimeError("send_first must be the client's first request")
        self._send("PATCH", path, _payload(body), timeout=self.connect_timeout)
        self._first = ("PATCH", path)

    def answer_first(self, *, timeout: float) -> dict[str, Any]:
        """The answer to :meth:`send_first`'s request, as :meth:`patch_merge` returns it (or raises).

        The connection becomes the client's kept-alive connection, so the
        list that follows goes out on it without a new TLS handshake.
        """
        if self._first is None:
            raise RuntimeError("answer_first without send_first")
        method, path = self._first
        self._first = None
        return self._json_object(self._answer(f"{method} {path}", timeout=timeout), f"{method} {path}")

    def stream(self, path: str, query: dict[str, str], *, timeout: float) -> Iterator[dict[str, Any]]:
        """GET a watch: yield each JSON event line; ends when the server ends the stream.

        ``timeout`` bounds each socket read, so a half-open connection
        raises instead of hanging; each line is capped (:data:`MAX_LINE`).
        The connection is closed after a stream (watch responses are not
        reused).
        """
        response = self._request("GET", path, query, timeout=timeout)
        what = f"GET {path} (watch)"
        try:
            while True:
                response.meter.allow(MAX_LINE + FRAMING, f"{what}: an event line with its chunk framing")
                line = self._framed(what, response.readline, MAX_LINE + 1)
                if not line:
                    return
                if len(line) > MAX_LINE:
                    raise AnswerTooLarge(f"{what}: an event line longer than {MAX_LINE} bytes")
                if line.strip():
                    event = json.loads(line)
                    if isinstance(event, dict):
                        yield event
        finally:
            self.close()

    def close(self) -> None:
        """Drop the connection (and a request :meth:`send_first` sent); the next request opens a new one."""
        self._first = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self) -> http.client.HTTPConnection:
        """The kept-alive connection, connected (TLS handshake done), a new one if needed."""
        conn = self._conn
        if conn is None:
            if self._context is None:  # plain HTTP: tests, a local proxy
                conn = http.client.HTTPConnection(self.config.host, self.config.port, timeout=self.connect_timeout)
            else:
                checked_context(self._context, self.config)
                conn = http.client.HTTPSConnection(
                    self.config.host, self.config.port, timeout=self.connect_timeout, context=self._context
                )
            conn.response_class = _Response  # undocumented, and in every http.client since Python 2: the caps
            self._conn = conn
        if conn.sock is None:
            if self._context is not None:
                checked_context(self._context, self.config)
            conn.timeout = self.connect_timeout
            try:
                conn.connect()
            except OSError as err:
                raise self._tls_failure(err) or err from None
        return conn

    def _tls_failure(self, err: OSError) -> TlsVerifyError | None:
        """The :class:`TlsVerifyError` for ``err`` if it is a failed certificate verification."""
        if self._context is None:
            return None
        import ssl

        if not isinstance(err, ssl.SSLCertVerificationError):
            return None
        reason = err.verify_message or str(err)
        return TlsVerifyError(
            f"{self.config.where}: TLS to {self.config.authority}: the server's certificate was refused: {reason}"
        )

    def _send(self, method: str, target: str, body: bytes | None, *, timeout: float) -> http.client.HTTPConnection:
        headers = {"Host": self.config.authority, "Accept": "application/json", "User-Agent": USER_AGENT}
        token = self.config.bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if body is not None:
            headers["Content-Type"] = MERGE_PATCH
        try:
            conn = self._connection()
            conn.sock.settimeout(timeout)
            conn.request(method, target, body=body, headers=headers)
        except BaseException:
            self.close()
            raise
        return conn

    def _answer(self, what: str, *, timeout: float) -> _Response:
        """The answer to the request just sent, if its status is 200 (else :class:`ApiStatusError`)."""
        conn = self._conn
        assert conn is not None
        try:
            conn.sock.settimeout(timeout)
            response = self._framed(what, conn.getresponse)
            assert isinstance(response, _Response)
            coding = (response.getheader("Content-Encoding") or "identity").strip().lower()
            if coding != "identity":
                raise HttpProtocolError(f"{what}: unsupported Content-Encoding {coding!r}")
            if response.status != 200:
                response.meter.allow(MAX_REFUSAL + FRAMING, f"{what}: the refusal's body")
                body = self._framed(what, response.read, MAX_REFUSAL)
                raise ApiStatusError(response.status, response.reason, _status_message(body))
        except BaseException:
            self.close()
            raise
        return response

    def _request(
        self, method: str, path: str, query: dict[str, str], *, timeout: float, body: bytes | None = None
    ) -> _Response:
        if self._first is not None:
            raise RuntimeError("the answer to send_first's request is still unread (answer_first)")
        target = path + ("?" + query_string(query) if query else "")
        for attempt in (1, 2):
            fresh = self._conn is None or self._conn.sock is None
            try:
                self._send(method, target, body, timeout=timeout)
                return self._answer(f"{method} {path}", timeout=timeout)
            except (BrokenPipeError, ConnectionResetError):  # RemoteDisconnected is a ConnectionResetError
                if fresh or attempt == 2:  # a kept-alive connection the server closed: once more on a new one
                    raise
        raise AssertionError("unreachable")

    def _json_object(self, response: _Response, what: str) -> dict[str, Any]:
        """The JSON object of ``response``'s body; the connection is kept only when the server keeps it."""
        try:
            declared = (response.getheader("Content-Length") or "").strip()
            if response.getheader("Transfer-Encoding") is None and declared.isdigit() and int(declared) > MAX_BODY:
                raise AnswerTooLarge(f"{what}: a body longer than {MAX_BODY} bytes (Content-Length: {declared})")
            response.meter.allow(MAX_BODY + FRAMING, f"{what}: the body with its chunk framing")
            body = self._framed(what, response.read)  # to its end: the meter bounds what it takes
            if len(body) > MAX_BODY:
                raise AnswerTooLarge(f"{what}: a body longer than {MAX_BODY} bytes")
        except BaseException:
            self.close()
            raise
        value = json.loads(body)
        if not isinstance(value, dict):
            raise ValueError(f"{what}: expected a JSON object")
        return value

    @staticmethod
    def _framed(what: str, read: Any, *args: Any) -> Any:
        """``read(*args)``, with ``http.client``'s complaints about framing raised as :class:`HttpProtocolError`.

        ``http.client`` raises its ``HTTPException`` subclasses, and a
        ``ValueError`` for a chunk size that is not hexadecimal.
        """
        try:
            return read(*args)
        except (http.client.HTTPException, ValueError) as err:
            if isinstance(err, OSError):  # RemoteDisconnected: the retry decides
                raise
            text = str(err).replace("\r", "\\r").replace("\n", "\\n")
            raise HttpProtocolError(f"{what}: {type(err).__name__}: {text[:200]}") from None


def _payload(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def _status_message(body: bytes) -> str:
    try:
        status = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:200]
    return str(status.get("message", "")) if isinstance(status, dict) else ""
