"""PaddlePaddle collective training's variables, derived from a completed cluster spec.

Paddle's collective mode (``paddle.distributed`` / fleet, one trainer
process per pod) learns the ring from four variables: ``PADDLE_TRAINER_ID``
(this trainer's rank), ``PADDLE_TRAINERS_NUM`` (the trainer count),
``PADDLE_CURRENT_ENDPOINT`` (this trainer's ``ip:port``) and
``PADDLE_TRAINER_ENDPOINTS`` (every trainer's ``ip:port``, comma-separated,
in rank order). Every member is a trainer; its endpoint is its pod IP and
member port.
"""

from __future__ import annotations

from ranktable.clusterspec import ClusterSpec, member_for_pod, require_completed


def paddle_env(spec: ClusterSpec, *, pod: str) -> dict[str, str]:
    """The four ``PADDLE_*`` collective variables for member ``pod``.

    Raises :class:`SpecError` unless the spec is completed,
    :class:`~ranktable.clusterspec.PodNotInSpec` if ``pod`` is not a member.
    """
    require_completed(spec, "Paddle environment")
    member = member_for_pod(spec, pod)
    return {
        "PADDLE_TRAINER_ID": str(member.rank),
        "PADDLE_TRAINERS_NUM": str(len(spec.members)),
        "PADDLE_CURRENT_ENDPOINT": member.address,
        "PADDLE_TRAINER_ENDPOINTS": ",".join(m.address for m in spec.members),
    }
