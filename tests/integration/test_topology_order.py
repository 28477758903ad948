"""Topology rank order on the real control plane: labelled kwok nodes, the controller's node informer.

The test registers its own kwok nodes with rack and spine labels (Kueue's
documented example levels, part of the default ``--topology-keys``) and binds
each member pod to a chosen node, so the expected ranks are known.
"""

from __future__ import annotations

import secrets
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from model.keys import RANK_ORDER_ANNOTATION
from ringdevcluster.kwok import node_name
from tests.support.controllerproc import ControllerProcess
from tests.support.factories import pod_template, volcano_job
from tests.support.kubectlring import ring, table
from tests.support.kubehelp import (
    create_pods,
    create_volcano_job,
    events_for,
    read_configmap,
    read_spec,
    wait_for,
    wait_spec,
)
from tests.support.topology import RACK, SPINE, labelled_nodes

pytestmark = pytest.mark.integration

#: Node index -> rack; all under spine s1. Workers 0..3 go to 230..233, 234 is the spare.
RACKS = {230: "r2", 231: "r1", 232: "r2", 233: "r1", 234: "r1"}


@pytest.fixture(scope="module")
def nodes(k8s: Any) -> Iterator[list[str]]:
    with labelled_nodes(k8s, {i: {SPINE: "s1", RACK: r} for i, r in RACKS.items()}, fixture="integration") as names:
        yield names


def _job(name: str, n: int, rank_order: str | None) -> dict[str, Any]:
    job = volcano_job(name, tasks=[("worker", n)], template=pod_template(port=3000))
    if rank_order is not None:
        job["metadata"]["annotations"] = {RANK_ORDER_ANNOTATION: rank_order}
    return job


def _start(k8s: Any, namespace: str, name: str, rank_order: str | None, nodes: list[str]) -> dict[str, Any]:
    job = create_volcano_job(k8s, namespace, _job(name, 4, rank_order))
    for i in range(4):
        create_pods(k8s, job, [("worker", i)], node=nodes[i])
    return job


def _ranks(spec: dict[str, Any]) -> list[tuple[int, int, str]]:
    return [(m["rank"], m["index"], m["node"]) for m in spec["members"]]


@pytest.fixture
def topology_controller(kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[ControllerProcess]:
    proc = ControllerProcess(
        kubeconfig=str(kubeconfig),
        namespace=namespace,
        log_path=tmp_path / "controller.log",
        extra=["--rank-order", "topology"],
    )
    proc.start()
    yield proc
    proc.stop(signal.SIGTERM)
    print(proc.log_tail(20))


def test_the_annotation_orders_ranks_by_rack_and_describe_shows_the_paths(
    k8s: Any, kubeconfig: Path, namespace: str, nodes: list[str], controller: ControllerProcess
) -> None:
    _start(k8s, namespace, "topo", "topology", nodes)
    _start(k8s, namespace, "plain", None, nodes)
    topo = wait_spec(k8s, namespace, "rings-config-topo")
    plain = wait_spec(k8s, namespace, "rings-config-plain")
    # rack r1 (nodes 231, 233) first, then r2 (230, 232); spec order within a rack
    assert _ranks(topo) == [(0, 1, nodes[1]), (1, 3, nodes[3]), (2, 0, nodes[0]), (3, 2, nodes[2])]
    assert topo["rankOrder"] == "topology"
    assert topo["topologyKeys"] == [SPINE, RACK, "kubernetes.io/hostname"]
    assert topo["members"][0]["topology"] == ["s1", "r1", nodes[1]]
    # the default rule (the controller's --rank-order spec) leaves the other job in spec order
    assert _ranks(plain) == [(i, i, nodes[i]) for i in range(4)]
    assert "rankOrder" not in plain and "topology" not in plain["members"][0]

    out = ring("describe", "vcjob/topo", "-n", namespace, kubeconfig=kubeconfig)
    assert out.returncode == 0, out.stderr
    assert "Rank order:" in out.stdout and "topology (the nodes' topology path" in out.stdout
    section = out.stdout.split("Members (rank order):\n", 1)[1].split("\n\n", 1)[0]
    rows = table(section)
    assert [(r["RANK"], r["POD"], r["TOPOLOGY"]) for r in rows] == [
        (str(m["rank"]), m["pod"], "/".join(m["topology"])) for m in topo["members"]
    ]
    plain_out = ring("describe", "vcjob/plain", "-n", namespace, kubeconfig=kubeconfig)
    assert "spec (task order, then index" in plain_out.stdout and "TOPOLOGY" not in plain_out.stdout


def test_a_replacement_in_the_same_rack_keeps_its_rank_and_a_restart_rewrites_nothing(
    k8s: Any, namespace: str, nodes: list[str], controller: ControllerProcess
) -> None:
    job = _start(k8s, namespace, "rep", "topology", nodes)
    first = wait_spec(k8s, namespace, "rings-config-rep")
    victim = first["members"][0]  # worker 1 on node 231, rack r1
    assert (victim["index"], victim["node"]) == (1, nodes[1])
    k8s.core.delete_namespaced_pod(victim["pod"], namespace, grace_period_seconds=0)
    wait_for(lambda: read_spec(k8s, namespace, "rings-config-rep")["status"] == "initializing", what="initializing")  # type: ignore[index]
    wait_for(
        lambda: victim["pod"] not in {p.metadata.name for p in k8s.core.list_namespaced_pod(namespace).items},
        what="pod deleted",
    )
    create_pods(k8s, job, [("worker", 1)], node=nodes[4])  # the spare node, rack r1 too
    second = wait_spec(k8s, namespace, "rings-config-rep", where=lambda s: s["epoch"] > first["epoch"])
    assert second["members"][0]["uid"] != victim["uid"]
    # fresh order would put node 233's worker 3 first (kwok-node-233 < kwok-node-234); the held rank wins
    assert _ranks(second) == [(0, 1, nodes[4]), (1, 3, nodes[3]), (2, 0, nodes[0]), (3, 2, nodes[2])]

    before = read_configmap(k8s, namespace, "rings-config-rep").metadata.resource_version
    controller.stop(signal.SIGTERM)
    controller.start()
    # the restarted controller synced the job: a reconcile counted after its caches synced
    wait_for(lambda: controller.metric("controller_runtime_reconcile_total", result="success"), what="a sync")
    assert read_configmap(k8s, namespace, "rings-config-rep").metadata.resource_version == before


def test_the_controller_flag_orders_unannotated_jobs_and_a_bad_annotation_is_reported(
    k8s: Any, namespace: str, nodes: list[str], topology_controller: ControllerProcess
) -> None:
    _start(k8s, namespace, "flag", None, nodes)
    _start(k8s, namespace, "optout", "spec", nodes)
    _start(k8s, namespace, "typo", "nearest", nodes)
    expected = [(0, 1, nodes[1]), (1, 3, nodes[3]), (2, 0, nodes[0]), (3, 2, nodes[2])]
    assert _ranks(wait_spec(k8s, namespace, "rings-config-flag")) == expected
    assert _ranks(wait_spec(k8s, namespace, "rings-config-optout")) == [(i, i, nodes[i]) for i in range(4)]
    assert _ranks(wait_spec(k8s, namespace, "rings-config-typo")) == expected
    warnings = wait_for(
        lambda: [e for e in events_for(k8s, namespace, "typo") if e.reason == "InvalidRankOrder"],
        what="InvalidRankOrder event",
    )
    assert "nearest" in warnings[0].message


HYPERNODE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "hypernodes.topology.volcano.sh"},
    "spec": {
        "group": "topology.volcano.sh",
        "scope": "Cluster",
        "names": {"plural": "hypernodes", "singular": "hypernode", "kind": "HyperNode", "listKind": "HyperNodeList"},
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                    }
                },
            }
        ],
    },
}


