"""Reduce a pod's JSON to a :class:`~model.records.PodRecord`.

Called by the pod informer for every event, so it reads only what the
product uses and allocates one small record.
"""

from __future__ import annotations

from typing import Any

from model.keys import DEFAULT_PORT, DEVICE_ANNOTATION
from model.kinds import identify_pod
from model.records import PodRecord, PodUID
from model.template import member_port, wants_devices

Json = dict[str, Any]


def pod_record(raw: Json, *, default_port: int = DEFAULT_PORT) -> PodRecord:
    """The slim record of a pod (``job`` None when no workload kind claims it)."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    annotations = meta.get("annotations") or {}
    identity = identify_pod(meta)
    port, port_error = member_port(spec, annotations, default=default_port)
    return PodRecord(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=PodUID(str(meta.get("uid", ""))),
        job=identity.job if identity else None,
        owner_uid=identity.owner_uid if identity else None,
        task=identity.task if identity else "",
        index=identity.index if identity else None,
        version=identity.version if identity else None,
        job_index=identity.job_index if identity else 0,
        phase=str(status.get("phase", "")),
        ip=str(status.get("podIP") or ""),
        host_ip=str(status.get("hostIP") or ""),
        node=str(spec.get("nodeName") or ""),
        port=port,
        created=str(meta.get("creationTimestamp", "")),
        deleting=bool(meta.get("deletionTimestamp")),
        devices=annotations.get(DEVICE_ANNOTATION),
        wants_devices=wants_devices(spec),
        port_error=port_error,
    )
