"""JobSet ``jobset.x-k8s.io/v1alpha2``.

Each replicated job runs ``replicas`` Jobs of ``parallelism`` pods; members
are ranked by replicated-job order, then job index, then completion index
(pod number ``job_index * parallelism + completion_index`` within the
replicated job); that is the order of JobSet's own ``job-global-index``.
JobSet marks pods with ``jobset.sigs.k8s.io/jobset-name``, ``-uid``,
``replicatedjob-name``, ``job-index`` and ``restart-attempt`` (as labels and
annotations); the Job controller adds
``batch.kubernetes.io/job-completion-index``. A restart (``status.restarts``)
plays the role of Volcano's job version: pods of older attempts never count.
JobSet v0.12's alpha restart modes change no version: ``RestartJob``
recreates one Job (its pods get a new ``job-restart-attempt``; they replace
their predecessors like any new pod), and ``restartStrategy: InPlaceRestart``
restarts containers in the pods it keeps (``in-place-restart-attempt``
annotation, ``status.currentInPlaceRestartAttempt``), so members and spec stay.

A JobSet owned by a TrainJob is not served on its own: its TrainJob is (same
job key, so its pods reach the TrainJob's worker), and takes the JobSet's
restart count as its version.
"""

from __future__ import annotations

from typing import Any

from model.identity import PodIdentity, int_or_none, meta_value
from model.keys import (
    JOB_COMPLETION_INDEX,
    JOBSET_GROUP,
    JOBSET_JOB_INDEX,
    JOBSET_NAME,
    JOBSET_REPLICATED_JOB,
    JOBSET_RESTART_ATTEMPT,
    JOBSET_UID,
    JOBSET_VERSION,
    TRAINER_GROUP,
)
from model.records import JobKey, TaskSpec, WorkloadRecord, count, job_key, runtime_of, workload
from model.template import task_spec

Json = dict[str, Any]

SHORT = "jobset"
KIND = "JobSet"
GROUP = JOBSET_GROUP
VERSION = JOBSET_VERSION
API_VERSION = f"{GROUP}/{VERSION}"
PLURAL = "jobsets"


def key_of(namespace: str, name: str) -> JobKey:
    """The job key of JobSet ``namespace/name`` (shared by the TrainJob owning it)."""
    return job_key(SHORT, namespace, name)


def workload_record(raw: Json, *, label_key: str) -> WorkloadRecord:
    """Reduce a JobSet to its membership; not ``served`` when a TrainJob owns it."""
    meta = raw.get("metadata") or {}
    served = not any(
        str(ref.get("apiVersion", "")).startswith(TRAINER_GROUP + "/") for ref in meta.get("ownerReferences") or []
    )
    runtime = runtime_of(raw, label_key)
    tasks: list[TaskSpec] = []
    error: str | None = None
    for rjob in (raw.get("spec") or {}).get("replicatedJobs") or []:
        rname = str(rjob.get("name", ""))
        job_spec = ((rjob.get("template") or {}).get("spec")) or {}
        replicas, parallelism = count(rjob.get("replicas"), default=1), count(job_spec.get("parallelism"), default=1)
        if replicas is None or parallelism is None:
            error = f"replicatedJob {rname}: replicas and parallelism must be non-negative integers"
            replicas, parallelism = replicas or 0, parallelism or 0
        pod_spec = ((job_spec.get("template") or {}).get("spec")) or {}
        tasks.append(task_spec(rname, replicas * parallelism, pod_spec, runtime=runtime, per_job=parallelism))
    if not tasks:
        error = error or "spec.replicatedJobs is empty"
    restarts = (raw.get("status") or {}).get("restarts", 0)
    return workload(
        raw,
        short=SHORT,
        kind=KIND,
        api_version=API_VERSION,
        version=restarts if isinstance(restarts, int) else 0,
        runtime=runtime,
        tasks=tuple(tasks),
        error=error,
        served=served,
    )


def identify(meta: Json) -> PodIdentity | None:
    """The pod's member identity in its JobSet, None if it names none."""
    jobset = meta_value(meta, JOBSET_NAME)
    if not jobset:
        return None
    return PodIdentity(
        job=key_of(str(meta.get("namespace", "")), jobset),
        task=meta_value(meta, JOBSET_REPLICATED_JOB) or "",
        index=int_or_none(meta_value(meta, JOB_COMPLETION_INDEX)),
        version=int_or_none(meta_value(meta, JOBSET_RESTART_ATTEMPT)),
        owner_uid=meta_value(meta, JOBSET_UID),  # the pod's owner is a Job: JobSet's uid label
        job_index=int_or_none(meta_value(meta, JOBSET_JOB_INDEX)) or 0,
    )
