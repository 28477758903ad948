"""JAX's multi-process variables, derived from a completed cluster spec.

One JAX process per pod (as Kubeflow Trainer's JAX runtime runs it). Process
0 hosts the coordinator service on its pod IP and member port; every process
connects there. The variables:

* ``JAX_COORDINATOR_ADDRESS``: ``ip:port`` of rank 0. ``jax.distributed.initialize()``
  reads this one from the environment itself (checked in jax 0.10.2,
  ``jax/_src/distributed.py``).
* ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``: the pod count and this pod's
  rank. JAX does not read these itself; they are the names Kubeflow
  Trainer's JAX guide has the script pass on::

      jax.distributed.initialize(
          num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
          process_id=int(os.environ["JAX_PROCESS_ID"]),
      )
"""

from __future__ import annotations

from ranktable.clusterspec import ClusterSpec, member_for_pod, require_completed


def jax_env(spec: ClusterSpec, *, pod: str) -> dict[str, str]:
    """``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID`` for member ``pod``.

    Raises :class:`SpecError` unless the spec is completed,
    :class:`~ranktable.clusterspec.PodNotInSpec` if ``pod`` is not a member.
    """
    require_completed(spec, "JAX environment")
    member = member_for_pod(spec, pod)
    return {
        "JAX_COORDINATOR_ADDRESS": spec.members[0].address,
        "JAX_NUM_PROCESSES": str(len(spec.members)),
        "JAX_PROCESS_ID": str(member.rank),
    }
