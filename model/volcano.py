"""Volcano ``batch.volcano.sh/v1alpha1`` Job.

Members are the job's tasks in spec order, each with ``replicas`` pods
indexed from 0, so ranks follow the spec, never the order pods show up.
Volcano's job controller names pods ``<job>-<task>-<index>`` and marks them
with ``volcano.sh/job-name``, ``volcano.sh/task-spec``, ``volcano.sh/job-version``
(and, in newer releases, ``volcano.sh/task-index``), as labels or annotations
depending on the release: both are read (v1.10 to v1.15: job-version is an
annotation only, the others both). A restart (``RestartJob``) bumps
``status.version``; pods of older versions never count. ``RestartTask``,
``RestartPod`` (since v1.11) and ``RestartPartition`` (v1.14) recreate pods
under their names at the same version: a replacement takes its
predecessor's slot.
"""

from __future__ import annotations

from typing import Any

from model.identity import PodIdentity, int_or_none, meta_value
from model.keys import (
    VOLCANO_GROUP,
    VOLCANO_JOB_NAME,
    VOLCANO_JOB_VERSION,
    VOLCANO_TASK_INDEX,
    VOLCANO_TASK_SPEC,
    VOLCANO_VERSION,
)
from model.records import JobKey, TaskSpec, WorkloadRecord, count, job_key, runtime_of, workload
from model.template import task_spec

Json = dict[str, Any]

SHORT = "vcjob"
KIND = "Job"
GROUP = VOLCANO_GROUP
VERSION = VOLCANO_VERSION
API_VERSION = f"{GROUP}/{VERSION}"
PLURAL = "jobs"


def key_of(namespace: str, name: str) -> JobKey:
    """The job key of Volcano Job ``namespace/name``."""
    return job_key(SHORT, namespace, name)


def workload_record(raw: Json, *, label_key: str) -> WorkloadRecord:
    """Reduce a Volcano Job to its membership; a malformed spec sets ``error``."""
    runtime = runtime_of(raw, label_key)
    tasks: list[TaskSpec] = []
    error: str | None = None
    for i, task in enumerate((raw.get("spec") or {}).get("tasks") or []):
        task_name = str(task.get("name") or f"default{i}")
        replicas = count(task.get("replicas"), default=0)
        if replicas is None:
            error = f"task {task_name}: replicas {task.get('replicas')!r} is not a non-negative integer"
            replicas = 0
        pod_spec = ((task.get("template") or {}).get("spec")) or {}
        tasks.append(task_spec(task_name, replicas, pod_spec, runtime=runtime))
    if len({t.name for t in tasks}) != len(tasks):
        error = "task names are not unique"
    if not tasks:
        error = error or "spec.tasks is empty"
    version = (raw.get("status") or {}).get("version", 0)
    return workload(
        raw,
        short=SHORT,
        kind=KIND,
        api_version=API_VERSION,
        version=version if isinstance(version, int) else 0,
        runtime=runtime,
        tasks=tuple(tasks),
        error=error,
    )


def identify(meta: Json) -> PodIdentity | None:
    """The pod's member identity in its Volcano Job, None if it names none."""
    job = meta_value(meta, VOLCANO_JOB_NAME)
    if not job:
        return None
    pod_name = str(meta.get("name", ""))
    task = meta_value(meta, VOLCANO_TASK_SPEC) or ""
    index = int_or_none(meta_value(meta, VOLCANO_TASK_INDEX))
    if index is None:
        # Volcano names pods <job>-<task>-<index>.
        prefix = f"{job}-{task}-" if task else f"{job}-"
        if pod_name.startswith(prefix):
            rest = pod_name[len(prefix) :]
            if not task and "-" in rest:
                task, _, rest = rest.rpartition("-")
            index = int_or_none(rest)
    owner_uid = None
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == KIND and str(ref.get("apiVersion", "")).startswith(GROUP + "/"):
            owner_uid = ref.get("uid")
    return PodIdentity(
        job=key_of(str(meta.get("namespace", "")), job),
        task=task,
        index=index,
        version=int_or_none(meta_value(meta, VOLCANO_JOB_VERSION)),
        owner_uid=owner_uid,
    )
