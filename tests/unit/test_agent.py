"""The agent's routing and bookkeeping around its per-job workers.

The caches are plain dicts here (the lookups the daemon passes in read its
informers); the ConfigMap verbs go to ``MemoryAPI``. What is tested is what
only a cluster exercised before: a deleted workload's worker is forgotten and
the jobs gauge follows, and an invalid job is looked at again after
``RECHECK_INVALID_SECONDS`` because what blocks it may go away unseen.
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from agent.agent import DONE, RECHECK_INVALID_SECONDS, Agent, Result
from agent.decide import JOB_STATUSES
from model import lws
from model.configmap import configmap_body, configmap_record
from model.kinds import KINDS, OTHER_KIND, label_values, short_name
from model.pod import pod_record
from model.records import ConfigMapRecord, JobKey, ObjectKey, PodRecord, WorkloadRecord
from model.volcano import workload_record
from tests.support.factories import leader_worker_set, lws_pod, volcano_job, volcano_pod
from tests.support.memoryapi import MemoryAPI
from tests.support.metricvalue import value

Json = dict[str, Any]
LABEL = "ring-controller.atlas"


class Caches:
    """What the informers would hold, and what the agent asked to be queued."""

    def __init__(self, api: MemoryAPI) -> None:
        self.api = api
        self.workloads: dict[JobKey, WorkloadRecord] = {}
        self.pods: dict[JobKey, list[PodRecord]] = {}
        self.enqueued: list[JobKey] = []

    def configmap(self, key: ObjectKey) -> ConfigMapRecord | None:
        namespace, name = key.split("/", 1)
        raw = self.api.cms.get((namespace, name))
        record = configmap_record(raw) if raw else None
        return record if record is not None and record.managed else None  # the informer's label selector

    def agent(self) -> Agent:
        return Agent(
            api=self.api,
            enqueue=self.enqueued.append,
            workload=self.workloads.get,
            pods=lambda key: self.pods.get(key, []),
            configmap=self.configmap,
        )


def _job(name: str, workers: int = 2) -> tuple[Json, WorkloadRecord]:
    raw = volcano_job(name, namespace="ns", tasks=[("worker", workers)], uid=f"{name}-uid")
    return raw, workload_record(raw, label_key=LABEL)


def _running(raw: Json, n: int) -> list[PodRecord]:
    name = raw["metadata"]["name"]
    return [
        pod_record(volcano_pod(raw, task="worker", index=i, uid=f"{name}-p{i}", ip=f"127.1.0.{i + 1}", phase="Running"))
        for i in range(n)
    ]


def jobs(agent: Agent, status: str, *, kind: str = "vcjob") -> float:
    return value(agent.metrics.jobs, kind=kind, status=status)


async def test_a_deleted_workloads_worker_is_forgotten_and_its_gauge_decremented() -> None:
    caches = Caches(MemoryAPI())
    agent = caches.agent()
    raw, wl = _job("gone")
    caches.workloads[wl.key], caches.pods[wl.key] = wl, _running(raw, 2)
    before = jobs(agent, "completed")
    await agent.sync(wl.key)
    assert agent.status(wl.key) == "completed" and jobs(agent, "completed") == before + 1
    del caches.workloads[wl.key]
    assert await agent.sync(wl.key) is DONE
    assert agent.status(wl.key) is None
    assert jobs(agent, "completed") == before
    await agent.sync(wl.key)  # a second delete event: nothing left to count down
    assert jobs(agent, "completed") == before


async def test_the_gauge_moves_with_the_status() -> None:
    caches = Caches(MemoryAPI())
    agent = caches.agent()
    raw, wl = _job("moving")
    caches.workloads[wl.key] = wl
    init, done = jobs(agent, "initializing"), jobs(agent, "completed")
    await agent.sync(wl.key)
    assert (jobs(agent, "initializing"), jobs(agent, "completed")) == (init + 1, done)
    caches.pods[wl.key] = _running(raw, 2)
    await agent.sync(wl.key)
    assert (jobs(agent, "initializing"), jobs(agent, "completed")) == (init, done + 1)


async def test_an_invalid_job_is_looked_at_again_after_a_minute() -> None:
    api = MemoryAPI()
    caches = Caches(api)
    agent = caches.agent()
    raw, wl = _job("blocked")
    api.put("ns", {"metadata": {"name": wl.configmap, "namespace": "ns"}, "data": {"x": "y"}})  # foreign
    caches.workloads[wl.key], caches.pods[wl.key] = wl, _running(raw, 2)
    result = await agent.sync(wl.key)
    assert agent.status(wl.key) == "invalid"
    assert result == Result(requeue_after=60.0) == Result.after(RECHECK_INVALID_SECONDS) and not result.done
    # The owner deletes its ConfigMap (no event this controller watches): the recheck completes it.
    del api.cms[("ns", wl.configmap)]
    assert await agent.sync(wl.key) is DONE  # a valid job is not rechecked
    assert agent.status(wl.key) == "completed"


async def test_a_valid_job_asks_for_no_recheck() -> None:
    caches = Caches(MemoryAPI())
    agent = caches.agent()
    raw, wl = _job("fine")
    caches.workloads[wl.key] = wl
    assert await agent.sync(wl.key) is DONE  # initializing: the pods' events bring it back
    caches.pods[wl.key] = _running(raw, 2)
    assert await agent.sync(wl.key) is DONE
    assert agent.status(wl.key) == "completed"


@pytest.mark.parametrize(
    ("old", "new", "queued"),
    [
        pytest.param(None, "a", True, id="added"),
        pytest.param("a", "a", False, id="unchanged"),
        pytest.param("a", None, True, id="deleted"),
    ],
)
def test_workload_events_only_enqueue_on_change(old: str | None, new: str | None, queued: bool) -> None:
    api = MemoryAPI()
    caches = Caches(api)
    agent = caches.agent()
    _, wl = _job("ev")
    records = {"a": wl}
    agent.on_workload(records.get(old or ""), records.get(new or ""))
    assert caches.enqueued == ([wl.key] if queued else [])
    assert api.calls == []  # handlers never call the API


def test_a_pod_moving_between_jobs_enqueues_both() -> None:
    caches = Caches(MemoryAPI())
    agent = caches.agent()
    raw_a, _ = _job("a")
    raw_b, _ = _job("b")
    (pa,), (pb,) = _running(raw_a, 1), _running(raw_b, 1)
    agent.on_pod(pa, pb)
    assert pa.job is not None and pb.job is not None and pa.job != pb.job
    assert sorted(caches.enqueued) == sorted([pa.job, pb.job])


def test_configmap_events_enqueue_their_job() -> None:
    caches = Caches(MemoryAPI())
    agent = caches.agent()
    _, wl = _job("cm")
    body = configmap_body(
        namespace="ns", name=wl.configmap, job=wl.key, owner=wl.owner_reference(), data={"cluster.json": "{}"}
    )
    record = configmap_record(body)
    agent.on_configmap(None, record)
    agent.on_configmap(record, record)  # a resync: no change, no work
    assert caches.enqueued == [wl.key]


@pytest.mark.parametrize("seconds", [0.0, -1.0, float("nan")], ids=["zero", "negative", "nan"])
def test_a_requeue_needs_a_positive_delay(seconds: float) -> None:
    with pytest.raises(ValueError, match="requeue_after must be positive"):
        Result.after(seconds)


def test_done_is_the_default_result() -> None:
    assert DONE == Result() and DONE.done and DONE.requeue_after is None
    assert Result.after(0.5).requeue_after == 0.5 and not Result.after(0.5).done


def test_each_agent_counts_on_its_own_registry_and_nothing_is_registered_at_import() -> None:
    from prometheus_client import REGISTRY as DEFAULT

    from agent.metrics import AgentMetrics

    a, b = Caches(MemoryAPI()).agent(), Caches(MemoryAPI()).agent()
    a.metrics.jobs.labels("vcjob", "completed").inc()
    assert (jobs(a, "completed"), jobs(b, "completed")) == (1.0, 0.0)
    assert a.events.metrics is a.metrics  # the agent's Events count where the agent does
    assert DEFAULT.get_sample_value("ringcontroller_jobs", {"kind": "vcjob", "status": "completed"}) is None
    registry = CollectorRegistry()
    AgentMetrics(registry)
    assert {(k, st): registry.get_sample_value("ringcontroller_jobs", {"kind": k, "status": st})
            for k in label_values() for st in JOB_STATUSES} == {(k, st): 0.0 for k in label_values() for st in JOB_STATUSES}  # fmt: skip
    # The latency histogram too: a series born at its first observation shows Prometheus no increase.
    assert {k: registry.get_sample_value("ringcontroller_spec_latency_seconds_count", {"kind": k}) for k in label_values()} == {
        k: 0.0 for k in label_values()
    }  # fmt: skip


async def test_each_per_job_metric_says_the_kind_of_its_workload() -> None:
    """A Volcano Job and a LeaderWorkerSet's group: counted apart, under their kinds' short names."""
    caches = Caches(MemoryAPI())
    agent = caches.agent()
    raw, vc = _job("vc")
    caches.workloads[vc.key], caches.pods[vc.key] = vc, _running(raw, 2)
    lws_raw = leader_worker_set("llm", replicas=1, size=2, namespace="ns", uid="llm-uid")
    (group,) = [lws.workload_record(lws_raw, label_key=LABEL).for_group(0)]
    caches.workloads[group.key] = group
    caches.pods[group.key] = [
        pod_record(lws_pod(lws_raw, group=0, worker=w, ip=f"127.2.0.{w + 1}", phase="Running")) for w in range(2)
    ]
    for key in (vc.key, group.key):
        await agent.sync(key)
    assert {k: jobs(agent, "completed", kind=k) for k in label_values()} == {
        k: (1.0 if k in ("vcjob", "lws") else 0.0) for k in label_values()
    }
    for kind in ("vcjob", "lws"):
        assert value(agent.metrics.configmap_writes, kind=kind, verb="create", result="ok") == 1.0
        assert value(agent.metrics.events, kind=kind, type="Normal", reason="SpecCompleted") == 1.0


def test_the_kind_label_is_bounded_by_the_kinds_served() -> None:
    assert short_name(api_version="leaderworkerset.x-k8s.io/v1", kind="LeaderWorkerSet") == "lws"
    assert short_name(api_version="batch/v1", kind="Job") == "job"
    assert short_name(api_version="batch.volcano.sh/v1alpha1", kind="Job") == "vcjob"  # same kind, another group
    assert short_name(api_version="example.com/v1", kind="Anything") == OTHER_KIND
    assert label_values() == (*(k.short for k in KINDS), OTHER_KIND)
