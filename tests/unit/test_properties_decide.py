"""Properties of ``decide()``, checked on generated jobs and pod populations.

Every property is stated against a small model of the contract written here
(slots in the workload's task order, a slot filled by a Running pod with an
IP of the current incarnation and version, none when two live pods claim the
slot), not against ``decide``'s own code. Task names are drawn so that spec order is often not alphabetical
(``worker`` before ``chief``, ``zeta`` before ``alpha``); two ``@example`` s
pin those cases.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent.decide import decide, explain
from model.pod import pod_record
from model.records import PodRecord, WorkloadRecord
from model.volcano import workload_record
from ranktable.clusterspec import CLUSTER_FILE, ClusterSpec, spec_from_json
from ranktable.stored import unpack
from tests.support.factories import volcano_job, volcano_pod

LABEL = "ring-controller.atlas"
NAMES = ("worker", "chief", "zeta", "alpha", "ps", "evaluator")
#: What a slot's pod can be; only "running" counts.
STATES = ("absent", "running", "pending", "no_ip", "deleting", "old_version", "stranger")
#: States of a live pod of the current job (not deleted, not finished): two of them in one slot count none.
LIVE = ("running", "pending", "no_ip")

Tasks = list[tuple[str, int]]


@dataclass(frozen=True)
class SlotPods:
    """The pods generated for one slot: (state, generation) each; generation varies uid and IP."""

    task: str
    index: int
    pods: tuple[tuple[str, int], ...]


tasks_st = st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True).flatmap(
    lambda names: st.lists(st.integers(0, 3), min_size=len(names), max_size=len(names)).map(
        lambda counts: list(zip(names, counts, strict=True))
    )
)


def slots_of(tasks: Tasks) -> list[tuple[str, int]]:
    """The contract's rank order: tasks in spec order, then index."""
    return [(t, i) for t, n in tasks for i in range(n)]


def population(tasks: Tasks, *, generations: int = 1) -> st.SearchStrategy[list[SlotPods]]:
    """For every slot, 0-2 pods in any state (a second one: a replacement overlapping its predecessor)."""
    # "running" drawn about half the time, so full jobs and slots claimed by two live pods are common.
    state = st.sampled_from(STATES) | st.just("running")
    pod = st.tuples(state, st.integers(0, generations - 1))
    return st.tuples(*[st.lists(pod, max_size=2) for _ in slots_of(tasks)]).map(
        lambda per_slot: [
            SlotPods(task, index, tuple(p for p in pods if p[0] != "absent"))
            for (task, index), pods in zip(slots_of(tasks), per_slot, strict=True)
        ]
    )


def job(tasks: Tasks) -> tuple[dict[str, Any], WorkloadRecord]:
    raw = volcano_job("j", namespace="ns", tasks=tasks, uid="job-uid")
    return raw, workload_record(raw, label_key=LABEL)


def uid_of(task: str, index: int, generation: int, k: int) -> str:
    return f"uid-{task}-{index}-g{generation}-k{k}"


def build_pods(raw: dict[str, Any], slots: Sequence[SlotPods]) -> list[PodRecord]:
    out = []
    for s, slot in enumerate(slots):
        for k, (state, gen) in enumerate(slot.pods):
            pod = volcano_pod(
                raw,
                task=slot.task,
                index=slot.index,
                version=7 if state == "old_version" else 0,
                uid=uid_of(slot.task, slot.index, gen, k),
                # Distinct per pod: two Running pod-network pods never share an IP (the decision
                # refuses such a spec: address_collision).
                ip="" if state == "no_ip" else f"127.{1 + gen}.{s // 250 + 16 * k}.{1 + s % 250}",
                phase="Pending" if state == "pending" else "Running",
                node="n1",
                name_suffix=f"-r{k}" if k else "",
            )
            pod["metadata"]["creationTimestamp"] = f"2026-11-29T00:00:0{(k + 1) // 2}Z"  # k 1 and 2 tie
            if state == "deleting":
                pod["metadata"]["deletionTimestamp"] = "2026-11-29T00:01:00Z"
            if state == "stranger":
                pod["metadata"]["ownerReferences"][0]["uid"] = "an-earlier-job-uid"
            out.append(pod_record(pod))
    return out


def contested(slot: SlotPods) -> bool:
    """Two or more live pods of the current job claim the slot: none of them counts."""
    return sum(state in LIVE for state, _ in slot.pods) > 1


def filled(slots: Sequence[SlotPods]) -> bool:
    return all(any(state == "running" for state, _ in s.pods) and not contested(s) for s in slots)


@given(data=st.data(), tasks=tasks_st)
@example(data=None, tasks=[("worker", 2), ("chief", 1)])
@example(data=None, tasks=[("zeta", 1), ("alpha", 2)])
def test_ranks_follow_task_order_and_completed_iff_every_slot_is_filled(data: Any, tasks: Tasks) -> None:
    raw, wl = job(tasks)
    slots = (
        [SlotPods(t, i, (("running", 0),)) for t, i in slots_of(tasks)]
        if data is None
        else data.draw(population(tasks))
    )
    d = decide(wl, build_pods(raw, slots), previous=None)
    expected = slots_of(tasks)
    complete = bool(expected) and filled(slots)
    assert (d.spec.status == "completed") == complete
    if complete:
        assert [(m.rank, m.task, m.index) for m in d.spec.members] == [(r, t, i) for r, (t, i) in enumerate(expected)]
        by_slot = {(s.task, s.index): s for s in slots}
        for m in d.spec.members:
            assert m.pod.startswith(f"j-{m.task}-{m.index}")
            states = {uid_of(m.task, m.index, gen, k): st for k, (st, gen) in enumerate(by_slot[m.task, m.index].pods)}
            assert states[m.uid] == "running"  # the member is a counting pod of its own slot
    else:
        assert d.spec.members == ()
    assert d.data is not None and spec_from_json(d.data[CLUSTER_FILE]) == d.spec


