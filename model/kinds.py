"""The workload kinds the controller serves, as one table.

Each kind says where its objects live in the API (to watch them), how to
reduce one to a :class:`~model.records.WorkloadRecord`, and how to read a pod's
identity in it. Adding a kind means adding a module and a row here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from model import deployment, jobset, trainjob, volcano
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


VOLCANO_JOB = WorkloadKind(
    short=volcano.SHORT,
    kind=volcano.KIND,
    group=volcano.GROUP,
    version=volcano.VERSION,
    plural=volcano.PLURAL,
    record=volcano.workload_record,
    identify=volcano.identify,
)

TRAINJOB = WorkloadKind(
    short=trainjob.SHORT,
    kind=trainjob.KIND,
    group=trainjob.GROUP,
    version=trainjob.VERSION,
    plural=trainjob.PLURAL,
    record=trainjob.workload_record,
    identify=None,  # its pods are its JobSet's
    key_prefix=jobset.SHORT,
)

JOBSET = WorkloadKind(
    short=jobset.SHORT,
    kind=jobset.KIND,
    group=jobset.GROUP,
    version=jobset.VERSION,
    plural=jobset.PLURAL,
    record=jobset.workload_record,
    identify=jobset.identify,
)

DEPLOYMENT = WorkloadKind(
    short=deployment.SHORT,
    kind=deployment.KIND,
    group=deployment.GROUP,
    version=deployment.VERSION,
    plural=deployment.PLURAL,
    record=deployment.workload_record,
    identify=deployment.identify,
)

#: Every kind. Pods are matched against them in this order; for a job key
#: shared by two kinds (TrainJob and its JobSet) the earlier kind serves it.
KINDS: tuple[WorkloadKind, ...] = (VOLCANO_JOB, TRAINJOB, JOBSET, DEPLOYMENT)
BY_SHORT: dict[str, WorkloadKind] = {k.short: k for k in KINDS}


def identify_pod(meta: Json) -> PodIdentity | None:
    """The first kind's reading of the pod's identity, None if no kind claims it."""
    for kind in KINDS:
        if kind.identify is not None:
            identity = kind.identify(meta)
            if identity is not None:
                return identity
    return None
