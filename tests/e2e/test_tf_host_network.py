"""Two hostNetwork members of one job on one node: real TensorFlow trains on one IP, two ports.

On the local control plane two ``hostNetwork`` pods of a Volcano Job are
placed on one kwok node, so both report the node's address (kwok gives a
``hostNetwork`` pod its node's IP, a loopback address here). The controller
lists them at that IP with the template's port and the next one; a real
TensorFlow process per pod, started as ``ring-launch -- python train.py``,
must find its own server address in ``TF_CONFIG``, bind it and train in
lockstep with the other (identical losses and weights). Twice: on a kwok
node at an IPv4 loopback address, and on one whose address is ``::1``, so the
members are IPv6 (``TF_CONFIG`` holds ``[::1]:port``). On the real node:
tests/workloads/test_networks_real_node.py.
"""

from __future__ import annotations

import secrets
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ringdevcluster.kwok import HOST_IP_ANNOTATION, node_manifest
from tests.support import tfharness
from tests.support.controllerproc import ControllerProcess
from tests.support.factories import pod_template, volcano_job
from tests.support.kubehelp import create_pods, create_volcano_job, read_spec, running_pods, wait_for
from tests.support.tfharness import WorkerGroup, WorkerSpec

pytestmark = pytest.mark.e2e

STEPS = 4
RING_LAUNCH = str(Path(sys.executable).with_name("ring-launch"))
KWOK_NODE = "kwok-node-0"


def _two_free_ports() -> int:
    """A port p with p and p + 1 both free on every interface right now."""
    for _ in range(50):
        (base,) = tfharness.free_ports(1)
        try:
            with socket.socket() as probe:
                probe.bind(("0.0.0.0", base + 1))
        except OSError:
            continue
        return base
    raise AssertionError("no two consecutive free ports found")


@pytest.fixture(params=["IPv4", "IPv6"])
def node(request: pytest.FixtureRequest, k8s: Any) -> Iterator[str]:
    """A kwok node: kwok-node-0 (an IPv4 loopback address), or a new one at ``::1``."""
    if request.param == "IPv4":
        yield KWOK_NODE
        return
    manifest = node_manifest(201)
    name = f"kwok-v6-{secrets.token_hex(3)}"
    manifest["metadata"]["name"] = name
    manifest["metadata"]["labels"]["kubernetes.io/hostname"] = name
    manifest["metadata"]["annotations"][HOST_IP_ANNOTATION] = "::1"
    manifest["spec"] = {"podCIDR": "fd00:10:201::/64", "podCIDRs": ["fd00:10:201::/64"]}
    k8s.core.create_node(manifest)
    yield name
    k8s.core.delete_node(name)


@pytest.fixture(scope="module")
def cifar_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tfharness.make_cifar10(tmp_path_factory.mktemp("cifar10"), per_batch=64, seed=5)


def test_two_host_network_workers_on_one_node_train_on_distinct_ports(
    k8s: Any,
    namespace: str,
    kubeconfig: Path,
    controller: ControllerProcess,
    tmp_path: Path,
    cifar_dir: Path,
    node: str,
) -> None:
    template = pod_template()
    template["spec"]["hostNetwork"] = True
    job = create_volcano_job(k8s, namespace, volcano_job("hn", tasks=[("worker", 2)], template=template))
    base = _two_free_ports()
    names = ["hn-worker-0", "hn-worker-1"]
    specs = [
        WorkerSpec(
            name=f"worker-{i}",
            argv=[
                RING_LAUNCH,
                "--from-api",
                "--kubeconfig",
                str(kubeconfig),
                "--namespace",
                namespace,
                "--configmap",
                "rings-config-hn",
                "--",
                *tfharness.train_argv(cifar_dir, steps=STEPS, result=tmp_path / f"result-{i}.json"),
            ],
            env=tfharness.worker_env(POD_NAME=name, RING_TIMEOUT="120"),
            result=tmp_path / f"result-{i}.json",
        )  # fmt: skip
        for i, name in enumerate(names)
    ]
    with WorkerGroup(specs, log_dir=tmp_path / "logs") as group:
        # Both pods name the same port; each member gets its own from the spec.
        create_pods(
            k8s, job, [("worker", 0), ("worker", 1)], node=node, annotations={"ring-controller/port": str(base)}
        )
        codes = group.wait(timeout=240)
        group.assert_all_succeeded(codes)
        results = group.results()
        logs = group.describe()
    live = wait_for(lambda: running_pods(k8s, namespace, names), what="pods running")
    (ip,) = {live[n].status.pod_ip for n in names}
    assert ip == live[names[0]].status.host_ip
    spec = read_spec(k8s, namespace, "rings-config-hn")
    assert spec is not None
    assert [(m["pod"], m["ip"], m["port"]) for m in spec["members"]] == [
        (names[0], ip, base),
        (names[1], ip, base + 1),
    ]
    host = f"[{ip}]" if ":" in ip else ip
    assert (host == "[::1]") == (node != KWOK_NODE)
    cluster = [f"{host}:{base}", f"{host}:{base + 1}"]
    for i in range(2):
        assert results[f"worker-{i}"]["tf_config"] == {
            "cluster": {"worker": cluster},
            "task": {"type": "worker", "index": i},
        }
    assert results["worker-0"]["losses"] == results["worker-1"]["losses"], logs
    assert results["worker-0"]["weights_sha256"] == results["worker-1"]["weights_sha256"], logs
