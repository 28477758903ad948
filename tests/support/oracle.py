"""An oracle for the chaos runs: what every job's spec must be, from the API server's objects.

Written from the contract (docs/design.md), not from ``agent/decide.py`` nor the
models: it reads the raw Volcano Jobs, Deployments, Indexed Jobs,
StatefulSets, pods and ConfigMaps as the API server returns them and
computes, per job, the members the spec must list (rank order from the
workload's task order, then index; Deployments by pod creation, then name;
a slot that two live pods claim holds neither; a finished member keeps its
place in the unchanged completed spec), their uids, IPs and ports, and the
status. Label, annotation and default values are imported from
:mod:`model.keys` (one place for each fact); the rules are restated here. It does not predict the
epoch, which depends on history: callers check epochs over time (never
down, up on every member change).

Only the shapes the chaos runs create are covered: Volcano Jobs whose pods
carry the job-controller's labels, Deployments, Indexed Jobs and
StatefulSets as their controllers make them, and PodGroups (Kubernetes
1.37) with pods ranked by hand or by their owner's index; no devices.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from model.keys import (
    CONFIG_VOLUME_NAMES,
    CONFIGMAP_PREFIX,
    DEFAULT_PORT,
    JOB_COMPLETION_INDEX,
    JOB_NAME_LABEL,
    LWS_NAME,
    LWS_WORKER_INDEX,
    POD_TEMPLATE_HASH,
    PORT_ANNOTATION,
    PORT_ENV,
    PORT_NAMES,
    RANK_ANNOTATION,
    STATEFULSET_POD_INDEX,
    VOLCANO_JOB_NAME,
    VOLCANO_JOB_VERSION,
    VOLCANO_TASK_INDEX,
    VOLCANO_TASK_SPEC,
)

Json = dict[str, Any]
Member = tuple[int, str, int, str, str, str, int]  # rank, task, index, pod, uid, ip, port


@dataclass(frozen=True)
class Expected:
    """The spec a job must have: ``members`` only when ``status`` is completed."""

    namespace: str
    configmap: str
    kind: str
    name: str
    uid: str
    version: int
    status: str
    members: tuple[Member, ...]


def _meta(obj: Json) -> Json:
    return obj.get("metadata") or {}


def _configmap_name(name: str, templates: list[Json]) -> str:
    for template in templates:
        for volume in (template.get("spec") or {}).get("volumes") or []:
            if volume.get("name") in CONFIG_VOLUME_NAMES and (volume.get("configMap") or {}).get("name"):
                return str(volume["configMap"]["name"])
    return CONFIGMAP_PREFIX + name


def _port(pod: Json) -> int:
    containers = (pod.get("spec") or {}).get("containers") or []
    for port_name in PORT_NAMES:
        for c in containers:
            for p in c.get("ports") or []:
                if p.get("name") == port_name:
                    return int(p["containerPort"])
    annotations = _meta(pod).get("annotations") or {}
    if PORT_ANNOTATION in annotations:
        return int(annotations[PORT_ANNOTATION])
    for c in containers:
        for e in c.get("env") or []:
            if e.get("name") == PORT_ENV and "value" in e:
                return int(e["value"])
    return DEFAULT_PORT


def _counts(pod: Json) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and bool(status.get("podIP")) and not _meta(pod).get("deletionTimestamp")


def _member(rank: int, task: str, index: int, pod: Json) -> Member:
    meta = _meta(pod)
    return (rank, task, index, str(meta["name"]), str(meta["uid"]), str(pod["status"]["podIP"]), _port(pod))


def _live(pod: Json) -> bool:
    """Not being deleted and not finished: a pod that may still run as a member."""
    phase = (pod.get("status") or {}).get("phase")
    return not _meta(pod).get("deletionTimestamp") and phase not in ("Failed", "Succeeded")


def _placed(pod: Json) -> bool:
    """May hold a slot: live (:func:`_live`), or finished (``Succeeded``) and not being deleted."""
    phase = (pod.get("status") or {}).get("phase")
    return not _meta(pod).get("deletionTimestamp") and phase != "Failed"


def _fill(
    tasks: list[tuple[str, int]],
    claims: dict[tuple[str, int], list[Json]],
    written: dict[tuple[str, int], Member] | None = None,
) -> tuple[tuple[Member, ...], bool]:
    """Members of slots ``tasks`` (name, replicas) in rank order, from the pods claiming each slot.

    A slot is filled when exactly one live pod claims it and that pod counts;
    two live claimants fill it with neither. A slot no live pod claims is
    filled by a finished (``Succeeded``) pod that is its member in the
    completed spec ``written`` (same uid), as written there; but only while
    the spec stays exactly as written: any other change and the finished
    members stop counting (the job waits). Returns (members, complete).
    """
    written = written or {}
    members: list[Member] = []
    finished = False
    rank = 0
    for task, replicas in tasks:
        for index in range(replicas):
            candidates = claims.get((task, index), [])
            live = [p for p in candidates if _live(p)]
            before = written.get((task, index))
            if len(live) == 1 and _counts(live[0]):
                members.append(_member(rank, task, index, live[0]))
            elif not live and before is not None and any(_meta(p).get("uid") == before[4] for p in candidates):
                members.append(before)
                finished = True
            rank += 1
    complete = rank > 0 and len(members) == rank
    if complete and finished and tuple(members) != tuple(written[(m[1], m[2])] for m in members):
        complete = False
    return (tuple(members) if complete else ()), complete


def _written(
    configmaps: Mapping[str, Json] | None, configmap: str, uid: str, version: int
) -> dict[tuple[str, int], Member]:
    """The members by slot of the completed spec in ``configmap`` when it is this job's (uid, version)."""
    got = actual((configmaps or {}).get(configmap))
    if got is None or (got[0], got[1], got[2]) != ("completed", uid, version):
        return {}
    return {(m[1], m[2]): m for m in got[3]}


