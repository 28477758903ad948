"""The launcher's TLS (``ssl`` through ``http.client``) against a local TLS server on loopback.

The server (tests/support/loopback.py) uses the test certificates in
tests/unit/data/tls: a CA (``ca.crt``), a server certificate for
``localhost`` only (``server``) and one for ``other.example`` only
(``other-name``), P-256, valid for a century; ``other-ca.crt``, a CA that
signed neither; ``expired.crt`` for localhost, expired in 2000, signed by
``expired-ca.crt`` (made by ``expired.sh``). Each test names one rule: the
chain and the host name are verified, and a context that would not verify
both is never used; a certificate that fails is one line naming the server
and the reason, and ``ring-launch`` exits 78 without retrying; a Python
whose ``ssl`` does not load says so in one line. Against the real API
server: tests/integration/test_launcher_api.py.
"""

from __future__ import annotations

import json
import ssl
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ranktable.launch.apiwatch import ApiSource
from ranktable.launch.kubeapi import KubeClient, TlsVerifyError, tls_context
from ranktable.launch.kubeconfig import ApiConfigError, ClientConfig
from ranktable.launch.launcher import EXIT_API_CONFIG, main
from tests.support.loopback import TLS, Loopback, Reply, Request, answer

OK = answer("200 OK", b'{"kind":"Status","ok":true}', "Content-Type: application/json")


def ok(_request: Request) -> bytes:
    return OK


@pytest.fixture
def server() -> Iterator[Loopback]:
    s = Loopback(ok, cert="server")
    yield s
    s.close()


def config(port: int, *, host: str = "localhost", ca: str = "ca.crt", insecure: bool = False) -> ClientConfig:
    return ClientConfig(host=host, port=port, where="test", ca_file=str(TLS / ca), insecure=insecure, token="t")


def test_the_right_ca_and_name_connect_with_a_verifying_context(server: Loopback) -> None:
    client = KubeClient(config(server.port), connect_timeout=5)
    assert isinstance(client._context, ssl.SSLContext)
    assert client._context.verify_mode == ssl.CERT_REQUIRED and client._context.check_hostname
    assert client.get_json("/version", {}, timeout=5) == {"kind": "Status", "ok": True}
    assert server.requests[0].headers["authorization"] == "Bearer t"


REFUSED = [
    pytest.param("server", "localhost", "other-ca.crt", "unable to get local issuer certificate", id="another-ca"),
    pytest.param("server", "127.0.0.1", "ca.crt", "IP address mismatch", id="ip-mismatch"),
    pytest.param("other-name", "localhost", "ca.crt", "Hostname mismatch", id="name-mismatch"),
    pytest.param("expired", "localhost", "expired-ca.crt", "certificate has expired", id="expired"),
]


@pytest.mark.parametrize(("cert", "host", "ca", "reason"), REFUSED)
def test_a_certificate_that_fails_verification_is_final_and_names_server_and_reason(
    cert: str, host: str, ca: str, reason: str
) -> None:
    s = Loopback(ok, cert=cert)
    try:
        client = KubeClient(config(s.port, host=host, ca=ca), connect_timeout=5)
        source = ApiSource(namespace="a", name="c", client=client)
        with pytest.raises(TlsVerifyError, match="certificate was refused") as raised:
            next(source.observe(time.monotonic() + 30))
        assert isinstance(raised.value, ApiConfigError)  # exit 78: no retry to the deadline
        assert str(raised.value).startswith(f"test: TLS to {host}:{s.port}: the server's certificate was refused: ")
        assert reason in str(raised.value) and "\n" not in str(raised.value)
        assert s.connections == 1 and s.requests == []
    finally:
        s.close()


def kubeconfig(tmp_path: Path, port: int, *, ca: str) -> Path:
    """A kubeconfig (JSON, which the launcher reads too) for ``https://localhost:PORT`` trusting ``ca``."""
    path = tmp_path / "kubeconfig"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [
            {"name": "k", "cluster": {"server": f"https://localhost:{port}", "certificate-authority": str(TLS / ca)}}
        ],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("register", [False, True], ids=["watch", "register"])
