"""PyTorch's rendezvous variables, derived from a completed cluster spec.

``torch.distributed``'s ``env://`` init method reads ``MASTER_ADDR``,
``MASTER_PORT``, ``RANK`` and ``WORLD_SIZE``. Rank 0 of the spec is the
master: its pod IP and member port are the rendezvous address. Every member
of the spec counts towards ``WORLD_SIZE`` whatever its task, because the spec's
ranks are already the global ranks (task order, then index).
"""

from __future__ import annotations

from ranktable.clusterspec import ClusterSpec, SpecError, member_for_pod


def torch_env(spec: ClusterSpec, *, pod: str) -> dict[str, str]:
    """``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE`` for member ``pod``.

    The spec must be completed (a partial world would hang the rendezvous);
    raises :class:`SpecError` otherwise and
    :class:`~ranktable.clusterspec.PodNotInSpec` if ``pod`` is not a member.
    """
    if not spec.completed:
        raise SpecError(f"the spec is {spec.status}, not completed: no PyTorch environment can be derived yet")
    member = member_for_pod(spec, pod)
    master = spec.members[0]
    return {
        "MASTER_ADDR": master.ip,
        "MASTER_PORT": str(master.port),
        "RANK": str(member.rank),
        "WORLD_SIZE": str(len(spec.members)),
    }
