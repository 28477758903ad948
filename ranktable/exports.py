"""Everything ``ring-launch`` exports for one member, for every framework, from one spec.

One completed spec serves every common framework: the trainer picks the
variables it reads and ignores the rest, so the launcher needs no
``--framework`` flag and one image can switch framework without a new pod
template. :data:`FRAMEWORKS` is the table users see (``ring-launch --help``,
docs/launcher.md); :func:`member_env` computes the values. Pure: the hostfiles' text
comes from :mod:`ranktable.hostfile`, the launcher writes them.

Name clashes are avoided by the frameworks themselves: PyTorch's ``RANK`` /
``WORLD_SIZE`` and MindSpore's ``RANK_ID`` / ``RANK_SIZE`` are different
names; torchrun replaces ``RANK``/``WORLD_SIZE`` for its children.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ranktable.clusterspec import ClusterSpec
from ranktable.frozen import record
from ranktable.hostfile import hostfile_env
from ranktable.jaxenv import jax_env
from ranktable.mindsporeenv import mindspore_env
from ranktable.netenv import network_env
from ranktable.paddleenv import paddle_env
from ranktable.tfconfig import tf_config
from ranktable.torchenv import torch_env, torchrun_env

if TYPE_CHECKING:
    from typing import Final


@record
class Framework:
    """One row of the exports table: who reads ``exports``, and when they are set."""

    name: str
    exports: str
    when: str = "always"


FRAMEWORKS: Final = (
    Framework("TensorFlow (MultiWorkerMirrored, ParameterServer)", "TF_CONFIG"),
    Framework("PyTorch, one process per pod (env://)", "MASTER_ADDR MASTER_PORT RANK WORLD_SIZE"),
    Framework(
        "PyTorch torchrun, slots processes per pod",
        "PET_NNODES PET_NODE_RANK PET_NPROC_PER_NODE PET_MASTER_ADDR PET_MASTER_PORT NNODES NODE_RANK",
    ),
    Framework("JAX (jax.distributed.initialize)", "JAX_COORDINATOR_ADDRESS JAX_NUM_PROCESSES JAX_PROCESS_ID"),
    Framework(
        "PaddlePaddle collective",
        "PADDLE_TRAINER_ID PADDLE_TRAINERS_NUM PADDLE_CURRENT_ENDPOINT PADDLE_TRAINER_ENDPOINTS",
    ),
    Framework("MindSpore dynamic cluster", "MS_ROLE MS_SCHED_HOST MS_SCHED_PORT MS_WORKER_NUM MS_NODE_ID"),
    Framework(
        "MindSpore / HCCL rank table (Ascend)", "RANK_TABLE_FILE RANK_ID RANK_SIZE", "the job has Ascend devices"
    ),
    Framework(
        "MPI, DeepSpeed, Horovod hostfiles (<ip> slots=N; MPICH/Intel <ip>:N)",
        "RING_HOSTFILE OMPI_MCA_orte_default_hostfile HYDRA_HOST_FILE",
        "the hostfile directory is writable",
    ),
    Framework(
        "Interfaces (NCCL, gloo, TensorPipe, HCCL, Open MPI, MPICH/Intel MPI Hydra)",
        "NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME TP_SOCKET_IFNAME HCCL_SOCKET_IFNAME HCCL_IF_IP "
        "OMPI_MCA_btl_tcp_if_include OMPI_MCA_oob_tcp_if_include HYDRA_IFACE I_MPI_HYDRA_IFACE",
        "the job chose a secondary network (ring-controller.io/network)",
    ),
    Framework(
        "HCCL's family and ports",
        "HCCL_SOCKET_FAMILY; HCCL_IF_BASE_PORT",
        "an IPv6 address or a secondary network; members sharing an IP (hostNetwork)",
    ),
    Framework("ring-launch itself", "RING_EPOCH RING_IP RING_PORT; RING_RESTART_COUNT (with --supervise)"),
)


def frameworks_text() -> str:
    """:data:`FRAMEWORKS` as the plain-text table ``ring-launch --help`` prints."""
    lines = []
    for f in FRAMEWORKS:
        when = "" if f.when == "always" else f" (when {f.when})"
        lines.append(f"  {f.name}{when}:\n      {f.exports}")
    return "\n".join(lines)


def member_env(
    spec: ClusterSpec,
    *,
    pod: str,
    rank_table_file: str | None = None,
    hostfile_dir: str | None = None,
) -> dict[str, str]:
    """Every variable of :data:`FRAMEWORKS` for member ``pod`` of a completed ``spec``.

    ``rank_table_file`` (set when the job has a rank table) becomes
    ``RANK_TABLE_FILE``; ``hostfile_dir`` (where the caller wrote the
    hostfiles) the hostfile variables; each is left out when None. Raises
    :class:`~ranktable.clusterspec.SpecError` when a framework's rules reject
    the spec (two TensorFlow chiefs, two MindSpore schedulers) and
    :class:`~ranktable.clusterspec.PodNotInSpec` for a foreign pod.
    """
    env = {"TF_CONFIG": json.dumps(tf_config(spec, pod=pod), separators=(",", ":"))}
    env.update(torch_env(spec, pod=pod))
    env.update(torchrun_env(spec, pod=pod))
    env.update(jax_env(spec, pod=pod))
    env.update(paddle_env(spec, pod=pod))
    env.update(mindspore_env(spec, pod=pod))
    env.update(network_env(spec, pod=pod))
    if hostfile_dir is not None:
        env.update(hostfile_env(hostfile_dir))
    if rank_table_file:
        env["RANK_TABLE_FILE"] = rank_table_file
    env["RING_EPOCH"] = str(spec.epoch)
    return env
