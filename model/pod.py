"""Reduce a pod's JSON to a :class:`~model.records.PodRecord`.

Called by the pod informer for every event, so it reads only what the
product uses and allocates one small record.

Strings that many pods share (namespace, job key, owner uid, task, phase,
node, host IP, creation second) are interned: the informer keeps every
selected pod's record for as long as the pod lives, and without interning
each record would hold its own copy of each, decoded afresh from every
event (about 40 % of a record's memory at 1,600 pods).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from sys import intern
from typing import Any

from model import podgroup
from model.keys import (
    DEFAULT_PORT,
    DEVICE_ANNOTATIONS,
    EPOCH_ANNOTATION,
    HARDWARE_TYPE_ANNOTATION,
    NETWORK_STATUS_ANNOTATION,
    RANK_INDEX_ANNOTATION,
    REGISTERED_ANNOTATION,
    SUPER_POD_RANK_ANNOTATION,
)
from model.kinds import identify_pod
from model.network import Attachment, host_port, pod_claims
from model.records import JobKey, PodRecord, PodUID
from model.template import member_port, member_slots, wants_devices
from ranktable.registration import parse_registration

Json = dict[str, Any]


def pod_record(raw: Json, *, default_port: int = DEFAULT_PORT) -> PodRecord:
    """The slim record of a pod (``job`` None when no workload kind claims it)."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    annotations = meta.get("annotations") or {}
    identity = identify_pod(meta)
    port, port_error = member_port(spec, annotations, default=default_port)
    slots, slots_error = member_slots(spec, annotations)
    registered_ip, registration_error = "", None
    registered_other_ips: tuple[str, ...] = ()
    try:
        registration = parse_registration(annotations.get(REGISTERED_ANNOTATION))
    except ValueError as e:
        registration_error = str(e)
    else:
        if registration is not None:
            registered_ip, registered_other_ips = registration.ip, registration.other_ips
    ip = str(status.get("podIP") or "")
    return PodRecord(
        namespace=intern(str(meta.get("namespace", ""))),
        name=str(meta.get("name", "")),
        uid=PodUID(str(meta.get("uid", ""))),
        job=JobKey(intern(identity.job)) if identity else None,
        owner_uid=intern(identity.owner_uid) if identity and identity.owner_uid else None,
        task=intern(identity.task) if identity else "",
        index=identity.index if identity else None,
        version=identity.version if identity else None,
        job_index=identity.job_index if identity else 0,
        phase=intern(str(status.get("phase", ""))),
        ip=ip,
        host_ip=intern(str(status.get("hostIP") or "")),
        node=intern(str(spec.get("nodeName") or "")),
        port=port,
        created=intern(str(meta.get("creationTimestamp", ""))),
        deleting=bool(meta.get("deletionTimestamp")),
        devices=next((annotations[k] for k in DEVICE_ANNOTATIONS if k in annotations), None),
        wants_devices=wants_devices(spec),
        port_error=port_error,
        epoch_seen=annotations.get(EPOCH_ANNOTATION, ""),
        slots=slots,
        slots_error=slots_error,
        rank_index=annotations.get(RANK_INDEX_ANNOTATION),
        hardware=annotations.get(HARDWARE_TYPE_ANNOTATION),
        super_pod_rank=annotations.get(SUPER_POD_RANK_ANNOTATION),
        registered_ip=registered_ip,
        registration_error=registration_error,
        mounts=mounted_configmaps(spec),
        other_ips=_other_ips(status, ip),
        host_network=bool(spec.get("hostNetwork")),
        host_port=host_port(spec),
        network_status=annotations.get(NETWORK_STATUS_ANNOTATION),
        registered_other_ips=registered_other_ips,
        claims=pod_claims(spec, status),
        **_group_fields(meta, spec),
    )


def _group_fields(meta: Json, spec: Json) -> dict[str, Any]:
    """``group`` and ``group_index`` of a pod naming a PodGroup, nothing for the others (most pods)."""
    group = podgroup.group_of(str(meta.get("namespace", "")), spec)
    if group is None:
        return {}
    return {"group": JobKey(intern(group)), "group_index": podgroup.member_index(meta)}


def as_group_member(pod: PodRecord) -> PodRecord:
    """``pod`` as a member of the PodGroup it names (:attr:`~model.records.PodRecord.group`): that job,
    its one task, its rank there; no version, no owner to compare (a PodGroup owns no pod).
    ``pod`` itself when it names none."""
    if pod.group is None:
        return pod
    return replace(
        pod,
        job=pod.group,
        task=podgroup.TASK,
        index=pod.group_index,
        version=None,
        owner_uid=None,
        job_index=0,
    )


def job_pods(key: JobKey, pods: list[PodRecord]) -> list[PodRecord]:
    """The pods indexed under job ``key`` as that job's members: a PodGroup's pods as :func:`as_group_member`."""
    if not key.startswith(podgroup.SHORT + "/"):
        return pods
    return [as_group_member(p) if p.group == key else p for p in pods]


def _other_ips(status: Json, ip: str) -> tuple[str, ...]:
    """The ``status.podIPs`` entries besides ``ip`` (empty on single-stack, the common case, without allocating)."""
    entries = status.get("podIPs")
    if not isinstance(entries, list) or len(entries) < 2:
        return ()
    return tuple(
        str(e["ip"]) for e in entries if isinstance(e, dict) and isinstance(e.get("ip"), str) and e["ip"] != ip
    )


def with_claim_networks(pod: PodRecord, lookup: Callable[[str], tuple[Attachment, ...] | str | None]) -> PodRecord:
    """``pod`` with :attr:`~model.records.PodRecord.claim_networks` filled from ``lookup``
    (``namespace/name`` of a ResourceClaim to its cached record); ``pod`` itself when it has no claim known there."""
    found = tuple(
        (ref, record) for ref, name in pod.claims if (record := lookup(f"{pod.namespace}/{name}")) is not None
    )
    return replace(pod, claim_networks=found) if found else pod


def mounted_configmaps(spec: Json) -> tuple[str, ...]:
    """The ConfigMaps a pod spec's volumes project (``configMap`` volumes, ``projected`` sources), sorted."""
    names: set[str] = set()
    for volume in spec.get("volumes") or ():
        if not isinstance(volume, dict):
            continue
        sources = [volume] + [s for s in (volume.get("projected") or {}).get("sources") or () if isinstance(s, dict)]
        for source in sources:
            name = (source.get("configMap") or {}).get("name")
            if isinstance(name, str) and name:
                names.add(intern(name))
    return tuple(sorted(names))
