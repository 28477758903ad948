"""Real Multus on the real node: TensorFlow trains over a NetworkAttachmentDefinition the job names (opt-in).

Run with ``RING_TEST_MULTUS=1`` on a workloads cluster made with
``ring-devcluster up --with node --second-network --multus`` (the fixture
asks for one; a running cluster without Multus is refused with a message
saying to bring it down first). There the node's only CNI configuration is
the Multus thin plugin v4.2.3, built from the Go module proxy; the
NetworkAttachmentDefinition CRD comes from that release's manifest and the
attachment ``default/ring-fast`` is the second bridge ``ringbr1``. The
workers' pod template asks for it the way users do
(``k8s.v1.cni.cncf.io/networks: default/ring-fast``), so Multus attaches it
as ``net1`` and writes the pod's ``k8s.v1.cni.cncf.io/network-status``
itself. The Volcano job annotated ``ring-controller.io/network:
default/ring-fast`` is then listed at the ``net1`` addresses with
``interface: net1``, the workers train, and their byte counters show the
all-reduce on ``net1``. (The chained-configuration path, without Multus, is
``test_second_network.py``.)
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest

from model.keys import NETWORK_ANNOTATION, NETWORK_STATUS_ANNOTATION
from ringdevcluster import Cluster, node
from tests.support import nodejobs
from tests.support.controllerproc import ControllerProcess
from tests.support.kubehelp import wait_for, wait_spec
from tests.workloads.test_networks_real_node import _exported
from tests.workloads.test_second_network import _counters, counting_script
from tests.workloads.test_tf_real_node import VOLCANO, _finished, _volcano_pods, volcano_job

pytestmark = [pytest.mark.e2e, pytest.mark.multus]

STEPS = 8
NAD = ("k8s.cni.cncf.io", "v1")


@pytest.fixture(scope="module")
def trainer_image() -> str:
    nodejobs.ensure_trainer_images()
    return nodejobs.TRAINER_IMAGE


@pytest.fixture(scope="module")
def cifar(workloads: Any) -> Path:
    return nodejobs.make_data(Path(workloads.state_dir) / "test-cifar10")


def test_tf_workers_train_over_the_multus_attachment_the_job_names(
    k8s: Any, namespace: str, controller: ControllerProcess, trainer_image: str, cifar: Path, workloads: Cluster
) -> None:
    assert workloads.multus, "the workloads cluster does not run Multus (up --second-network --multus)"
    # Multus is the node's CNI configuration, the chained network-status plugin's configuration is absent.
    net_d = sorted(p.name for p in (Path(workloads.state_dir) / "node" / "cni" / "net.d").iterdir())
    assert net_d == [node.MULTUS_CONFIG, "10-ring-devcluster.conflist"], net_d
    ns, name = node.SECOND_NETWORK.split("/")
    attachment = k8s.custom.get_namespaced_custom_object(*NAD, ns, "network-attachment-definitions", name)
    assert json.loads(attachment["spec"]["config"])["plugins"][0]["bridge"] == node.BRIDGE2
    job = volcano_job(
        "tfmultus", data=cifar, workers=2,
        command=[*nodejobs.LAUNCH, "--timeout", "300", "--", "sh", "-c", counting_script("eth0", node.MULTUS_INTERFACE), "sh"],
        args=["python", "/app/train.py", "--steps", str(STEPS), "--result", "-"],
    )  # fmt: skip
    job["metadata"].setdefault("annotations", {})[NETWORK_ANNOTATION] = node.SECOND_NETWORK
    (task,) = job["spec"]["tasks"]
    task["template"].setdefault("metadata", {}).setdefault("annotations", {})[node.NETWORKS_ANNOTATION] = (
        node.SECOND_NETWORK
    )
    k8s.custom.create_namespaced_custom_object(*VOLCANO, namespace, "jobs", job)
    pods = wait_for(
        lambda: (lambda ps: ps if len(ps) == 2 else None)(_volcano_pods(k8s, namespace, "tfmultus")),
        timeout=120,
        what="2 Volcano pods",
    )
    spec = wait_spec(k8s, namespace, "rings-config-tfmultus", timeout=180)
    pods = _finished(k8s, namespace, pods)
    names = ["tfmultus-worker-0", "tfmultus-worker-1"]
    by_name = {p.metadata.name: p for p in pods}
    fast = []
    for pod_name in names:
        # Multus' annotation: the cluster network (eth0, default) and the attachment (net1).
        status = json.loads(by_name[pod_name].metadata.annotations[NETWORK_STATUS_ANNOTATION])
        print(f"{pod_name} {NETWORK_STATUS_ANNOTATION}: {json.dumps(status)}")
        assert [(e["name"], e["interface"], e.get("default", False)) for e in status] == [
            ("ring-devcluster", "eth0", True),
            (node.SECOND_NETWORK, node.MULTUS_INTERFACE, False),
        ]
        assert by_name[pod_name].status.pod_ip in status[0]["ips"]
        ip = status[1]["ips"][0]  # the cluster's first family
        assert ipaddress.ip_address(ip) in node.addresses(workloads.ip_family).second_cidrs[0]
        fast.append(ip)
    assert [(m["pod"], m["ip"], m["port"], m.get("interface")) for m in spec["members"]] == [
        (names[0], fast[0], 2222, node.MULTUS_INTERFACE),
        (names[1], fast[1], 2222, node.MULTUS_INTERFACE),
    ]
    deltas = {}
    for rank, pod_name in enumerate(names):
        text = k8s.core.read_namespaced_pod_log(pod_name, namespace)
        env = _exported(text)["env"]
        worker = [f"[{ip}]:2222" if ":" in ip else f"{ip}:2222" for ip in fast]
        assert json.loads(env["TF_CONFIG"])["cluster"]["worker"] == worker
        assert env["RING_IP"] == fast[rank]
        assert env["GLOO_SOCKET_IFNAME"] == node.MULTUS_INTERFACE
        log = nodejobs.parse_log(pod_name, text)
        assert log.result, text[-1500:]
        before, after = _counters(text)
        deltas[pod_name] = {i: after[i]["tx"] - before[i]["tx"] for i in ("eth0", node.MULTUS_INTERFACE)}
    print(f"bytes sent during training, per worker and interface: {deltas}")
    results = [nodejobs.parse_log(n, k8s.core.read_namespaced_pod_log(n, namespace)).result for n in names]
    assert len({r["weights_sha256"] for r in results if r}) == 1, "workers ended with different weights"
    for pod_name, sent in deltas.items():
        # As on the chained second network: the gradients' all-reduce on net1, eth0 nearly idle.
        assert sent[node.MULTUS_INTERFACE] > 100_000, (pod_name, deltas)
        assert sent["eth0"] < 10_000, (pod_name, deltas)
