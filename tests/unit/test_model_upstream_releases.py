"""The models on objects shaped exactly as the releases the dev cluster runs write them.

JobSet v0.12.0, Kubeflow Trainer v2.3.0 and Volcano v1.15.1: the labels and
annotations each controller puts on the pods it creates (JobSet's
``labelAndAnnotateObject`` plus the Job controller's, Volcano's
``createJobPod``), the pod names, and the workload fields each release added
(JobSet's in-place restart attempts and per-Job restarts, Trainer's
``runtimePatches`` in place of ``labels``/``podSpecOverrides``, Volcano's pod
restarts that keep the job version). Plain dicts, written out here rather than
built by the test factories, so a factory that drifts from upstream cannot hide
a model that does too.
"""

from __future__ import annotations

from typing import Any

from agent.decide import decide
from model import jobset, trainjob, volcano
from model.pod import pod_record
from model.records import PodRecord

Json = dict[str, Any]
LABEL = "ring-controller.atlas"
NS = "train"


# --------------------------------------------------------------------------
# JobSet v0.12.0 (and the Job controller of Kubernetes 1.35 under it)


def _jobset_v012(name: str, *, replicated: list[tuple[str, int, int]], status: Json | None = None) -> Json:
    """A JobSet as the API returns it after JobSet's defaulting webhook."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": NS, "uid": f"{name}-uid", "labels": {LABEL: "tensorflow"}},
        "spec": {
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "failurePolicy": {"maxRestarts": 3, "restartStrategy": "Recreate"},
            "successPolicy": {"operator": "All"},
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "replicatedJobs": [
                {
                    "name": rjob,
                    "groupName": "default",
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "parallelism": per_job,
                            "completions": per_job,
                            "completionMode": "Indexed",
                            "backoffLimit": 0,
                            "template": {
                                "metadata": {"labels": {LABEL: "tensorflow"}},
                                "spec": {
                                    "containers": [
                                        {"name": "node", "ports": [{"name": "tf-port", "containerPort": 2222}]}
                                    ]
                                },
                            },
                        }
                    },
                }
                for rjob, replicas, per_job in replicated
            ],
        },
        "status": status or {"restarts": 0, "restartsCountTowardsMax": 0},
    }


def _jobset_pod_v012(
    js: Json,
    *,
    rjob: str,
    job_index: int,
    completion: int,
    global_index: int,
    ip: str,
    restarts: int = 0,
    job_restarts: int | None = None,
    in_place: int | None = None,
    uid: str = "",
    created: str = "2026-12-01T10:00:00Z",
    deleting: bool = False,
) -> Json:
    """A pod of ``js`` as JobSet v0.12.0 and the Job controller label and annotate it."""
    name = js["metadata"]["name"]
    job = f"{name}-{rjob}-{job_index}"
    replicas = {r["name"]: r["replicas"] for r in js["spec"]["replicatedJobs"]}
    jobset_keys = {
        "jobset.sigs.k8s.io/jobset-name": name,
        "jobset.sigs.k8s.io/jobset-uid": js["metadata"]["uid"],
        "jobset.sigs.k8s.io/replicatedjob-name": rjob,
        "jobset.sigs.k8s.io/restart-attempt": str(restarts),
        "jobset.sigs.k8s.io/replicatedjob-replicas": str(replicas[rjob]),
        "jobset.sigs.k8s.io/global-replicas": str(sum(replicas.values())),
        "jobset.sigs.k8s.io/job-index": str(job_index),
        "jobset.sigs.k8s.io/job-key": "3f4c" * 10,
        "jobset.sigs.k8s.io/job-global-index": str(global_index),
        "jobset.sigs.k8s.io/group-name": "default",
        "jobset.sigs.k8s.io/group-replicas": str(sum(replicas.values())),
        "jobset.sigs.k8s.io/job-group-index": str(global_index),
    }
    if job_restarts is not None:  # feature gate RestartJob (alpha, off by default)
        jobset_keys["jobset.sigs.k8s.io/job-restart-attempt"] = str(job_restarts)
    labels = {
        LABEL: "tensorflow",
        **jobset_keys,
        "batch.kubernetes.io/controller-uid": f"{job}-uid",
        "batch.kubernetes.io/job-name": job,
        "controller-uid": f"{job}-uid",
        "job-name": job,
        "batch.kubernetes.io/job-completion-index": str(completion),
        "jobset.sigs.k8s.io/priority": "0",  # JobSet's pod webhook
    }
    annotations = {**jobset_keys, "batch.kubernetes.io/job-completion-index": str(completion)}
    if in_place is not None:  # written by JobSet's in-place restart agent in the pod
        annotations["jobset.sigs.k8s.io/in-place-restart-attempt"] = str(in_place)
    meta: Json = {
        "name": f"{job}-{completion}-x7k2p",
        "generateName": f"{job}-{completion}-",
        "namespace": NS,
        "uid": uid or f"{job}-{completion}-uid",
        "creationTimestamp": created,
        "labels": labels,
        "annotations": annotations,
        "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": f"{job}-uid", "controller": True}
        ],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T10:05:00Z"
    return {
        "metadata": meta,
        "spec": {
            "hostname": f"{job}-{completion}",
            "subdomain": name,
            "containers": [{"name": "node", "ports": [{"name": "tf-port", "containerPort": 2222}]}],
            "nodeName": "kwok-node-0",
        },
        "status": {"phase": "Running", "podIP": ip, "hostIP": "10.0.0.1"},
    }


def _global_index(js: Json, rjob: str, job_index: int) -> int:
    """JobSet's job-global-index: the Jobs of earlier replicated jobs, then this one's index."""
    before = 0
    for r in js["spec"]["replicatedJobs"]:
        if r["name"] == rjob:
            return before + job_index
        before += r["replicas"]
    raise KeyError(rjob)


def _all_raw_v012(js: Json, **kw: Any) -> list[Json]:
    """Every pod of ``js``, in creation order (replicated job, Job, completion index)."""
    pods: list[Json] = []
    for r in js["spec"]["replicatedJobs"]:
        for j in range(r["replicas"]):
            for c in range(r["template"]["spec"]["parallelism"]):
                gi = _global_index(js, r["name"], j)
                ip = f"127.1.0.{len(pods) + 1}"
                pods.append(
                    _jobset_pod_v012(js, rjob=r["name"], job_index=j, completion=c, global_index=gi, ip=ip, **kw)
                )
    return pods


def _all_pods_v012(js: Json, **kw: Any) -> list[PodRecord]:
    return [pod_record(raw) for raw in _all_raw_v012(js, **kw)]


def test_jobset_v012_pod_identity() -> None:
    js = _jobset_v012("js", replicated=[("driver", 1, 1), ("workers", 2, 2)])
    raw = _jobset_pod_v012(js, rjob="workers", job_index=1, completion=1, global_index=2, ip="127.1.0.9", restarts=2)
    identity = jobset.identify(raw["metadata"])
    assert identity is not None
    assert (identity.job, identity.task, identity.job_index, identity.index, identity.version, identity.owner_uid) == (
        "jobset/train/js",
        "workers",
        1,
        1,
        2,
        "js-uid",
    )


def test_jobset_v012_ranks_follow_job_global_index_then_completion_index() -> None:
    js = _jobset_v012("js", replicated=[("driver", 1, 1), ("workers", 2, 2), ("eval", 1, 1)])
    rec = jobset.workload_record(js, label_key=LABEL)
    raw = _all_raw_v012(js)
    d = decide(rec, [pod_record(p) for p in reversed(raw)], previous=None)
    assert d.spec.status == "completed" and len(d.spec.members) == 6
    by_jobset = sorted(
        raw,
        key=lambda p: (
            int(p["metadata"]["labels"]["jobset.sigs.k8s.io/job-global-index"]),
            int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]),
        ),
    )
    assert [m.pod for m in d.spec.members] == [p["metadata"]["name"] for p in by_jobset]
    assert [m.task for m in d.spec.members] == ["driver", "workers", "workers", "workers", "workers", "eval"]


def test_jobset_v012_in_place_restart_keeps_the_members_version_and_epoch() -> None:
    # restartStrategy InPlaceRestart: the pods stay (same uid and IP), the agent
    # in each pod bumps its in-place-restart-attempt annotation, JobSet moves
    # status.currentInPlaceRestartAttempt; status.restarts does not change.
    js = _jobset_v012("js", replicated=[("workers", 1, 3)])
    js["spec"]["failurePolicy"]["restartStrategy"] = "InPlaceRestart"
    rec = jobset.workload_record(js, label_key=LABEL)
    before = decide(rec, _all_pods_v012(js, in_place=0), previous=None)
    assert before.spec.status == "completed"
    js["status"] = {"restarts": 0, "previousInPlaceRestartAttempt": 0, "currentInPlaceRestartAttempt": 1}
    rec = jobset.workload_record(js, label_key=LABEL)
    assert rec.version == 0
    mixed = [*_all_pods_v012(js, in_place=1)[:2], *_all_pods_v012(js, in_place=0)[2:]]
    for pods in (mixed, _all_pods_v012(js, in_place=1)):
        after = decide(rec, pods, previous=before.spec)
        assert after.spec.status == "completed"
        assert after.spec.members == before.spec.members and after.spec.epoch == before.spec.epoch
        assert after.data == before.data


def test_jobset_v012_recreated_job_replaces_its_pods_at_the_same_restart_attempt() -> None:
    # failure policy action RestartJob (feature gate RestartJob): one Job is
    # recreated, its pods get job-restart-attempt 1 while restart-attempt (the
    # JobSet's restarts, our version) stays 0.
    js = _jobset_v012("js", replicated=[("workers", 2, 1)])
    rec = jobset.workload_record(js, label_key=LABEL)
    first = decide(rec, _all_pods_v012(js, job_restarts=0), previous=None)
    old, keep = _all_pods_v012(js, job_restarts=0)
    leaving = pod_record(
        _jobset_pod_v012(
            js, rjob="workers", job_index=0, completion=0, global_index=0, ip=old.ip, job_restarts=0, deleting=True
        )
    )
    fresh = pod_record(
        _jobset_pod_v012(
            js,
            rjob="workers",
            job_index=0,
            completion=0,
            global_index=0,
            ip="127.1.0.77",
            job_restarts=1,
            uid="js-workers-0-0-uid-2",
            created="2026-12-01T10:06:00Z",
        )
    )
    during = decide(rec, [leaving, keep], previous=first.spec)
    assert during.spec.status == "initializing"
    after = decide(rec, [leaving, fresh, keep], previous=during.spec)
    assert after.spec.status == "completed" and after.spec.job.version == 0
    assert [m.ip for m in after.spec.members] == ["127.1.0.77", keep.ip]
    assert after.spec.epoch == first.spec.epoch + 2


def test_jobset_v012_pods_of_an_older_restart_attempt_never_count() -> None:
    js = _jobset_v012("js", replicated=[("workers", 1, 2)], status={"restarts": 1, "restartsCountTowardsMax": 1})
    rec = jobset.workload_record(js, label_key=LABEL)
    assert rec.version == 1
    assert decide(rec, _all_pods_v012(js, restarts=0), previous=None).spec.status == "initializing"
    assert decide(rec, _all_pods_v012(js, restarts=1), previous=None).spec.status == "completed"


# --------------------------------------------------------------------------
# Kubeflow Trainer v2.3.0 (TrainJob -> JobSet of the same name)


def _trainjob_v23(name: str, *, nodes: int | None) -> Json:
    """A TrainJob as the API returns it after Trainer v2.3's defaulting (CRD and webhook)."""
    trainer: Json = {"env": [{"name": "TF_WORKER_PORT", "value": "23456"}], "numProcPerNode": 1}
    if nodes is not None:
        trainer["numNodes"] = nodes
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": NS, "uid": f"{name}-uid", "labels": {LABEL: "tensorflow"}},
        "spec": {
            "runtimeRef": {
                "name": "tensorflow-distributed",
                "apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime",
            },
            "trainer": trainer,
            "runtimePatches": [
                {
                    "manager": "example.com/labeller",
                    "time": "2026-12-01T10:00:00Z",
                    "trainingRuntimeSpec": {"template": {"metadata": {"labels": {"team": "a"}}}},
                }
            ],
            "suspend": False,
            "managedBy": "trainer.kubeflow.org/trainjob-controller",
        },
        "status": {"jobsStatus": [{"name": "node", "active": 3, "ready": 3}]},
    }


