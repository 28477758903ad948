"""Deployment ``apps/v1``: ``spec.replicas`` interchangeable members.

Deployment pods have no index. They are ranked by creation time, then name:
stable while the pods live, and a replacement pod takes the last rank (the
member list changes, so the epoch grows). A pod is found through its
ReplicaSet owner: ReplicaSets are named ``<deployment>-<pod-template-hash>``,
so the Deployment's name needs no ReplicaSet cache. During a rollout the
oldest live pods fill the ranks.
"""

from __future__ import annotations

from typing import Any

from model.ascend import ascend_job
from model.identity import PodIdentity
from model.keys import POD_TEMPLATE_HASH
from model.records import JobKey, WorkloadRecord, count, job_key, runtime_of, workload
from model.template import task_spec

Json = dict[str, Any]

SHORT = "deploy"
KIND = "Deployment"
GROUP = "apps"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
PLURAL = "deployments"
TASK = "worker"


def key_of(namespace: str, name: str) -> JobKey:
    """The job key of Deployment ``namespace/name``."""
    return job_key(SHORT, namespace, name)


def workload_record(raw: Json, *, label_key: str) -> WorkloadRecord:
    """Reduce a Deployment to its membership (one task of ``spec.replicas``)."""
    spec = raw.get("spec") or {}
    runtime = runtime_of(raw, label_key)
    replicas = count(spec.get("replicas"), default=1)
    error = None
    if replicas is None:
        error, replicas = f"spec.replicas {spec.get('replicas')!r} is not a non-negative integer", 0
    template = spec.get("template") or {}
    pod_spec = template.get("spec") or {}
    tasks = (task_spec(TASK, replicas, pod_spec, runtime=runtime),)
    # As ascend-operator reads a Deployment: the pod template's annotations over its own.
    meta = raw.get("metadata") or {}
    annotations = {**(meta.get("annotations") or {}), **((template.get("metadata") or {}).get("annotations") or {})}
    return workload(
        raw,
        short=SHORT,
        kind=KIND,
        api_version=API_VERSION,
        version=0,
        runtime=runtime,
        tasks=tasks,
        indexed=False,
        error=error,
        owns_pods=False,
        ascend=ascend_job({"annotations": annotations, "labels": meta.get("labels") or {}}, tasks),
    )


def identify(meta: Json) -> PodIdentity | None:
    """The pod's Deployment (through its ReplicaSet's name), None if not a Deployment pod."""
    pod_hash = (meta.get("labels") or {}).get(POD_TEMPLATE_HASH)
    if not pod_hash:
        return None
    for ref in meta.get("ownerReferences") or []:
        rs = str(ref.get("name", ""))
        if ref.get("kind") == "ReplicaSet" and rs.endswith("-" + pod_hash):
            return PodIdentity(
                job=key_of(str(meta.get("namespace", "")), rs[: -len(pod_hash) - 1]),
                task=TASK,
                index=None,
                version=None,
                owner_uid=None,
            )
    return None