def _owned_by(pod: Json, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in _meta(pod).get("ownerReferences") or [])


def _int(value: object) -> int:
    text = str(value).strip()
    return int(text) if text.isdigit() else -1


def expect_volcano(job: Json, pods: list[Json], *, configmaps: Mapping[str, Json] | None = None) -> Expected:
    """Slots: tasks in spec order, indices 0..replicas-1; a slot is filled by the one
    live pod of this job (owner uid) and its current version claiming it, when it counts,
    or by its finished member of the completed spec in ``configmaps`` (see :func:`_fill`)."""
    meta = _meta(job)
    name, uid = str(meta["name"]), str(meta.get("uid", ""))
    version = int(((job.get("status") or {}).get("version")) or 0)
    tasks = [(str(t["name"]), int(t.get("replicas") or 0)) for t in (job.get("spec") or {}).get("tasks") or []]
    claims: dict[tuple[str, int], list[Json]] = {}
    for pod in pods:
        pm = _meta(pod)
        labels, annotations = pm.get("labels") or {}, pm.get("annotations") or {}
        if labels.get(VOLCANO_JOB_NAME) != name or not _owned_by(pod, uid):
            continue
        if str(annotations.get(VOLCANO_JOB_VERSION, version)) != str(version):
            continue
        if _placed(pod):
            key = (str(labels.get(VOLCANO_TASK_SPEC)), _int(labels.get(VOLCANO_TASK_INDEX, -1)))
            claims.setdefault(key, []).append(pod)
    templates = [t.get("template") or {} for t in (job.get("spec") or {}).get("tasks") or []]
    members, complete = _fill(tasks, claims, _written(configmaps, _configmap_name(name, templates), uid, version))
    return Expected(
        namespace=str(meta["namespace"]),
        configmap=_configmap_name(name, templates),
        kind="Job",
        name=name,
        uid=uid,
        version=version,
        status="completed" if complete else "initializing",
        members=members,
    )


