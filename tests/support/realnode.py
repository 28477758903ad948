"""Pods on the dev cluster's real node (``ring-devcluster up --with node``).

A test image without a registry or a Docker engine: Debian's static busybox
packed as a docker-archive (:mod:`ringdevcluster.images`) and imported into the
node's containerd; pods built by :func:`node_pod` select the real node,
tolerate its taint and never pull. :func:`exec_in` runs a command in a
container through the API server and the kubelet, as ``kubectl exec`` does.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.stream import stream

from ringdevcluster import images, node
from tests.support.kubehelp import wait_for

Json = dict[str, Any]


def import_busybox(directory: Path) -> str:
    """Pack Debian's static busybox as an image, import it into the node; return its name.

    The tag is the binary's digest, so a changed busybox is a new image.
    """
    files = images.busybox_files()
    tag = hashlib.sha256(files["/bin/busybox"].data).hexdigest()[:12]
    name = f"ring-devcluster.local/busybox:{tag}"
    if name not in node.image_names():
        archive = images.write_docker_archive(directory / "busybox.tar", name=name, files=files, cmd=["sh"])
        node.import_image(archive)
    return name


def node_pod(name: str, *, image: str, script: str, labels: dict[str, str] | None = None, **spec: Any) -> Json:
    """A pod on the real node running ``sh -c script`` in ``image`` (never pulled); ``spec`` adds pod fields."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            **node.pod_placement(),
            # busybox sh as PID 1 ignores SIGTERM: do not wait 30 s on delete.
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "main", "image": image, "imagePullPolicy": "Never", "command": ["sh", "-c", script]}
            ],
            **spec,
        },
    }


def wait_running(core: client.CoreV1Api, namespace: str, name: str, *, timeout: float = 120.0) -> Json:
    """Wait until pod ``name`` is Running with an IP; return it (raw JSON)."""

    def running() -> Json | None:
        pod = core.api_client.sanitize_for_serialization(core.read_namespaced_pod(name, namespace))
        status = pod.get("status") or {}
        if status.get("phase") in ("Failed", "Succeeded"):
            raise AssertionError(f"pod {name} ended: {status}")
        return pod if status.get("phase") == "Running" and status.get("podIP") else None

    return wait_for(running, timeout=timeout, interval=0.2, what=f"pod {namespace}/{name} Running")


def exec_in(api: client.ApiClient, namespace: str, pod: str, argv: list[str]) -> str:
    """Run ``argv`` in the pod's first container (through the API server and the kubelet); return stdout+stderr."""
    # A client of its own: the websocket call swaps the client's request function.
    core = client.CoreV1Api(client.ApiClient(api.configuration))
    out: str = stream(
        core.connect_get_namespaced_pod_exec, pod, namespace,
        command=argv, stderr=True, stdin=False, stdout=True, tty=False,
    )  # fmt: skip
    return out
