"""LeaderWorkerSet ``leaderworkerset.x-k8s.io/v1``: one job per group.

A LeaderWorkerSet runs ``spec.replicas`` groups of ``leaderWorkerTemplate.size``
pods: a leader (``<lws>-<group>``) and ``size - 1`` workers
(``<lws>-<group>-<worker>``). Groups are independent (each is one model
replica, say), so each group is a job of its own: job key
``lws/<namespace>/<lws>-<group>``, ConfigMap ``rings-config-<lws>-<group>``,
members ranked leader first, then by worker index. The LWS controller marks
every pod with ``leaderworkerset.sigs.k8s.io/name``, ``group-index`` and
``worker-index`` (the leader's is 0); those labels are the identity here, and
the pods' owners (the leader StatefulSet, the leader pod) are not read.

A group's ConfigMap has the group in its name, which one pod template
cannot name for every group: the pods read the spec through the API
(``ring-launch --from-api`` with ``RING_CONFIGMAP`` built from the pod's
group label by the downward API), and a template that mounts a
``rings-config`` volume is invalid (every group would write the same one).
Scaling ``replicas`` adds or drops whole groups; a group recreated after a
pod failure (``RecreateGroupOnPodRestart``, the default) is new pods, hence
a new epoch of that group only.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from model.identity import PodIdentity, int_or_none, meta_value
from model.keys import CONFIG_VOLUME_NAMES, LWS_GROUP, LWS_GROUP_INDEX, LWS_NAME, LWS_VERSION, LWS_WORKER_INDEX
from model.records import JobKey, WorkloadRecord, count, group_key, job_key, runtime_of, workload
from model.template import task_spec, template_label_error

Json = dict[str, Any]

SHORT = "lws"
KIND = "LeaderWorkerSet"
GROUP = LWS_GROUP
VERSION = LWS_VERSION
API_VERSION = f"{GROUP}/{VERSION}"
PLURAL = "leaderworkersets"
#: The one task of a group: the leader (index 0), then the workers.
TASK = "worker"


def key_of(namespace: str, name: str) -> JobKey:
    """The (unserved) job key of LeaderWorkerSet ``namespace/name`` itself; its groups' keys extend it."""
    return job_key(SHORT, namespace, name)


def workload_record(raw: Json, *, label_key: str) -> WorkloadRecord:
    """Reduce a LeaderWorkerSet to its groups: ``replicas`` of them, each of ``size`` members."""
    spec = raw.get("spec") or {}
    lwt = spec.get("leaderWorkerTemplate") or {}
    runtime = runtime_of(raw, label_key)
    error: str | None = None
    replicas, size = count(spec.get("replicas"), default=1), count(lwt.get("size"), default=1)
    if replicas is None or size is None:
        error = "spec.replicas and spec.leaderWorkerTemplate.size must be non-negative integers"
        replicas, size = replicas or 0, size or 0
    worker = lwt.get("workerTemplate") or {}
    leader = lwt.get("leaderTemplate") or worker
    for what, template in (("leaderTemplate", leader), ("workerTemplate", worker)):
        problem = template_label_error(template, label_key)
        error = error or (f"{what}: {problem}" if problem else None)
        mounted = {v.get("name") for v in (template.get("spec") or {}).get("volumes") or [] if isinstance(v, dict)}
        if error is None and mounted & set(CONFIG_VOLUME_NAMES):
            error = (
                f"{what} mounts a {' or '.join(CONFIG_VOLUME_NAMES)} volume, but each group has its own ConfigMap "
                f"(rings-config-<name>-<group>): read it with ring-launch --from-api instead"
            )
    task = task_spec(TASK, size, worker.get("spec") or {}, runtime=runtime)
    leader_task = task_spec(TASK, size, leader.get("spec") or {}, runtime=runtime)
    task = replace(task, wants_devices=task.wants_devices or leader_task.wants_devices)
    return workload(
        raw,
        short=SHORT,
        kind=KIND,
        api_version=API_VERSION,
        version=0,
        runtime=runtime,
        tasks=(task,),
        error=error,
        owns_pods=False,
        groups=replicas,
        index_source=f"label {LWS_WORKER_INDEX}",
    )


def identify(meta: Json) -> PodIdentity | None:
    """The pod's group (its job) and its place in it, None if the LWS controller did not mark it."""
    name = meta_value(meta, LWS_NAME)
    group = int_or_none(meta_value(meta, LWS_GROUP_INDEX))
    if not name or group is None:
        return None
    return PodIdentity(
        job=group_key(key_of(str(meta.get("namespace", "")), name), group),
        task=TASK,
        index=int_or_none(meta_value(meta, LWS_WORKER_INDEX)),
        version=None,
        owner_uid=None,
    )
