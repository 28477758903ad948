"""Topology rank order: ring neighbours are network neighbours (opt-in).

By default ranks follow the workload spec (task order, then index). A job
that asks for it (annotation :data:`~model.keys.RANK_ORDER_ANNOTATION` with
value ``topology``), or every job of a controller run with ``--rank-order
topology``, is ranked by where its pods run instead:

- **The path.** Each member's *topology path* is the values of an ordered
  list of node label keys (``--topology-keys``, outermost level first,
  :data:`DEFAULT_TOPOLOGY_KEYS`) on the node its pod runs on; a missing
  label is ``""``, and the ``kubernetes.io/hostname`` level falls back to
  the node's name. Where Volcano HyperNodes are installed, each tier a
  member's node belongs to is one more level (:mod:`model.hypernode`), and
  for Ascend jobs whose device annotation carries a ``super_pod_id``, that id
  is one too (:data:`SUPER_POD_LEVEL`), both just above the host.
- **The order.** Members sorted by path (values compared in natural order,
  so ``rack-2`` comes before ``rack-10``), then by spec order within one
  domain. Every domain, at every level, is then one contiguous run of
  ranks, so a ring all-reduce in rank order crosses each level's boundary
  the least number of times there is: once per domain of that level the job
  spans (the last crossing is the wrap-around), none when it spans one
  (:func:`ring_crossings`). Rank 0 is the first member in that order, but
  for a job with a TensorFlow ``chief`` task: TensorFlow's collectives ring
  starts at the chief whatever the ranks say, so the order is rotated to
  start at the chief (a rotated ring crosses every level as often).
- **Stable.** The order depends only on the placement and the last
  completed topology-ordered spec (``held``): a controller restart rebuilds
  the same ranks. When the membership is unchanged (same pods), the held
  ranks (and the paths they were computed from) stand, whatever labels
  changed meanwhile. When pods were replaced, each member keeps its held
  rank (a replacement takes the rank of the slot it replaces) if its
  domain, the path without its last level, is unchanged; the others fill
  the free ranks in topology order. That result is used only if it crosses
  every level as few times as the fresh order does; otherwise the fresh
  order wins. Keeping a rank never costs a crossing.

Pure functions on plain data; :mod:`agent.decide` applies them in one place.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, get_args

from model.hypernode import LEVEL_PREFIX, tier_levels
from model.keys import RANK_ORDER_ANNOTATION

#: How ranks are assigned: ``spec`` (task order, then index: the default
#: contract) or ``topology`` (the nodes' topology path, then spec order).
RankRule = Literal["spec", "topology"]
RULE_SPEC: Final[RankRule] = "spec"
RULE_TOPOLOGY: Final[RankRule] = "topology"
RULES: Final[tuple[RankRule, ...]] = get_args(RankRule)

HOSTNAME_KEY: Final = "kubernetes.io/hostname"
#: The level of an Ascend member's super pod (the device annotation's
#: ``super_pod_id``): not a node label, named in the spec's level list.
SUPER_POD_LEVEL: Final = "ascend/super-pod-id"

#: Node label keys of the topology path, outermost first. Only the labels a
#: node carries take part; the rest are empty on every node and change
#: nothing. Sources: Kubernetes' well-known region and zone; EKS's EC2
#: instance topology (``network-node-layer-1`` is the top of the hierarchy,
#: layer 3, or 4 on four-layer instance types, the switch next to the
#: instance); GKE's block, sub-block and host of its placement topology;
#: NVIDIA Topograph's core, spine and leaf switches (on-premises clusters);
#: the block and rack levels of Kueue's topology-aware scheduling as its
#: documentation names them (set ``--topology-keys`` to the levels of your
#: own Kueue ``Topology``); and the host.
DEFAULT_TOPOLOGY_KEYS: Final[tuple[str, ...]] = (
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
    "topology.k8s.aws/network-node-layer-4",
    "cloud.google.com/gce-topology-block",
    "cloud.google.com/gce-topology-subblock",
    "cloud.google.com/gce-topology-host",
    "network.topology.nvidia.com/core",
    "network.topology.nvidia.com/spine",
    "network.topology.nvidia.com/leaf",
    "cloud.provider.com/topology-block",
    "cloud.provider.com/topology-rack",
    HOSTNAME_KEY,
)

#: A topology path: one value per level, outermost first ("" where a node lacks the label).
Path = tuple[str, ...]


def node_path(raw: dict[str, object], keys: Sequence[str]) -> Path:
    """The topology path of a Node object (its JSON) for ``keys``; the slim record the node informer keeps."""
    meta = raw.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    labels = meta.get("labels")
    labels = labels if isinstance(labels, dict) else {}
    name = str(meta.get("name", ""))
    return tuple(str(labels.get(k) or (name if k == HOSTNAME_KEY else "")) for k in keys)


def rule_for(annotation: str | None, default: RankRule) -> tuple[RankRule, str | None]:
    """The rule of a job: its annotation's value, else ``default``; and why the annotation is ignored, if it is."""
    if annotation is None:
        return default, None
    value = annotation.strip()
    if value in RULES:
        return value, None
    return default, (
        f"annotation {RANK_ORDER_ANNOTATION}={annotation!r} is not one of {', '.join(RULES)}; ranks follow {default}"
    )


