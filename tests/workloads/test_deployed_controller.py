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

import time
from typing import Any

import pytest

from ringdevcluster import node
from tests.support import nodejobs
from tests.support.deployed import (
    completed_spec,
    controller_pods,
    create_workload,
    lease_holder,
    metric,
    namespace_gone,
    ready,
)
from tests.support.kubehelp import wait_for

pytestmark = pytest.mark.integration

NAMESPACE = "ring-controller"
IMAGE = "ring-controller:0.1.0"
Json = dict[str, Any]


def _delete_all(k8s: Any, docs: list[Json]) -> None:
    for doc in reversed(docs):
        nodejobs.delete(k8s.api, doc)
    wait_for(lambda: namespace_gone(k8s, NAMESPACE), timeout=120, what=f"namespace {NAMESPACE} gone")


def test_shipped_manifests_run_two_replicas_on_the_real_node_and_fail_over(k8s: Any, namespace: str) -> None:
    nodejobs.ensure_image(IMAGE, "--controller")
    docs = nodejobs.manifests("ring-controller.yaml") + nodejobs.manifests("rbac.yaml")
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
        pods = wait_for(
            lambda: (lambda ps: ps if len(ps) == 2 and all(ready(p) for p in ps) else None)(
                controller_pods(k8s, NAMESPACE)
            ),
            timeout=180,
            what="both replicas Ready (probes run by the kubelet)",
        )
        print(f"\nFIGURE deployed controller: apply -> 2 replicas Ready {time.monotonic() - started:.1f}s")
        assert {p.spec.node_name for p in pods} == {node.NODE_NAME}
        (container,) = pods[0].spec.containers
        assert container.image == IMAGE and container.security_context.read_only_root_filesystem
        assert pods[0].spec.security_context.run_as_user == 65532
        names = {p.metadata.name for p in pods}
        leader = wait_for(
            lambda: lease_holder(k8s, NAMESPACE) if lease_holder(k8s, NAMESPACE) in names else None,
            what="a leader among the replicas",
        )
        by_name = {p.metadata.name: p for p in pods}
        # Metrics from each pod IP: exactly one is the leader.
        status = {n: metric(by_name[n].status.pod_ip, "leader_election_master_status") for n in names}
        assert sorted(status.values()) == [0.0, 1.0] and status[leader] == 1.0

        create_workload(k8s, namespace, "first")
        wait_for(lambda: completed_spec(k8s, namespace, "first"), timeout=60, what="the deployed controller's spec")

        deleted = time.monotonic()
        k8s.core.delete_namespaced_pod(leader, NAMESPACE)

        # The standby usually wins; the leader's replacement pod may win the race too.
        def successor() -> Any:
            holder = lease_holder(k8s, NAMESPACE)
            live = {p.metadata.name: p for p in controller_pods(k8s, NAMESPACE)}
            return live.get(holder) if holder and holder != leader else None

        winner = wait_for(successor, timeout=60, what="another replica taking the Lease")
        print(
            f"FIGURE deployed controller fail-over (leader pod deleted -> {winner.metadata.name} holds the Lease, "
            f"{'the standby' if winner.metadata.name in names else 'the new replica'}): {time.monotonic() - deleted:.2f}s"
        )
        create_workload(k8s, namespace, "second")
        spec = wait_for(
            lambda: completed_spec(k8s, namespace, "second"), timeout=60, what="the next spec after fail-over"
        )
        assert metric(winner.status.pod_ip, "leader_election_master_status") == 1.0
        assert spec["epoch"] >= 1
    finally:
        _delete_all(k8s, docs)