@pytest.fixture
def hypernodes(k8s: Any) -> Iterator[list[str]]:
    """Nodes 236..239 without topology labels, in two HyperNode leaves under one spine (the CRD installed if absent)."""
    ext = client.ApiextensionsV1Api(k8s.api)
    created_crd = False
    try:
        ext.create_custom_resource_definition(HYPERNODE_CRD)
        created_crd = True
    except ApiException as e:
        if e.status != 409:
            raise
    wait_for(
        lambda: any(
            c.type == "Established" and c.status == "True"
            for c in (ext.read_custom_resource_definition(HYPERNODE_CRD["metadata"]["name"]).status.conditions or [])
        ),
        what="HyperNode CRD established",
    )
    group = ("topology.volcano.sh", "v1alpha1", "hypernodes")
    suffix = secrets.token_hex(3)
    leaves = {f"leaf-x-{suffix}": [237, 239], f"leaf-y-{suffix}": [236, 238]}
    objects = [
        {
            "apiVersion": "topology.volcano.sh/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": name},
            "spec": {
                "tier": 1,
                "members": [{"type": "Node", "selector": {"exactMatch": {"name": node_name(i)}}} for i in nodes],
            },
        }
        for name, nodes in leaves.items()
    ]
    objects.append(
        {
            "apiVersion": "topology.volcano.sh/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": f"spine-{suffix}"},
            "spec": {
                "tier": 2,
                "members": [{"type": "HyperNode", "selector": {"regexMatch": {"pattern": f"-{suffix}$"}}}],
            },
        }
    )
    try:
        for body in objects:
            k8s.custom.create_cluster_custom_object(*group, body)
        with labelled_nodes(k8s, {i: {} for i in (236, 237, 238, 239)}, fixture="hypernode") as names:
            yield names
    finally:
        for body in objects:
            try:
                k8s.custom.delete_cluster_custom_object(*group, body["metadata"]["name"])
            except ApiException as e:
                if e.status != 404:
                    raise
        if created_crd:
            ext.delete_custom_resource_definition(HYPERNODE_CRD["metadata"]["name"])


def test_volcano_hypernodes_order_nodes_without_topology_labels(
    k8s: Any, kubeconfig: Path, namespace: str, tmp_path: Path, hypernodes: list[str]
) -> None:
    proc = ControllerProcess(kubeconfig=str(kubeconfig), namespace=namespace, log_path=tmp_path / "controller.log")
    proc.start()  # after the CRD exists: kinds are discovered at start
    try:
        _start(k8s, namespace, "hyper", "topology", hypernodes)
        spec = wait_spec(k8s, namespace, "rings-config-hyper")
    finally:
        proc.stop(signal.SIGTERM)
    # leaf-x (nodes 237, 239) sorts before leaf-y (236, 238); by name alone the order would be 236..239
    assert _ranks(spec) == [(0, 1, hypernodes[1]), (1, 3, hypernodes[3]), (2, 0, hypernodes[0]), (3, 2, hypernodes[2])]
    assert spec["topologyKeys"] == [
        "volcano.sh/hypernode-tier-2",
        "volcano.sh/hypernode-tier-1",
        "kubernetes.io/hostname",
    ]
    assert spec["members"][0]["topology"][1].startswith("leaf-x-")
