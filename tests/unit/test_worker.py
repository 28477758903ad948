"""The per-job worker's write path, on an in-memory ConfigMap store.

``MemoryAPI`` (tests/support) implements the agent's ``KubeAPI`` protocol over
a dict with resourceVersions and 409/404 like the API server's, so the state
machine (informer lag, foreign edits, deletions, conflicts, restarts) is
tested on plain data. The real API server is exercised by the integration
tests.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest

from agent.api import ApiError, Conflict, NotFound
from agent.worker import MAX_CONFLICTS, JobWorker
from model.pod import pod_record
from model.records import PodRecord, WorkloadRecord
from model.volcano import workload_record
from tests.support.factories import pod_template, volcano_job, volcano_pod
from tests.support.memoryapi import MemoryAPI
from tests.support.metricvalue import value

Json = dict[str, Any]
LABEL = "ring-controller.atlas"


def _job(workers: int = 2, *, mounted: bool = True) -> tuple[Json, WorkloadRecord]:
    """A Volcano Job whose pods mount its spec (``rings-config-j``) unless ``mounted`` is False."""
    template = pod_template(configmap="rings-config-j" if mounted else None)
    raw = volcano_job("j", namespace="ns", tasks=[("worker", workers)], uid="job-uid", template=template)
    return raw, workload_record(raw, label_key=LABEL)


def _pods(raw: Json, n: int, *, base: int = 1) -> list[PodRecord]:
    return [
        pod_record(
            volcano_pod(raw, task="worker", index=i, uid=f"p{i}-{base}", ip=f"127.1.0.{base + i}", phase="Running")
        )
        for i in range(n)
    ]


def _spec(api: MemoryAPI) -> Json:
    return json.loads(api.cms[("ns", "rings-config-j")]["data"]["cluster.json"])  # type: ignore[no-any-return]


async def test_create_then_complete_is_two_writes() -> None:
    api = MemoryAPI()
    raw, wl = _job()
    w = JobWorker(api=api)
    await w.sync(wl, [], None)
    assert api.calls == ["create"] and _spec(api)["status"] == "initializing"
    await w.sync(wl, _pods(raw, 2), None)  # informer has not seen our create yet: one GET
    assert api.calls == ["create", "get", "update"]
    assert _spec(api)["status"] == "completed" and w.status == "completed"
    assert api.events == [("Normal", "SpecCompleted")]


async def test_a_job_over_the_member_limit_gets_an_event_a_metric_and_keeps_what_was_written() -> None:
    api = MemoryAPI()
    raw, wl = _job(2)
    w = JobWorker(api=api, max_members=2)
    await w.sync(wl, _pods(raw, 2), None)
    written = _spec(api)
    assert written["status"] == "completed"
    grown = dataclasses.replace(wl, tasks=(dataclasses.replace(wl.tasks[0], replicas=3),))
    api.calls.clear()
    await w.sync(grown, _pods(raw, 2), api.record("ns", "rings-config-j"))
    assert w.status == "invalid" and api.calls == []  # nothing written: the completed spec stays
    assert _spec(api) == written
    assert api.events[-1] == ("Warning", "TooManyMembers")
    assert "asks for 3 members, over this controller's limit of 2 (--max-members)" in api.event_messages[-1]
    assert value(w.metrics.invalid_inputs, kind="vcjob", reason="too_many_members") == 1


async def test_informer_lagging_our_own_write_costs_no_call() -> None:
    api = MemoryAPI()
    raw, wl = _job()
    w = JobWorker(api=api)
    await w.sync(wl, [], None)
    created = api.record("ns", "rings-config-j")
    await w.sync(wl, _pods(raw, 2), created)
    api.calls.clear()
    # The informer still shows the create (the version our update replaced).
    await w.sync(wl, _pods(raw, 2), created)
    assert api.calls == []


async def test_deleted_configmap_is_recreated_with_a_continuing_epoch() -> None:
    api = MemoryAPI()
    raw, wl = _job()
    w = JobWorker(api=api)
    await w.sync(wl, _pods(raw, 2), None)
    epoch = _spec(api)["epoch"]
    del api.cms[("ns", "rings-config-j")]
    await w.sync(wl, _pods(raw, 2), None)
    assert _spec(api)["status"] == "completed" and _spec(api)["epoch"] == epoch


async def test_hand_edited_spec_is_corrected() -> None:
    api = MemoryAPI()
    raw, wl = _job()
    w = JobWorker(api=api)
    await w.sync(wl, _pods(raw, 2), None)
    good = _spec(api)
    edited = copy.deepcopy(api.cms[("ns", "rings-config-j")])
    edited["data"]["cluster.json"] = edited["data"]["cluster.json"].replace("127.1.0.2", "10.9.9.9")
    api.put("ns", edited)
    await w.sync(wl, _pods(raw, 2), api.record("ns", "rings-config-j"))
    assert _spec(api)["members"] == good["members"]


async def test_label_stripped_under_us_makes_it_foreign_without_raising() -> None:
    api = MemoryAPI()
    raw, wl = _job()
    w = JobWorker(api=api)
    await w.sync(wl, [], None)
    stripped = copy.deepcopy(api.cms[("ns", "rings-config-j")])
    stripped["metadata"]["labels"] = {}
    api.put("ns", stripped)
    before = copy.deepcopy(api.cms[("ns", "rings-config-j")])
    await w.sync(wl, _pods(raw, 2), None)  # the informer dropped it (label selector)
    assert api.cms[("ns", "rings-config-j")] == before
    assert w.status == "invalid" and ("Warning", "ForeignConfigMap") in api.events


async def test_foreign_configmap_found_on_create_is_untouched() -> None:
    api = MemoryAPI()
    raw, wl = _job()
    api.put("ns", {"metadata": {"name": "rings-config-j", "namespace": "ns"}, "data": {"hccl.json": "{}"}})
    w = JobWorker(api=api)
    await w.sync(wl, _pods(raw, 2), None)
    assert api.cms[("ns", "rings-config-j")]["data"] == {"hccl.json": "{}"}
    assert api.events == [("Warning", "ForeignConfigMap")]
    await w.sync(wl, _pods(raw, 2), None)
    assert api.events == [("Warning", "ForeignConfigMap")]  # reported once


async def test_configmap_of_another_job_is_not_taken_over() -> None:
    api = MemoryAPI()
    raw_a, wl_a = _job()
    await JobWorker(api=api).sync(wl_a, _pods(raw_a, 2), None)
    raw_b = volcano_job("other", namespace="ns", tasks=[("worker", 1)], uid="b-uid")
    raw_b["spec"]["tasks"][0]["template"]["spec"]["volumes"] = [
        {"name": "rings-config", "configMap": {"name": "rings-config-j"}}
    ]
    wl_b = workload_record(raw_b, label_key=LABEL)
    before = copy.deepcopy(api.cms[("ns", "rings-config-j")])
    w_b = JobWorker(api=api)
    await w_b.sync(wl_b, [], api.record("ns", "rings-config-j"))
    assert api.cms[("ns", "rings-config-j")] == before
    assert w_b.status == "invalid" and ("Warning", "ConfigMapTaken") in api.events


async def test_restarted_worker_adopts_the_written_spec_without_writing() -> None:
    api = MemoryAPI()
    raw, wl = _job()
    await JobWorker(api=api).sync(wl, _pods(raw, 2), None)
    api.calls.clear()
    fresh = JobWorker(api=api)
    await fresh.sync(wl, _pods(raw, 2), api.record("ns", "rings-config-j"))
    assert api.calls == [] and fresh.status == "completed"
    assert api.events == [("Normal", "SpecCompleted")]  # not announced twice


async def test_conflicting_writer_is_retried_on_the_fresh_version() -> None:
    api = MemoryAPI()
    raw, wl = _job()
    w = JobWorker(api=api)
    await w.sync(wl, [], None)
    stale = api.record("ns", "rings-config-j")
    touched = copy.deepcopy(api.cms[("ns", "rings-config-j")])
    touched["metadata"].setdefault("annotations", {})["someone"] = "else"
    api.put("ns", touched)  # a metadata-only change by someone else
    w.written = None  # forget: as after a restart with a stale informer
    await w.sync(wl, _pods(raw, 2), stale)
    assert "update" in api.calls and _spec(api)["status"] == "completed"


@pytest.mark.parametrize("workers", [1, 3])
async def test_epoch_is_stable_across_identical_syncs(workers: int) -> None:
    api = MemoryAPI()
    raw, wl = _job(workers)
    w = JobWorker(api=api)
    for _ in range(3):
        await w.sync(wl, _pods(raw, workers), api.record("ns", "rings-config-j"))
    assert _spec(api)["epoch"] == 1 and api.calls.count("update") + api.calls.count("create") == 1


# Delivery: member pods annotated with the completed epoch ----------------------------------------


def _shown(pods: list[PodRecord], epoch: int) -> list[PodRecord]:
    """The pods as the informer shows them once our annotation landed."""
    return [dataclasses.replace(p, epoch_seen=str(epoch)) for p in pods]


async def test_completed_spec_annotates_every_member_once_with_its_epoch() -> None:
    api = MemoryAPI()
    raw, wl = _job(3)
    w = JobWorker(api=api)
    await w.sync(wl, _pods(raw, 2), None)
    assert api.touches == []  # initializing: nobody to tell
    pods = _pods(raw, 3)
    await w.sync(wl, pods, api.record("ns", "rings-config-j"))
    epoch = _spec(api)["epoch"]
    assert sorted(api.touches) == sorted((p.name, p.uid, {"ring-controller.io/epoch": str(epoch)}) for p in pods)
    api.touches.clear()
    await w.sync(wl, _shown(pods, epoch), api.record("ns", "rings-config-j"))
    assert api.touches == []  # every pod shows the epoch: no call


async def test_a_job_over_the_touch_ceiling_is_not_touched_and_says_so_once_per_epoch() -> None:
    api = MemoryAPI()
    raw, wl = _job(3)
    w = JobWorker(api=api, touch_max_members=2)
    pods = _pods(raw, 3)
    await w.sync(wl, pods, None)
    assert _spec(api)["status"] == "completed" and api.touches == []
    assert api.events[-1] == ("Normal", "TouchSkipped")
    assert api.event_messages[-1].startswith("3 members is over --touch-max-members 2: 3 pods mounting the spec")
    assert value(w.metrics.pod_touches, kind="vcjob", result="skipped") == 3
    await w.sync(wl, pods, api.record("ns", "rings-config-j"))  # the same epoch again: nothing more said
    assert (
        api.events.count(("Normal", "TouchSkipped")) == 1
        and value(w.metrics.pod_touches, kind="vcjob", result="skipped") == 3
    )
    at_ceiling = JobWorker(api=MemoryAPI(), touch_max_members=3)
    await at_ceiling.sync(wl, pods, None)
    assert value(at_ceiling.metrics.pod_touches, kind="vcjob", result="ok") == 3  # at most the ceiling: touched


async def test_a_failed_touch_is_made_again_by_a_later_sync() -> None:
    api = MemoryAPI()
    raw, wl = _job(2)
    w = JobWorker(api=api)
    pods = _pods(raw, 2)
    api.pod_error = {pods[1].name: ApiError(500, "InternalError", "etcd timeout")}
    with pytest.raises(ApiError, match="^500 InternalError: etcd timeout$"):
        await w.sync(wl, pods, None)
    epoch = _spec(api)["epoch"]
    api.touches.clear()
    api.pod_error = {}
    # The informer shows the first pod annotated, the second not: only the second is asked again.
    await w.sync(wl, [*_shown(pods[:1], epoch), pods[1]], api.record("ns", "rings-config-j"))
    assert [t[0] for t in api.touches] == [pods[1].name]


async def test_a_stale_copy_is_not_patched_again_but_a_changed_value_is() -> None:
    api = MemoryAPI()
    raw, wl = _job(2)
    w = JobWorker(api=api)
    pods = _pods(raw, 2)
    await w.sync(wl, pods, None)
    epoch = _spec(api)["epoch"]
    api.touches.clear()
    # An event from before our patch landed still shows no annotation: no second patch.
    await w.sync(wl, pods, api.record("ns", "rings-config-j"))
    assert api.touches == []
    # Someone set another value: the epoch is written back.
    changed = [dataclasses.replace(pods[0], epoch_seen="99"), *_shown(pods[1:], epoch)]
    await w.sync(wl, changed, api.record("ns", "rings-config-j"))
    assert [(t[0], t[2]) for t in api.touches] == [(pods[0].name, {"ring-controller.io/epoch": str(epoch)})]


async def test_a_replacement_gets_the_new_epoch_and_the_survivor_too() -> None:
    api = MemoryAPI()
    raw, wl = _job(2)
    w = JobWorker(api=api)
    pods = _pods(raw, 2)
    await w.sync(wl, pods, None)
    first = _spec(api)["epoch"]
    replaced = [_shown(pods, first)[0], _pods(raw, 2, base=10)[1]]
    api.touches.clear()
    await w.sync(wl, replaced, api.record("ns", "rings-config-j"))
    second = _spec(api)["epoch"]
    assert second > first
    assert sorted(api.touches) == sorted((p.name, p.uid, {"ring-controller.io/epoch": str(second)}) for p in replaced)


async def test_a_member_that_does_not_mount_the_spec_is_not_touched() -> None:
    # API-mode launchers (ring-launch --from-api) read the ConfigMap through the API server:
    # a kubelet sync brings them nothing, so a touch would only cost a write.
    api = MemoryAPI()
    raw, wl = _job(2, mounted=False)
    await JobWorker(api=api).sync(wl, _pods(raw, 2), None)
    assert _spec(api)["status"] == "completed" and api.touches == []
    mounted_raw, _ = _job(2)
    one_mounts = [_pods(mounted_raw, 2)[0], _pods(raw, 2)[1]]
    api = MemoryAPI()
    await JobWorker(api=api).sync(wl, one_mounts, None)
    assert [t[0] for t in api.touches] == [one_mounts[0].name]


async def test_no_touch_pods_writes_nothing_to_pods() -> None:
    api = MemoryAPI()
    raw, wl = _job(2)
    w = JobWorker(api=api, touch_pods=False)
    await w.sync(wl, _pods(raw, 2), None)
    assert _spec(api)["status"] == "completed" and api.touches == []


async def test_forbidden_touch_is_counted_once_and_not_retried_for_that_epoch() -> None:
    api = MemoryAPI()
    raw, wl = _job(2)
    pods = _pods(raw, 2)
    api.pod_error = {p.name: ApiError(403, "Forbidden", "forbidden") for p in pods}
    w = JobWorker(api=api)
    forbidden = w.metrics.pod_touches.labels("vcjob", "forbidden")
    before = forbidden._value.get()
    decision = await w.sync(wl, pods, None)  # does not raise: the spec is written, delivery falls back
    assert decision.spec.status == "completed" and _spec(api)["status"] == "completed"
    assert forbidden._value.get() - before == 2
    await w.sync(wl, pods, api.record("ns", "rings-config-j"))
    assert forbidden._value.get() - before == 2  # not asked again for this epoch


async def test_gone_member_is_skipped_and_other_failures_raise_for_a_retry() -> None:
    api = MemoryAPI()
    raw, wl = _job(2)
    pods = _pods(raw, 2)
    api.pod_error = {
        pods[0].name: NotFound(404, "NotFound", "gone"),
        pods[1].name: Conflict(409, "Conflict", "uid precondition"),
    }
    w = JobWorker(api=api)
    await w.sync(wl, pods, None)  # both skipped without raising
    api.pod_error = {pods[0].name: ApiError(500, "InternalError", "etcd timeout")}
    with pytest.raises(ApiError, match="^500 InternalError: etcd timeout$"):
        await w.sync(wl, pods, api.record("ns", "rings-config-j"))
    assert [t[0] for t in api.touches] == [pods[1].name]  # the other pod was still annotated


async def test_replace_of_a_configmap_deleted_under_us_falls_back_to_create() -> None:
    api = MemoryAPI()
    raw, wl = _job()
    w = JobWorker(api=api)
    await w.sync(wl, [], None)
    stale = api.record("ns", "rings-config-j")  # the informer still shows it ...
    del api.cms[("ns", "rings-config-j")]  # ... but it is gone from the server
    before = value(w.metrics.configmap_writes, kind="vcjob", verb="update", result="not_found")
    await w.sync(wl, _pods(raw, 2), stale)
    assert api.calls == ["create", "update", "create"]
    assert _spec(api)["status"] == "completed" and w.status == "completed"
    assert value(w.metrics.configmap_writes, kind="vcjob", verb="update", result="not_found") == before + 1
    assert w.written is not None and w.written.uid == api.cms[("ns", "rings-config-j")]["metadata"]["uid"]


async def test_gives_up_after_the_conflict_limit_without_claiming_a_write() -> None:
    api = MemoryAPI()
    raw, wl = _job()
    w = JobWorker(api=api)
    await w.sync(wl, [], None)
    written = w.written
    api.fail["update"] = [Conflict(409, "Conflict", "the object has been modified")] * (MAX_CONFLICTS + 5)
    with pytest.raises(RuntimeError, match=f"still conflicting after {MAX_CONFLICTS} attempts"):
        await w.sync(wl, _pods(raw, 2), api.record("ns", "rings-config-j"))
    assert api.calls.count("update") == MAX_CONFLICTS  # bounded: the queue's backoff takes over
    assert api.calls.count("get") == MAX_CONFLICTS  # each conflict re-read the server's copy
    assert w.written == written and w.status == "initializing"
    assert _spec(api)["status"] == "initializing"


async def test_conflicts_below_the_limit_are_absorbed() -> None:
    api = MemoryAPI()
    raw, wl = _job()
    w = JobWorker(api=api)
    await w.sync(wl, [], None)
    api.fail["update"] = [Conflict(409, "Conflict", "the object has been modified")] * (MAX_CONFLICTS - 1)
    await w.sync(wl, _pods(raw, 2), api.record("ns", "rings-config-j"))
    assert api.calls.count("update") == MAX_CONFLICTS and _spec(api)["status"] == "completed"


async def test_a_zero_member_workload_never_completes() -> None:
    api = MemoryAPI()
    raw, wl = _job(0)
    assert wl.expected == 0
    w = JobWorker(api=api)
    for _ in range(2):
        await w.sync(wl, _pods(raw, 2), api.record("ns", "rings-config-j"))  # stray pods change nothing
    assert _spec(api)["status"] == "initializing" and _spec(api)["members"] == []
    assert w.status == "initializing" and ("Normal", "SpecCompleted") not in api.events
