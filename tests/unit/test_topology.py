"""The topology rank order (model.topology): paths, the order, stickiness across replacements and restarts."""

from __future__ import annotations

import itertools
import random

import pytest

from model.keys import RANK_ORDER_ANNOTATION
from model.topology import (
    DEFAULT_TOPOLOGY_KEYS,
    HOSTNAME_KEY,
    SUPER_POD_LEVEL,
    Held,
    Path,
    Placed,
    held_members,
    member_paths,
    natural,
    node_path,
    parse_keys,
    ring_crossings,
    rule_for,
    topology_ranks,
)

RACK = "cloud.provider.com/topology-rack"
SPINE = "cloud.provider.com/topology-block"


def placed(paths: list[Path], *, uids: list[str] | None = None) -> list[Placed]:
    return [Placed(("worker", i), (uids or [f"u{i}" for i in range(len(paths))])[i], p) for i, p in enumerate(paths)]


def by_rank(items: list[Placed], ranks: list[int]) -> list[Path]:
    out: list[Path] = [()] * len(items)
    for p, r in zip(items, ranks, strict=True):
        out[r] = p.path
    return out


def minimum(paths: list[Path], level: int) -> int:
    domains = {p[:level] for p in paths}
    return len(domains) if len(domains) > 1 else 0


def held_of(items: list[Placed], ranks: list[int]) -> list[Held]:
    return [Held(p.slot, p.uid, r, p.path) for p, r in zip(items, ranks, strict=True)]


def test_node_path_reads_the_keys_in_order_and_falls_back_to_the_name_for_the_host() -> None:
    raw = {"metadata": {"name": "n7", "labels": {RACK: "r2", SPINE: "s1", "other": "x"}}}
    assert node_path(raw, (SPINE, RACK, "absent", HOSTNAME_KEY)) == ("s1", "r2", "", "n7")


def test_natural_order_compares_numbers_as_numbers() -> None:
    values = ["rack-10", "rack-2", "rack-1", "rack-01", "b", "a"]
    assert sorted(values, key=lambda v: natural((v,))) == ["a", "b", "rack-01", "rack-1", "rack-2", "rack-10"]


@pytest.mark.parametrize(
    ("annotation", "default", "rule", "error"),
    [
        (None, "spec", "spec", False),
        (None, "topology", "topology", False),
        ("topology", "spec", "topology", False),
        (" spec ", "topology", "spec", False),
        ("topo", "spec", "spec", True),
    ],
    ids=["absent-spec", "absent-topology", "opt-in", "opt-out", "bad"],
)
def test_rule_for(annotation: str | None, default: str, rule: str, error: bool) -> None:
    got, why = rule_for(annotation, default)  # type: ignore[arg-type]
    assert got == rule
    assert (why is not None) == error
    if why:
        assert RANK_ORDER_ANNOTATION in why


def test_parse_keys() -> None:
    assert parse_keys(f" {SPINE}, {RACK},,{HOSTNAME_KEY}") == (SPINE, RACK, HOSTNAME_KEY)
    assert parse_keys("") == ()
    with pytest.raises(ValueError, match="not a label key"):
        parse_keys("bad key")
    with pytest.raises(ValueError, match="twice"):
        parse_keys("a,a")
    assert parse_keys(",".join(DEFAULT_TOPOLOGY_KEYS)) == DEFAULT_TOPOLOGY_KEYS


def test_member_paths_drop_unused_levels_and_put_the_super_pod_above_the_host() -> None:
    keys = ("topology.kubernetes.io/zone", RACK, HOSTNAME_KEY)
    levels, paths = member_paths(keys, [("n1", ("", "r1", "n1")), ("n2", None)], ["3", None])
    assert levels == (RACK, SUPER_POD_LEVEL, HOSTNAME_KEY)
    assert paths == [("r1", "3", "n1"), ("", "", "n2")]
    levels, paths = member_paths(keys, [("n1", ("", "r1", "n1"))], [None])
    assert levels == (RACK, HOSTNAME_KEY)


def test_ring_crossings_count_the_wrap_around() -> None:
    paths = [("s1", "r1"), ("s1", "r1"), ("s1", "r2"), ("s2", "r3")]
    assert ring_crossings(paths, 1) == 2
    assert ring_crossings(paths, 2) == 3
    assert ring_crossings(paths[:1], 2) == 0
    assert ring_crossings([("s1", "r1")] * 3, 2) == 0


