"""The launcher's TLS without the ``ssl`` module (:class:`ranktable.launch.kubeapi._TlsContext`), against a local TLS server.

The server is the ``ssl`` module's, on 127.0.0.1, with the test certificate
in tests/unit/data/tls (a CA, a server certificate for ``localhost``
only and one for ``other.example`` only, P-256, valid for a century);
``other-ca.crt`` is a CA that signed neither. Each test names one rule the client must keep: verify the chain,
check the host name, read a body that ends with the connection (with or
without TLS's close_notify), and fall back to ``ssl`` where ``_ssl`` lacks
what it uses. Against the real API server: tests/integration/test_launcher_api.py.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ranktable.launch import kubeapi
from ranktable.launch.kubeapi import KubeClient, tls_context
from ranktable.launch.kubeconfig import ClientConfig

TLS = Path(__file__).parent / "data" / "tls"


class Server:
    """Answers each TLS connection's first request with ``answer``, then closes (``close_notify`` unless ``ragged``)."""

    def __init__(self, answer: bytes, *, ragged: bool = False, cert: str = "server") -> None:
        self.answer = answer
        self.ragged = ragged
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(TLS / f"{cert}.crt", TLS / f"{cert}.key")
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests: list[bytes] = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            try:
                with self.context.wrap_socket(raw, server_side=True) as tls:
                    self.requests.append(tls.recv(65536))
                    tls.sendall(self.answer)
                    if self.ragged:
                        raw.shutdown(socket.SHUT_RDWR)  # TCP ends under TLS: no close_notify
                    else:
                        tls.unwrap()
            except OSError:
                pass
            finally:
                raw.close()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def server() -> Iterator[Server]:
    body = b'{"kind":"Status","ok":true}'
    s = Server(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    yield s
    s.close()


def config(port: int, *, host: str = "localhost", ca: str = "ca.crt", insecure: bool = False) -> ClientConfig:
    return ClientConfig(host=host, port=port, where="test", ca_file=str(TLS / ca), insecure=insecure, token="t")


def test_the_right_ca_and_name_connect_without_loading_ssl(server: Server) -> None:
    client = KubeClient(config(server.port), connect_timeout=5)
    assert isinstance(client._context, kubeapi._TlsContext)
    assert client.get_json("/version", {}, timeout=5) == {"kind": "Status", "ok": True}
    assert (
        server.requests[0].startswith(b"GET /version HTTP/1.1\r\n")
        and b"Authorization: Bearer t\r\n" in server.requests[0]
    )


def test_a_certificate_from_another_ca_is_refused(server: Server) -> None:
    client = KubeClient(config(server.port, ca="other-ca.crt"), connect_timeout=5)
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        client.get_json("/version", {}, timeout=5)


def test_a_name_the_certificate_does_not_carry_is_refused(server: Server) -> None:
    client = KubeClient(
        config(server.port, host="127.0.0.1"), connect_timeout=5
    )  # the certificate names localhost only
    with pytest.raises(ssl.SSLCertVerificationError, match="IP address mismatch"):
        client.get_json("/version", {}, timeout=5)


def test_a_certificate_for_another_host_name_is_refused() -> None:
    s = Server(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", cert="other-name")  # names other.example only
    try:
        with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
            KubeClient(config(s.port), connect_timeout=5).get_json("/version", {}, timeout=5)
    finally:
        s.close()


def test_insecure_skips_verification(server: Server) -> None:
    client = KubeClient(config(server.port, host="127.0.0.1", ca="other-ca.crt", insecure=True), connect_timeout=5)
    assert client.get_json("/version", {}, timeout=5)["ok"] is True


@pytest.mark.parametrize("ragged", [False, True], ids=["close-notify", "ragged-eof"])
def test_a_body_that_ends_with_the_connection_is_read_to_its_end(ragged: bool) -> None:
    s = Server(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"n": 1}', ragged=ragged)
    try:
        assert KubeClient(config(s.port), connect_timeout=5).get_json("/x", {}, timeout=5) == {"n": 1}
    finally:
        s.close()


def test_without_the_private_c_api_the_ssl_module_is_used(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    class NoContext:
        PROTOCOL_TLS_CLIENT = ssl.PROTOCOL_TLS_CLIENT

    monkeypatch.setattr(kubeapi, "_ssl", NoContext)
    context = tls_context(config(server.port))
    assert isinstance(context, ssl.SSLContext) and context.verify_mode == ssl.CERT_REQUIRED
    client = KubeClient(config(server.port), connect_timeout=5)
    assert client.get_json("/version", {}, timeout=5)["ok"] is True
