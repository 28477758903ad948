"""Every process of a fresh dev cluster starts with the argv and environment recorded in devcluster_argv.json.

The recording was made from the code before the tooling was split into
modules (issue 22): a change of any flag given to etcd, the API server, the
controller-manager, the scheduler, kwok, an addon or the real node shows up
here as a diff. When a flag changes on purpose, re-record the file (the
running clusters pick up new flags only on a fresh start).
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ringdevcluster import addons, cluster, controlplane

pytestmark = pytest.mark.tools

EXPECTED = Path(__file__).with_name("devcluster_argv.json")
#: Binary name -> the path the recording used.
_BINARIES = (
    "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "jobset", "controller-manager",
    "scheduler", "trainer", "kubelet", "kube-proxy", "relay", "coredns", "pause", "prometheus", "kueue",
    "lws-controller",
)  # fmt: skip


def _recorded(state_dir: Path) -> dict[str, Any]:
    text = EXPECTED.read_text().replace("{state}", str(state_dir))
    return json.loads(text)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def fresh_state(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """state.json of a fresh cluster with every addon, on ports 20000, 20001, ... in allocation order."""
    state_dir = tmp_path_factory.mktemp("state")
    binaries = {name: Path(f"/cache/x/{name}") for name in _BINARIES}
    names = addons.expand(list(addons.ADDONS))
    versions = {m: "v0" for m in ("etcd", "kwok", "kube", *addons.modules(names))}
    ports = itertools.count(20000)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", "/usr/bin:/bin")
        patch.setattr(cluster, "free_port", lambda: next(ports))
        cluster._fresh(
            state_dir, binaries=binaries, versions=versions, addons=names, ip_family="dual", say=lambda _m: None
        )
    return state_dir, json.loads((state_dir / "state.json").read_text())


@pytest.mark.parametrize("field", ["ports", "argv", "env"])
def test_a_fresh_cluster_gives_its_processes_the_recorded(field: str, fresh_state: tuple[Path, dict[str, Any]]) -> None:
    state_dir, state = fresh_state
    assert state[field] == _recorded(state_dir)[field]


def test_the_api_server_certificate_carries_the_service_ip(fresh_state: tuple[Path, dict[str, Any]]) -> None:
    state_dir, _ = fresh_state
    text = subprocess.run(
        ["openssl", "x509", "-in", str(state_dir / "pki" / "apiserver.crt"), "-noout", "-ext", "subjectAltName"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "IP Address:10.96.0.1" in text and "IP Address:127.0.0.1" in text
    # The IPv6 Service range's first address too (the `kubernetes` Service of an IPv6-only cluster).
    ips = {ipaddress.ip_address(w.split(":", 1)[1]) for w in text.replace(",", " ").split() if w.startswith("Address:")}
    assert ipaddress.ip_address(controlplane.SERVICE_IP6) in ips, text


def test_a_fresh_1_32_cluster_turns_dra_on_in_its_control_plane(tmp_path: Path) -> None:
    binaries = {name: Path(f"/cache/x/{name}") for name in _BINARIES}
    ports = itertools.count(20000)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cluster, "free_port", lambda: next(ports))
        fresh = cluster._fresh(
            tmp_path, binaries=binaries, versions={"etcd": "v0", "kwok": "v0", "kube": "v1.32.13"}, addons=[],
            ip_family="dual", say=lambda _m: None,
        )  # fmt: skip
    argv = fresh._state["argv"]
    gates = "--feature-gates=DynamicResourceAllocation=true,DRAResourceClaimDeviceStatus=true"
    assert gates in argv["kube-apiserver"] and "--runtime-config=resource.k8s.io/v1beta1=true" in argv["kube-apiserver"]
    assert gates in argv["kube-controller-manager"] and gates in argv["kube-scheduler"]
    assert not any(a.startswith("--feature-gates=") for a in argv["etcd"] + argv["kwok"])