def expect_indexed_job(job: Json, pods: list[Json], *, configmaps: Mapping[str, Json] | None = None) -> Expected:
    """A batch/v1 Indexed Job: ``completions`` slots, filled by completion index
    (``parallelism`` at least ``completions``, else it never completes)."""
    meta = _meta(job)
    spec = job.get("spec") or {}
    name, uid = str(meta["name"]), str(meta.get("uid", ""))
    completions = int(spec.get("completions") or 0)
    runnable = int(spec.get("parallelism", 1)) >= completions
    claims: dict[tuple[str, int], list[Json]] = {}
    for pod in pods:
        pm = _meta(pod)
        labels, annotations = pm.get("labels") or {}, pm.get("annotations") or {}
        if labels.get(JOB_NAME_LABEL) != name or not _owned_by(pod, uid) or not _placed(pod):
            continue
        index = labels.get(JOB_COMPLETION_INDEX, annotations.get(JOB_COMPLETION_INDEX, -1))
        claims.setdefault(("worker", _int(index)), []).append(pod)
    written = _written(configmaps, _configmap_name(name, [spec.get("template") or {}]), uid, 0)
    members, complete = _fill([("worker", completions if runnable else 0)], claims, written)
    return Expected(
        namespace=str(meta["namespace"]),
        configmap=_configmap_name(name, [spec.get("template") or {}]),
        kind="Job",
        name=name,
        uid=uid,
        version=0,
        status="completed" if complete else "initializing",
        members=members,
    )


def expect_statefulset(sts: Json, pods: list[Json], *, configmaps: Mapping[str, Json] | None = None) -> Expected:
    """``spec.replicas`` slots filled by ordinal (the pod-index label, from ``spec.ordinals.start``)."""
    meta = _meta(sts)
    spec = sts.get("spec") or {}
    name, uid = str(meta["name"]), str(meta.get("uid", ""))
    start = int((spec.get("ordinals") or {}).get("start") or 0)
    claims: dict[tuple[str, int], list[Json]] = {}
    for pod in pods:
        labels = _meta(pod).get("labels") or {}
        if not _owned_by(pod, uid) or not _placed(pod) or STATEFULSET_POD_INDEX not in labels:
            continue
        claims.setdefault(("worker", _int(labels[STATEFULSET_POD_INDEX]) - start), []).append(pod)
    written = _written(configmaps, _configmap_name(name, [spec.get("template") or {}]), uid, 0)
    members, complete = _fill([("worker", int(spec.get("replicas", 1)))], claims, written)
    return Expected(
        namespace=str(meta["namespace"]),
        configmap=_configmap_name(name, [spec.get("template") or {}]),
        kind="StatefulSet",
        name=name,
        uid=uid,
        version=0,
        status="completed" if complete else "initializing",
        members=members,
    )


def _group_rank(pod: Json) -> int:
    """A pod's rank in its PodGroup, from the contract (docs/jobs.md): its owner's index label where its
    controller is a Job, a LeaderWorkerSet's pod or a StatefulSet, else the rank annotation; -1 if none."""
    meta = _meta(pod)
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    owners = {(r.get("apiVersion"), r.get("kind")) for r in meta.get("ownerReferences") or [] if r.get("controller")}
    found = -1
    if ("batch/v1", "Job") in owners:
        found = _int(labels.get(JOB_COMPLETION_INDEX, annotations.get(JOB_COMPLETION_INDEX, -1)))
    elif LWS_NAME in labels:
        found = _int(labels.get(LWS_WORKER_INDEX, -1))
    elif ("apps/v1", "StatefulSet") in owners:
        found = _int(labels.get(STATEFULSET_POD_INDEX, -1))
    return found if found >= 0 else _int(annotations.get(RANK_ANNOTATION, -1))


def expect_podgroup(group: Json, pods: list[Json], *, configmaps: Mapping[str, Json] | None = None) -> Expected:
    """A PodGroup: ``gang.minCount`` slots (none without a gang), filled by rank (:func:`_group_rank`) by
    the pods whose ``spec.schedulingGroup.podGroupName`` names it; the group owns none of them."""
    meta = _meta(group)
    name, uid = str(meta["name"]), str(meta.get("uid", ""))
    gang = ((group.get("spec") or {}).get("schedulingPolicy") or {}).get("gang") or {}
    count = gang.get("minCount") if isinstance(gang.get("minCount"), int) else 0
    claims: dict[tuple[str, int], list[Json]] = {}
    for pod in pods:
        named = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
        if named == name and _placed(pod):
            claims.setdefault(("worker", _group_rank(pod)), []).append(pod)
    configmap = CONFIGMAP_PREFIX + name
    members, complete = _fill([("worker", max(0, count))], claims, _written(configmaps, configmap, uid, 0))
    return Expected(
        namespace=str(meta["namespace"]),
        configmap=configmap,
        kind="PodGroup",
        name=name,
        uid=uid,
        version=0,
        status="completed" if complete else "initializing",
        members=members,
    )


