"""The end of a job is no membership change: members that finished (``Succeeded``) keep their places.

A 3-worker job completes at epoch N; its workers then finish one by one, as
real ones do. Each case checks what :func:`agent.decide.decide` writes (the
files byte for byte and the epoch), what :func:`agent.decide.explain` shows,
and the limits of the rule: only the member as written (same pod uid) in the
completed spec, only while that spec stays as it is, never a ``Failed`` pod,
never a Deployment's pod.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from agent.decide import FINISHED_DETAIL, FINISHED_OUT_DETAIL, Decision, decide, explain
from model.deployment import workload_record as deployment_record
from model.keys import RANK_ORDER_ANNOTATION
from model.pod import pod_record
from model.records import PodRecord, PodUID, WorkloadRecord
from model.volcano import workload_record
from ranktable.clusterspec import ClusterSpec, spec_from_json
from ringcontroller.kubectl_ring import render
from tests.support.factories import pod_template, volcano_job, volcano_pod
from tests.unit.test_decide import _ascend_job, _ascend_pods
from tests.unit.test_decide_topology import ORDER
from tests.unit.test_decide_topology import job as topology_job
from tests.unit.test_decide_topology import pods as topology_pods

LABEL = "ring-controller.atlas"


def _job(n: int = 3) -> tuple[dict[str, Any], WorkloadRecord]:
    raw = volcano_job("j", tasks=[("worker", n)], uid="job-uid")
    return raw, workload_record(raw, label_key=LABEL)


def _pod(raw: dict[str, Any], index: int, *, uid: str = "", **kw: Any) -> PodRecord:
    fields: dict[str, Any] = {
        "uid": uid or f"pod-{index}",
        "ip": f"127.1.0.{index + 1}",
        "host_ip": "10.0.0.1",
        "phase": "Running",
        "node": "n1",
        **kw,
    }
    return pod_record(volcano_pod(raw, task="worker", index=index, **fields))


def _finish(pod: PodRecord, *, keep_ip: bool = True, phase: str = "Succeeded") -> PodRecord:
    """``pod`` after its container exited; the kubelet may keep or clear podIP (and hostIP) on a terminal pod."""
    return replace(pod, phase=phase) if keep_ip else replace(pod, phase=phase, ip="", host_ip="")


def _completed(wl: WorkloadRecord, pods: list[PodRecord], **kw: Any) -> tuple[Decision, ClusterSpec]:
    """The completed decision, and its spec as read back from the ConfigMap (as after a restart)."""
    done = decide(wl, pods, previous=None, **kw)
    assert done.spec.status == "completed" and done.data is not None
    return done, spec_from_json(done.data["cluster.json"])


def _unchanged(d: Decision, done: Decision) -> None:
    assert (d.spec.status, d.spec.epoch) == ("completed", done.spec.epoch)
    assert d.data == done.data  # nothing to write
    assert d.spec.members == done.spec.members


IPS = [pytest.param(True, id="ip-kept"), pytest.param(False, id="ip-cleared")]
PREVIOUS = [pytest.param(False, id="as-written"), pytest.param(True, id="read-back")]


@pytest.mark.parametrize("read_back", PREVIOUS)
@pytest.mark.parametrize("keep_ip", IPS)
def test_members_finishing_one_by_one_change_nothing(keep_ip: bool, read_back: bool) -> None:
    raw, wl = _job()
    pods = [_pod(raw, i) for i in range(3)]
    done, back = _completed(wl, pods)
    previous = back if read_back else done.spec

    first = decide(wl, [_finish(pods[0], keep_ip=keep_ip), *pods[1:]], previous=previous)
    _unchanged(first, done)
    assert first.ready == 3 and first.finished == {"pod-0"}

    ended = [_finish(p, keep_ip=keep_ip) for p in pods]
    last = decide(wl, ended, previous=first.spec)
    _unchanged(last, done)
    assert last.ready == 3 and last.finished == {"pod-0", "pod-1", "pod-2"}
    # A controller restarted after the job ended rebuilds the same files from the ConfigMap's spec.
    _unchanged(decide(wl, ended, previous=spec_from_json(last.data["cluster.json"] if last.data else "")), done)


def test_a_succeeded_pod_of_another_uid_in_the_slot_does_not_count() -> None:
    raw, wl = _job()
    pods = [_pod(raw, i) for i in range(3)]
    done, _ = _completed(wl, pods)
    other = _finish(_pod(raw, 0, uid="another-0"))
    d = decide(wl, [other, *pods[1:]], previous=done.spec)
    assert (d.spec.status, d.spec.epoch, d.ready, d.finished) == ("initializing", done.spec.epoch + 1, 2, frozenset())


def test_a_failed_member_is_lost_a_new_epoch_as_before() -> None:
    raw, wl = _job()
    pods = [_pod(raw, i) for i in range(3)]
    done, _ = _completed(wl, pods)
    for keep_ip in (True, False):
        d = decide(wl, [_finish(pods[0], keep_ip=keep_ip, phase="Failed"), *pods[1:]], previous=done.spec)
        assert (d.spec.status, d.spec.epoch, d.spec.members, d.ready) == ("initializing", done.spec.epoch + 1, (), 2)


def test_a_finished_member_keeps_no_place_once_the_spec_moved_on() -> None:
    raw, wl = _job()
    pods = [_pod(raw, i) for i in range(3)]
    done, _ = _completed(wl, pods)
    # worker 2 failed: the spec went back to initializing; then worker 0 finished.
    lost = decide(wl, [pods[0], pods[1], _finish(pods[2], phase="Failed")], previous=done.spec)
    assert lost.spec.status == "initializing"
    # worker 2's replacement runs, but the finished worker 0 cannot join the new spec.
    back = [_finish(pods[0]), pods[1], _pod(raw, 2, uid="new-2", ip="127.1.0.9")]
    d = decide(wl, back, previous=lost.spec, held=done.spec)
    assert (d.spec.status, d.spec.epoch, d.ready, d.finished) == ("initializing", lost.spec.epoch, 2, frozenset())
    e = explain(wl, back, previous=lost.spec, held=done.spec)
    assert [(s.index, s.state) for s in e.waiting] == [(0, "not_running")]
    assert e.waiting[0].detail == FINISHED_OUT_DETAIL


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(lambda raw, pod: _finish(pod, phase="Failed"), id="failed"),
        pytest.param(lambda raw, pod: _pod(raw, 2, uid="new-2", ip="127.1.0.9"), id="replaced-and-running"),
    ],
)
def test_a_finished_member_stops_counting_when_another_member_changes(other: Any) -> None:
    raw, wl = _job()
    pods = [_pod(raw, i) for i in range(3)]
    done, _ = _completed(wl, pods)
    now = [_finish(pods[0]), pods[1], other(raw, pods[2])]
    d = decide(wl, now, previous=done.spec)
    # Never a completed spec naming a finished pod beside a new member (it would wait for a peer that is gone).
    assert (d.spec.status, d.spec.epoch, d.spec.members, d.finished) == (
        "initializing",
        done.spec.epoch + 1,
        (),
        frozenset(),
    )
    e = explain(wl, now, previous=done.spec)
    assert e.slots[0].state == "not_running" and e.slots[0].detail == FINISHED_OUT_DETAIL
    assert sum(s.counts for s in e.slots) == d.ready


def test_a_job_that_finished_before_it_ever_completed_stays_initializing() -> None:
    raw, wl = _job()
    pods = [_pod(raw, i) for i in range(3)]
    waiting = decide(wl, pods[:2], previous=None)
    assert waiting.spec.status == "initializing"
    d = decide(wl, [_finish(pods[0]), pods[1], pods[2]], previous=waiting.spec)
    assert (d.spec.status, d.ready) == ("initializing", 2)


def test_a_finished_member_of_an_earlier_job_version_holds_no_place() -> None:
    raw, wl = _job()
    # Pods without a version match any (the slot rule lets them in): only the spec's job ref tells the versions apart.
    pods = [replace(_pod(raw, i), version=None) for i in range(3)]
    done, _ = _completed(wl, pods)
    raw["status"] = {"version": 1}
    restarted = workload_record(raw, label_key=LABEL)
    assert restarted.version == 1
    d = decide(restarted, [_finish(pods[0]), *pods[1:]], previous=done.spec)
    assert d.spec.status == "initializing" and d.finished == frozenset()


def test_a_deployment_pod_that_succeeded_holds_no_rank_as_before() -> None:
    raw = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "default", "uid": "d-uid", "labels": {LABEL: "tensorflow"}},
        "spec": {"replicas": 2, "template": pod_template()},
    }
    wl = deployment_record(raw, label_key=LABEL)
    assert not wl.indexed
    plain, _ = _job(2)
    pods = [
        replace(_pod(plain, i), owner_uid=None, index=None, version=None, task="", created=f"2026-12-01T00:00:0{i}Z")
        for i in range(2)
    ]
    done, _ = _completed(wl, pods)
    d = decide(wl, [_finish(pods[0]), pods[1]], previous=done.spec)
    assert (d.spec.status, d.spec.epoch, d.ready, d.finished) == ("initializing", done.spec.epoch + 1, 1, frozenset())


def test_explain_shows_the_finished_slot_and_describe_names_it() -> None:
    raw, wl = _job()
    pods = [_pod(raw, i) for i in range(3)]
    done, back = _completed(wl, pods)
    now = [_finish(pods[0], keep_ip=False), *pods[1:]]
    e = explain(wl, now, previous=back)
    assert e.decision == decide(wl, now, previous=back)
    assert [(s.index, s.state, s.counts) for s in e.slots] == [
        (0, "finished", True),
        (1, "counting", True),
        (2, "counting", True),
    ]
    assert e.slots[0].detail == FINISHED_DETAIL
    assert e.waiting == ()
    assert render.STATE_WORDS["finished"] == "finished" and render.HINTS["finished"] == ""


def test_a_finished_member_keeps_its_topology_rank() -> None:
    raw, wl = topology_job(4, annotation="topology")
    pods = topology_pods(raw, 4)
    done, back = _completed(wl, pods, order=ORDER)
    assert back.rank_order == "topology"
    # j-worker-1 (rack r1) is at rank 2 in topology order, not at its spec position 1.
    (member,) = [m for m in back.members if m.index == 1]
    assert member.rank == 2
    now = [pods[0], _finish(pods[1], keep_ip=False), *pods[2:]]
    d = decide(wl, now, previous=back, order=ORDER, held=back)
    _unchanged(d, done)
    assert d.finished == {"pod-1"}


def test_an_npu_member_that_finished_leaves_hccl_json_as_written() -> None:
    raw, wl = _ascend_job(2, annotations={RANK_ORDER_ANNOTATION: "spec"})
    pods = _ascend_pods(raw, 2)
    done, back = _completed(wl, pods)
    assert done.data is not None and "hccl.json" in done.data
    assert json.loads(done.data["hccl.json"])["server_list"][0]["container_ip"] == "127.1.0.1"
    # The pod's IP and hostIP gone from its status; the spec read back lacks the hccl-only fields.
    d = decide(wl, [_finish(pods[0], keep_ip=False), pods[1]], previous=back)
    _unchanged(d, done)
    assert d.finished == {PodUID("pod-0")}