def parse_keys(text: str) -> tuple[str, ...]:
    """``--topology-keys``: comma-separated label keys, outermost first. Raises ValueError on a malformed one."""
    keys = [k.strip() for k in text.split(",") if k.strip()]
    for key in keys:
        if not _LABEL_KEY.fullmatch(key) or len(key.rpartition("/")[2]) > 63 or len(key.rpartition("/")[0]) > 253:
            raise ValueError(f"--topology-keys: {key!r} is not a label key")
    if len(set(keys)) != len(keys):
        raise ValueError("--topology-keys: a key is listed twice")
    return tuple(keys)


_LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DIGITS = re.compile(r"(\d+)")


def natural(path: Path) -> tuple[tuple[tuple[int, str], ...], ...]:
    """A sort key for ``path`` comparing digit runs as numbers (``rack-2`` < ``rack-10``), ties by text."""
    return tuple(
        tuple((int(part), part) if i % 2 else (-1, part) for i, part in enumerate(_DIGITS.split(value)))
        for value in path
    )


@dataclass(frozen=True, slots=True)
class Placed:
    """A member to rank: its slot (task, index), its pod's uid and its topology path."""

    slot: tuple[str, int]
    uid: str
    path: Path


@dataclass(frozen=True, slots=True)
class Held:
    """A member of the last completed topology-ordered spec: slot, pod uid, rank and path (current levels)."""

    slot: tuple[str, int]
    uid: str
    rank: int
    path: Path


@dataclass(frozen=True, slots=True)
class RankOrder:
    """How a controller orders ranks: the ``rule`` for jobs that do not choose
    (``--rank-order``), the node label ``keys`` (``--topology-keys``) and
    ``node_path``, the topology path of a node by name (None: unknown)."""

    rule: RankRule = RULE_SPEC
    keys: tuple[str, ...] = DEFAULT_TOPOLOGY_KEYS
    node_path: Callable[[str], Path | None] = lambda _name: None
    #: A node's Volcano HyperNode path ``{tier: hypernode}`` (:mod:`model.hypernode`; empty: none).
    hypernodes: Callable[[str], dict[int, str]] = lambda _name: {}


def member_paths(
    keys: Sequence[str],
    nodes: Sequence[tuple[str, Path | None]],
    super_pods: Sequence[str | None],
    hypernodes: Sequence[dict[int, str]] | None = None,
) -> tuple[tuple[str, ...], list[Path]]:
    """The levels and each member's path, for members on ``nodes`` ((node name, its path for
    ``keys`` or None when the node is unknown), with ``super_pods`` (the Ascend super pod id, None: none)
    and ``hypernodes`` (each node's Volcano HyperNode path ``{tier: name}``).

    An unknown node's path is empty but for its name on the hostname level.
    Just above the host level (else last) come the HyperNode tiers in use,
    highest first, then the super pod level when any member has one.
    Levels empty for every member are left out, so the spec lists only the levels in use.
    """
    levels = list(keys)
    at = levels.index(HOSTNAME_KEY) if HOSTNAME_KEY in levels else len(levels)
    chains = list(hypernodes) if hypernodes is not None else [{} for _ in nodes]
    tiers = tier_levels(chains)
    with_super_pod = any(s is not None for s in super_pods)
    extra = [f"{LEVEL_PREFIX}{t}" for t in tiers] + ([SUPER_POD_LEVEL] if with_super_pod else [])
    levels[at:at] = extra
    paths: list[list[str]] = []
    for (name, found), super_pod, chain in zip(nodes, super_pods, chains, strict=True):
        path = list(found) if found is not None else [name if k == HOSTNAME_KEY else "" for k in keys]
        values = [chain.get(t, "") for t in tiers] + ([super_pod or ""] if with_super_pod else [])
        path[at:at] = values
        paths.append(path)
    used = [j for j in range(len(levels)) if any(p[j] for p in paths)]
    return tuple(levels[j] for j in used), [tuple(p[j] for j in used) for p in paths]


