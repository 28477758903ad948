"""A pod's place in its workload, as a workload model reads it from the pod."""

from __future__ import annotations

from dataclasses import dataclass

from model.records import JobKey


@dataclass(frozen=True, slots=True)
class PodIdentity:
    """Which job a pod belongs to and which member it is.

    ``index`` None: the kind has no per-pod index. ``version`` None: the pod
    carries no job version. ``owner_uid`` None: no owner reference to check.
    """

    job: JobKey
    task: str
    index: int | None
    version: int | None
    owner_uid: str | None
    job_index: int = 0


def meta_value(meta: dict[str, object], key: str) -> str | None:
    """``key`` from the labels, else the annotations, of object metadata."""
    for section in ("labels", "annotations"):
        values = meta.get(section)
        if isinstance(values, dict) and key in values:
            return str(values[key])
    return None


def int_or_none(value: str | None) -> int | None:
    """``value`` as an int, None when absent or not a decimal integer."""
    if value is None:
        return None
    value = value.strip()
    return int(value) if value.isascii() and value.isdigit() else None
