"""Reduce a ConfigMap's JSON to a :class:`~model.records.ConfigMapRecord`."""

from __future__ import annotations

import base64
from typing import Any

from model.keys import JOB_ANNOTATION, MANAGED_LABEL, MANAGED_VALUE
from model.records import ConfigMapRecord, JobKey
from ranktable.clusterspec import SpecError
from ranktable.stored import GZIP_FILES, binary_from_json

Json = dict[str, Any]


def configmap_record(raw: Json) -> ConfigMapRecord:
    """The slim record of a ConfigMap; ``managed`` says it carries our label.

    Of ``binaryData`` only the spec's compressed keys are kept (decoded from
    base64); a value that is not base64 is dropped, so the spec reads as
    unreadable and is rewritten, as malformed plain text would be.
    """
    meta = raw.get("metadata") or {}
    job = (meta.get("annotations") or {}).get(JOB_ANNOTATION)
    binary = raw.get("binaryData") or {}
    try:
        binary_data = binary_from_json({k: v for k, v in binary.items() if k in GZIP_FILES})
    except SpecError:
        binary_data = {}
    return ConfigMapRecord(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        managed=(meta.get("labels") or {}).get(MANAGED_LABEL) == MANAGED_VALUE,
        job=JobKey(job) if job else None,
        data=dict(raw.get("data") or {}),
        binary_data=binary_data,
    )


def configmap_body(
    *,
    namespace: str,
    name: str,
    job: JobKey,
    owner: dict[str, object],
    data: dict[str, str],
    binary_data: dict[str, bytes] | None = None,
    resource_version: str | None = None,
) -> Json:
    """The full ConfigMap the controller writes (create, or replace at ``resource_version``).

    ``data`` and ``binary_data`` are the spec's form (a
    :class:`ranktable.stored.Stored`): plain keys, or compressed ones (raw
    bytes, base64-encoded here). The whole object is written, so a key of the
    other form left from an earlier epoch goes.
    """
    meta: Json = {
        "name": name,
        "namespace": namespace,
        "labels": {MANAGED_LABEL: MANAGED_VALUE},
        "annotations": {JOB_ANNOTATION: job},
        "ownerReferences": [owner],
    }
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    body: Json = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
    if binary_data:
        body["binaryData"] = {k: base64.b64encode(v).decode("ascii") for k, v in binary_data.items()}
    return body