def test_fresh_order_groups_domains_and_keeps_spec_order_within_one() -> None:
    items = placed(
        [("s2", "r3", "h5"), ("s1", "r1", "h1"), ("s2", "r3", "h5"), ("s1", "r10", "h2"), ("s1", "r2", "h3")]
    )
    ranks, _ = topology_ranks(items)
    assert by_rank(items, ranks) == [
        ("s1", "r1", "h1"),
        ("s1", "r2", "h3"),
        ("s1", "r10", "h2"),
        ("s2", "r3", "h5"),
        ("s2", "r3", "h5"),
    ]
    assert ranks[0] < ranks[2]  # same host: spec order
    assert ranks[1] == 0  # rank 0 is the first member in topology order


def test_fresh_order_reaches_the_minimum_crossings_at_every_level() -> None:
    rng = random.Random(7)
    for _ in range(200):
        paths = [
            (f"s{rng.randrange(2)}", f"r{rng.randrange(4)}", f"h{rng.randrange(8)}")
            for _ in range(rng.randrange(1, 20))
        ]
        # racks belong to one spine, hosts to one rack (a tree)
        paths = [(f"s{int(r[1:]) % 2}", r, f"{r}-{h}") for _, r, h in paths]
        items = placed(paths)
        ranks, _ = topology_ranks(items)
        assert sorted(ranks) == list(range(len(items)))
        ordered = by_rank(items, ranks)
        for level in (1, 2, 3):
            assert ring_crossings(ordered, level) == minimum(paths, level)


def test_the_same_placement_gives_the_same_ranks() -> None:
    paths = [("s1", "r2", "h3"), ("s1", "r1", "h1"), ("s2", "r3", "h4"), ("s1", "r1", "h2")]
    first, _ = topology_ranks(placed(paths))
    again, _ = topology_ranks(placed(paths))
    assert first == again


def test_restart_with_unchanged_members_keeps_the_held_ranks_and_paths_even_after_a_label_change() -> None:
    items = placed([("r1", "h1"), ("r2", "h2"), ("r1", "h3")])
    ranks, _ = topology_ranks(items)
    held = held_of(items, ranks)
    relabelled = [Placed(p.slot, p.uid, ("r9", p.path[1])) if p.uid == "u1" else p for p in items]
    again, paths = topology_ranks(relabelled, held)
    assert again == ranks
    assert paths == [p.path for p in items]


def test_a_replacement_in_the_same_domain_keeps_its_rank() -> None:
    # 2 racks x 2 hosts, one member per host; rank 0's pod is replaced onto another host of its rack.
    items = placed([("r1", "h1"), ("r1", "h2"), ("r2", "h3"), ("r2", "h4")])
    ranks, _ = topology_ranks(items)
    assert ranks == [0, 1, 2, 3]
    held = held_of(items, ranks)
    replaced = list(items)
    replaced[0] = Placed(("worker", 0), "new", ("r1", "h9"))
    again, _ = topology_ranks(replaced, held)
    assert again == ranks  # the same rack: the replacement keeps rank 0
    assert topology_ranks(replaced)[0] == [1, 0, 2, 3]  # without the held spec, h9 sorts after h2
    assert ring_crossings(by_rank(replaced, again), 1) == 2


def test_keeping_a_rank_that_would_split_a_host_gives_the_fresh_order() -> None:
    # two members per host: rank 1's pod lands on h3; keeping rank 1 would put an h3 member between
    # h1 and h2 (h1 h3 h2 h2 h3 h3: 4 host crossings instead of 3), so the fresh order wins.
    items = placed([("r1", f"h{1 + i // 2}") for i in range(6)])
    ranks, _ = topology_ranks(items)
    replaced = list(items)
    replaced[1] = Placed(("worker", 1), "new", ("r1", "h3"))
    again, _ = topology_ranks(replaced, held_of(items, ranks))
    assert again == topology_ranks(replaced)[0] == [0, 3, 1, 2, 4, 5]
    assert ring_crossings(by_rank(replaced, again), 2) == 3


