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

The exec limit. Linux copies at most ``MAX_ARG_STRLEN`` (32 pages, 128 KiB
with 4 KiB pages) of any one argument or ``KEY=value`` string into a new
program, and at most a quarter of the stack limit (capped at 6 MiB) of all of
them together; beyond either, ``execve`` fails with ``E2BIG``. Two variables
grow with the member count: ``TF_CONFIG`` (every member's ``ip:port``) and
``PADDLE_TRAINER_ENDPOINTS`` (the same, comma-separated), about 21 bytes a
member, so they pass 128 KiB at about 6,500 members. Neither framework reads
them from a file: TensorFlow's ``TFConfigClusterResolver`` reads the
``TF_CONFIG`` environment variable, Paddle's ``PaddleCloudRoleMaker`` its
environment. :data:`FILE_FORMS` says what the launcher does instead (the
value goes to a file named by ``RING_<NAME>_FILE``, which the trainer reads
into its own environment, where no exec limit applies);
:func:`oversized` and :func:`exec_overflow` are the checks.
"""

from __future__ import annotations

import json
import os
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
    from collections.abc import Mapping, Sequence
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
        "Families (HCCL, NCCL) and HCCL's ports",
        "HCCL_SOCKET_FAMILY NCCL_SOCKET_FAMILY; HCCL_IF_BASE_PORT",
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


#: Pages in Linux's ``MAX_ARG_STRLEN``, the most ``execve`` copies of one ``KEY=value`` string.
MAX_ARG_STRLEN_PAGES: Final = 32
#: Linux's cap on all argument and environment strings together, whatever the stack limit:
#: three quarters of the default 8 MiB stack (``_STK_LIM / 4 * 3`` in fs/exec.c).
ARG_AREA_CAP: Final = 6 * 1024 * 1024
#: Environment variable: ``stop`` makes the launcher exit (:data:`ranktable.launch.exitcodes.EXEC_LIMIT`)
#: instead of writing an oversized variable to a file (``file``, the default).
OVERSIZED_ENV: Final = "RING_OVERSIZED"


@record
class FileForm:
    """What replaces variable ``name`` when it is over the exec limit: the file named by
    ``RING_<name>_FILE`` and who reads it (``reader``, as docs/launcher.md shows it)."""

    name: str
    reader: str


#: The variables that grow with the member count, and how a trainer gets them past the exec limit.
FILE_FORMS: Final = (
    FileForm(
        "TF_CONFIG",
        "TensorFlow reads TF_CONFIG only from its environment (TFConfigClusterResolver): call "
        "ranktable.tfconfig.setup_tf_config() in the trainer before TensorFlow starts, or set "
        "os.environ['TF_CONFIG'] from the file",
    ),
    FileForm(
        "PADDLE_TRAINER_ENDPOINTS",
        "Paddle reads PADDLE_TRAINER_ENDPOINTS only from its environment (PaddleCloudRoleMaker): set "
        "os.environ['PADDLE_TRAINER_ENDPOINTS'] from the file before fleet.init()",
    ),
)


@record
class ExecLimits:
    """The exec limits of this system: bytes of one ``KEY=value`` string with its NUL
    (``per_string``) and of all argument and environment strings with their pointers (``total``)."""

    per_string: int
    total: int


def exec_limits() -> ExecLimits:
    """This system's :class:`ExecLimits` (page size and ``ARG_MAX`` from ``sysconf``)."""
    page = os.sysconf("SC_PAGE_SIZE")
    arg_max = os.sysconf("SC_ARG_MAX")
    return ExecLimits(
        per_string=MAX_ARG_STRLEN_PAGES * page,
        total=ARG_AREA_CAP if arg_max <= 0 else min(arg_max, ARG_AREA_CAP),
    )


def file_variable(name: str) -> str:
    """The variable naming the file that holds ``name``'s value when it is over the limit: ``RING_<name>_FILE``."""
    return f"RING_{name}_FILE"


def file_reader(name: str) -> str:
    """Who reads variable ``name`` and how a trainer gets it from its file (:data:`FILE_FORMS`)."""
    for form in FILE_FORMS:
        if form.name == name:
            return form.reader
    return f"set os.environ[{name!r}] from the file in the trainer"


def entry_size(name: str, value: str) -> int:
    """Bytes ``execve`` copies for one variable: ``NAME=value`` encoded as the OS does, and its NUL."""
    return len(os.fsencode(name)) + len(os.fsencode(value)) + 2


def oversized(env: Mapping[str, str], *, per_string: int) -> list[str]:
    """The names in ``env`` whose ``NAME=value`` string is over ``per_string`` bytes, sorted."""
    return sorted(name for name, value in env.items() if entry_size(name, value) > per_string)


@record
class Overflow:
    """Why an exec would fail with ``E2BIG``: ``what`` (a variable's name, or a summary) is
    ``size`` bytes over ``limit``; :attr:`message` says so in one line."""

    what: str
    size: int
    limit: int
    kind: str  # "per_string" or "total"

    @property
    def message(self) -> str:
        if self.kind == "per_string":
            return (
                f"{self.what} is {self.size:,} bytes, over the exec limit of {self.limit:,} bytes per "
                "variable (Linux MAX_ARG_STRLEN)"
            )
        return (
            f"the command line and environment are {self.size:,} bytes, over the exec limit of "
            f"{self.limit:,} bytes in all (ARG_MAX); the largest: {self.what}"
        )


class ExecLimitError(Exception):
    """The trainer cannot be exec'd within the exec limit; ``overflow`` says which string and by how much."""

    def __init__(self, overflow: Overflow, advice: str = "") -> None:
        super().__init__(overflow.message + (f"; {advice}" if advice else ""))
        self.overflow = overflow


def exec_overflow(env: Mapping[str, str], argv: Sequence[str], *, limits: ExecLimits) -> Overflow | None:
    """Why exec'ing ``argv`` with exactly ``env`` would fail with ``E2BIG``, or None when it fits.

    The first variable (by name) or argument over ``limits.per_string``; else
    the total of all strings (with their NULs), the program's path and one
    pointer per string against ``limits.total``.
    """
    sizes = {name: entry_size(name, value) for name, value in env.items()}
    for name in oversized(env, per_string=limits.per_string):
        return Overflow(what=name, size=entry_size(name, env[name]), limit=limits.per_string, kind="per_string")
    for i, arg in enumerate(argv):
        size = len(os.fsencode(arg)) + 1
        if size > limits.per_string:
            return Overflow(what=f"argument {i}", size=size, limit=limits.per_string, kind="per_string")
        sizes[f"argument {i}"] = size
    pointer = 8  # a 64-bit pointer per string, and the two NULL ends of the arrays
    total = sum(sizes.values()) + (len(os.fsencode(argv[0])) + 1 if argv else 0) + pointer * (len(sizes) + 2)
    if total <= limits.total:
        return None
    largest = max(sizes, key=lambda k: sizes[k])
    return Overflow(what=f"{largest}, {sizes[largest]:,} bytes", size=total, limit=limits.total, kind="total")


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
