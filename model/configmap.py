"""Reduce a ConfigMap's JSON to a :class:`~model.records.ConfigMapRecord`."""

from __future__ import annotations

from typing import Any

from model.keys import JOB_ANNOTATION, MANAGED_LABEL, MANAGED_VALUE
from model.records import ConfigMapRecord, JobKey

Json = dict[str, Any]


def configmap_record(raw: Json) -> ConfigMapRecord:
    """The slim record of a ConfigMap; ``managed`` says it carries our label."""
    meta = raw.get("metadata") or {}
    job = (meta.get("annotations") or {}).get(JOB_ANNOTATION)
    return ConfigMapRecord(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        managed=(meta.get("labels") or {}).get(MANAGED_LABEL) == MANAGED_VALUE,
        job=JobKey(job) if job else None,
        data=dict(raw.get("data") or {}),
    )


def configmap_body(
    *,
    namespace: str,
    name: str,
    job: JobKey,
    owner: dict[str, object],
    data: dict[str, str],
    resource_version: str | None = None,
) -> Json:
    """The full ConfigMap the controller writes (create, or replace at ``resource_version``)."""
    meta: Json = {
        "name": name,
        "namespace": namespace,
        "labels": {MANAGED_LABEL: MANAGED_VALUE},
        "annotations": {JOB_ANNOTATION: job},
        "ownerReferences": [owner],
    }
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