def test_a_replacement_in_another_domain_takes_the_fresh_order_when_keeping_would_cross_more() -> None:
    paths = [("r1", "h1"), ("r1", "h1"), ("r2", "h2"), ("r2", "h2")]
    items = placed(paths)
    ranks, _ = topology_ranks(items)
    held = held_of(items, ranks)
    replaced = list(items)
    replaced[0] = Placed(("worker", 0), "new", ("r3", "h5"))  # rank 0's slot lands in a third rack
    again, _ = topology_ranks(replaced, held)
    fresh, _ = topology_ranks(replaced)
    assert ring_crossings(by_rank(replaced, again), 1) == 3 == minimum([p.path for p in replaced], 1)
    # rank 1 (same rack) keeps its rank only if that costs nothing; here keeping it leaves r1 split around r3
    assert again == fresh or ring_crossings(by_rank(replaced, again), 1) == ring_crossings(by_rank(replaced, fresh), 1)


def test_replacements_never_cost_a_crossing() -> None:
    rng = random.Random(11)
    for _ in range(300):
        n = rng.randrange(2, 12)
        paths = [(f"r{rng.randrange(3)}", f"h{rng.randrange(4)}") for _ in range(n)]
        items = placed(paths)
        ranks, _ = topology_ranks(items)
        held = held_of(items, ranks)
        replaced = list(items)
        for i in rng.sample(range(n), rng.randrange(1, n + 1)):
            replaced[i] = Placed(items[i].slot, f"new{i}", (f"r{rng.randrange(3)}", f"h{rng.randrange(4)}"))
        again, _ = topology_ranks(replaced, held)
        assert sorted(again) == list(range(n))
        for level in (1, 2):
            assert ring_crossings(by_rank(replaced, again), level) == ring_crossings(
                by_rank(replaced, topology_ranks(replaced)[0]), level
            )


def test_held_members_move_paths_onto_the_current_levels() -> None:
    held = held_members(
        [(("w", 0), "u0", 0, ("z1", "r1", "h1"))], ("zone", RACK, HOSTNAME_KEY), (RACK, "new", HOSTNAME_KEY)
    )
    assert held == [Held(("w", 0), "u0", 0, ("r1", "", "h1"))]


def test_a_held_spec_of_another_size_is_ignored() -> None:
    items = placed([("r2", "h1"), ("r1", "h2")])
    held = [Held(("worker", 0), "u0", 0, ("r2", "h1"))]
    assert topology_ranks(items, held)[0] == topology_ranks(items)[0]


@pytest.mark.parametrize("n", [1, 2, 5])
def test_every_permutation_of_the_input_gives_one_order_of_paths(n: int) -> None:
    paths = [(f"r{i % 2}", f"h{i}") for i in range(n)]
    seen = set()
    for perm in itertools.permutations(paths):
        items = placed(list(perm))
        ranks, _ = topology_ranks(items)
        seen.add(tuple(by_rank(items, ranks)))
    assert len(seen) == 1


def test_controller_flags() -> None:
    from ringcontroller.options import parse

    default = parse([])
    assert (default.rank_order, default.topology_keys) == ("spec", DEFAULT_TOPOLOGY_KEYS)
    chosen = parse(["--rank-order", "topology", "--topology-keys", f"{SPINE},{RACK}"])
    assert (chosen.rank_order, chosen.topology_keys) == ("topology", (SPINE, RACK))
    assert parse(["--topology-keys", ""]).topology_keys == ()
    with pytest.raises(SystemExit, match="^2$"):
        parse(["--topology-keys", "not a key"])
    with pytest.raises(SystemExit, match="^2$"):
        parse(["--rank-order", "nearest"])


def test_a_chief_keeps_rank_0_and_the_rotated_ring_crosses_no_more() -> None:
    items = placed([("r2", "h1"), ("r1", "h2"), ("r2", "h3"), ("r1", "h4"), ("r3", "h5")])
    plain, _ = topology_ranks(items)
    assert plain[0] == 2  # r1 r1 r2 r2 r3: the member at index 0 (r2, h1) comes third
    ranks, _ = topology_ranks(items, first=0)
    assert ranks[0] == 0
    assert ranks == [(r - 2) % 5 for r in plain]
    for level in (1, 2):
        assert ring_crossings(by_rank(items, ranks), level) == ring_crossings(by_rank(items, plain), level)
    # a replacement elsewhere keeps the chief at 0
    replaced = list(items)
    replaced[3] = Placed(("worker", 3), "new", ("r1", "h9"))
    again, _ = topology_ranks(replaced, held_of(items, ranks), first=0)
    assert again[0] == 0 and sorted(again) == list(range(5))
