"""MindSpore's variables, derived from a completed cluster spec, for both launch modes.

**Dynamic cluster** (MindSpore's recommended start, no OpenMPI): every
process learns its role and the scheduler's address from ``MS_ROLE``
(``MS_SCHED`` or ``MS_WORKER``), ``MS_SCHED_HOST``, ``MS_SCHED_PORT``,
``MS_WORKER_NUM`` and optionally ``MS_NODE_ID`` (a unique id per process).
The scheduler is one process that only coordinates:

* a member of a task named ``scheduler`` (ascend-operator's replica type) is
  it: its pod IP and member port are the scheduler's address, it gets
  ``MS_ROLE=MS_SCHED``, and it is not counted among the workers;
* otherwise the scheduler's address is rank 0's pod IP and member port, and
  the launch script on rank 0 starts the scheduler beside its worker
  (``MS_ROLE=MS_SCHED python train.py &``).

One worker process per pod: ``MS_WORKER_NUM`` counts worker pods and
``MS_NODE_ID`` is the pod's position among them.

**Rank table** (Ascend, ``hccl.json``): ``RANK_TABLE_FILE`` names the table
(set by the launcher), ``RANK_SIZE`` is the number of devices in it and
``RANK_ID`` the global rank of this pod's first device (the table's
``rank_id``); a pod with N devices starts N processes with ``RANK_ID+i``
(and ``DEVICE_ID`` i). Only for specs whose members carry devices.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ranktable.clusterspec import ClusterSpec, SpecError, member_for_pod, require_completed

if TYPE_CHECKING:
    from typing import Final

#: The task whose member is MindSpore's scheduler.
SCHEDULER_TASK: Final = "scheduler"


def mindspore_env(spec: ClusterSpec, *, pod: str) -> dict[str, str]:
    """The ``MS_*`` dynamic-cluster variables, plus ``RANK_ID``/``RANK_SIZE`` for device jobs.

    Raises :class:`SpecError` unless the spec is completed or if it has more
    than one scheduler member, :class:`~ranktable.clusterspec.PodNotInSpec`
    if ``pod`` is not a member.
    """
    require_completed(spec, "MindSpore environment")
    member = member_for_pod(spec, pod)
    schedulers = [m for m in spec.members if m.task == SCHEDULER_TASK]
    if len(schedulers) > 1:
        raise SpecError(
            f"MindSpore runs one scheduler, the spec has {len(schedulers)}: {', '.join(m.pod for m in schedulers)}"
        )
    scheduler = schedulers[0] if schedulers else spec.members[0]
    workers = [m for m in spec.members if m.task != SCHEDULER_TASK]
    env = {
        "MS_ROLE": "MS_SCHED" if member.task == SCHEDULER_TASK else "MS_WORKER",
        "MS_SCHED_HOST": scheduler.ip,
        "MS_SCHED_PORT": str(scheduler.port),
        "MS_WORKER_NUM": str(len(workers)),
    }
    if member.task != SCHEDULER_TASK:
        env["MS_NODE_ID"] = str(workers.index(member))
    if spec.has_devices:
        first = 0
        for m in spec.members:
            if m.pod == pod:
                break
            first += len(m.devices)
        env["RANK_ID"] = str(first)
        env["RANK_SIZE"] = str(sum(len(m.devices) for m in spec.members))
    return env
