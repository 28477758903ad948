"""A scripted HTTP/1.1 server on 127.0.0.1 for the launcher's client tests (tests/unit/test_kubeapi*.py).

Not an API server: it answers each request with the bytes a test's handler
returns, well formed or not, so the tests can check what the client does
with an answer too big, a line without end or framing it cannot read.
Plain TCP, or TLS with a certificate of tests/unit/data/tls.
Against the real API server: tests/integration/test_launcher_api.py.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

TLS = Path(__file__).resolve().parents[1] / "unit" / "data" / "tls"


@dataclass(frozen=True)
class Request:
    """One request the server read: on its ``conn``-th connection (from 0), headers with lower-case names."""

    conn: int
    method: str
    target: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Reply:
    """What to write: ``data`` (bytes, or pieces written one by one until the client stops reading).

    ``close``: end the connection after it (``ragged``: over TLS, without
    ``close_notify``).
    """

    data: bytes | Iterable[bytes] = b""
    close: bool = False
    ragged: bool = False


#: A handler's answer: a :class:`Reply`, bytes (a :class:`Reply` that keeps the connection), or None (close, no answer).
Answer = Union[Reply, bytes, None]  # noqa: UP007 - evaluated at import: Python 3.9 runs these tests too


@dataclass
class Loopback:
    """Serves on 127.0.0.1:``port`` until :meth:`close`; ``requests`` and ``connections`` say what it saw."""

    handler: Callable[[Request], Answer]
    cert: str | None = None
    requests: list[Request] = field(default_factory=list)
    connections: int = 0

    def __post_init__(self) -> None:
        self._context: ssl.SSLContext | None = None
        if self.cert is not None:
            self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self._context.load_cert_chain(TLS / f"{self.cert}.crt", TLS / f"{self.cert}.key")
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self._listener.accept()
            except OSError:
                return
            index = self.connections
            self.connections += 1
            self._open.append(raw)
            threading.Thread(target=self._serve, args=(raw, index), daemon=True).start()

    def _serve(self, raw: socket.socket, index: int) -> None:
        sock: socket.socket = raw
        try:
            raw.settimeout(30)
            if self._context is not None:
                sock = self._context.wrap_socket(raw, server_side=True)
            reader = sock.makefile("rb")
            while True:
                request = _read_request(reader, index)
                if request is None:
                    return
                self.requests.append(request)
                answer = self.handler(request)
                if answer is None:
                    return
                reply = Reply(answer) if isinstance(answer, bytes) else answer
                for piece in [reply.data] if isinstance(reply.data, bytes) else reply.data:
                    sock.sendall(piece)
                if reply.close:
                    if reply.ragged or not isinstance(sock, ssl.SSLSocket):
                        raw.shutdown(socket.SHUT_RDWR)  # TCP ends under TLS: no close_notify
                    else:
                        sock.unwrap()
                    return
        except OSError:  # the client went away, or refused the certificate
            return
        finally:
            raw.close()

    def close(self) -> None:
        """Stop listening and end every connection."""
        self._listener.close()
        for sock in self._open:
            sock.close()


def _read_request(reader: object, index: int) -> Request | None:
    readline = reader.readline  # type: ignore[attr-defined]
    line = readline(65537)
    if not line:
        return None
    method, target, _ = line.decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    while True:
        header = readline(65537).decode("latin-1").rstrip("\r\n")
        if not header:
            break
        name, _, value = header.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = reader.read(int(headers.get("content-length", "0")))  # type: ignore[attr-defined]
    return Request(conn=index, method=method, target=target, headers=headers, body=body)


def answer(status: str, body: bytes = b"", *headers: str) -> bytes:
    """An HTTP/1.1 answer with ``Content-Length`` (unless ``headers`` set a framing of their own)."""
    head = [f"HTTP/1.1 {status}", *headers]
    if not any(h.lower().startswith(("content-length:", "transfer-encoding:")) for h in headers):
        head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def chunked(*chunks: bytes, last: bool = True) -> bytes:
    """``chunks`` in chunked framing, with the last (empty) chunk unless ``last`` is false."""
    return b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for chunk in chunks) + (b"0\r\n\r\n" if last else b"")