@given(data=st.data(), tasks=tasks_st, complete=st.booleans())
def test_any_arrival_order_gives_the_same_files(data: Any, tasks: Tasks, complete: bool) -> None:
    raw, wl = job(tasks)
    slots = data.draw(population(tasks))
    if complete:  # every slot has a running pod, besides whatever else: the case where order could matter
        slots = [SlotPods(s.task, s.index, (("running", 1), *s.pods)) for s in slots]
    pods = build_pods(raw, slots)
    shuffled = data.draw(st.permutations(pods))
    previous = data.draw(st.none() | st.just(decide(wl, pods[:1], previous=None).spec))
    assert decide(wl, shuffled, previous=previous).data == decide(wl, pods, previous=previous).data


@settings(max_examples=40)
@given(data=st.data(), tasks=tasks_st)
@example(data=None, tasks=[("worker", 2), ("chief", 1)])
def test_epoch_grows_exactly_when_the_member_list_changes(data: Any, tasks: Tasks) -> None:
    raw, wl = job(tasks)
    if data is None:
        # completed -> completed: member 1 replaced under the same name (new uid and IP).
        steps = [
            [SlotPods(t, i, (("running", 0),)) for t, i in slots_of(tasks)],
            [SlotPods(t, i, (("running", 1 if (t, i) == ("worker", 1) else 0),)) for t, i in slots_of(tasks)],
        ]
    else:
        steps = data.draw(st.lists(population(tasks, generations=3), min_size=2, max_size=5))
    previous: ClusterSpec | None = None
    saw_completed_to_completed = False
    for slots in steps:
        spec = decide(wl, build_pods(raw, slots), previous=previous).spec
        before_members = previous.members if previous is not None else ()
        before_epoch = previous.epoch if previous is not None else 0
        changed = spec.members != before_members
        assert spec.epoch == before_epoch + (1 if changed else 0)
        if previous is not None and previous.status == spec.status == "completed" and changed:
            saw_completed_to_completed = True
            assert spec.epoch > previous.epoch
        previous = spec
    if data is None:
        assert saw_completed_to_completed


@given(
    tasks=st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True).flatmap(
        lambda names: st.lists(st.integers(1, 40), min_size=len(names), max_size=len(names)).map(
            lambda counts: list(zip(names, counts, strict=True))
        )
    ),
    limit=st.integers(200, 8000),
)
def test_files_stay_under_the_size_limit_or_the_job_gets_spec_too_large(tasks: Tasks, limit: int) -> None:
    raw, wl = job(tasks)
    slots = [SlotPods(t, i, (("running", 0),)) for t, i in slots_of(tasks)]
    d = decide(wl, build_pods(raw, slots), previous=None, size_limit=limit)
    full = decide(wl, build_pods(raw, slots), previous=None)
    assert full.data is not None
    size = sum(len(v.encode()) for v in full.data.values())
    if d.stored is None:
        assert d.data is None
        assert [p.reason for p in d.problems] == ["too_large"]
        assert f"{size} bytes plain" in d.problems[0].message
        assert size > limit
    else:
        assert d.data == full.data and not [p for p in d.problems if p.reason == "too_large"]
        assert d.stored.compressed == (size > limit)
        if size <= limit:
            assert d.stored.data == full.data  # plain keys byte for byte
        stored = sum(len(v.encode()) for v in d.stored.data.values()) + sum(map(len, d.stored.binary_data.values()))
        assert stored <= limit
        assert json.loads(unpack(d.stored.data, d.stored.binary_data)[CLUSTER_FILE])["status"] == "completed"


#: The slot state explain() must show for a slot whose best pod is in this generated state.
EXPLAINED = {"running": "counting", "pending": "not_running", "no_ip": "no_ip", "deleting": "deleting"}
#: Generated states whose pods never fill a slot.
FOREIGN = ("old_version", "stranger")


@given(data=st.data(), tasks=tasks_st)
def test_explain_agrees_with_decide_and_accounts_for_every_pod(data: Any, tasks: Tasks) -> None:
    raw, wl = job(tasks)
    slots = data.draw(population(tasks))
    pods = build_pods(raw, slots)
    e = explain(wl, pods, previous=None)
    assert e.decision == decide(wl, pods, previous=None)
    assert [(s.task, s.index) for s in e.slots] == slots_of(tasks)
    assert sum(s.counts for s in e.slots) == e.decision.ready
    assert (e.decision.spec.status == "completed") == (bool(e.slots) and not e.waiting)
    # Every pod is either in its slot or ignored with a reason, never both, never lost.
    placed = [s.pod.uid for s in e.slots if s.pod is not None]
    assert sorted(placed + [i.pod.uid for i in e.ignored]) == sorted(p.uid for p in pods)
    assert all(i.reason for i in e.ignored)
    for slot, generated in zip(e.slots, slots, strict=True):
        own = [state for state, _ in generated.pods if state not in FOREIGN]
        if not own:
            assert slot.state == "missing" and slot.pod is None
        elif contested(generated):
            assert slot.state == "duplicate" and not slot.counts
        elif "running" in own:
            assert slot.state == "counting"
        else:
            assert slot.state in {EXPLAINED[state] for state in own}
