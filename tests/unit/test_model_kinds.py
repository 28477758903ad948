"""JobSet, TrainJob and Deployment models, and ranks across Jobs, on plain JSON."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from agent.decide import decide
from model import deployment, jobset, trainjob
from model.kinds import WorkloadKind
from model.pod import pod_record
from model.records import JobKey, WorkloadRecord
from model.serving import serving_workload
from tests.support.factories import jobset as make_jobset
from tests.support.factories import jobset_pod

LABEL = "ring-controller.atlas"


def test_jobset_expected_is_replicas_times_parallelism() -> None:
    rec = jobset.workload_record(make_jobset("js", replicated=[("driver", 1, 1), ("workers", 2, 3)]), label_key=LABEL)
    assert rec is not None
    assert [(t.name, t.replicas, t.per_job) for t in rec.tasks] == [("driver", 1, 1), ("workers", 6, 3)]
    assert rec.expected == 7 and rec.key == "jobset/default/js"


def test_jobset_owned_by_a_trainjob_is_served_through_it() -> None:
    js = make_jobset(
        "tj", owner={"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "tj", "uid": "u"}
    )
    rec = jobset.workload_record(js, label_key=LABEL)
    assert not rec.served and rec.key == "jobset/default/tj"


def test_jobset_ranks_by_replicated_job_then_job_index_then_completion_index() -> None:
    js = make_jobset("js", replicated=[("driver", 1, 1), ("workers", 2, 2)], uid="js-uid")
    rec = jobset.workload_record(js, label_key=LABEL)
    assert rec is not None
    layout = [("workers", 1, 1), ("workers", 0, 1), ("driver", 0, 0), ("workers", 1, 0), ("workers", 0, 0)]
    pods = [
        pod_record(jobset_pod(js, rjob=r, job_index=j, completion=c, ip=f"127.1.0.{n + 1}", phase="Running"))
        for n, (r, j, c) in enumerate(layout)
    ]
    d = decide(rec, pods, previous=None)
    assert d.spec.status == "completed"
    got = [(m.task, m.index, m.pod.rsplit("-", 2)[0]) for m in d.spec.members]
    assert got == [
        ("driver", 0, "js-driver-0"),
        ("workers", 0, "js-workers-0"),
        ("workers", 1, "js-workers-0"),
        ("workers", 2, "js-workers-1"),
        ("workers", 3, "js-workers-1"),
    ]


def test_jobset_restart_attempt_is_the_version() -> None:
    js = make_jobset("js", replicated=[("workers", 1, 2)], uid="js-uid")
    js["status"] = {"restarts": 1}
    rec = jobset.workload_record(js, label_key=LABEL)
    assert rec is not None and rec.version == 1
    old = [
        pod_record(
            jobset_pod(js, rjob="workers", job_index=0, completion=c, restart=0, ip="127.1.0.1", phase="Running")
        )
        for c in range(2)
    ]
    new = [
        pod_record(
            jobset_pod(js, rjob="workers", job_index=0, completion=c, restart=1, ip=f"127.1.0.{2 + c}", phase="Running")
        )
        for c in range(2)
    ]
    assert decide(rec, old, previous=None).spec.status == "initializing"
    assert decide(rec, new, previous=None).spec.status == "completed"


@pytest.mark.parametrize(
    "layout",
    [
        pytest.param([(0, c) for c in range(3)], id="one-job-completions=numNodes"),
        pytest.param([(j, 0) for j in range(3)], id="numNodes-jobs-of-one-pod"),
    ],
)
def test_trainjob_ranks_nodes_in_either_trainer_layout(layout: list[tuple[int, int]]) -> None:
    tj = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj", "namespace": "default", "uid": "tj-uid", "labels": {LABEL: "tensorflow"}},
        "spec": {"runtimeRef": {"name": "tensorflow-distributed"}, "trainer": {"numNodes": 3}},
    }
    rec = trainjob.workload_record(tj, label_key=LABEL)
    assert rec.key == "jobset/default/tj" and rec.expected == 3 and not rec.owns_pods
    js = make_jobset("tj", replicated=[("node", 1, 3)], uid="js-uid")
    pods = [
        pod_record(jobset_pod(js, rjob="node", job_index=j, completion=c, ip=f"127.1.0.{10 + j + c}", phase="Running"))
        for j, c in reversed(layout)
    ]
    init = pod_record(
        jobset_pod(
            make_jobset("tj", replicated=[("dataset-initializer", 1, 1)]),
            rjob="dataset-initializer",
            job_index=0,
            completion=0,
            ip="127.1.0.99",
            phase="Running",
        )
    )
    d = decide(rec, [*pods, init], previous=None)
    assert d.spec.status == "completed"
    assert [m.ip for m in d.spec.members] == ["127.1.0.10", "127.1.0.11", "127.1.0.12"]
    assert all(m.role == "worker" for m in d.spec.members)


def test_trainjob_without_numnodes_defers_to_its_runtime() -> None:
    tj = {
        "metadata": {"name": "tj", "namespace": "ns"},
        "spec": {"runtimeRef": {"name": "tf-rt", "kind": "ClusterTrainingRuntime"}},
    }
    rec = trainjob.workload_record(tj, label_key=LABEL)
    assert rec.runtime_ref == "tf-rt" and rec.error is None
    assert trainjob.runtime_nodes({"spec": {"mlPolicy": {"numNodes": 4}}}) == 4
    assert trainjob.runtime_nodes({"spec": {}}) is None
    bad = trainjob.workload_record({**tj, "spec": {"trainer": {"numNodes": "two"}}}, label_key=LABEL)
    assert bad.error is not None and "numNodes" in bad.error


def _trainjob(num_nodes: int | None) -> WorkloadRecord:
    spec: dict[str, Any] = {"runtimeRef": {"name": "tf-rt", "kind": "ClusterTrainingRuntime"}}
    if num_nodes is not None:
        spec["trainer"] = {"numNodes": num_nodes}
    return trainjob.workload_record(
        {"metadata": {"name": "tj", "namespace": "ns", "uid": "tj-uid"}, "spec": spec}, label_key=LABEL
    )


def _owned_jobset(restarts: int) -> WorkloadRecord:
    js = make_jobset(
        "tj",
        namespace="ns",
        owner={"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "tj", "uid": "tj-uid"},
    )
    js["status"] = {"restarts": restarts}
    return jobset.workload_record(js, label_key=LABEL)


@pytest.mark.parametrize(
    ("cached", "runtimes", "expected"),
    [
        ({"jobset": _owned_jobset(2)}, {}, None),
        ({"trainjob": _trainjob(3), "jobset": _owned_jobset(2)}, {}, (3, 2, None)),
        ({"trainjob": _trainjob(3)}, {}, (3, 0, None)),
        ({"trainjob": _trainjob(None), "jobset": _owned_jobset(1)}, {"tf-rt": 4}, (4, 1, None)),
        ({"trainjob": _trainjob(None)}, {}, (0, 0, "ClusterTrainingRuntime tf-rt not found")),
    ],
    ids=[
        "owned-jobset-alone-serves-nothing",
        "trainjob-takes-its-jobsets-restarts",
        "trainjob-before-its-jobset",
        "numnodes-from-the-runtime",
        "runtime-missing-is-an-error",
    ],
)
def test_serving_workload_of_a_trainjob_key(
    cached: dict[str, WorkloadRecord], runtimes: dict[str, int], expected: tuple[int, int, str | None] | None
) -> None:
    def lookup(kind: WorkloadKind, key: str) -> WorkloadRecord | None:
        assert key == "ns/tj"
        return cached.get(kind.short)

    served = serving_workload(JobKey("jobset/ns/tj"), lookup=lookup, runtime_nodes=runtimes.get)
    if expected is None:
        assert served is None
        return
    assert served is not None and served.kind == "TrainJob"
    replicas, version, error = expected
    assert (served.expected, served.version) == (replicas, version)
    assert (served.error or "").startswith(error or "")
    assert (served.error is None) == (error is None)


def test_serving_workload_of_a_plain_jobset_is_the_jobset() -> None:
    rec = jobset.workload_record(make_jobset("js", namespace="ns"), label_key=LABEL)
    served = serving_workload(
        JobKey("jobset/ns/js"),
        lookup=lambda kind, key: rec if kind.short == "jobset" else None,
        runtime_nodes=lambda name: None,
    )
    assert served is rec


def _deploy_pod(name: str, created: str, ip: str, rs: str = "web-5d8f7c9b4") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "creationTimestamp": created,
            "labels": {LABEL: "tensorflow", "pod-template-hash": rs.rsplit("-", 1)[1]},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": "rs-uid", "controller": True}
            ],
        },
        "spec": {"containers": [{"name": "c"}], "nodeName": "n"},
        "status": {"phase": "Running", "podIP": ip, "hostIP": "10.0.0.1"},
    }


def test_deployment_pods_are_found_through_their_replicaset_name() -> None:
    rec = pod_record(_deploy_pod("web-5d8f7c9b4-abcde", "2026-11-29T00:00:01Z", "127.1.0.1"))
    assert rec.job == "deploy/default/web" and rec.index is None
    assert deployment.identify({"name": "x", "labels": {"pod-template-hash": "abc"}, "ownerReferences": []}) is None


def test_deployment_ranks_by_creation_and_replacement_takes_the_last_rank() -> None:
    raw = {
        "metadata": {"name": "web", "namespace": "default", "uid": "d-uid", "labels": {LABEL: "tensorflow"}},
        "spec": {"replicas": 2, "template": {"spec": {}}},
    }
    rec = deployment.workload_record(raw, label_key=LABEL)
    a = pod_record(_deploy_pod("web-5d8f7c9b4-zzzzz", "2026-11-29T00:00:01Z", "127.1.0.1"))
    b = pod_record(_deploy_pod("web-5d8f7c9b4-aaaaa", "2026-11-29T00:00:02Z", "127.1.0.2"))
    first = decide(rec, [b, a], previous=None)
    assert [m.pod for m in first.spec.members] == ["web-5d8f7c9b4-zzzzz", "web-5d8f7c9b4-aaaaa"]
    c = pod_record(_deploy_pod("web-5d8f7c9b4-ccccc", "2026-11-29T00:00:03Z", "127.1.0.3"))
    gone = decide(rec, [b, replace(a, deleting=True)], previous=first.spec)
    assert gone.spec.status == "initializing"
    back = decide(rec, [b, c], previous=gone.spec)
    assert [m.pod for m in back.spec.members] == ["web-5d8f7c9b4-aaaaa", "web-5d8f7c9b4-ccccc"]
    assert back.spec.epoch == first.spec.epoch + 2


def test_evicted_deployment_pod_holds_no_rank() -> None:
    raw = {
        "metadata": {"name": "web", "namespace": "default", "uid": "d-uid", "labels": {LABEL: "tensorflow"}},
        "spec": {"replicas": 1, "template": {"spec": {}}},
    }
    rec = deployment.workload_record(raw, label_key=LABEL)
    evicted = replace(
        pod_record(_deploy_pod("web-5d8f7c9b4-aaaaa", "2026-11-29T00:00:01Z", "127.1.0.1")), phase="Failed"
    )
    fresh = pod_record(_deploy_pod("web-5d8f7c9b4-bbbbb", "2026-11-29T00:00:05Z", "127.1.0.2"))
    d = decide(rec, [evicted, fresh], previous=None)
    assert d.spec.status == "completed" and [m.pod for m in d.spec.members] == ["web-5d8f7c9b4-bbbbb"]


@pytest.mark.parametrize(
    ("labels", "suspend", "says"),
    [
        ({"kueue.x-k8s.io/queue-name": "lq"}, True, "until Kueue admits it from LocalQueue lq"),
        ({}, True, "the JobSet is suspended (spec.suspend): its pods run once it is resumed"),
        ({"kueue.x-k8s.io/queue-name": "lq"}, False, None),
    ],
    ids=["kueue", "by-hand", "admitted"],
)
def test_a_suspended_jobset_or_trainjob_says_why_it_waits(
    labels: dict[str, str], suspend: bool, says: str | None
) -> None:
    js = make_jobset("js")
    js["metadata"]["labels"].update(labels)
    js["spec"]["suspend"] = suspend
    tj = {
        "metadata": {"name": "tj", "namespace": "default", "labels": {LABEL: "tensorflow", **labels}},
        "spec": {"suspend": suspend, "trainer": {"numNodes": 2}},
    }
    for rec, kind in (
        (jobset.workload_record(js, label_key=LABEL), "JobSet"),
        (trainjob.workload_record(tj, label_key=LABEL), "TrainJob"),
    ):
        if says is None:
            assert rec.waiting is None
        else:
            assert rec.waiting is not None and says.replace("JobSet", kind) in rec.waiting