def expect_deployment(deploy: Json, pods: list[Json]) -> Expected:
    """``spec.replicas`` slots filled by the Deployment's live pods, oldest first, then by name."""
    meta = _meta(deploy)
    name = str(meta["name"])
    replicas = int((deploy.get("spec") or {}).get("replicas", 1))
    mine = []
    for pod in pods:
        pm = _meta(pod)
        pod_hash = (pm.get("labels") or {}).get(POD_TEMPLATE_HASH)
        owners = [r for r in pm.get("ownerReferences") or [] if r.get("kind") == "ReplicaSet"]
        if not pod_hash or not any(r.get("name") == f"{name}-{pod_hash}" for r in owners):
            continue
        phase = (pod.get("status") or {}).get("phase")
        if pm.get("deletionTimestamp") or phase in ("Failed", "Succeeded"):
            continue
        mine.append(pod)
    mine.sort(key=lambda p: (str(_meta(p).get("creationTimestamp", "")), _meta(p)["name"]))
    ranked = mine[:replicas]
    complete = replicas > 0 and len(ranked) == replicas and all(_counts(p) for p in ranked)
    template = (deploy.get("spec") or {}).get("template") or {}
    return Expected(
        namespace=str(meta["namespace"]),
        configmap=_configmap_name(name, [template]),
        kind="Deployment",
        name=name,
        uid=str(meta.get("uid", "")),
        version=0,
        status="completed" if complete else "initializing",
        members=tuple(_member(i, "worker", i, p) for i, p in enumerate(ranked)) if complete else (),
    )


def actual(cm: Json | None) -> tuple[str, str, int, tuple[Member, ...], int] | None:
    """(status, job uid, job version, members, epoch) of a ConfigMap's cluster.json; None if absent/unreadable."""
    if cm is None or "cluster.json" not in (cm.get("data") or {}):
        return None
    try:
        spec = json.loads(cm["data"]["cluster.json"])
        members = tuple(
            (int(m["rank"]), m["task"], int(m["index"]), m["pod"], m["uid"], m["ip"], int(m["port"]))
            for m in spec.get("members") or []
        )
        return str(spec["status"]), str(spec["job"]["uid"]), int(spec["job"]["version"]), members, int(spec["epoch"])
    except (ValueError, KeyError, TypeError):
        return None


def mismatch(expected: Expected, cm: Json | None) -> str | None:
    """Why the ConfigMap does not hold the expected spec (None: it does, epoch aside)."""
    got = actual(cm)
    if got is None:
        return "no readable cluster.json"
    status, uid, version, members, _ = got
    if (status, uid, version) != (expected.status, expected.uid, expected.version):
        return f"status/uid/version {(status, uid, version)} != {(expected.status, expected.uid, expected.version)}"
    if members != expected.members:
        return f"members {members} != {expected.members}"
    return None


def expect_all(objects: dict[str, list[Json]], *, configmaps: Mapping[str, Json] | None = None) -> list[Expected]:
    """Every job's expected spec from listed ``jobs`` (Volcano), ``deployments``,
    ``indexedjobs`` (batch/v1), ``statefulsets``, ``podgroups`` and ``pods`` (raw JSON);
    ``configmaps`` by name, where finished members keep their places."""
    pods_by_ns: dict[str, list[Json]] = {}
    for pod in objects.get("pods", []):
        pods_by_ns.setdefault(str(_meta(pod).get("namespace")), []).append(pod)

    def pods_of(obj: Json) -> list[Json]:
        return pods_by_ns.get(str(_meta(obj)["namespace"]), [])

    out = [expect_volcano(j, pods_of(j), configmaps=configmaps) for j in objects.get("jobs", [])]
    out += [expect_deployment(d, pods_of(d)) for d in objects.get("deployments", [])]
    out += [expect_indexed_job(j, pods_of(j), configmaps=configmaps) for j in objects.get("indexedjobs", [])]
    out += [expect_statefulset(s, pods_of(s), configmaps=configmaps) for s in objects.get("statefulsets", [])]
    out += [expect_podgroup(g, pods_of(g), configmaps=configmaps) for g in objects.get("podgroups", [])]
    return out
