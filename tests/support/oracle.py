"""An oracle for the chaos runs: what every job's spec must be, from the API server's objects.

Written from the contract (docs/design.md), not from ``agent/decide.py`` nor the
models: it reads the raw Volcano Jobs, Deployments, pods and ConfigMaps as
the API server returns them and computes, per job, the members the spec must
list (rank order from the workload's task order, then index; Deployments by
pod creation, then name), their uids, IPs and ports, and the status. Label,
annotation and default values are imported from :mod:`model.keys` (one
place for each fact); the rules are restated here. It does not predict the
epoch, which depends on history: callers check epochs over time (never
down, up on every member change).

Only the shapes the chaos runs create are covered: Volcano Jobs whose pods
carry the job-controller's labels, and Deployments; no devices.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from model.keys import (
    CONFIG_VOLUME_NAMES,
    CONFIGMAP_PREFIX,
    DEFAULT_PORT,
    POD_TEMPLATE_HASH,
    PORT_ANNOTATION,
    PORT_ENV,
    PORT_NAMES,
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


def expect_volcano(job: Json, pods: list[Json]) -> Expected:
    """Slots: tasks in spec order, indices 0..replicas-1; a slot is filled by a
    counting pod of this job (owner uid) and its current version."""
    meta = _meta(job)
    name, uid = str(meta["name"]), str(meta.get("uid", ""))
    version = int(((job.get("status") or {}).get("version")) or 0)
    tasks = [(str(t["name"]), int(t.get("replicas") or 0)) for t in (job.get("spec") or {}).get("tasks") or []]
    by_slot: dict[tuple[str, int], list[Json]] = {}
    for pod in pods:
        pm = _meta(pod)
        labels, annotations = pm.get("labels") or {}, pm.get("annotations") or {}
        if labels.get(VOLCANO_JOB_NAME) != name:
            continue
        if not any(ref.get("uid") == uid for ref in pm.get("ownerReferences") or []):
            continue
        if str(annotations.get(VOLCANO_JOB_VERSION, version)) != str(version):
            continue
        if not _counts(pod):
            continue
        by_slot.setdefault((str(labels.get(VOLCANO_TASK_SPEC)), int(labels.get(VOLCANO_TASK_INDEX, -1))), []).append(
            pod
        )
    members: list[Member] = []
    rank = 0
    for task, replicas in tasks:
        for index in range(replicas):
            candidates = by_slot.get((task, index), [])
            if candidates:
                newest = max(candidates, key=lambda p: (str(_meta(p).get("creationTimestamp", "")), _meta(p)["name"]))
                members.append(_member(rank, task, index, newest))
            rank += 1
    complete = rank > 0 and len(members) == rank
    templates = [t.get("template") or {} for t in (job.get("spec") or {}).get("tasks") or []]
    return Expected(
        namespace=str(meta["namespace"]),
        configmap=_configmap_name(name, templates),
        kind="Job",
        name=name,
        uid=uid,
        version=version,
        status="completed" if complete else "initializing",
        members=tuple(members) if complete else (),
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


def expect_all(objects: dict[str, list[Json]]) -> list[Expected]:
    """Every job's expected spec from listed ``jobs``, ``deployments``, ``pods`` (raw JSON)."""
    pods_by_ns: dict[str, list[Json]] = {}
    for pod in objects.get("pods", []):
        pods_by_ns.setdefault(str(_meta(pod).get("namespace")), []).append(pod)
    out = [expect_volcano(j, pods_by_ns.get(str(_meta(j)["namespace"]), [])) for j in objects.get("jobs", [])]
    out += [
        expect_deployment(d, pods_by_ns.get(str(_meta(d)["namespace"]), [])) for d in objects.get("deployments", [])
    ]
    return out
