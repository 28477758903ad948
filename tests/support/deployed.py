"""The controller deployed in the cluster (shipped manifests, Helm chart): its pods, its Lease,
its metrics, and the labelled workloads whose specs it must write.

:func:`deployed_controller` deploys it as users do from the plain YAML, on the
real node: it imports the image ``ring-controller:0.1.0`` (``build/image.sh
--controller --import``), creates the ``ring-controller`` namespace with the
operator's placement (the dev cluster's PodNodeSelector and
PodTolerationRestriction annotations: select the real node, tolerate its
taint), server-side applies build/rbac.yaml and build/ring-controller.yaml
unchanged, waits for both replicas Ready, and deletes everything afterwards.
That controller is cluster-wide: keep it up only for one test.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from model.keys import DEFAULT_LABEL_KEY
from ringdevcluster import node
from tests.support import charts, nodejobs
from tests.support.kubehelp import wait_for

Json = dict[str, Any]
#: The namespace of the shipped manifests.
NAMESPACE = "ring-controller"
#: The image build/image.sh makes and the shipped Deployment names.
IMAGE = "ring-controller:0.1.0"
#: The pod label of every ring-controller replica (build/ring-controller.yaml, the chart, the PodMonitor).
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


def wait_leader(k8s: Any, namespace: str, names: set[str]) -> str:
    """The replica among ``names`` that holds the Lease, once one does (the Lease read once per poll)."""
    return str(
        wait_for(
            lambda: (lambda holder: holder if holder in names else None)(lease_holder(k8s, namespace)),
            what="a leader among the replicas",
        )
    )


def metric(ip: str, name: str) -> float | None:
    """One sample of ``name`` from a replica's /metrics on its pod IP (port 8080)."""
    with urllib.request.urlopen(f"http://{ip}:8080/metrics", timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    return None


def create_workload(
    k8s: Any,
    namespace: str,
    name: str,
    *,
    replicas: int = 2,
    annotations: Json | None = None,
    label_key: str = DEFAULT_LABEL_KEY,
) -> None:
    """A Deployment on the kwok nodes, opted in with ``label_key``: a deployed controller
    selecting that label writes its spec. ``annotations`` go on the pod template (e.g. a bad
    ``ring-controller/port``)."""
    labels = {"app": name, label_key: "tensorflow"}
    k8s.apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": labels, "annotations": annotations or {}},
                    "spec": {"containers": [{"name": "c", "image": "kwok.invalid/none"}]},
                },
            },
        },
    )


def completed_spec(k8s: Any, namespace: str, name: str, *, members: int = 2) -> Json | None:
    """The workload's cluster spec once completed with ``members`` members, else None."""
    try:
        cm = k8s.core.read_namespaced_config_map(f"rings-config-{name}", namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    spec: Json = json.loads((cm.data or {}).get("cluster.json", "{}"))
    return spec if spec.get("status") == "completed" and len(spec.get("members", [])) == members else None


def _delete_all(k8s: Any, docs: list[Json]) -> None:
    for doc in reversed(docs):
        nodejobs.delete(k8s.api, doc)
    wait_for(lambda: namespace_gone(k8s, NAMESPACE), timeout=120, what=f"namespace {NAMESPACE} gone")


@contextlib.contextmanager
def deployed_controller(k8s: Any) -> Iterator[list[Any]]:
    """Deploy the shipped manifests on the real node; yield the two Ready pods; delete it all afterwards."""
    nodejobs.ensure_image(IMAGE, "--controller")
    docs = charts.shipped(*charts.SHIPPED)
    if not namespace_gone(k8s, NAMESPACE):  # a previous run's leftovers
        _delete_all(k8s, docs)
    namespace_doc = next(d for d in docs if d["kind"] == "Namespace")
    k8s.core.create_namespace(
        {
            "metadata": {
                "name": NAMESPACE,
                "annotations": node.namespace_placement(),
                "labels": namespace_doc["metadata"]["labels"],
            }
        }
    )
    try:
        started = time.monotonic()
        nodejobs.apply(k8s.api, docs)
        both = wait_for(
            lambda: (lambda ps: ps if len(ps) == 2 and all(ready(p) for p in ps) else None)(
                controller_pods(k8s, NAMESPACE)
            ),
            timeout=180,
            what="both replicas Ready (probes run by the kubelet)",
        )
        print(f"\nFIGURE deployed controller: apply -> 2 replicas Ready {time.monotonic() - started:.1f}s")
        yield both
    finally:
        _delete_all(k8s, docs)
