"""The launcher's self-check in plain Python images on the real node, brought by the init container.

Images: Debian bullseye (3.9), bookworm (3.11), trixie (3.13) with python3 and
nothing else, and forky with ``python3.14`` and ``python3.15`` (each run on
its own): every interpreter of :data:`tests.support.pythonroots.PYTHONS` that
Debian carries (:mod:`tests.support.pythonimages`). In each pod the init
container, from the controller image built from this checkout, copies
``ring-launch.pyz`` into an ``emptyDir``; two containers of the plain image
then run ``PYTHON /ring/ring-launch.pyz --print json``: one in file mode on
the mounted spec ConfigMap, one with ``--from-api`` on the pod's own service
account (token and CA projected by the kubelet, ``KUBERNETES_SERVICE_HOST``
set by it). Every container runs as 65532 on a read-only root filesystem.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ranktable.tfconfig import tf_config
from ringdevcluster import Cluster, node
from tests.support import deployed, nodejobs, pythonimages, pythonroots
from tests.support.kubehelp import wait_for
from tests.support.launcherapi import put_spec, service_account
from tests.support.pythonroots import Python
from tests.support.specs import make_spec

pytestmark = pytest.mark.integration

POD = "job-worker-1"
CM = "rings-config-job"
LOCKED = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "readOnlyRootFilesystem": True}
#: Debian's interpreters of the matrix (pyenv's live on the host, not in an image).
DEBIANS = [pytest.param(python, id=python.version) for python in pythonroots.PYTHONS if not python.pyenv]


def launcher_pod(image: str, python: str) -> dict[str, Any]:
    def container(name: str, *args: str) -> dict[str, Any]:
        return {
            "name": name,
            "image": image,
            "imagePullPolicy": "Never",
            "command": [python, "/ring/ring-launch.pyz", *args, "--timeout", "60", "--print", "json"],
            "env": [
                {"name": "POD_NAME", "value": POD},  # the spec's member; the pod's own name differs
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "RING_CONFIGMAP", "value": CM},
            ],
            "securityContext": LOCKED,
            "volumeMounts": [
                {"name": "ring-launch", "mountPath": "/ring", "readOnly": True},
                {"name": "rings-config", "mountPath": "/etc/ring-config", "readOnly": True},
            ],
        }

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "selfcheck"},
        "spec": {
            **node.pod_placement(),
            "restartPolicy": "Never",
            "serviceAccountName": "trainer",
            "initContainers": [
                {
                    "name": "ring-launch",
                    "image": deployed.IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python3", "/opt/ring-launch/ring-launch.pyz", "--install", "/ring"],
                    "securityContext": LOCKED,
                    "volumeMounts": [{"name": "ring-launch", "mountPath": "/ring"}],
                }
            ],
            "containers": [container("file"), container("api", "--from-api")],
            "volumes": [
                {"name": "ring-launch", "emptyDir": {}},
                {"name": "rings-config", "configMap": {"name": CM}},
            ],
        },
    }


@pytest.mark.parametrize("python", DEBIANS)
def test_self_check_in_a_plain_python_image(
    python: Python, k8s: Any, namespace: str, workloads: Cluster, tmp_path: Path
) -> None:
    nodejobs.ensure_image(deployed.IMAGE, "--controller")  # this checkout's controller image, with the pyz
    image = pythonimages.image(python.root, Path(workloads.state_dir) / "python-images")
    spec = make_spec([("worker", 3)])
    put_spec(k8s, namespace, CM, spec)
    service_account(k8s, namespace, "trainer", configmap=CM, verbs=["get", "list", "watch"])
    k8s.core.create_namespaced_pod(namespace, launcher_pod(image, python.command))

    def ended() -> Any:
        pod = k8s.core.read_namespaced_pod("selfcheck", namespace)
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    pod = wait_for(ended, timeout=180, interval=0.5, what=f"the self-check pod on {python.how}")
    logs = {c: k8s.core.read_namespaced_pod_log("selfcheck", namespace, container=c) for c in ("file", "api")}
    assert pod.status.phase == "Succeeded", (pod.status, logs)
    for mode, log in logs.items():
        printed = [line for line in log.splitlines() if line.startswith("{")]
        assert len(printed) == 1, (mode, log)
        assert json.loads(json.loads(printed[0])["TF_CONFIG"]) == tf_config(spec, pod=POD), (mode, log)
    installed = k8s.core.read_namespaced_pod_log("selfcheck", namespace, container="ring-launch")
    assert "installed /ring/ring-launch.pyz" in installed, installed
