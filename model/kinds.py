"""The workload kinds the controller serves, as one table.

Each kind says where its objects live in the API (to watch them), how to
reduce one to a :class:`~model.records.WorkloadRecord`, and how to read a pod's
identity in it. Each row is read from its kind's module (:func:`_row`), so the
facts are spelled once, there; adding a kind means adding a module and its
row here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from model import deployment, indexedjob, jobset, lws, podgroup, statefulset, trainjob, volcano
from model.identity import PodIdentity
from model.records import WorkloadRecord

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    """A watched workload kind: its API location and its reading rules."""

    short: str
    kind: str
    group: str
    version: str
    plural: str
    record: Callable[..., WorkloadRecord]
    identify: Callable[[Json], PodIdentity | None] | None
    key_prefix: str = ""

    @property
    def prefix(self) -> str:
        """The first part of this kind's job keys (a TrainJob shares its JobSet's)."""
        return self.key_prefix or self.short

    @property
    def api_version(self) -> str:
        """``group/version`` (just ``version`` for the core group)."""
        return f"{self.group}/{self.version}" if self.group else self.version


def _row(module: ModuleType, *, key_prefix: str = "") -> WorkloadKind:
    """The row of the kind that ``module`` models, from the module's own names.

    Every kind module defines ``SHORT``, ``KIND``, ``GROUP``, ``VERSION``,
    ``PLURAL`` and ``workload_record``; ``identify`` if its pods name it
    (a TrainJob's pods are its JobSet's). ``key_prefix``: the kind is served
    under another kind's job keys.
    """
    return WorkloadKind(
        short=module.SHORT,
        kind=module.KIND,
        group=module.GROUP,
        version=module.VERSION,
        plural=module.PLURAL,
        record=module.workload_record,
        identify=getattr(module, "identify", None),
        key_prefix=key_prefix,
    )


VOLCANO_JOB = _row(volcano)
# A TrainJob is served under its JobSet's job keys (its workload_record's
# ``short``), so that the JobSet's pods reach it.
TRAINJOB = _row(trainjob, key_prefix=jobset.SHORT)
JOBSET = _row(jobset)
DEPLOYMENT = _row(deployment)
INDEXED_JOB = _row(indexedjob)
LEADER_WORKER_SET = _row(lws)
STATEFULSET = _row(statefulset)
# Its pods are named by their spec (spec.schedulingGroup), not their metadata: model.pod reads it.
POD_GROUP = _row(podgroup)

#: Every kind. Pods are matched against them in this order; for a job key
#: shared by two kinds (TrainJob and its JobSet) the earlier kind serves it.
#: A JobSet's pods also carry the Job controller's marks, so JobSet comes
#: before the Indexed Job; a LeaderWorkerSet's pods are StatefulSet pods, so
#: LeaderWorkerSet comes before StatefulSet.
KINDS: tuple[WorkloadKind, ...] = (
    VOLCANO_JOB,
    TRAINJOB,
    JOBSET,
    DEPLOYMENT,
    INDEXED_JOB,
    LEADER_WORKER_SET,
    STATEFULSET,
    POD_GROUP,
)
BY_SHORT: dict[str, WorkloadKind] = {k.short: k for k in KINDS}


def identify_pod(meta: Json) -> PodIdentity | None:
    """The first kind's reading of the pod's identity, None if no kind claims it."""
    for kind in KINDS:
        if kind.identify is not None:
            identity = kind.identify(meta)
            if identity is not None:
                return identity
    return None


#: The ``kind`` label of a workload no row describes (never expected: the
#: label's values stay :data:`KINDS`' short names plus this one).
OTHER_KIND = "other"
_SHORT_BY_API: dict[tuple[str, str], str] = {(k.api_version, k.kind): k.short for k in KINDS}


def short_name(*, api_version: str, kind: str) -> str:
    """The short name (``vcjob``, ``lws``, ...) of the watched kind ``kind`` of ``api_version``;
    :data:`OTHER_KIND` for a kind no row describes. The metrics' ``kind`` label: its values are
    bounded by the table, whatever the objects say."""
    return _SHORT_BY_API.get((api_version, kind), OTHER_KIND)


def label_values() -> tuple[str, ...]:
    """Every value :func:`short_name` can return, in :data:`KINDS` order."""
    return (*(k.short for k in KINDS), OTHER_KIND)