def _trainer_jobset_v23(tj: Json, *, nodes: int) -> Json:
    """The JobSet Trainer v2.3 makes of ``tj``: same name, controller-owned, numNodes as completions."""
    js = _jobset_v012(tj["metadata"]["name"], replicated=[("node", 1, nodes)])
    js["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "name": tj["metadata"]["name"],
            "uid": tj["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    rjob = js["spec"]["replicatedJobs"][0]
    rjob["template"]["metadata"] = {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}}
    return js


def test_trainjob_v23_is_served_under_its_jobset_key_with_nodes_ranked_by_completion_index() -> None:
    tj = _trainjob_v23("tf", nodes=3)
    rec = trainjob.workload_record(tj, label_key=LABEL)
    assert rec.error is None and rec.key == "jobset/train/tf" and rec.expected == 3 and not rec.owns_pods
    js = _trainer_jobset_v23(tj, nodes=3)
    lender = jobset.workload_record(js, label_key=LABEL)
    assert not lender.served and lender.key == rec.key
    pods = _all_pods_v012(js)
    # Trainer names the nodes <trainjob>-node-0-<completion index> (hostname; the pod adds a suffix).
    assert [p.name.rsplit("-", 1)[0] for p in pods] == ["tf-node-0-0", "tf-node-0-1", "tf-node-0-2"]
    d = decide(rec, list(reversed(pods)), previous=None)
    assert d.spec.status == "completed"
    assert [(m.rank, m.index, m.ip) for m in d.spec.members] == [
        (0, 0, "127.1.0.1"),
        (1, 1, "127.1.0.2"),
        (2, 2, "127.1.0.3"),
    ]


def test_trainjob_v23_without_numnodes_takes_the_runtime_s() -> None:
    rec = trainjob.workload_record(_trainjob_v23("tf", nodes=None), label_key=LABEL)
    assert rec.runtime_ref == "tensorflow-distributed" and rec.error is None
    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "tensorflow-distributed"},
        "spec": {
            "mlPolicy": {"numNodes": 4, "torch": {"numProcPerNode": 2}},
            "template": {"spec": {"replicatedJobs": [{"name": "node", "replicas": 1}]}},
        },
    }
    assert trainjob.runtime_nodes(runtime) == 4


