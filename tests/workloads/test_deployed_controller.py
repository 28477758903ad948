"""The controller as users deploy it: its image on the real node, the shipped manifests unchanged.

``build/rbac.yaml`` and ``build/ring-controller.yaml`` are applied as they are
(server-side apply, like ``kubectl apply --server-side``); the image
``ring-controller:0.1.0`` comes from ``build/image.sh --controller --import``.
Two replicas run on the real node with in-cluster config from their
ServiceAccount token, probes run by the kubelet, leader election, the shipped
security context under the namespace's ``restricted`` Pod Security level.

The one thing added is the operator's placement, on the namespace and not in
the files: the dev cluster's API server runs the PodNodeSelector and
PodTolerationRestriction admission plugins, and the ``ring-controller``
namespace is created first with their annotations (select the real node,
tolerate its taint), as a cluster admin would pin a system namespace.
"""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ringdevcluster import node
from tests.support import nodejobs
from tests.support.kubehelp import wait_for

pytestmark = pytest.mark.integration

NAMESPACE = "ring-controller"
LEASE = "ring-controller"
IMAGE = "ring-controller:0.1.0"
Json = dict[str, Any]


def _delete_all(k8s: Any, docs: list[Json]) -> None:
    for doc in reversed(docs):
        nodejobs.delete(k8s.api, doc)
    wait_for(lambda: _gone(k8s), timeout=120, what=f"namespace {NAMESPACE} gone")


def _gone(k8s: Any) -> bool:
    try:
        k8s.core.read_namespace(NAMESPACE)
    except ApiException as e:
        return e.status == 404
    return False


def _pods(k8s: Any) -> list[Any]:
    pods = k8s.core.list_namespaced_pod(NAMESPACE, label_selector="app.kubernetes.io/name=ring-controller").items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def _ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _holder(k8s: Any) -> str | None:
    """The pod holding the Lease (identities are ``<pod name>_<uuid>``, one per process)."""
    try:
        lease = client.CoordinationV1Api(k8s.api).read_namespaced_lease(LEASE, NAMESPACE)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    holder = lease.spec.holder_identity
    return holder.rsplit("_", 1)[0] if holder else None


def _metric(ip: str, name: str) -> float | None:
    with urllib.request.urlopen(f"http://{ip}:8080/metrics", timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    return None


def _workload(k8s: Any, namespace: str, name: str) -> None:
    """A 2-replica Deployment on the kwok nodes, opted in: the deployed controller writes its spec."""
    labels = {"app": name, "ring-controller.atlas": "tensorflow"}
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


def _completed(k8s: Any, namespace: str, name: str) -> Json | None:
    try:
        cm = k8s.core.read_namespaced_config_map(f"rings-config-{name}", namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    spec: Json = json.loads((cm.data or {}).get("cluster.json", "{}"))
    return spec if spec.get("status") == "completed" and len(spec.get("members", [])) == 2 else None


def test_shipped_manifests_run_two_replicas_on_the_real_node_and_fail_over(k8s: Any, namespace: str) -> None:
    nodejobs.ensure_image(IMAGE, "--controller")
    docs = nodejobs.manifests("ring-controller.yaml") + nodejobs.manifests("rbac.yaml")
    if not _gone(k8s):  # a previous run's leftovers
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
        pods = wait_for(
            lambda: (lambda ps: ps if len(ps) == 2 and all(_ready(p) for p in ps) else None)(_pods(k8s)),
            timeout=180,
            what="both replicas Ready (probes run by the kubelet)",
        )
        print(f"\nFIGURE deployed controller: apply -> 2 replicas Ready {time.monotonic() - started:.1f}s")
        assert {p.spec.node_name for p in pods} == {node.NODE_NAME}
        (container,) = pods[0].spec.containers
        assert container.image == IMAGE and container.security_context.read_only_root_filesystem
        assert pods[0].spec.security_context.run_as_user == 65532
        names = {p.metadata.name for p in pods}
        leader = wait_for(lambda: _holder(k8s) if _holder(k8s) in names else None, what="a leader among the replicas")
        by_name = {p.metadata.name: p for p in pods}
        # Metrics from each pod IP: exactly one is the leader.
        status = {n: _metric(by_name[n].status.pod_ip, "leader_election_master_status") for n in names}
        assert sorted(status.values()) == [0.0, 1.0] and status[leader] == 1.0

        _workload(k8s, namespace, "first")
        wait_for(lambda: _completed(k8s, namespace, "first"), timeout=60, what="the deployed controller's spec")

        deleted = time.monotonic()
        k8s.core.delete_namespaced_pod(leader, NAMESPACE)

        # The standby usually wins; the leader's replacement pod may win the race too.
        def successor() -> Any:
            holder = _holder(k8s)
            live = {p.metadata.name: p for p in _pods(k8s)}
            return live.get(holder) if holder and holder != leader else None

        winner = wait_for(successor, timeout=60, what="another replica taking the Lease")
        print(
            f"FIGURE deployed controller fail-over (leader pod deleted -> {winner.metadata.name} holds the Lease, "
            f"{'the standby' if winner.metadata.name in names else 'the new replica'}): {time.monotonic() - deleted:.2f}s"
        )
        _workload(k8s, namespace, "second")
        spec = wait_for(lambda: _completed(k8s, namespace, "second"), timeout=60, what="the next spec after fail-over")
        assert _metric(winner.status.pod_ip, "leader_election_master_status") == 1.0
        assert spec["epoch"] >= 1
    finally:
        _delete_all(k8s, docs)
