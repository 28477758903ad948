"""Volcano HyperNodes as topology paths (model.hypernode) and in the decision."""

from __future__ import annotations

from typing import Any

import pytest

from agent.decide import decide
from model.hypernode import HyperNodeIndex, Selector, hypernode_record
from model.topology import HOSTNAME_KEY, SUPER_POD_LEVEL, RankOrder, member_paths
from tests.unit.test_decide_topology import job, pods


def hn(
    name: str, tier: int, *, nodes: list[dict[str, Any]] | None = None, children: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    members = [{"type": "Node", "selector": s} for s in nodes or []]
    members += [{"type": "HyperNode", "selector": s} for s in children or []]
    return {"metadata": {"name": name}, "spec": {"tier": tier, "members": members}}


def exact(name: str) -> dict[str, Any]:
    return {"exactMatch": {"name": name}}


def regex(pattern: str) -> dict[str, Any]:
    return {"regexMatch": {"pattern": pattern}}


def test_record_reads_both_selector_spellings_and_ignores_label_selectors() -> None:
    raw = hn("s0", 1, nodes=[exact("n1"), {"type": "Regex", "regexMatch": {"pattern": "^gpu-"}}, {"labelMatch": {}}])
    record = hypernode_record(raw)
    assert record is not None and record.tier == 1 and not record.children
    assert record.nodes == (Selector(exact="n1"), Selector(pattern="^gpu-"), Selector())
    assert [s.matches("gpu-7") for s in record.nodes] == [False, True, False]
    assert Selector(pattern="(").matches("x") is False  # a bad pattern selects nothing
    assert hypernode_record({"metadata": {"name": "x"}, "spec": {"tier": "1"}}) is None


@pytest.fixture
def index() -> HyperNodeIndex:
    # two leaf switches under one spine; n9 is in no HyperNode
    raw = [
        hn("leaf-a", 1, nodes=[exact("n1"), exact("n2")]),
        hn("leaf-b", 1, nodes=[regex("^n[34]$")]),
        hn("spine", 2, children=[regex("^leaf-")]),
    ]
    return HyperNodeIndex(r for r in map(hypernode_record, raw) if r is not None)


def test_a_node_climbs_from_its_leaf_to_the_top(index: HyperNodeIndex) -> None:
    assert index.path("n1") == {1: "leaf-a", 2: "spine"}
    assert index.path("n4") == {1: "leaf-b", 2: "spine"}
    assert index.path("n9") == {}
    assert index.path("n34") == {}  # the pattern is anchored by its author, not by us


def test_member_paths_put_the_tiers_above_the_super_pod_and_the_host(index: HyperNodeIndex) -> None:
    keys = ("topology.kubernetes.io/zone", HOSTNAME_KEY)
    levels, paths = member_paths(
        keys,
        [("n1", ("z", "n1")), ("n3", ("z", "n3")), ("n9", ("z", "n9"))],
        ["0", "1", None],
        [index.path(n) for n in ("n1", "n3", "n9")],
    )
    assert levels == (
        "topology.kubernetes.io/zone",
        "volcano.sh/hypernode-tier-2",
        "volcano.sh/hypernode-tier-1",
        SUPER_POD_LEVEL,
        HOSTNAME_KEY,
    )
    assert paths == [("z", "spine", "leaf-a", "0", "n1"), ("z", "spine", "leaf-b", "1", "n3"), ("z", "", "", "", "n9")]


def test_hypernodes_order_ranks_when_nodes_carry_no_labels(index: HyperNodeIndex) -> None:
    raw, wl = job(4, annotation="topology")
    # workers 0..3 on n3, n1, n4, n2 (leaf-b, leaf-a, leaf-b, leaf-a); the nodes carry no topology labels
    placed = pods(raw, 4, nodes=["n3", "n1", "n4", "n2"])
    order = RankOrder(rule="spec", keys=(HOSTNAME_KEY,), node_path=lambda _n: None, hypernodes=index.path)
    d = decide(wl, placed, previous=None, order=order)
    assert [m.node for m in d.spec.members] == ["n1", "n2", "n3", "n4"]
    assert d.spec.topology_keys == ("volcano.sh/hypernode-tier-2", "volcano.sh/hypernode-tier-1", HOSTNAME_KEY)
    assert d.spec.members[0].topology == ("spine", "leaf-a", "n1")
    # the same nodes with the leaves' members swapped: the HyperNodes, not the names, decide
    swapped = HyperNodeIndex(
        r
        for r in map(
            hypernode_record,
            [hn("leaf-a", 1, nodes=[regex("^n[34]$")]), hn("leaf-b", 1, nodes=[exact("n1"), exact("n2")])],
        )
        if r is not None
    )
    d = decide(wl, placed, previous=None, order=RankOrder(keys=(HOSTNAME_KEY,), hypernodes=swapped.path))
    assert [m.node for m in d.spec.members] == ["n3", "n4", "n1", "n2"]
