"""The controller as users deploy it, on the real node: build/rbac.yaml and build/ring-controller.yaml applied.

:func:`deployed_controller` imports the image ``ring-controller:0.1.0``
(``build/image.sh --controller --import``), creates the ``ring-controller``
namespace with the operator's placement (the dev cluster's PodNodeSelector and
PodTolerationRestriction annotations: select the real node, tolerate its
taint), server-side applies the shipped manifests unchanged, waits for both
replicas Ready, and deletes everything afterwards. The controller it runs is
cluster-wide: keep it up only for one test.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ringdevcluster import node
from tests.support import nodejobs
from tests.support.kubehelp import wait_for

NAMESPACE = "ring-controller"
LEASE = "ring-controller"
IMAGE = "ring-controller:0.1.0"
#: The pod label the Deployment, the PodMonitor and these helpers select on.
SELECTOR = "app.kubernetes.io/name=ring-controller"
Json = dict[str, Any]


def _docs() -> list[Json]:
    return nodejobs.manifests("ring-controller.yaml") + nodejobs.manifests("rbac.yaml")


def gone(k8s: Any) -> bool:
    """True once the namespace no longer exists."""
    try:
        k8s.core.read_namespace(NAMESPACE)
    except ApiException as e:
        return e.status == 404
    return False


def _delete_all(k8s: Any, docs: list[Json]) -> None:
    for doc in reversed(docs):
        nodejobs.delete(k8s.api, doc)
    wait_for(lambda: gone(k8s), timeout=120, what=f"namespace {NAMESPACE} gone")


def pods(k8s: Any) -> list[Any]:
    """The controller's live (not terminating) pods."""
    found = k8s.core.list_namespaced_pod(NAMESPACE, label_selector=SELECTOR).items
    return [p for p in found if p.metadata.deletion_timestamp is None]


def ready(pod: Any) -> bool:
    """The pod's Ready condition (the kubelet runs the readiness probe)."""
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def holder(k8s: Any) -> str | None:
    """The pod holding the Lease (identities are ``<pod name>_<uuid>``, one per process)."""
    try:
        lease = client.CoordinationV1Api(k8s.api).read_namespaced_lease(LEASE, NAMESPACE)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    name = lease.spec.holder_identity
    return name.rsplit("_", 1)[0] if name else None


def workload(k8s: Any, namespace: str, name: str, *, replicas: int = 2, annotations: Json | None = None) -> None:
    """A Deployment on the kwok nodes, opted in: the deployed controller writes its spec.

    ``annotations`` go on the pod template (e.g. a bad ``ring-controller/port``).
    """
    labels = {"app": name, "ring-controller.atlas": "tensorflow"}
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


def completed(k8s: Any, namespace: str, name: str, *, members: int = 2) -> Json | None:
    """The workload's cluster spec once completed with ``members`` members, else None."""
    try:
        cm = k8s.core.read_namespaced_config_map(f"rings-config-{name}", namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    spec: Json = json.loads((cm.data or {}).get("cluster.json", "{}"))
    return spec if spec.get("status") == "completed" and len(spec.get("members", [])) == members else None


@contextlib.contextmanager
def deployed_controller(k8s: Any) -> Iterator[list[Any]]:
    """Deploy the shipped manifests on the real node; yield the two Ready pods; delete it all afterwards."""
    nodejobs.ensure_image(IMAGE, "--controller")
    docs = _docs()
    if not gone(k8s):  # a previous run's leftovers
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
            lambda: (lambda ps: ps if len(ps) == 2 and all(ready(p) for p in ps) else None)(pods(k8s)),
            timeout=180,
            what="both replicas Ready (probes run by the kubelet)",
        )
        print(f"\nFIGURE deployed controller: apply -> 2 replicas Ready {time.monotonic() - started:.1f}s")
        yield both
    finally:
        _delete_all(k8s, docs)
