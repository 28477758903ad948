"""Indexed Jobs and StatefulSets on plain JSON: membership, ranks, replacement, bad input."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from agent.decide import decide, explain
from model import indexedjob, statefulset
from model.keys import RANK_ORDER_ANNOTATION
from model.kinds import KINDS, identify_pod
from model.pod import pod_record
from model.records import PodRecord
from model.serving import serving_workload
from model.topology import HOSTNAME_KEY, RankOrder
from tests.support.factories import (
    indexed_job,
    job_pod,
    jobset,
    jobset_pod,
    statefulset_pod,
)
from tests.support.factories import (
    statefulset as make_sts,
)

LABEL = "ring-controller.atlas"


def job_pods(job: dict[str, Any], indexes: list[int], **kw: Any) -> list[PodRecord]:
    return [pod_record(job_pod(job, index=i, ip=f"127.1.0.{i + 1}", phase="Running", **kw)) for i in indexes]


# Indexed Jobs ---------------------------------------------------------------------


def test_indexed_job_expects_completions_and_ranks_by_completion_index() -> None:
    raw = indexed_job("tf", 4, uid="job-uid")
    rec = indexedjob.workload_record(raw, label_key=LABEL)
    assert rec.key == "job/default/tf" and rec.expected == 4 and rec.error is None and rec.served
    # Pods arrive in any order, with names whose random suffixes sort against their indexes.
    suffixes = {0: "zzzzz", 1: "yyyyy", 2: "bbbbb", 3: "aaaaa"}
    pods = [
        pod_record(job_pod(raw, index=i, suffix=suffixes[i], ip=f"127.1.0.{i + 1}", phase="Running"))
        for i in (3, 1, 0, 2)
    ]
    d = decide(rec, pods, previous=None)
    assert d.spec.status == "completed"
    assert [(m.rank, m.index, m.pod) for m in d.spec.members] == [(i, i, f"tf-{i}-{suffixes[i]}") for i in range(4)]
    assert [m.ip for m in d.spec.members] == [f"127.1.0.{i + 1}" for i in range(4)]


def test_a_job_pod_names_its_job_and_a_jobset_pod_stays_its_jobsets() -> None:
    raw = indexed_job("tf", 2, uid="job-uid")
    identity = identify_pod(job_pod(raw, index=1)["metadata"])
    assert identity is not None
    assert (identity.job, identity.task, identity.index, identity.owner_uid) == (
        "job/default/tf",
        "worker",
        1,
        "job-uid",
    )
    js = jobset("js", uid="js-uid")
    js_identity = identify_pod(jobset_pod(js, rjob="workers", job_index=0, completion=1)["metadata"])
    assert js_identity is not None and js_identity.job == "jobset/default/js"


def test_a_job_owned_by_a_jobset_is_not_served_on_its_own() -> None:
    raw = indexed_job("js-workers-0", 2)
    raw["metadata"]["ownerReferences"] = [
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js", "uid": "u", "controller": True}
    ]
    rec = indexedjob.workload_record(raw, label_key=LABEL)
    assert not rec.served
    kind = next(k for k in KINDS if k.short == indexedjob.SHORT)
    assert (
        serving_workload(rec.key, lookup=lambda k, _name: rec if k is kind else None, runtime_nodes=lambda _: None)
        is None
    )


@pytest.mark.parametrize(
    ("change", "says"),
    [
        pytest.param({"parallelism": 2}, "spec.parallelism 2 < spec.completions 4", id="parallelism-below"),
        pytest.param({"completionMode": "NonIndexed"}, "completionMode is NonIndexed", id="non-indexed"),
        pytest.param({"completions": None}, "spec.completions is not set", id="no-completions"),
        pytest.param({"parallelism": -1}, "non-negative integers", id="bad-parallelism"),
    ],
)
def test_an_unrunnable_indexed_job_is_invalid_and_nothing_is_written(change: dict[str, Any], says: str) -> None:
    raw = indexed_job("tf", 4, uid="job-uid")
    raw["spec"].update(change)
    rec = indexedjob.workload_record(raw, label_key=LABEL)
    assert rec.error is not None and says in rec.error
    d = decide(rec, job_pods(raw, [0, 1]), previous=None)
    assert d.status == "invalid" and d.data is None
    assert [p.reason for p in d.problems] == ["invalid_workload"] and says in d.problems[0].message


def test_parallelism_above_completions_is_fine() -> None:
    raw = indexed_job("tf", 2, parallelism=8, uid="job-uid")
    rec = indexedjob.workload_record(raw, label_key=LABEL)
    assert rec.error is None and rec.expected == 2
    assert decide(rec, job_pods(raw, [0, 1]), previous=None).spec.status == "completed"


def test_a_pod_template_without_the_runtime_label_is_invalid() -> None:
    raw = indexed_job("tf", 2, uid="job-uid")
    del raw["spec"]["template"]["metadata"]["labels"][LABEL]
    rec = indexedjob.workload_record(raw, label_key=LABEL)
    assert rec.error is not None and f"the pod template has no label {LABEL}" in rec.error
    d = decide(rec, [], previous=None)
    assert d.data is None and d.problems[0].reason == "invalid_workload"
    sts = make_sts("web", 2)
    del sts["spec"]["template"]["metadata"]["labels"][LABEL]
    assert "has no label" in (statefulset.workload_record(sts, label_key=LABEL).error or "")


def test_a_failed_index_is_replaced_under_its_index_with_a_new_epoch() -> None:
    raw = indexed_job("tf", 3, uid="job-uid")
    rec = indexedjob.workload_record(raw, label_key=LABEL)
    first = decide(rec, job_pods(raw, [0, 1, 2]), previous=None)
    assert first.spec.status == "completed" and first.spec.epoch == 1
    # backoffLimitPerIndex: index 1 fails; the Job controller makes a new pod for index 1.
    failed = pod_record(job_pod(raw, index=1, ip="127.1.0.2", phase="Failed"))
    lost = decide(rec, [*job_pods(raw, [0, 2]), failed], previous=first.spec)
    assert lost.spec.status == "initializing" and lost.spec.epoch == 2
    new = pod_record(job_pod(raw, index=1, suffix="again", uid="uid-new", ip="127.1.0.9", phase="Running"))
    back = decide(rec, [*job_pods(raw, [0, 2]), failed, new], previous=lost.spec)
    assert back.spec.status == "completed" and back.spec.epoch == 3
    assert [(m.index, m.pod, m.ip) for m in back.spec.members][1] == (1, "tf-1-again", "127.1.0.9")


def test_suspension_and_failed_indexes_say_why_the_job_waits() -> None:
    raw = indexed_job("tf", 2, uid="job-uid")
    assert indexedjob.workload_record(raw, label_key=LABEL).waiting is None
    raw["spec"]["suspend"] = True
    suspended = indexedjob.workload_record(raw, label_key=LABEL)
    assert suspended.waiting is not None and "suspended" in suspended.waiting and suspended.error is None
    raw["spec"]["suspend"] = False
    raw["status"] = {"failedIndexes": "1"}
    failed = indexedjob.workload_record(raw, label_key=LABEL)
    assert failed.waiting is not None and "indexes 1 failed for good" in failed.waiting


def test_suspending_and_resuming_follow_the_epoch_rule() -> None:
    raw = indexed_job("tf", 2, uid="job-uid")
    rec = indexedjob.workload_record(raw, label_key=LABEL)
    first = decide(rec, job_pods(raw, [0, 1]), previous=None)
    # Suspended: the Job controller deletes the pods.
    gone = [replace(p, deleting=True) for p in job_pods(raw, [0, 1])]
    paused = decide(rec, gone, previous=first.spec)
    assert (paused.spec.status, paused.spec.epoch, paused.spec.members) == ("initializing", 2, ())
    resumed = decide(rec, job_pods(raw, [0, 1], suffix="new"), previous=paused.spec)
    assert (resumed.spec.status, resumed.spec.epoch) == ("completed", 3)


# StatefulSets --------------------------------------------------------------------


def sts_pods(sts: dict[str, Any], ordinals: list[int], **kw: Any) -> list[PodRecord]:
    return [pod_record(statefulset_pod(sts, ordinal=o, ip=f"127.2.0.{o + 1}", phase="Running", **kw)) for o in ordinals]


def test_statefulset_ranks_by_ordinal_and_scaling_is_a_new_epoch() -> None:
    sts = make_sts("web", 3, uid="sts-uid")
    rec = statefulset.workload_record(sts, label_key=LABEL)
    assert rec.key == "sts/default/web" and rec.expected == 3
    first = decide(rec, sts_pods(sts, [2, 0, 1]), previous=None)
    assert [(m.rank, m.pod) for m in first.spec.members] == [(0, "web-0"), (1, "web-1"), (2, "web-2")]
    up = statefulset.workload_record({**sts, "spec": {**sts["spec"], "replicas": 4}}, label_key=LABEL)
    waiting = decide(up, sts_pods(sts, [0, 1, 2]), previous=first.spec)
    assert (waiting.spec.status, waiting.spec.epoch) == ("initializing", 2)
    grown = decide(up, sts_pods(sts, [0, 1, 2, 3]), previous=waiting.spec)
    assert (grown.spec.status, grown.spec.epoch, len(grown.spec.members)) == ("completed", 3, 4)
    down = statefulset.workload_record({**sts, "spec": {**sts["spec"], "replicas": 2}}, label_key=LABEL)
    # Ordinals 2 and 3 are still terminating: beyond the replicas, they fill no slot.
    shrunk = decide(down, sts_pods(sts, [0, 1, 2, 3]), previous=grown.spec)
    assert (shrunk.spec.status, shrunk.spec.epoch) == ("completed", 4)
    assert [m.pod for m in shrunk.spec.members] == ["web-0", "web-1"]
    ignored = explain(down, sts_pods(sts, [0, 1, 2, 3]), previous=grown.spec).ignored
    assert [(i.pod.name, i.reason) for i in ignored] == [
        ("web-2", "index 2 is beyond task worker's 2 replicas"),
        ("web-3", "index 3 is beyond task worker's 2 replicas"),
    ]


def test_statefulset_ordinals_start_where_the_spec_says() -> None:
    sts = make_sts("web", 2, uid="sts-uid", start=5)
    rec = statefulset.workload_record(sts, label_key=LABEL)
    d = decide(rec, sts_pods(sts, [6, 5, 4]), previous=None)
    assert [(m.rank, m.index, m.pod) for m in d.spec.members] == [(0, 0, "web-5"), (1, 1, "web-6")]
    ignored = explain(rec, sts_pods(sts, [6, 5, 4]), previous=None).ignored
    assert [(i.pod.name, i.reason) for i in ignored] == [("web-4", "index 4 is beyond task worker's 2 replicas from 5")]


def test_statefulset_pods_without_the_ordinal_label_wait_with_a_problem() -> None:
    sts = make_sts("web", 2, uid="sts-uid")
    rec = statefulset.workload_record(sts, label_key=LABEL)
    pods = sts_pods(sts, [0, 1], index_label=False)
    d = decide(rec, pods, previous=None)
    assert d.spec.status == "initializing" and d.data is not None  # the initializing spec, nothing wrong
    assert [(p.reason, p.message) for p in d.problems] == [
        (
            "missing_index",
            "StatefulSet web: pods carry no member index (label apps.kubernetes.io/pod-index), "
            "so they fill no slot: web-0, web-1",
        )
    ]
    e = explain(rec, pods, previous=None)
    assert [s.state for s in e.slots] == ["missing", "missing"]
    assert {i.reason for i in e.ignored} == {"carries no member index (label apps.kubernetes.io/pod-index)"}


def test_a_statefulset_made_by_a_leaderworkerset_is_not_served_on_its_own() -> None:
    sts = make_sts("lws", 2)
    sts["metadata"]["ownerReferences"] = [
        {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "lws", "uid": "u"}
    ]
    assert not statefulset.workload_record(sts, label_key=LABEL).served


# Two pods, one index ------------------------------------------------------------------


def test_two_live_pods_claiming_one_index_count_neither_until_one_goes() -> None:
    raw = indexed_job("tf", 2, uid="job-uid")
    rec = indexedjob.workload_record(raw, label_key=LABEL)
    extra = pod_record(job_pod(raw, index=1, suffix="extra", uid="uid-extra", ip="127.1.0.7", phase="Running"))
    pods = [*job_pods(raw, [0, 1]), extra]
    d = decide(rec, pods, previous=None)
    assert d.spec.status == "initializing" and d.ready == 1
    assert [(p.reason, p.message) for p in d.problems] == [
        (
            "duplicate_index",
            "pods tf-1-extra, tf-1-x1z all claim worker index 1: none of them counts while more than one runs",
        )
    ]
    e = explain(rec, pods, previous=None)
    assert [s.state for s in e.slots] == ["counting", "duplicate"]
    assert [i.reason for i in e.ignored] == [
        "another live pod claims the same slot: none of them counts while more than one runs"
    ]
    # A Pending rival is live too; one being deleted is not.
    pending = replace(extra, phase="Pending", ip="")
    assert decide(rec, [*job_pods(raw, [0, 1]), pending], previous=None).spec.status == "initializing"
    leaving = replace(extra, deleting=True)
    done = decide(rec, [*job_pods(raw, [0, 1]), leaving], previous=None)
    assert done.spec.status == "completed" and not done.problems
    assert [m.pod for m in done.spec.members] == ["tf-0-x0z", "tf-1-x1z"]


# Topology order within one host ------------------------------------------------------------


def test_members_on_one_topology_path_keep_their_index_order_whatever_their_uids_and_names() -> None:
    raw = indexed_job("tf", 6, uid="job-uid")
    raw["metadata"]["annotations"] = {RANK_ORDER_ANNOTATION: "topology"}
    rec = indexedjob.workload_record(raw, label_key=LABEL)
    # Indexes 0..5 alternate between two hosts in two racks; uids and name suffixes
    # sort against the indexes.
    node_of = {i: ("h1" if i % 2 else "h0") for i in range(6)}
    pods = [
        pod_record(
            job_pod(
                raw,
                index=i,
                suffix=f"{chr(ord('z') - i) * 5}",
                uid=f"uid-{9 - i}",
                ip=f"127.1.0.{i + 1}",
                phase="Running",
                node=node_of[i],
            )
        )
        for i in (5, 2, 0, 3, 1, 4)
    ]
    paths = {"h0": ("r0", "h0"), "h1": ("r1", "h1")}
    order = RankOrder(rule="topology", keys=("rack", HOSTNAME_KEY), node_path=paths.get)
    d = decide(rec, pods, previous=None, order=order)
    assert d.spec.status == "completed" and d.spec.rank_order == "topology"
    assert [(m.rank, m.node, m.index) for m in d.spec.members] == [
        (0, "h0", 0), (1, "h0", 2), (2, "h0", 4), (3, "h1", 1), (4, "h1", 3), (5, "h1", 5),
    ]  # fmt: skip