# --------------------------------------------------------------------------
# Volcano v1.15.1 (job controller's createJobPod)


def _volcano_job_v115(name: str, *, version: int, tasks: list[tuple[str, int]]) -> Json:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "uid": f"{name}-uid", "labels": {LABEL: "tensorflow"}},
        "spec": {
            "schedulerName": "volcano",
            "queue": "default",  # the v1.15 CRD's default
            "maxRetry": 3,  # likewise
            "minAvailable": sum(r for _, r in tasks),
            "tasks": [
                {
                    "name": t,
                    "replicas": r,
                    "minAvailable": r,
                    "template": {
                        "metadata": {"labels": {LABEL: "tensorflow"}},
                        "spec": {"containers": [{"name": "tf"}]},
                    },
                }
                for t, r in tasks
            ],
        },
        "status": {
            "version": version,
            "retryCount": version,
            "state": {"phase": "Running"},
            "running": sum(r for _, r in tasks),
        },
    }


def _volcano_pod_v115(job: Json, *, task: str, index: int, ip: str, version: int, uid: str = "") -> Json:
    """A pod as Volcano v1.15.1's job controller writes it: job-version is an annotation only."""
    name = job["metadata"]["name"]
    annotations = {
        "volcano.sh/task-index": str(index),
        "volcano.sh/task-spec": task,
        "scheduling.k8s.io/group-name": f"{name}-{job['metadata']['uid']}",
        "volcano.sh/job-name": name,
        "volcano.sh/queue-name": "default",
        "volcano.sh/job-version": str(version),
        "volcano.sh/template-uid": f"{name}-{task}",
        "volcano.sh/job-retry-count": str(version),
    }
    labels = {
        LABEL: "tensorflow",
        "volcano.sh/task-index": str(index),
        "volcano.sh/job-name": name,
        "volcano.sh/task-spec": task,
        "volcano.sh/job-namespace": NS,
        "volcano.sh/queue-name": "default",
    }
    return {
        "metadata": {
            "name": f"{name}-{task}-{index}",
            "namespace": NS,
            "uid": uid or f"{name}-{task}-{index}-v{version}",
            "creationTimestamp": "2026-12-01T10:00:00Z",
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "batch.volcano.sh/v1alpha1",
                    "kind": "Job",
                    "name": name,
                    "uid": job["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "schedulerName": "volcano",
            "hostname": f"{name}-{task}-{index}",
            "subdomain": name,
            "containers": [{"name": "tf"}],
            "nodeName": "kwok-node-0",
        },
        "status": {"phase": "Running", "podIP": ip, "hostIP": "10.0.0.1"},
    }


def test_volcano_v115_pod_identity_reads_the_version_annotation() -> None:
    job = _volcano_job_v115("tf", version=2, tasks=[("ps", 1), ("worker", 2)])
    raw = _volcano_pod_v115(job, task="worker", index=1, ip="127.1.0.3", version=2)
    assert "volcano.sh/job-version" not in raw["metadata"]["labels"]
    identity = volcano.identify(raw["metadata"])
    assert identity is not None
    assert (identity.job, identity.task, identity.index, identity.version, identity.owner_uid) == (
        "vcjob/train/tf",
        "worker",
        1,
        2,
        "tf-uid",
    )


def test_volcano_v115_restart_job_bumps_the_version_and_old_pods_never_count() -> None:
    job = _volcano_job_v115("tf", version=1, tasks=[("worker", 2)])
    rec = volcano.workload_record(job, label_key=LABEL)
    assert rec.version == 1
    old = [
        pod_record(_volcano_pod_v115(job, task="worker", index=i, ip=f"127.1.0.{i + 1}", version=0)) for i in range(2)
    ]
    new = [
        pod_record(_volcano_pod_v115(job, task="worker", index=i, ip=f"127.1.1.{i + 1}", version=1)) for i in range(2)
    ]
    # The old pods (same names) are deleted before their successors exist.
    assert decide(rec, old, previous=None).spec.status == "initializing"
    done = decide(rec, new, previous=None)
    assert done.spec.status == "completed" and done.spec.job.version == 1
    assert [m.ip for m in done.spec.members] == ["127.1.1.1", "127.1.1.2"]


def test_volcano_v115_restart_pod_keeps_the_version_and_the_replacement_takes_the_slot() -> None:
    # Actions RestartPod / RestartTask (Volcano >= 1.11) / RestartPartition (1.14) delete
    # pods without bumping status.version; the job controller recreates them
    # under the same name with a new uid and IP.
    job = _volcano_job_v115("tf", version=0, tasks=[("worker", 2)])
    rec = volcano.workload_record(job, label_key=LABEL)
    pods = [
        pod_record(_volcano_pod_v115(job, task="worker", index=i, ip=f"127.1.0.{i + 1}", version=0)) for i in range(2)
    ]
    first = decide(rec, pods, previous=None)
    gone = decide(rec, pods[:1], previous=first.spec)
    assert gone.spec.status == "initializing"
    again = pod_record(
        _volcano_pod_v115(job, task="worker", index=1, ip="127.1.0.9", version=0, uid="tf-worker-1-again")
    )
    back = decide(rec, [pods[0], again], previous=gone.spec)
    assert back.spec.status == "completed" and back.spec.job.version == 0
    assert [(m.index, m.ip, m.uid) for m in back.spec.members] == [
        (0, "127.1.0.1", pods[0].uid),
        (1, "127.1.0.9", "tf-worker-1-again"),
    ]
    assert back.spec.epoch == first.spec.epoch + 2
