"""Labelled kwok nodes for topology tests and the topology benchmark.

The dev cluster registers fake nodes ``kwok-node-0..N-1``; kwok manages every
Node carrying its label (``type=kwok``), so a test can register more nodes of
the same shape (:func:`ringdevcluster.kwok.node_manifest`) with topology
labels of its own, and delete them afterwards. They carry a NoSchedule taint
(:data:`TAINT`) so that other tests' pods are not scheduled onto them; pods
meant for them tolerate it (:func:`toleration`) or name their node.
Indices are chosen apart from the dev cluster's own nodes (0..N-1) by the
caller.

Also the ring metric of the benchmark: :func:`ring_edges` counts the edges
of a ring in rank order that cross a rack and a spine.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from kubernetes.client.rest import ApiException

from ringdevcluster.kwok import node_manifest, node_name

SPINE = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
#: Marks the nodes of one topology fixture (the value names it).
FIXTURE_LABEL = "ring-controller.io/topology-fixture"
TAINT = {"key": "ring-controller.io/topology-test", "value": "true", "effect": "NoSchedule"}


def toleration() -> dict[str, str]:
    """The toleration of :data:`TAINT`."""
    return {"key": TAINT["key"], "operator": "Equal", "value": TAINT["value"], "effect": TAINT["effect"]}


def _manifest(index: int, labels: dict[str, str], fixture: str) -> dict[str, Any]:
    body = node_manifest(index)
    body["metadata"]["labels"].update({**labels, FIXTURE_LABEL: fixture})
    body["spec"]["taints"] = [dict(TAINT)]
    return body


def _ready(k8s: Any, names: Sequence[str]) -> bool:
    for name in names:
        node = k8s.core.read_node(name)
        conditions = {c.type: c.status for c in (node.status.conditions or [])}
        if conditions.get("Ready") != "True":
            return False
    return True


@contextmanager
def labelled_nodes(
    k8s: Any, layout: dict[int, dict[str, str]], *, fixture: str, timeout: float = 120.0
) -> Iterator[list[str]]:
    """Register kwok nodes ``index -> extra labels``, wait until kwok reports them Ready, delete them after.

    Yields their names in ``layout`` order. A node of the same name left by
    an earlier, interrupted run is replaced.
    """
    names = [node_name(i) for i in layout]
    for index, labels in layout.items():
        body = _manifest(index, labels, fixture)
        try:
            k8s.core.create_node(body)
        except ApiException as e:
            if e.status != 409:
                raise
            k8s.core.delete_node(body["metadata"]["name"])
            _wait_gone(k8s, body["metadata"]["name"], timeout)
            k8s.core.create_node(body)
    try:
        deadline = time.monotonic() + timeout
        while not _ready(k8s, names):
            if time.monotonic() > deadline:
                raise TimeoutError(f"kwok did not make nodes {names[0]}..{names[-1]} Ready in {timeout:.0f}s")
            time.sleep(0.2)
        yield names
    finally:
        for name in names:
            try:
                k8s.core.delete_node(name)
            except ApiException as e:
                if e.status != 404:
                    raise


def _wait_gone(k8s: Any, name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            k8s.core.read_node(name)
        except ApiException as e:
            if e.status == 404:
                return
            raise
        time.sleep(0.1)
    raise TimeoutError(f"node {name} still there after {timeout:.0f}s")


def ring_edges(levels: Sequence[tuple[str, str]]) -> tuple[int, int]:
    """(rack crossings, spine crossings) of the ring through members in rank order, each given as (spine, rack)."""
    n = len(levels)
    if n < 2:
        return 0, 0
    pairs = [(levels[i], levels[(i + 1) % n]) for i in range(n)]
    return sum(1 for a, b in pairs if a != b), sum(1 for a, b in pairs if a[0] != b[0])


def minimum_edges(levels: Sequence[tuple[str, str]]) -> tuple[int, int]:
    """The fewest (rack, spine) crossings any ring through these members can have:
    one per rack (spine) spanned, none when only one."""
    racks, spines = len(set(levels)), len({s for s, _ in levels})
    return (racks if racks > 1 else 0), (spines if spines > 1 else 0)
