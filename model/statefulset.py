"""StatefulSet ``apps/v1``: ``spec.replicas`` members by ordinal.

The StatefulSet controller names pods ``<name>-<ordinal>``, owns them
(controller ownerReference) and marks each with its ordinal in the label
``apps.kubernetes.io/pod-index`` (Kubernetes 1.28 and later). Ranks follow
the ordinals, from ``spec.ordinals.start`` (0 unless set). A pod without the
label (an older cluster) fills no slot: the job waits and says why, rather
than guess an ordinal from the name.

Scaling up or down changes the member count, so the next spec that completes
has a new epoch; pods beyond ``replicas`` (still terminating after a scale
down) fill no slot. A replaced pod keeps its name and ordinal but is a new
pod (uid, usually IP): a new member, a new epoch. Both pod management
policies are served: ``Parallel`` starts every pod at once; ``OrderedReady``
starts ordinal N+1 only when N is Ready, so the spec completes once the last
ordinal runs (a readiness probe that waits for the training itself would
never let the later ordinals start). A StatefulSet made by a LeaderWorkerSet
is served through its LeaderWorkerSet.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from model.identity import PodIdentity, int_or_none, meta_value
from model.keys import LWS_GROUP, STATEFULSET_POD_INDEX
from model.podgroup import group_of
from model.records import JobKey, WorkloadRecord, count, job_key, runtime_of, workload
from model.template import task_spec, template_label_error

Json = dict[str, Any]

SHORT = "sts"
KIND = "StatefulSet"
GROUP = "apps"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
PLURAL = "statefulsets"
#: The one task of a StatefulSet.
TASK = "worker"


def key_of(namespace: str, name: str) -> JobKey:
    """The job key of StatefulSet ``namespace/name``."""
    return job_key(SHORT, namespace, name)


def workload_record(raw: Json, *, label_key: str) -> WorkloadRecord:
    """Reduce a StatefulSet to its membership (one task of ``spec.replicas``, numbered from ``ordinals.start``)."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    runtime = runtime_of(raw, label_key)
    served = not any(
        str(ref.get("apiVersion", "")).startswith(LWS_GROUP + "/") or ref.get("kind") == "Pod"
        for ref in meta.get("ownerReferences") or []
    )
    error: str | None = None
    replicas = count(spec.get("replicas"), default=1)
    start = count((spec.get("ordinals") or {}).get("start"), default=0)
    if replicas is None:
        error, replicas = f"spec.replicas {spec.get('replicas')!r} is not a non-negative integer", 0
    if start is None:
        error, start = f"spec.ordinals.start {(spec.get('ordinals') or {}).get('start')!r} is not valid", 0
    template = spec.get("template") or {}
    error = error or template_label_error(template, label_key)
    task = task_spec(TASK, replicas, template.get("spec") or {}, runtime=runtime)
    return workload(
        raw,
        short=SHORT,
        kind=KIND,
        api_version=API_VERSION,
        version=0,
        runtime=runtime,
        tasks=(replace(task, first_index=start),),
        error=error,
        served=served,
        in_group=group_of(str(meta.get("namespace", "")), template.get("spec") or {}),
        index_source=f"label {STATEFULSET_POD_INDEX}",
    )


def identify(meta: Json) -> PodIdentity | None:
    """The pod's member identity in its StatefulSet (its controller owner), None if it has none."""
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == KIND and ref.get("apiVersion") == API_VERSION and ref.get("controller"):
            return PodIdentity(
                job=key_of(str(meta.get("namespace", "")), str(ref.get("name", ""))),
                task=TASK,
                index=int_or_none(meta_value(meta, STATEFULSET_POD_INDEX)),
                version=None,
                owner_uid=ref.get("uid"),
            )
    return None
