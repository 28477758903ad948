"""PodGroups (scheduling.k8s.io/v1beta1) on plain JSON: the member count, where ranks come from, bad input,
and the routing of a pod that names a group beside its own workload."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.agent import DONE, UNSERVED_GRACE_SECONDS, Agent, Result
from agent.decide import decide, explain
from model import indexedjob, podgroup
from model import statefulset as sts_model
from model.kinds import BY_SHORT, KINDS
from model.pod import as_group_member, job_pods, pod_record
from model.records import JobKey, PodRecord, WorkloadRecord
from model.serving import serving_workload
from tests.support.factories import (
    group_pod,
    indexed_job,
    job_pod,
    leader_worker_set,
    lws_pod,
    pod_group,
    statefulset,
    statefulset_pod,
)
from tests.support.memoryapi import MemoryAPI
from tests.support.metricvalue import value

Json = dict[str, Any]
LABEL = "ring-controller.atlas"
KEY = JobKey("pg/default/tf")
EXAMPLE = "build/examples/podgroup/tf-podgroup.yaml"


def record(raw: Json) -> WorkloadRecord:
    return podgroup.workload_record(raw, label_key=LABEL)


def running(name: str, rank: int | str | None, n: int, *, group: str = "tf") -> PodRecord:
    return pod_record(group_pod(group, name, rank=rank, ip=f"127.1.0.{n}", phase="Running"))


def members(pods: list[PodRecord]) -> list[PodRecord]:
    return job_pods(KEY, pods)


# The group itself -----------------------------------------------------------------


def test_a_gang_podgroup_expects_its_min_count_and_owns_no_pod() -> None:
    rec = record(pod_group("tf", 4, uid="pg-uid"))
    assert (rec.key, rec.kind, rec.api_version) == (KEY, "PodGroup", "scheduling.k8s.io/v1beta1")
    assert rec.expected == 4 and rec.error is None and rec.served and not rec.owns_pods
    assert rec.configmap == "rings-config-tf"
    assert BY_SHORT["pg"] in KINDS and (BY_SHORT["pg"].group, BY_SHORT["pg"].plural) == (
        "scheduling.k8s.io",
        "podgroups",
    )


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (pod_group("tf", basic=True), "basic scheduling"),
        (pod_group("tf", 0), "minCount 0"),
        (pod_group("tf", None), "minCount None"),
        ({**pod_group("tf"), "spec": {"schedulingPolicy": {"gang": {"minCount": "3"}}}}, "minCount '3'"),
        ({**pod_group("tf"), "spec": {}}, "no gang"),
    ],
    ids=["basic", "zero", "absent", "a string", "no policy"],
)
def test_a_group_without_a_positive_gang_count_is_invalid_and_nothing_is_written(raw: Json, says: str) -> None:
    rec = record(raw)
    assert rec.error is not None and says in rec.error
    d = decide(rec, [running("a", 0, 1)], previous=None)
    assert d.data is None and d.problems[0].reason == "invalid_workload"


def test_a_changed_min_count_is_a_new_member_count_hence_a_new_epoch() -> None:
    pods = members([running(f"p{i}", i, i + 1) for i in range(3)])
    two = decide(record(pod_group("tf", 2)), pods[:2], previous=None)
    assert two.spec.status == "completed"
    three = decide(record(pod_group("tf", 3)), pods, previous=two.spec)
    assert three.spec.status == "completed" and three.spec.epoch == two.spec.epoch + 1


# Where a member's rank comes from ---------------------------------------------------


def test_pods_made_by_hand_are_ranked_by_their_rank_annotation_not_by_name_or_arrival() -> None:
    # Names sort against the ranks; the pods arrive in yet another order.
    pods = [running("zeta", 0, 1), running("alpha", 2, 3), running("mid", 1, 2)]
    d = decide(record(pod_group("tf", 3)), members(pods), previous=None)
    assert d.spec.status == "completed"
    assert [(m.rank, m.pod, m.ip) for m in d.spec.members] == [
        (0, "zeta", "127.1.0.1"),
        (1, "mid", "127.1.0.2"),
        (2, "alpha", "127.1.0.3"),
    ]
    assert d.spec.job.kind == "PodGroup"


def _in_group(raw: Json, group: str = "tf") -> Json:
    raw["spec"]["schedulingGroup"] = {"podGroupName": group}
    return raw


def test_a_job_pod_is_ranked_by_its_completion_index_even_with_a_rank_annotation() -> None:
    job = indexed_job("train", 2, uid="job-uid")
    raw = _in_group(job_pod(job, index=1))
    raw["metadata"]["annotations"]["ring-controller.io/rank"] = "0"
    pod = pod_record(raw)
    assert (pod.job, pod.index, pod.group, pod.group_index) == ("job/default/train", 1, KEY, 1)
    assert pod.job_keys == ("job/default/train", KEY)


def test_a_statefulset_pod_is_ranked_by_its_ordinal_label() -> None:
    pod = pod_record(_in_group(statefulset_pod(statefulset("db", 3, uid="sts-uid"), ordinal=2)))
    assert (pod.group, pod.group_index) == (KEY, 2)


def test_an_lws_leader_is_ranked_by_its_worker_index_not_its_statefulset_ordinal() -> None:
    lws = leader_worker_set("serve", replicas=4, size=2, uid="lws-uid")
    leader = pod_record(_in_group(lws_pod(lws, group=3, worker=0)))  # the leader StatefulSet's ordinal 3
    worker = pod_record(_in_group(lws_pod(lws, group=3, worker=1)))
    assert (leader.group_index, worker.group_index) == (0, 1)


def test_a_known_owner_without_its_label_falls_back_to_the_rank_annotation() -> None:
    raw = _in_group(statefulset_pod(statefulset("db", 3, uid="sts-uid"), ordinal=2, index_label=False))
    assert pod_record(raw).group_index is None
    raw["metadata"]["annotations"] = {"ring-controller.io/rank": "1"}
    assert pod_record(raw).group_index == 1


@pytest.mark.parametrize("rank", ["-1", "one", "1.0", ""], ids=["negative", "a word", "a float", "empty"])
def test_a_malformed_rank_is_no_rank(rank: str) -> None:
    assert running("a", rank, 1).group_index is None


def test_a_pod_that_names_no_group_has_no_second_job() -> None:
    pod = pod_record(job_pod(indexed_job("train", 2, uid="job-uid"), index=0))
    assert pod.group is None and pod.job_keys == ("job/default/train",)
    assert as_group_member(pod) is pod


def test_as_a_group_member_a_pod_is_the_groups_without_an_owner_or_version_to_compare() -> None:
    pod = pod_record(_in_group(job_pod(indexed_job("train", 2, uid="job-uid"), index=1)))
    member = as_group_member(pod)
    assert (member.job, member.task, member.index, member.owner_uid, member.version) == (KEY, "worker", 1, None, None)
    # Under its own Job's key the pod stays the Job's.
    assert job_pods(JobKey("job/default/train"), [pod]) == [pod]


# Bad input: a clear reason, nothing wrong written ----------------------------------


def test_a_pod_without_a_rank_fills_no_slot_and_the_job_says_where_a_rank_comes_from() -> None:
    rec = record(pod_group("tf", 2))
    d = decide(rec, members([running("a", 0, 1), running("b", None, 2)]), previous=None)
    assert d.spec.status == "initializing" and d.spec.members == ()
    (problem,) = d.problems
    assert problem.reason == "missing_index"
    assert "b" in problem.message and "ring-controller.io/rank" in problem.message


def test_two_pods_with_one_rank_count_neither() -> None:
    rec = record(pod_group("tf", 2))
    d = decide(rec, members([running("a", 0, 1), running("b", 1, 2), running("c", 1, 3)]), previous=None)
    assert d.spec.status == "initializing"
    assert [p.reason for p in d.problems] == ["duplicate_index"]
    assert "b, c" in d.problems[0].message


def test_a_rank_beyond_the_min_count_is_reported_and_fills_no_slot() -> None:
    rec = record(pod_group("tf", 2))
    d = decide(rec, members([running("a", 0, 1), running("b", 2, 2)]), previous=None)
    assert d.spec.status == "initializing"
    (problem,) = d.problems
    assert problem.reason == "index_out_of_range" and "b (index 2)" in problem.message
    ignored = explain(rec, members([running("a", 0, 1), running("b", 2, 2)]), previous=None).ignored
    assert {i.pod.name: i.reason for i in ignored} == {"b": "index 2 is beyond task worker's 2 replicas"}


def test_a_finished_pod_beyond_the_count_is_no_bad_input() -> None:
    rec = record(pod_group("tf", 1))
    done = replace(running("old", 1, 2), phase="Succeeded")
    d = decide(rec, members([running("a", 0, 1), done]), previous=None)
    assert d.spec.status == "completed" and d.problems == ()


def test_other_kinds_keep_pods_beyond_their_count_quiet() -> None:
    # A StatefulSet's pods past replicas after a scale down are no bad input: only a PodGroup is strict.
    sts = statefulset("db", 2, uid="sts-uid")
    rec = sts_model.workload_record(sts, label_key=LABEL)
    pods = [pod_record(statefulset_pod(sts, ordinal=i, ip=f"127.1.0.{i + 1}", phase="Running")) for i in range(3)]
    d = decide(rec, pods, previous=None)
    assert d.spec.status == "completed" and d.problems == ()


def test_the_group_serves_its_own_key_and_nothing_else() -> None:
    rec = record(pod_group("tf", 2))
    found = serving_workload(
        KEY,
        lookup=lambda kind, name: rec if kind.short == "pg" and name == "default/tf" else None,
        runtime_nodes=lambda _: None,
    )
    assert found == rec


# The agent: a pod naming a group that nothing serves ---------------------------------


class Caches:
    def __init__(self) -> None:
        self.api = MemoryAPI()
        self.workloads: dict[JobKey, WorkloadRecord] = {}
        self.pods: dict[JobKey, list[PodRecord]] = {}
        self.now = 1000.0

    def agent(self) -> Agent:
        return Agent(
            api=self.api,
            enqueue=lambda _key: None,
            workload=self.workloads.get,
            pods=lambda key: self.pods.get(key, []),
            configmap=lambda _key: None,
            clock=lambda: self.now,
        )


async def test_a_pod_naming_an_unserved_group_gets_one_warning_and_a_metric_and_nothing_is_written() -> None:
    caches = Caches()
    caches.pods[KEY] = [running("a", 0, 1), running("b", 1, 2)]
    agent = caches.agent()
    # At first sight nothing: the group may just not have reached the cache yet; look again later.
    assert await agent.sync(KEY) == Result.after(UNSERVED_GRACE_SECONDS)
    caches.now += UNSERVED_GRACE_SECONDS - 1
    assert await agent.sync(KEY) == Result.after(1)
    await agent.events.drain()
    assert caches.api.events == []
    caches.now += 1
    assert await agent.sync(KEY) == DONE
    assert await agent.sync(KEY) == DONE  # the same pods again: reported once
    await agent.events.drain()
    assert caches.api.events == [("Warning", "PodGroupNotServed")] * 2
    assert all("names PodGroup tf" in m for m in caches.api.event_messages)
    assert value(agent.metrics.invalid_inputs, kind="pg", reason="podgroup_not_served") == 2
    assert caches.api.cms == {}


async def test_a_pod_served_by_its_own_workload_may_name_an_unlabelled_group() -> None:
    # The Job controller's own PodGroups (WorkloadWithJob) carry no labels: the labelled Job serves its pods.
    caches = Caches()
    job = indexed_job("train", 1, uid="job-uid")
    caches.workloads[JobKey("job/default/train")] = indexedjob.workload_record(job, label_key=LABEL)
    caches.pods[KEY] = [pod_record(_in_group(job_pod(job, index=0, ip="127.1.0.1", phase="Running")))]
    agent = caches.agent()
    assert await agent.sync(KEY) == DONE
    caches.now += UNSERVED_GRACE_SECONDS
    assert await agent.sync(KEY) == DONE
    await agent.events.drain()
    assert caches.api.events == []


async def test_a_group_that_arrives_within_the_grace_serves_its_pods_and_nothing_is_reported() -> None:
    caches = Caches()
    caches.pods[KEY] = [running("b", 1, 2), running("a", 0, 1)]
    agent = caches.agent()
    await agent.sync(KEY)  # the pods first
    caches.now += 1
    caches.workloads[KEY] = record(pod_group("tf", 2, uid="pg-uid"))  # then the group
    assert await agent.sync(KEY) == DONE
    caches.now += UNSERVED_GRACE_SECONDS
    await agent.events.drain()
    assert caches.api.events == [("Normal", "SpecCompleted")]


async def test_a_labelled_group_completes_its_spec_from_its_pods() -> None:
    caches = Caches()
    caches.workloads[KEY] = record(pod_group("tf", 2, uid="pg-uid"))
    caches.pods[KEY] = [running("b", 1, 2), running("a", 0, 1)]
    agent = caches.agent()
    await agent.sync(KEY)
    await agent.events.drain()
    assert agent.status(KEY) == "completed"
    assert ("default", "rings-config-tf") in caches.api.cms


def test_the_shipped_example_is_one_valid_group_whose_pods_rank_0_and_1_and_mount_its_configmap() -> None:
    docs = list(yaml.safe_load_all((Path(__file__).resolve().parents[2] / EXAMPLE).read_text()))
    group, *pods = docs
    group["metadata"]["namespace"] = "ml"
    rec = record(group)
    assert rec.error is None and rec.expected == 2 and rec.key == "pg/ml/tf-gang"
    records = []
    for i, raw in enumerate(pods):
        raw["metadata"]["namespace"] = "ml"
        raw["status"] = {"phase": "Running", "podIP": f"127.1.0.{i + 1}"}
        pod = pod_record(raw)
        assert pod.mounts == (rec.configmap,)
        records.append(pod)
    d = decide(rec, job_pods(rec.key, records), previous=None)
    assert d.spec.status == "completed"
    assert [(m.rank, m.pod, m.port) for m in d.spec.members] == [
        (0, "tf-gang-chief", 2222),
        (1, "tf-gang-worker", 2222),
    ]


def test_a_job_whose_template_names_a_labelled_group_is_served_through_the_group() -> None:
    job = indexed_job("train", 2, uid="job-uid")
    job["spec"]["template"]["spec"]["schedulingGroup"] = {"podGroupName": "tf"}
    job_rec = indexedjob.workload_record(job, label_key=LABEL)
    assert job_rec.in_group == KEY
    group = record(pod_group("tf", 2, uid="pg-uid"))
    cached: dict[tuple[str, str], WorkloadRecord] = {("job", "default/train"): job_rec}

    def serve(key: str) -> WorkloadRecord | None:
        return serving_workload(
            JobKey(key), lookup=lambda kind, name: cached.get((kind.short, name)), runtime_nodes=lambda _: None
        )

    assert serve("job/default/train") == job_rec  # the group is not a job (absent or unlabelled)
    cached[("pg", "default/tf")] = group
    assert serve("job/default/train") is None  # the labelled group is the job
    assert serve("pg/default/tf") == group
    # A StatefulSet too.
    sts = statefulset("db", 2, uid="sts-uid")
    sts["spec"]["template"]["spec"]["schedulingGroup"] = {"podGroupName": "tf"}
    cached[("sts", "default/db")] = sts_model.workload_record(sts, label_key=LABEL)
    assert serve("sts/default/db") is None
