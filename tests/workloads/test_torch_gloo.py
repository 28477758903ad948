"""PyTorch on the real node with nothing but ring-launch: a gloo all-reduce across 3 pods (opt-in).

Run with ``build/test.sh --with torch`` (or ``RING_TEST_TORCH=1``): PyTorch's
wheels from PyPI bring CUDA libraries (2.8 GB of wheels), too much for every
CI run, so the test is deselected otherwise (:mod:`tests.support.torchimage`).

A Volcano Job of 3 workers labelled ``pytorch`` runs a stock PyTorch image
(no ring-controller); the init container brings ``ring-launch.pyz``, which
waits for the controller's spec and exports ``MASTER_ADDR``, ``MASTER_PORT``,
``RANK`` and ``WORLD_SIZE``: the script reads only those
(``init_process_group("gloo")`` with ``env://``), all-reduces its rank + 1
and prints the sum, which must be 1 + 2 + 3 on every pod.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from ringdevcluster import Cluster, node
from tests.support import nodejobs, torchimage
from tests.support.controllerproc import ControllerProcess
from tests.support.kubehelp import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.torch]

WORKERS = 3
PORT = 29500
SCRIPT = """
import json, os, torch, torch.distributed as dist
dist.init_process_group("gloo")
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
print("RESULT " + json.dumps({"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": value.item(),
      "master": os.environ["MASTER_ADDR"] + ":" + os.environ["MASTER_PORT"]}), flush=True)
dist.destroy_process_group()
"""


def torch_job(name: str, image: str) -> dict[str, Any]:
    pod_spec = {
        **copy.deepcopy(node.pod_placement()),
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 2,
        "initContainers": [
            {
                "name": "ring-launch",
                "image": nodejobs.CONTROLLER_IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python3", "/opt/ring-launch/ring-launch.pyz", "--install", "/ring"],
                "volumeMounts": [{"name": "ring-launch", "mountPath": "/ring"}],
            }
        ],
        "containers": [
            {
                "name": "pytorch",
                "image": image,
                "imagePullPolicy": "Never",
                "command": [*nodejobs.LAUNCH, "--timeout", "300", "--", "python3", "-c", SCRIPT],
                "env": [
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "GLOO_SOCKET_IFNAME", "value": "eth0"},
                    {"name": "HOME", "value": "/tmp"},
                ],
                "ports": [{"name": "tf-port", "containerPort": PORT}],
                "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
                "volumeMounts": [
                    {"name": "ring-launch", "mountPath": "/ring", "readOnly": True},
                    {"name": "rings-config", "mountPath": "/etc/ring-config", "readOnly": True},
                ],
            }
        ],
        "volumes": [
            {"name": "ring-launch", "emptyDir": {}},
            {"name": "rings-config", "configMap": {"name": f"rings-config-{name}", "optional": True}},
        ],
    }
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"ring-controller.atlas": "pytorch"}},
        "spec": {
            "minAvailable": WORKERS,
            "schedulerName": "volcano",
            "queue": "default",
            "tasks": [
                {
                    "name": "worker",
                    "replicas": WORKERS,
                    "template": {"metadata": {"labels": {"ring-controller.atlas": "pytorch"}}, "spec": pod_spec},
                }
            ],
        },
    }


def test_gloo_all_reduce_across_three_pods_from_ring_launch_alone(
    k8s: Any, namespace: str, workloads: Cluster, controller: ControllerProcess
) -> None:
    nodejobs.ensure_image(nodejobs.CONTROLLER_IMAGE, "--controller")
    image = torchimage.image(Path(workloads.state_dir) / "torch-image")
    job = torch_job("gloo", image)
    k8s.custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", job)

    def finished() -> list[Any] | None:
        pods = k8s.core.list_namespaced_pod(namespace, label_selector="volcano.sh/job-name=gloo").items
        done = [p for p in pods if p.status.phase in ("Succeeded", "Failed")]
        return pods if len(pods) == WORKERS and len(done) == WORKERS else None

    pods = wait_for(finished, timeout=600, interval=1.0, what="the 3 PyTorch pods to finish")
    results = []
    for pod in pods:
        log = k8s.core.read_namespaced_pod_log(pod.metadata.name, namespace, container="pytorch")
        assert pod.status.phase == "Succeeded", log
        (line,) = [x for x in log.splitlines() if x.startswith("RESULT ")]
        results.append(json.loads(line[len("RESULT ") :]))
    assert sorted(r["rank"] for r in results) == [0, 1, 2]
    assert {r["world"] for r in results} == {WORKERS}
    assert {r["sum"] for r in results} == {6.0}
    assert len({r["master"] for r in results}) == 1
