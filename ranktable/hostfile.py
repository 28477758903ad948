"""MPI hostfiles with pod IPs, derived from a completed cluster spec.

MPI launchers start every rank from one place and need the host list in a
file. Two layouts cover them:

* ``openmpi`` (``<ip> slots=N``): Open MPI's ``mpirun`` (which also reads
  ``OMPI_MCA_orte_default_hostfile``), DeepSpeed's ``--hostfile``,
  Horovod's ``horovodrun -hostfile``;
* ``mpich`` (``<ip>:N``): MPICH and Intel MPI's Hydra ``mpiexec`` (which
  also reads ``HYDRA_HOST_FILE``). An IPv6 address is bracketed there
  (``[fd00::5]:N``), since the colon would otherwise run into the count;
  the ``openmpi`` layout has no port-like suffix and keeps it bare.

One line per host in rank order. ``N`` is the member's ``slots`` (pod
annotation ``ring-controller/slots`` or container env ``RING_SLOTS``,
default 1); members sharing an IP (``hostNetwork`` pods on one node) are one
line with their slots added, since MPI counts slots per host.

:func:`hostfile_env` names the files for the launcher, which writes them
(:mod:`ranktable.launch.launcher`); everything here is pure.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ranktable.clusterspec import ClusterSpec, require_completed

if TYPE_CHECKING:
    from typing import Final, Literal

if TYPE_CHECKING:
    Flavor = Literal["openmpi", "mpich"]
#: File names in the hostfile directory, per flavor.
FILE_NAMES: Final[dict[Flavor, str]] = {"openmpi": "hostfile", "mpich": "hostfile.mpich"}


def hostfile_text(spec: ClusterSpec, *, flavor: Flavor = "openmpi") -> str:
    """The hostfile of a completed ``spec`` in ``flavor``'s layout, newline-terminated.

    Raises :class:`SpecError` unless the spec is completed.
    """
    require_completed(spec, "hostfile")
    slots: dict[str, int] = {}
    for member in spec.members:
        slots[member.ip] = slots.get(member.ip, 0) + member.slots
    if flavor == "openmpi":
        lines = [f"{ip} slots={n}" for ip, n in slots.items()]
    else:
        lines = [f"[{ip}]:{n}" if ":" in ip else f"{ip}:{n}" for ip, n in slots.items()]
    return "".join(line + "\n" for line in lines)


def hostfile_env(directory: str) -> dict[str, str]:
    """The variables naming the hostfiles in ``directory``.

    ``RING_HOSTFILE`` and ``OMPI_MCA_orte_default_hostfile`` name the
    ``openmpi`` file, ``HYDRA_HOST_FILE`` the ``mpich`` one.
    """
    openmpi = os.path.join(directory, FILE_NAMES["openmpi"])
    return {
        "RING_HOSTFILE": openmpi,
        "OMPI_MCA_orte_default_hostfile": openmpi,
        "HYDRA_HOST_FILE": os.path.join(directory, FILE_NAMES["mpich"]),
    }
