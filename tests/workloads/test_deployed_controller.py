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
from tests.support.deployed import (
    IMAGE,
    NAMESPACE,
    completed_spec,
    controller_pods,
    create_workload,
    deployed_controller,
    lease_holder,
    metric,
    wait_leader,
)
from tests.support.kubehelp import wait_for

pytestmark = pytest.mark.integration


def test_shipped_manifests_run_two_replicas_on_the_real_node_and_fail_over(k8s: Any, namespace: str) -> None:
    with deployed_controller(k8s) as ready_pods:
        assert {p.spec.node_name for p in ready_pods} == {node.NODE_NAME}
        (container,) = ready_pods[0].spec.containers
        assert container.image == IMAGE and container.security_context.read_only_root_filesystem
        assert ready_pods[0].spec.security_context.run_as_user == 65532
        names = {p.metadata.name for p in ready_pods}
        leader = wait_leader(k8s, NAMESPACE, names)
        by_name = {p.metadata.name: p for p in ready_pods}
        # Metrics from each pod IP: exactly one is the leader.
        status = {n: metric(by_name[n].status.pod_ip, "leader_election_master_status") for n in names}
        assert sorted(status.values()) == [0.0, 1.0] and status[leader] == 1.0

        create_workload(k8s, namespace, "first")
        wait_for(lambda: completed_spec(k8s, namespace, "first"), timeout=60, what="the deployed controller's spec")

        deleted = time.monotonic()
        k8s.core.delete_namespaced_pod(leader, NAMESPACE)

        # The standby usually wins; the leader's replacement pod may win the race too.
        def successor() -> Any:
            current = lease_holder(k8s, NAMESPACE)
            live = {p.metadata.name: p for p in controller_pods(k8s, NAMESPACE)}
            return live.get(current) if current and current != leader else None

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
