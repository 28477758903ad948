"""hostNetwork members on the real node: two TensorFlow workers of one job share the node's IP and train.

The Volcano example (build/examples/volcano) with ``hostNetwork: true`` and
its member port given by the ``ring-controller/port`` annotation instead of a
container port (which would be a hostPort, one per node): the real Volcano
controller makes both pods, the real kubelet runs both on the one node, in
the node's network namespace. ring-controller lists them at the node's IP
with ports 23222 and 23223 (the template's port plus each member's place on
the IP), ring-launch exports that TF_CONFIG, and the workers must train in
sync (identical weights), each gRPC server on its own port of the host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import nodejobs
from tests.support.controllerproc import ControllerProcess
from tests.support.kubehelp import wait_for, wait_spec
from tests.workloads.test_tf_real_node import VOLCANO, _finished, _volcano_pods, volcano_job

pytestmark = pytest.mark.e2e

PORT = 23222


@pytest.fixture(scope="module")
def trainer_image() -> str:
    nodejobs.ensure_trainer_images()
    return nodejobs.TRAINER_IMAGE


@pytest.fixture(scope="module")
def cifar(workloads: Any) -> Path:
    return nodejobs.make_data(Path(workloads.state_dir) / "test-cifar10")


def test_two_host_network_workers_on_one_node_train_on_distinct_ports(
    k8s: Any, namespace: str, controller: ControllerProcess, trainer_image: str, cifar: Path
) -> None:
    job = volcano_job(
        "tfhost", data=cifar, workers=2,
        command=[*nodejobs.LAUNCH, "--timeout", "300", "--"], args=["python", "/app/train.py", "--steps", "4", "--result", "-"],
    )  # fmt: skip
    (task,) = job["spec"]["tasks"]
    template = task["template"]
    template["spec"]["hostNetwork"] = True
    template["spec"]["dnsPolicy"] = "ClusterFirstWithHostNet"
    (container,) = template["spec"]["containers"]
    container.pop("ports")
    template.setdefault("metadata", {}).setdefault("annotations", {})["ring-controller/port"] = str(PORT)
    k8s.custom.create_namespaced_custom_object(*VOLCANO, namespace, "jobs", job)
    pods = wait_for(
        lambda: (lambda ps: ps if len(ps) == 2 else None)(_volcano_pods(k8s, namespace, "tfhost")),
        timeout=120,
        what="2 Volcano pods",
    )
    # The completed spec, read while the workers train (Volcano's end of the job is a new version).
    spec = wait_spec(k8s, namespace, "rings-config-tfhost", timeout=180)
    pods = _finished(k8s, namespace, pods)
    (ip,) = {p.status.pod_ip for p in pods}  # both on the node's IP
    assert ip == pods[0].status.host_ip
    assert [(m["pod"], m["ip"], m["port"]) for m in spec["members"]] == [
        ("tfhost-worker-0", ip, PORT),
        ("tfhost-worker-1", ip, PORT + 1),
    ]
    logs = [
        nodejobs.parse_log(p.metadata.name, k8s.core.read_namespaced_pod_log(p.metadata.name, namespace)) for p in pods
    ]
    results = [w.result for w in logs]
    assert all(results), [w.text[-1500:] for w in logs if not w.result]
    assert len({r["weights_sha256"] for r in results}) == 1, "workers ended with different weights"
    for r in results:
        assert r["tf_config"]["cluster"]["worker"] == [f"{ip}:{PORT}", f"{ip}:{PORT + 1}"]