def held_members(
    members: Sequence[tuple[tuple[str, int], str, int, Path]], keys: Sequence[str], levels: Sequence[str]
) -> list[Held]:
    """The members (slot, uid, rank, path on ``keys``) of a held spec, their paths moved onto ``levels``."""
    at = {k: j for j, k in enumerate(keys)}
    return [
        Held(slot, uid, rank, tuple(path[at[k]] if k in at and at[k] < len(path) else "" for k in levels))
        for slot, uid, rank, path in members
    ]


def ring_crossings(paths: Sequence[Path], level: int) -> int:
    """Edges of the ring ``0 -> 1 -> ... -> n-1 -> 0`` (in rank order) between members whose
    paths differ in their first ``level`` values: how often a ring all-reduce crosses that level."""
    n = len(paths)
    if n < 2:
        return 0
    return sum(1 for i in range(n) if paths[i][:level] != paths[(i + 1) % n][:level])


def _crossings(by_rank: Sequence[Path]) -> tuple[int, ...]:
    depth = max((len(p) for p in by_rank), default=0)
    return tuple(ring_crossings(by_rank, level) for level in range(1, depth + 1))


def topology_ranks(
    placed: Sequence[Placed], held: Sequence[Held] = (), *, first: int | None = None
) -> tuple[list[int], list[Path]]:
    """The rank and the path shown for each of ``placed`` (given in spec order), by the rules of the module doc.

    ``held``: the members of the last completed topology-ordered spec (empty:
    none), their paths on the same levels as ``placed``'s. ``first``: the
    index in ``placed`` of a member that must keep rank 0 (a TensorFlow
    chief: TensorFlow's ring starts at the chief whatever the ranks say);
    the order is then rotated to start at it, which crosses no level more
    often (a ring has no start).
    """
    n = len(placed)
    fresh_order = sorted(range(n), key=lambda i: (natural(placed[i].path), i))
    if first is not None:
        at = fresh_order.index(first)
        fresh_order = fresh_order[at:] + fresh_order[:at]
    fresh = [0] * n
    for rank, i in enumerate(fresh_order):
        fresh[i] = rank
    paths = [p.path for p in placed]
    if len(held) != n or sorted(h.rank for h in held) != list(range(n)):
        return fresh, paths
    by_uid = {h.uid: h for h in held}
    if all(p.uid in by_uid for p in placed):
        return [by_uid[p.uid].rank for p in placed], [by_uid[p.uid].path for p in placed]
    present = {p.uid for p in placed}
    by_slot = {h.slot: h for h in held if h.uid not in present}  # the slots whose pod was replaced
    kept: dict[int, int] = {}
    for i, p in enumerate(placed):
        before = by_uid.get(p.uid) or by_slot.get(p.slot)
        if before is not None and before.path[:-1] == p.path[:-1]:
            kept[i] = before.rank
    free = iter(sorted(set(range(n)) - set(kept.values())))
    sticky = list(fresh)
    for i in fresh_order:
        sticky[i] = kept[i] if i in kept else next(free)
    if first is not None and sticky[first] != 0:
        sticky = [(r - sticky[first]) % n for r in sticky]
    if _crossings(_by_rank(paths, sticky)) == _crossings(_by_rank(paths, fresh)):
        return sticky, paths
    return fresh, paths


def _by_rank(paths: Sequence[Path], ranks: Sequence[int]) -> list[Path]:
    out: list[Path] = [()] * len(paths)
    for path, rank in zip(paths, ranks, strict=True):
        out[rank] = path
    return out
