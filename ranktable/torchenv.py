"""PyTorch's rendezvous variables, derived from a completed cluster spec.

``torch.distributed``'s ``env://`` init method reads ``MASTER_ADDR``,
``MASTER_PORT``, ``RANK`` and ``WORLD_SIZE``. Rank 0 of the spec is the
master: its pod IP and member port are the rendezvous address. Every member
of the spec counts towards ``WORLD_SIZE`` whatever its task, because the spec's
ranks are already the global ranks (task order, then index).

Pods that run several processes each start ``torchrun`` instead, which reads
``PET_*`` variables (:func:`torchrun_env`): nodes are pods, the node rank is
the pod's rank, processes per node are the member's ``slots``.
"""

from __future__ import annotations

from ranktable.clusterspec import ClusterSpec, member_for_pod, require_completed


def torch_env(spec: ClusterSpec, *, pod: str) -> dict[str, str]:
    """``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE`` for member ``pod``.

    The spec must be completed (a partial world would hang the rendezvous);
    raises :class:`SpecError` otherwise and
    :class:`~ranktable.clusterspec.PodNotInSpec` if ``pod`` is not a member.
    """
    require_completed(spec, "PyTorch environment")
    member = member_for_pod(spec, pod)
    master = spec.members[0]
    return {
        "MASTER_ADDR": master.ip,
        "MASTER_PORT": str(master.port),
        "RANK": str(member.rank),
        "WORLD_SIZE": str(len(spec.members)),
    }


def torchrun_env(spec: ClusterSpec, *, pod: str) -> dict[str, str]:
    """torchrun's variables for member ``pod``: one torchrun per pod, ``slots`` processes each.

    torchrun reads every option from ``PET_<OPTION>`` when the flag is not
    given (its ``env`` argparse action); Kubeflow Trainer's torch runtime sets
    exactly these: ``PET_NNODES`` (pods), ``PET_NPROC_PER_NODE`` (this
    member's slots), ``PET_NODE_RANK`` (this pod's rank), ``PET_MASTER_ADDR``
    and ``PET_MASTER_PORT`` (rank 0's pod IP and member port). ``NNODES`` and
    ``NODE_RANK`` carry the same values for launch scripts that pass them as
    flags. torchrun sets ``RANK``/``WORLD_SIZE`` for its own children, so the
    one-process-per-pod values of :func:`torch_env` do not get in its way.
    """
    require_completed(spec, "torchrun environment")
    member = member_for_pod(spec, pod)
    master = spec.members[0]
    nodes = str(len(spec.members))
    return {
        "NNODES": nodes,
        "NODE_RANK": str(member.rank),
        "PET_NNODES": nodes,
        "PET_NODE_RANK": str(member.rank),
        "PET_NPROC_PER_NODE": str(member.slots),
        "PET_MASTER_ADDR": master.ip,
        "PET_MASTER_PORT": str(master.port),
    }
