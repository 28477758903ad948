"""Indexed Job ``batch/v1``: a plain Job with ``completionMode: Indexed``.

Members are the completion indexes ``0..completions-1``; the Job controller
marks each pod with ``batch.kubernetes.io/job-completion-index`` (a label
since Kubernetes 1.28, an annotation before) and ``batch.kubernetes.io/job-name``,
and owns it (controller ownerReference, ``batch.kubernetes.io/controller-uid``).
Ranks follow the indexes. A pod that fails is replaced under its index
(``backoffLimitPerIndex`` counts per index; ``podReplacementPolicy`` says
whether the replacement waits for the old pod to be gone): the replacement is
a new pod in that slot, so the member list and the epoch change, as for a
Volcano ``RestartPod``. An index that exhausted its ``backoffLimitPerIndex``
(``status.failedIndexes``) is not run again: the job then waits, and says so.

``parallelism`` below ``completions`` runs only ``parallelism`` indexes at
once, so all the members can never run together: such a Job is invalid
(reported, nothing written) rather than waiting forever. ``completions`` is
the member count (the Job controller caps active pods at the indexes left,
so a larger ``parallelism`` is fine). Changing both together (an elastic
Indexed Job) is a new member count, hence a new epoch.

Suspension (``spec.suspend``, as Kueue uses it): the Job controller deletes
the running pods, so the spec goes back to ``initializing`` with the next
epoch, and completes with a new one when the Job resumes, the rule every kind
follows when its members go away and come back. A Job owned by a JobSet is
served through its JobSet, never on its own.
"""

from __future__ import annotations

from typing import Any

from model.identity import PodIdentity, int_or_none, meta_value
from model.keys import (
    JOB_COMPLETION_INDEX,
    JOB_CONTROLLER_UID,
    JOB_INDEXED,
    JOB_NAME_LABEL,
    JOB_NAME_LEGACY_LABEL,
    JOBSET_GROUP,
)
from model.podgroup import group_of
from model.records import JobKey, WorkloadRecord, count, job_key, runtime_of, workload
from model.template import task_spec, template_label_error

Json = dict[str, Any]

SHORT = "job"
KIND = "Job"
GROUP = "batch"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
PLURAL = "jobs"
#: The one task of an Indexed Job.
TASK = "worker"


def key_of(namespace: str, name: str) -> JobKey:
    """The job key of Job ``namespace/name``."""
    return job_key(SHORT, namespace, name)


def workload_record(raw: Json, *, label_key: str) -> WorkloadRecord:
    """Reduce an Indexed Job to its membership; anything else sets ``error`` (see the module doc)."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    runtime = runtime_of(raw, label_key)
    served = not any(
        str(ref.get("apiVersion", "")).startswith(JOBSET_GROUP + "/") for ref in meta.get("ownerReferences") or []
    )
    error: str | None = None
    mode = spec.get("completionMode") or "NonIndexed"
    completions = count(spec.get("completions"), default=0)
    parallelism = count(spec.get("parallelism"), default=1)
    if mode != JOB_INDEXED:
        error = f"spec.completionMode is {mode}: its pods carry no index; set completionMode: {JOB_INDEXED}"
    elif spec.get("completions") is None:
        error = "spec.completions is not set (an Indexed Job needs it)"
    elif completions is None or parallelism is None:
        error = "spec.completions and spec.parallelism must be non-negative integers"
    elif parallelism < completions:
        error = (
            f"spec.parallelism {parallelism} < spec.completions {completions}: only {parallelism} of the "
            f"{completions} indexes run at once, so the members can never all run together; "
            f"set parallelism to completions"
        )
    template = spec.get("template") or {}
    error = error or template_label_error(template, label_key)
    tasks = (task_spec(TASK, completions or 0, template.get("spec") or {}, runtime=runtime),)
    waiting = None
    if spec.get("suspend") is True:
        waiting = "the Job is suspended (spec.suspend): its pods run once it is resumed (by Kueue, or by hand)"
    elif status.get("failedIndexes"):
        waiting = (
            f"indexes {status['failedIndexes']} failed for good (status.failedIndexes, backoffLimitPerIndex): "
            "the Job runs them no more, so the spec cannot complete"
        )
    return workload(
        raw,
        short=SHORT,
        kind=KIND,
        api_version=API_VERSION,
        version=0,
        runtime=runtime,
        tasks=tasks,
        error=error,
        served=served,
        in_group=group_of(str(meta.get("namespace", "")), template.get("spec") or {}),
        waiting=waiting,
        index_source=f"label or annotation {JOB_COMPLETION_INDEX}",
    )


def identify(meta: Json) -> PodIdentity | None:
    """The pod's member identity in its Job, None if the Job controller did not mark it."""
    job = meta_value(meta, JOB_NAME_LABEL) or meta_value(meta, JOB_NAME_LEGACY_LABEL)
    if not job:
        return None
    owner_uid = meta_value(meta, JOB_CONTROLLER_UID)
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == KIND and ref.get("apiVersion") == API_VERSION:
            owner_uid = ref.get("uid") or owner_uid
    return PodIdentity(
        job=key_of(str(meta.get("namespace", "")), job),
        task=TASK,
        index=int_or_none(meta_value(meta, JOB_COMPLETION_INDEX)),
        version=None,
        owner_uid=owner_uid,
    )
