"""The daemon's own HTTP client (:class:`ringcontroller.kube.Client`) and where it connects (:mod:`ringcontroller.kubeconfig`).

Against the scripted TLS server of tests/support/loopback.py with the test
CA of tests/unit/data/tls: what goes on the wire (method, path, query,
JSON body, Authorization from a token file read again for each request,
User-Agent), that the server's certificate is verified, and that the daemon
never imports kubernetes-asyncio's generated client (36 MB of its memory)
unless a kubeconfig user needs an exec plugin run. Against the real API
server every integration test's controller process uses it (client
certificates of the dev cluster's kubeconfig).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from ranktable.launch.kubeconfig import ApiConfigError, ClientConfig
from ringcontroller import kube, kubeconfig
from tests.support.loopback import TLS, Loopback, answer

OK = answer("200 OK", b'{"kind":"ConfigMap","ok":true}', "Content-Type: application/json")


@pytest.fixture
def server() -> Iterator[Loopback]:
    s = Loopback(lambda _request: OK, cert="server")
    yield s
    s.close()


def token_config(port: int, token_file: Path, *, ca: str = "ca.crt") -> ClientConfig:
    return ClientConfig(host="localhost", port=port, where="test", ca_file=str(TLS / ca), token_file=str(token_file))


async def test_requests_carry_the_json_body_query_and_the_token_read_again_for_each_request(
    server: Loopback, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    connection = kubeconfig.connection_of(token_config(server.port, token))
    assert connection.server == f"https://localhost:{server.port}"
    async with kube.Client(connection, user_agent="ring-controller/test") as api:
        answered = await kube.request(
            api, "PUT", "/api/v1/namespaces/n/configmaps/c", body={"data": {"k": "v"}}, query=[("dryRun", "All")]
        )
        token.write_text("rotated\n")  # the kubelet rotates a bound token in place
        await kube.get_json(api, "/version")
    assert answered == {"kind": "ConfigMap", "ok": True}
    first, second = server.requests
    assert (first.method, first.target) == ("PUT", "/api/v1/namespaces/n/configmaps/c?dryRun=All")
    assert json.loads(first.body) == {"data": {"k": "v"}}
    assert first.headers["content-type"] == "application/json"
    assert first.headers["user-agent"] == "ring-controller/test"
    assert [r.headers["authorization"] for r in (first, second)] == ["Bearer first", "Bearer rotated"]
    assert (second.method, second.target) == ("GET", "/version")


async def test_a_server_certificate_of_another_ca_is_refused(server: Loopback, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    connection = kubeconfig.connection_of(token_config(server.port, token, ca="other-ca.crt"))
    async with kube.Client(connection) as api:
        with pytest.raises(aiohttp.ClientConnectorCertificateError, match="certificate verify failed"):
            await kube.get_json(api, "/version")
    assert server.requests == []


def test_an_ipv6_server_is_bracketed_in_the_url(tmp_path: Path) -> None:
    config = ClientConfig(host="fd00::1", port=6443, where="test", tls=False, token="t")
    assert kubeconfig.connection_of(config).server == "http://[fd00::1]:6443"


def test_a_client_used_outside_its_async_with_says_so() -> None:
    config = ClientConfig(host="localhost", port=1, where="test", tls=False)
    client = kube.Client(kubeconfig.connection_of(config))
    with pytest.raises(RuntimeError, match="outside `async with`"):
        asyncio.run(kube.get_json(client, "/version"))


async def test_a_missing_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ApiConfigError, match="cannot read kubeconfig .*nope"):
        await kubeconfig.load(str(tmp_path / "nope"))


def test_the_daemon_imports_no_kubernetes_client() -> None:
    code = "import sys, ringcontroller.main; print(sorted({m.split('.')[0] for m in sys.modules} & {'kubernetes', 'kubernetes_asyncio'}))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


async def test_an_exec_plugin_user_is_served_by_kubernetes_asyncios_loader(server: Loopback, tmp_path: Path) -> None:
    plugin = tmp_path / "plugin"
    plugin.write_text(
        textwrap.dedent(
            """\
            #!/usr/bin/env python3
            import json
            print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                              "status": {"token": "from-the-plugin"}}))
            """
        )
    )
    plugin.chmod(0o755)
    config = tmp_path / "config"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                "clusters": [
                    {
                        "name": "k",
                        "cluster": {
                            "server": f"https://localhost:{server.port}",
                            "certificate-authority": str(TLS / "ca.crt"),
                        },
                    }
                ],
                "users": [
                    {
                        "name": "u",
                        "user": {
                            "exec": {
                                "apiVersion": "client.authentication.k8s.io/v1",
                                "command": str(plugin),
                                "interactiveMode": "Never",
                            }
                        },
                    }
                ],
            }
        )
    )
    connection = await kubeconfig.load(str(config))
    assert "plugin" in connection.source
    assert isinstance(connection.ssl, ssl.SSLContext)
    async with kube.Client(connection) as api:
        await kube.get_json(api, "/version")
    (seen,) = server.requests
    assert seen.headers["authorization"] == "Bearer from-the-plugin"
