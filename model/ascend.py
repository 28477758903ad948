"""Ascend rules that read the workload and its pods: which rank table, which rank, which super pod.

They follow ascend-operator (Ascend/mind-cluster, ``pkg/ranktable/factory.go``
and ``pkg/utils/superpod.go``), which took over HCCL-Controller's job; the
names they read are in :mod:`model.keys`. The formats themselves are in
:mod:`ranktable.hccl`.

Rank table version (``--ranktable-version auto``), first rule that applies:

1. ``2.0`` when a task's pod template asks for ``huawei.com/npu`` (ascend-operator
   looks at requests only; a template with only a limit gets the same request
   on its pods, so limits count here too);
2. when the workload has the annotation ``huawei.com/schedule_policy``: ``1.2``
   for ``chip2-node16-sp``, ``chip2-node8-sp`` and ``multilevel``, else ``1.0``;
3. ``1.2`` when the workload has the annotation ``sp-block``;
4. ``1.2`` when a task's node selector ``accelerator-type`` is
   ``module-a3-16-super-pod`` or ``module-a3-8-super-pod``;
5. else ``1.0``.

The annotations are the workload's own; for a Deployment its pod template's
annotations count too and win (as ascend-operator reads Deployments).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from model.keys import (
    AFFINITY_CONFIG_ANNOTATION,
    MULTILEVEL_POLICY,
    SCALE_OUT_TYPE_LABEL,
    SCHEDULE_POLICY_ANNOTATION,
    SP_BLOCK_ANNOTATION,
    SUPER_POD_AFFINITY_LABEL,
    SUPER_POD_AFFINITY_SOFT,
    SUPER_POD_POLICIES,
)

if TYPE_CHECKING:
    from model.records import TaskSpec

VERSION_1_0 = "1.0"
VERSION_1_2 = "1.2"
VERSION_2_0 = "2.0"


@dataclass(frozen=True, slots=True)
class AscendJob:
    """What a workload says about its rank table.

    ``table`` the version rule's choice; ``sp_block`` chips per logical super
    pod (0: none given); ``soft`` the soft super-pod strategy (super pods
    from each pod's ``super-pod-rank``); ``scale_out`` the raw
    ``scaleout-type`` label ("" when absent).
    """

    table: str = VERSION_1_0
    sp_block: int = 0
    soft: bool = False
    scale_out: str = ""


def _decimal(value: object) -> int | None:
    text = str(value).strip() if value is not None else ""
    return int(text) if text.isascii() and text.isdigit() else None


def table_version(annotations: Mapping[str, str], tasks: Sequence[TaskSpec]) -> str:
    """The rank table version ascend-operator would choose (module doc, rules 1-5)."""
    if any(t.npu for t in tasks):
        return VERSION_2_0
    policy = annotations.get(SCHEDULE_POLICY_ANNOTATION)
    if policy is not None:
        return VERSION_1_2 if policy in SUPER_POD_POLICIES or policy == MULTILEVEL_POLICY else VERSION_1_0
    if SP_BLOCK_ANNOTATION in annotations:
        return VERSION_1_2
    if any(t.super_pod_selector for t in tasks):
        return VERSION_1_2
    return VERSION_1_0


def sp_block(annotations: Mapping[str, str], tasks: Sequence[TaskSpec]) -> int:
    """Chips per logical super pod: ``sp-block``, else for multilevel jobs
    ``level1`` of ``huawei.com/affinity-config`` times the chips per pod; 0 if neither."""
    block = _decimal(annotations.get(SP_BLOCK_ANNOTATION)) or 0
    if block or annotations.get(SCHEDULE_POLICY_ANNOTATION) != MULTILEVEL_POLICY:
        return block
    pairs: dict[str, int] = {}
    for part in annotations.get(AFFINITY_CONFIG_ANNOTATION, "").split(","):
        key, sep, value = part.partition("=")
        number = _decimal(value)
        if not sep or number is None:
            return 0  # ascend-operator ignores a malformed config as a whole
        pairs[key.strip()] = number
    chips = next((t.chips for t in tasks if t.chips), 0)
    return pairs.get("level1", 0) * chips


def ascend_job(meta: Mapping[str, object], tasks: Iterable[TaskSpec]) -> AscendJob:
    """The :class:`AscendJob` of a workload from its metadata and tasks."""
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    assert isinstance(annotations, dict) and isinstance(labels, dict)
    task_list = tuple(tasks)
    return AscendJob(
        table=table_version(annotations, task_list),
        sp_block=sp_block(annotations, task_list),
        soft=labels.get(SUPER_POD_AFFINITY_LABEL) == SUPER_POD_AFFINITY_SOFT,
        scale_out=str(labels.get(SCALE_OUT_TYPE_LABEL, "")),
    )


def rank_order(indices: Sequence[str | None]) -> list[int] | str | None:
    """Volcano's ``hccl/rankIndex`` of the NPU members, in the job's slot order, checked.

    Returns None when no member carries one (ranks follow the job spec);
    the rank of each member (a permutation of ``0..N-1``) when all carry a
    valid, unique, dense one; else a message saying why they cannot be used.
    """
    if all(i is None for i in indices):
        return None
    missing = sum(1 for i in indices if i is None)
    if missing:
        return f"{missing} of {len(indices)} NPU pods carry no hccl/rankIndex"
    ranks = [_decimal(i) for i in indices]
    bad = [i for i, r in zip(indices, ranks, strict=True) if r is None]
    if bad:
        return f"hccl/rankIndex {bad[0]!r} is not a non-negative integer"
    valid = [r for r in ranks if r is not None]
    if sorted(valid) != list(range(len(valid))):
        twice = sorted({r for r in valid if valid.count(r) > 1})
        if twice:
            return f"hccl/rankIndex {twice[0]} is given to more than one pod"
        return f"hccl/rankIndex values are not 0..{len(valid) - 1} (gaps)"
    return valid


def logical_super_pod(position: int, *, block: int, chips: int) -> int:
    """ascend-operator's logical super pod of the server at ``position`` (0-based, rank order).

    A block of ``block`` chips holds ``block // chips`` servers of ``chips``
    devices (at least one).
    """
    if block <= 0 or chips <= 0:
        return 0
    return position // max(1, block // chips)
