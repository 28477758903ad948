"""Volcano HyperNodes as a source of topology paths (:mod:`model.topology`).

A HyperNode (``topology.volcano.sh/v1alpha1``, cluster-scoped) is one
network performance domain, a switch: ``spec.tier`` is its level (1 next to
the nodes), ``spec.members`` the nodes (``type: Node``) or lower HyperNodes
(``type: HyperNode``) it joins, each chosen by a selector: ``exactMatch.name``,
``regexMatch.pattern`` (a regular expression searched in the name, as Go's
``regexp.MatchString`` does) or, for nodes, ``labelMatch`` (not read here:
the controller keeps no node labels beyond its topology keys, so a
label-selected node has no HyperNode path; Volcano's label-based discovery
builds those HyperNodes from node labels that ``--topology-keys`` can name
directly). Older releases spell the selector with a ``type: Exact|Regex``
field next to the same match fields: read alike.

A node's HyperNode path is the chain from the tier-1 HyperNode that selects
it up through the HyperNodes that select each one, as ``{tier: name}``. When
several HyperNodes of one tier would claim a node (a misconfiguration), the
first by name wins, so the answer is still deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

GROUP: Final = "topology.volcano.sh"
VERSION: Final = "v1alpha1"
PLURAL: Final = "hypernodes"
#: The level name of HyperNode tier ``n`` in a spec's ``topologyKeys``.
LEVEL_PREFIX: Final = "volcano.sh/hypernode-tier-"


@dataclass(frozen=True, slots=True)
class Selector:
    """One member selector: an exact name or a pattern (None: matches nothing, e.g. a label selector)."""

    exact: str | None = None
    pattern: str | None = None

    def matches(self, name: str) -> bool:
        """Whether the member named ``name`` is selected."""
        if self.exact is not None:
            return name == self.exact
        if self.pattern is not None:
            try:
                return re.search(self.pattern, name) is not None
            except re.error:
                return False
        return False


@dataclass(frozen=True, slots=True)
class HyperNode:
    """The slim record of a HyperNode: name, tier, and its node and HyperNode member selectors."""

    name: str
    tier: int
    nodes: tuple[Selector, ...]
    children: tuple[Selector, ...]


def _selector(raw: Any) -> Selector:
    raw = raw if isinstance(raw, dict) else {}
    exact = raw.get("exactMatch")
    if isinstance(exact, dict) and isinstance(exact.get("name"), str):
        return Selector(exact=exact["name"])
    regex = raw.get("regexMatch")
    if isinstance(regex, dict) and isinstance(regex.get("pattern"), str):
        return Selector(pattern=regex["pattern"])
    return Selector()


def hypernode_record(raw: dict[str, Any]) -> HyperNode | None:
    """The record of a HyperNode's JSON (the HyperNode informer's transform); None when it has no usable tier."""
    meta = raw.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    spec = raw.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    tier = spec.get("tier")
    if isinstance(tier, bool) or not isinstance(tier, int) or tier < 0:
        return None
    nodes: list[Selector] = []
    children: list[Selector] = []
    for member in spec.get("members") or ():
        if not isinstance(member, dict):
            continue
        (children if member.get("type") == "HyperNode" else nodes).append(_selector(member.get("selector")))
    return HyperNode(name=str(meta.get("name", "")), tier=tier, nodes=tuple(nodes), children=tuple(children))


class HyperNodeIndex:
    """Node name -> its HyperNode path ``{tier: name}``, over a fixed set of HyperNodes; memoized.

    Build a new index when the HyperNodes change (the controller does so on
    the next lookup after an event).
    """

    def __init__(self, hypernodes: Iterable[HyperNode]) -> None:
        self._all = sorted(hypernodes, key=lambda h: h.name)
        self._memo: dict[str, dict[int, str]] = {}
        self._parents: dict[str, HyperNode | None] = {}

    def _parent(self, child: HyperNode) -> HyperNode | None:
        if child.name not in self._parents:
            self._parents[child.name] = next(
                (h for h in self._all if h.tier > child.tier and any(s.matches(child.name) for s in h.children)),
                None,
            )
        return self._parents[child.name]

    def path(self, node: str) -> dict[int, str]:
        """The HyperNode path of ``node`` (empty when no HyperNode selects it)."""
        found = self._memo.get(node)
        if found is not None:
            return found
        leaves = [h for h in self._all if any(s.matches(node) for s in h.nodes)]
        chain: dict[int, str] = {}
        current = min(leaves, key=lambda h: h.tier) if leaves else None
        while current is not None and current.tier not in chain:
            chain[current.tier] = current.name
            current = self._parent(current)
        self._memo[node] = chain
        return chain


def tier_levels(chains: Iterable[dict[int, str]]) -> tuple[int, ...]:
    """The tiers in use, outermost (highest) first."""
    return tuple(sorted({t for chain in chains for t in chain}, reverse=True))
