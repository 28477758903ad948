"""The launcher's HTTP to the API server: ``http.client`` and ``ssl``, nothing else.

:class:`KubeClient` sends GET requests for one :class:`~ranktable.kubeconfig.ClientConfig`
over one kept-alive connection (opened again after any error), with the
bearer token read for each request (bound service-account tokens rotate) and
the client certificate, if any, loaded into the TLS context once. It knows
nothing of ConfigMaps: :mod:`ranktable.apiwatch` builds the paths and runs
the list/watch loop.

The first request can go out before ``http.client`` is even loaded
(:meth:`KubeClient.send_first`, then :meth:`KubeClient.answer_first`): the
one-file launcher's self-registration (:mod:`ranktable.earlyreg`) writes its
PATCH on a TLS socket of its own making, loads the rest of the launcher while
the API server works, reads the answer with ``http.client`` and keeps the
connection for the list and watch that follow. That is why ``http.client``
(with the ``email`` package it loads), ``urllib.parse`` and ``tempfile`` are
imported where they are first needed, not at the top.

Errors, so the loop can tell them apart: :class:`ApiStatusError` for an
HTTP status other than 200 (``status``, ``reason`` and the ``Status``
message the server sent), ``OSError``/``http.client.HTTPException`` (and
``ssl.SSLError``, an ``OSError``) for transport trouble, and
:class:`~ranktable.kubeconfig.ApiConfigError` from the configuration.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
from typing import TYPE_CHECKING, Any

from ranktable.kubeconfig import ApiConfigError, ClientConfig

if TYPE_CHECKING:
    import http.client
    from collections.abc import Iterator

USER_AGENT = "ring-launch"
#: Seconds to connect (TCP and TLS) and, for :meth:`KubeClient.send_first`, to send.
CONNECT_TIMEOUT = 10.0
MERGE_PATCH = "application/merge-patch+json"


class ApiStatusError(RuntimeError):
    """The API server answered ``status`` (not 200); ``message`` is its ``Status`` object's message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.message = message


def tls_context(config: ClientConfig) -> ssl.SSLContext:
    """The TLS context of ``config``: its CA (or none when ``insecure``) and its client certificate."""
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
        self._conn: http.client.HTTPConnection | None = None
        #: The socket, method and path of a request :meth:`send_first` sent, its answer not read yet.
        self._first: tuple[socket.socket, str, str] | None = None

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
        """Connect and send :meth:`patch_merge`'s request, without waiting for (or loading the code that reads) its answer.

        Only as the client's first request; :meth:`answer_first` reads the
        answer and keeps the connection. Costs ``socket``, ``ssl`` and
        ``json`` only: the request is written here, byte for byte what
        ``http.client`` sends but ``Accept-Encoding``. The host goes to the
        resolver and to TLS as bytes, which skips Python's ``idna`` codec.
        Raises OSError (``ssl.SSLError`` included) when it cannot connect or
        send, :class:`ApiConfigError` when the token file cannot be read.
        """
        if self._conn is not None or self._first is not None:
            raise RuntimeError("send_first must be the client's first request")
        payload = _payload(body)
        head = "".join(f"{key}: {value}\r\n" for key, value in self._headers(MERGE_PATCH).items())
        request = f"PATCH {path} HTTP/1.1\r\n{head}Content-Length: {len(payload)}\r\n\r\n".encode("latin-1")
        host = self.config.host.encode("ascii")
        # getaddrinfo takes bytes too (typeshed says str only); a str would load the idna codec.
        sock = socket.create_connection((host, self.config.port), timeout=self.connect_timeout)  # type: ignore[arg-type]
        try:
            if self._context is not None:
                sock = self._context.wrap_socket(sock, server_hostname=host)
            sock.sendall(request + payload)
        except BaseException:
            sock.close()
            raise
        self._first = (sock, "PATCH", path)

    def answer_first(self, *, timeout: float) -> dict[str, Any]:
        """The answer to :meth:`send_first`'s request, as :meth:`patch_merge` returns it (or raises).

        The connection becomes the client's kept-alive connection, so the
        list that follows goes out on it without a new TLS handshake.
        """
        import http.client

        if self._first is None:
            raise RuntimeError("answer_first without send_first")
        sock, method, path = self._first
        self._first = None
        self._conn = self._new_connection()
        self._conn.sock = sock
        sock.settimeout(timeout)
        response = http.client.HTTPResponse(sock, method=method)
        try:
            response.begin()
        except BaseException:
            self.close()
            raise
        value = self._json_object(self._checked(response), f"{method} {path}")
        if response.will_close:
            self.close()
        return value

    def stream(self, path: str, query: dict[str, str], *, timeout: float) -> Iterator[dict[str, Any]]:
        """GET a watch: yield each JSON event line; ends when the server closes the stream.

        ``timeout`` bounds each socket read, so a half-open connection
        raises instead of hanging. The connection is closed after a stream
        (watch responses are not reused).
        """
        response = self._request(path, query, timeout=timeout)
        try:
            for line in iter(response.readline, b""):
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

    def _headers(self, content_type: str) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT, "Host": self.config.authority}
        if content_type:
            headers["Content-Type"] = content_type
        token = self.config.bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _request(
        self,
        path: str,
        query: dict[str, str],
        *,
        timeout: float,
        method: str = "GET",
        body: bytes | None = None,
        content_type: str = "",
    ) -> http.client.HTTPResponse:
        import http.client
        import urllib.parse

        if self._first is not None:
            raise RuntimeError("the answer to send_first's request is still unread (answer_first)")
        headers = self._headers(content_type)
        url = path + ("?" + urllib.parse.urlencode(query) if query else "")
        for attempt in (1, 2):
            fresh = self._conn is None
            conn = self._connection()
            try:
                conn.timeout = timeout
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
                conn.request(method, url, body=body, headers=headers)
                response = conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if fresh or attempt == 2:  # a kept-alive connection the server closed: once more on a new one
                    raise
                continue
            except BaseException:
                self.close()
                raise
            return self._checked(response)
        raise AssertionError("unreachable")

    def _checked(self, response: http.client.HTTPResponse) -> http.client.HTTPResponse:
        """``response`` if its status is 200; else the connection is closed and :class:`ApiStatusError` raised."""
        if response.status != 200:
            body = response.read(65536)
            self.close()
            raise ApiStatusError(response.status, response.reason, _status_message(body))
        return response

    def _json_object(self, response: http.client.HTTPResponse, what: str) -> dict[str, Any]:
        try:
            body = response.read()
        except BaseException:
            self.close()
            raise
        value = json.loads(body)
        if not isinstance(value, dict):
            raise ValueError(f"{what}: expected a JSON object")
        return value

    def _new_connection(self) -> http.client.HTTPConnection:
        import http.client

        if self._context is not None:
            return http.client.HTTPSConnection(
                self.config.host, self.config.port, timeout=self.connect_timeout, context=self._context
            )
        return http.client.HTTPConnection(self.config.host, self.config.port, timeout=self.connect_timeout)

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            self._conn = self._new_connection()
            self._conn.connect()
        return self._conn


def _payload(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def _status_message(body: bytes) -> str:
    try:
        status = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:200]
    return str(status.get("message", "")) if isinstance(status, dict) else ""
