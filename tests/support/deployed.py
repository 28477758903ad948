"""The controller deployed in the cluster (shipped manifests, Helm chart): its pods, its Lease,
its metrics, and the labelled workload whose spec it must write."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from model.keys import DEFAULT_LABEL_KEY

Json = dict[str, Any]
#: The pod label of every ring-controller replica (build/ring-controller.yaml, the chart).
SELECTOR = "app.kubernetes.io/name=ring-controller"
#: The Lease (--leader-election-id), in the controller's namespace.
LEASE = "ring-controller"


def namespace_gone(k8s: Any, namespace: str) -> bool:
    """True once ``namespace`` no longer exists."""
    try:
        k8s.core.read_namespace(namespace)
    except ApiException as e:
        return e.status == 404
    return False


def controller_pods(k8s: Any, namespace: str) -> list[Any]:
    """The controller's pods in ``namespace`` not being deleted."""
    pods = k8s.core.list_namespaced_pod(namespace, label_selector=SELECTOR).items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def ready(pod: Any) -> bool:
    """The pod's Ready condition (the kubelet runs its readiness probe: caches synced)."""
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def lease_holder(k8s: Any, namespace: str) -> str | None:
    """The pod holding the Lease (identities are ``<pod name>_<uuid>``, one per process)."""
    try:
        lease = client.CoordinationV1Api(k8s.api).read_namespaced_lease(LEASE, namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    holder = lease.spec.holder_identity
    return holder.rsplit("_", 1)[0] if holder else None


def metric(ip: str, name: str) -> float | None:
    """One sample of ``name`` from a replica's /metrics on its pod IP (port 8080)."""
    with urllib.request.urlopen(f"http://{ip}:8080/metrics", timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    return None


def create_workload(k8s: Any, namespace: str, name: str, *, label_key: str = DEFAULT_LABEL_KEY) -> None:
    """A 2-replica Deployment on the kwok nodes, opted in with ``label_key``: a deployed controller
    selecting that label writes its spec."""
    labels = {"app": name, label_key: "tensorflow"}
    k8s.apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "kwok.invalid/none"}]},
                },
            },
        },
    )


def completed_spec(k8s: Any, namespace: str, name: str) -> Json | None:
    """The workload's completed 2-member spec, None until there is one."""
    try:
        cm = k8s.core.read_namespaced_config_map(f"rings-config-{name}", namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    spec: Json = json.loads((cm.data or {}).get("cluster.json", "{}"))
    return spec if spec.get("status") == "completed" and len(spec.get("members", [])) == 2 else None
