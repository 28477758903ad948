"""PodGroup ``scheduling.k8s.io/v1beta1`` (Kubernetes 1.37): the generic path.

Kubernetes 1.37 gangs pods itself: a PodGroup says how many pods must be
scheduled together (``spec.schedulingPolicy.gang.minCount``) and each pod
names its group in ``spec.schedulingGroup.podGroupName``. Any workload kind
can run that way, including one nobody wrote code for here, so a PodGroup
carrying the selection label is a job of its own:

- its members are the selected pods whose ``spec.schedulingGroup.podGroupName``
  names it (in its namespace); the PodGroup owns none of them;
- the member count is ``gang.minCount`` (a group with the ``basic`` policy
  gangs nothing and has no count: invalid, with that reason); a changed
  ``minCount`` (elastic scaling) is a new member count, hence a new epoch;
- a member's rank is its index from its owner's kind where the pod has a
  known owner: ``batch.kubernetes.io/job-completion-index`` (owned by a Job),
  ``leaderworkerset.sigs.k8s.io/worker-index`` (a LeaderWorkerSet's pod),
  ``apps.kubernetes.io/pod-index`` (owned by a StatefulSet); else (no such
  owner, or its label missing) the pod's annotation ``ring-controller.io/rank``
  (:data:`~model.keys.RANK_ANNOTATION`), a decimal integer.
  A pod with neither fills no slot and the job says why (``missing_index``);
  two live pods with one rank count neither (``duplicate_index``); a rank at
  or beyond ``minCount`` is reported (``index_out_of_range``);
- the spec goes to ``rings-config-<podgroup>`` (a PodGroup has no pod
  template to name another), which the members mount or read through the API.

The pod keeps its identity in its owner's kind too (:attr:`model.records.PodRecord.group`
is the second job key): the Job controller's own PodGroups (feature gate
``WorkloadWithJob``) carry no labels, so a labelled Indexed Job whose pods
name such a group is still served as that Job. A workload whose pod
template names a labelled PodGroup serves nothing of its own
(:attr:`model.records.WorkloadRecord.in_group`, :mod:`model.serving`): the
group is the job.
"""

from __future__ import annotations

from typing import Any

from model.identity import int_or_none, meta_value
from model.keys import (
    JOB_COMPLETION_INDEX,
    LWS_NAME,
    LWS_WORKER_INDEX,
    PODGROUP_GROUP,
    PODGROUP_VERSION,
    RANK_ANNOTATION,
    STATEFULSET_POD_INDEX,
)
from model.records import JobKey, WorkloadRecord, job_key, runtime_of, workload
from model.template import task_spec

Json = dict[str, Any]

SHORT = "pg"
KIND = "PodGroup"
GROUP = PODGROUP_GROUP
VERSION = PODGROUP_VERSION
API_VERSION = f"{GROUP}/{VERSION}"
PLURAL = "podgroups"
#: The one task of a PodGroup.
TASK = "worker"
#: Where a member's rank comes from, for people (the reason a pod without one shows).
INDEX_SOURCE = (
    f"its owner's {JOB_COMPLETION_INDEX}, {LWS_WORKER_INDEX} or {STATEFULSET_POD_INDEX} label, "
    f"else the annotation {RANK_ANNOTATION}"
)


def key_of(namespace: str, name: str) -> JobKey:
    """The job key of PodGroup ``namespace/name``."""
    return job_key(SHORT, namespace, name)


def workload_record(raw: Json, *, label_key: str) -> WorkloadRecord:
    """Reduce a PodGroup to its membership: one task of ``gang.minCount`` members (see the module doc)."""
    spec = raw.get("spec") or {}
    policy = spec.get("schedulingPolicy") or {}
    gang = policy.get("gang")
    error: str | None = None
    members = 0
    if not isinstance(gang, dict):
        error = (
            "spec.schedulingPolicy has no gang (basic scheduling gangs nothing), so the group has no member "
            "count: use schedulingPolicy.gang.minCount"
        )
    else:
        min_count = gang.get("minCount")
        if isinstance(min_count, int) and not isinstance(min_count, bool) and min_count > 0:
            members = min_count
        else:
            error = f"spec.schedulingPolicy.gang.minCount {min_count!r} is not a positive integer"
    runtime = runtime_of(raw, label_key)
    return workload(
        raw,
        short=SHORT,
        kind=KIND,
        api_version=API_VERSION,
        version=0,
        runtime=runtime,
        tasks=(task_spec(TASK, members, {}, runtime=runtime),),
        error=error,
        owns_pods=False,
        index_source=INDEX_SOURCE,
        strict_range=True,
    )


def group_of(namespace: str, spec: Json) -> JobKey | None:
    """The job key of the PodGroup a pod spec names (``spec.schedulingGroup.podGroupName``), None if none."""
    group = spec.get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, dict) else None
    return key_of(namespace, name) if isinstance(name, str) and name else None


def member_index(meta: Json) -> int | None:
    """A pod's rank in its PodGroup (the module doc's order), None when it carries none usable."""
    owners = {
        (str(ref.get("apiVersion")), str(ref.get("kind")))
        for ref in meta.get("ownerReferences") or []
        if isinstance(ref, dict) and ref.get("controller")
    }
    index: int | None = None
    if ("batch/v1", "Job") in owners:
        index = int_or_none(meta_value(meta, JOB_COMPLETION_INDEX))
    elif meta_value(meta, LWS_NAME):
        index = int_or_none(meta_value(meta, LWS_WORKER_INDEX))
    elif ("apps/v1", "StatefulSet") in owners:
        index = int_or_none(meta_value(meta, STATEFULSET_POD_INDEX))
    if index is not None:
        return index
    annotations = meta.get("annotations") or {}
    return int_or_none(annotations.get(RANK_ANNOTATION)) if isinstance(annotations, dict) else None