def test_ring_launch_says_one_line_and_exits_78_for_a_certificate_it_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, register: bool
) -> None:
    s = Loopback(ok, cert="expired")
    try:
        monkeypatch.setenv("POD_IP", "10.0.0.7")
        path = kubeconfig(tmp_path, s.port, ca="expired-ca.crt")
        argv = ["--from-api", "--kubeconfig", str(path), "--namespace", "a", "--configmap", "c", "--pod", "p"]
        argv += ["--timeout", "60", "--print", "json"] + (["--register"] if register else [])
        assert main(argv) == EXIT_API_CONFIG
        lines = capsys.readouterr().err.splitlines()
        waiting = [] if register else ["ring-launch: pod p: waiting up to 60s for a completed spec in ConfigMap a/c"]
        assert lines == [
            *waiting,
            f"ring-launch: error: kubeconfig {path}: TLS to localhost:{s.port}: the server's certificate was refused: "
            "certificate has expired",
        ]
        assert s.requests == []
    finally:
        s.close()


def test_insecure_skips_verification(server: Loopback) -> None:
    client = KubeClient(config(server.port, host="127.0.0.1", ca="other-ca.crt", insecure=True), connect_timeout=5)
    assert client.get_json("/version", {}, timeout=5)["ok"] is True


@pytest.mark.parametrize("ragged", [False, True], ids=["close-notify", "ragged-eof"])
def test_a_body_that_ends_with_the_connection_is_read_to_its_end(ragged: bool) -> None:
    body = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"n": 1}'
    s = Loopback(lambda _r: Reply(body, close=True, ragged=ragged), cert="server")
    try:
        assert KubeClient(config(s.port), connect_timeout=5).get_json("/x", {}, timeout=5) == {"n": 1}
    finally:
        s.close()


# --- a context that does not verify both the chain and the host name is never used --------------


@pytest.mark.parametrize("weaken", ["no-host-name-check", "chain-optional", "no-chain-check"])
def test_a_context_that_would_not_verify_is_refused_before_any_connection(
    server: Loopback, monkeypatch: pytest.MonkeyPatch, weaken: str
) -> None:
    made = ssl.create_default_context

    def weakened(*args: object, **kwargs: object) -> ssl.SSLContext:
        context = made(*args, **kwargs)  # type: ignore[arg-type]
        context.check_hostname = False
        if weaken != "no-host-name-check":
            context.verify_mode = ssl.CERT_OPTIONAL if weaken == "chain-optional" else ssl.CERT_NONE
        return context

    monkeypatch.setattr(ssl, "create_default_context", weakened)
    with pytest.raises(ApiConfigError, match="does not verify the server's certificate and host name"):
        tls_context(config(server.port, host="127.0.0.1"))  # the certificate names localhost only
    with pytest.raises(ApiConfigError, match="does not verify"):
        KubeClient(config(server.port, host="127.0.0.1"), connect_timeout=5)
    assert server.connections == 0


def test_a_context_weakened_after_it_was_made_is_refused_at_the_next_connection(server: Loopback) -> None:
    client = KubeClient(config(server.port, host="127.0.0.1"), connect_timeout=5)
    assert client._context is not None
    client._context.check_hostname = False
    with pytest.raises(ApiConfigError, match="does not verify"):
        client.get_json("/version", {}, timeout=5)
    assert server.connections == 0


# --- a TLS library without what the launcher needs ------------------------------------------------


def test_a_python_whose_ssl_does_not_load_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ssl", None)  # import ssl raises ImportError, as on a Python built without it
    with pytest.raises(ApiConfigError, match="this Python cannot speak TLS to the API server: its ssl module"):
        tls_context(config(1))
    path = kubeconfig(tmp_path, 1, ca="ca.crt")
    argv = ["--from-api", "--kubeconfig", str(path), "--namespace", "a", "--configmap", "c", "--print", "json"]
    assert main(argv) == EXIT_API_CONFIG
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"ring-launch: error: kubeconfig {path}: this Python cannot speak TLS to the API server")
