"""The launcher's HTTP to the API server: ``http.client`` and ``ssl``, nothing else.

:class:`KubeClient` sends GET requests for one :class:`~ranktable.kubeconfig.ClientConfig`
over one kept-alive connection (opened again after any error), with the
bearer token read for each request (bound service-account tokens rotate) and
the client certificate, if any, loaded into the TLS context once. It knows
nothing of ConfigMaps: :mod:`ranktable.apiwatch` builds the paths and runs
the list/watch loop.

Errors, so the loop can tell them apart: :class:`ApiStatusError` for an
HTTP status other than 200 (``status``, ``reason`` and the ``Status``
message the server sent), ``OSError``/``http.client.HTTPException`` (and
``ssl.SSLError``, an ``OSError``) for transport trouble, and
:class:`~ranktable.kubeconfig.ApiConfigError` from the configuration.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import tempfile
import urllib.parse
from collections.abc import Iterator
from typing import Any

from ranktable.kubeconfig import ApiConfigError, ClientConfig

USER_AGENT = "ring-launch"


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
    """GET requests (and the launcher's one merge PATCH) to one API server; not thread-safe (one launcher, one loop)."""

    def __init__(self, config: ClientConfig, *, connect_timeout: float) -> None:
        self.config = config
        self.connect_timeout = connect_timeout
        self._context = tls_context(config) if config.tls else None
        self._conn: http.client.HTTPConnection | None = None

    def get_json(self, path: str, query: dict[str, str], *, timeout: float) -> dict[str, Any]:
        """GET ``path?query`` and return the JSON object of a 200 answer (raises otherwise)."""
        response = self._request(path, query, timeout=timeout)
        try:
            body = response.read()
        except BaseException:
            self.close()
            raise
        value = json.loads(body)
        if not isinstance(value, dict):
            raise ValueError(f"GET {path}: expected a JSON object")
        return value

    def patch_merge(self, path: str, body: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        """PATCH ``path`` with a JSON merge patch and return the object (raises :class:`ApiStatusError` otherwise)."""
        payload = json.dumps(body, separators=(",", ":")).encode("utf-8")
        response = self._request(
            path, {}, timeout=timeout, method="PATCH", body=payload, content_type="application/merge-patch+json"
        )
        try:
            answer = response.read()
        except BaseException:
            self.close()
            raise
        value = json.loads(answer)
        if not isinstance(value, dict):
            raise ValueError(f"PATCH {path}: expected a JSON object")
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
        """Drop the connection; the next request opens a new one."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

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
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT, "Host": self.config.authority}
        if content_type:
            headers["Content-Type"] = content_type
        token = self.config.bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
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
            if response.status != 200:
                body = response.read(65536)
                self.close()
                raise ApiStatusError(response.status, response.reason, _status_message(body))
            return response
        raise AssertionError("unreachable")

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._context is not None:
                self._conn = http.client.HTTPSConnection(
                    self.config.host, self.config.port, timeout=self.connect_timeout, context=self._context
                )
            else:
                self._conn = http.client.HTTPConnection(
                    self.config.host, self.config.port, timeout=self.connect_timeout
                )
            self._conn.connect()
        return self._conn


def _status_message(body: bytes) -> str:
    try:
        status = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:200]
    return str(status.get("message", "")) if isinstance(status, dict) else ""
