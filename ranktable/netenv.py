"""The network variables: which address, port and interface this member uses.

Derived from a completed cluster spec for one member (docs/launcher.md has the
table with each project's reference):

* ``RING_IP``, ``RING_PORT``: the member's own address as the spec lists it,
  for scripts that start a server of their own (the spec's port may differ
  from the pod template's: members sharing a node's IP in ``hostNetwork``
  pods get distinct ports, see :mod:`model.network`).
* On a secondary network (the member has an ``interface`` in the spec), the
  variables the collective libraries pick their interface by:
  ``NCCL_SOCKET_IFNAME`` (``=name``: exactly that interface, not a prefix),
  ``GLOO_SOCKET_IFNAME`` and ``TP_SOCKET_IFNAME`` (PyTorch's gloo and
  TensorPipe), ``HCCL_SOCKET_IFNAME`` (``=name``) with ``HCCL_IF_IP`` (the
  member's IP, which HCCL prefers to the name), Open MPI's
  ``OMPI_MCA_btl_tcp_if_include`` and ``OMPI_MCA_oob_tcp_if_include``,
  MPICH Hydra's ``HYDRA_IFACE`` and Intel MPI's ``I_MPI_HYDRA_IFACE``.
* ``HCCL_SOCKET_FAMILY`` and ``NCCL_SOCKET_FAMILY``: ``AF_INET6`` for an IPv6
  member, ``AF_INET`` for an IPv4 member on a secondary network. HCCL assumes
  IPv4 without it; NCCL takes the first address of the first interface it
  picks, and on a dual-stack interface ``getifaddrs`` lists the IPv4 address
  first, so a job that asked for IPv6 would have NCCL's bootstrap and its
  sockets on IPv4. PyTorch's gloo has no such variable (docs/launcher.md says
  which address it binds).
* ``HCCL_IF_BASE_PORT`` for the second and later members sharing one IP (host
  network on one node): HCCL takes 32 ports from its base (16 in older CANN
  releases; default base 60000), so the k-th member on the IP starts at
  ``60000 + 32 * k``.
"""

from __future__ import annotations

from ranktable.clusterspec import ClusterSpec, member_for_pod, require_completed

TYPE_CHECKING = False  # typing is not imported at run time (see ranktable.frozen)
if TYPE_CHECKING:
    from typing import Final

#: HCCL's default host port base and the ports it takes from it (CANN 8.x).
HCCL_BASE_PORT: Final = 60000
HCCL_PORTS_PER_PROCESS: Final = 32


def network_env(spec: ClusterSpec, *, pod: str) -> dict[str, str]:
    """The network variables (see the module doc) for member ``pod`` of a completed ``spec``.

    Raises :class:`~ranktable.clusterspec.SpecError` unless the spec is
    completed, :class:`~ranktable.clusterspec.PodNotInSpec` if ``pod`` is not
    a member.
    """
    require_completed(spec, "network environment")
    member = member_for_pod(spec, pod)
    env = {"RING_IP": member.ip, "RING_PORT": str(member.port)}
    ipv6 = ":" in member.ip
    if member.interface:
        name = member.interface
        env.update(
            {
                "NCCL_SOCKET_IFNAME": "=" + name,
                "GLOO_SOCKET_IFNAME": name,
                "TP_SOCKET_IFNAME": name,
                "HCCL_SOCKET_IFNAME": "=" + name,
                "HCCL_IF_IP": member.ip,
                "OMPI_MCA_btl_tcp_if_include": name,
                "OMPI_MCA_oob_tcp_if_include": name,
                "HYDRA_IFACE": name,
                "I_MPI_HYDRA_IFACE": name,
            }
        )
    if ipv6 or member.interface:
        family = "AF_INET6" if ipv6 else "AF_INET"
        env["HCCL_SOCKET_FAMILY"] = family
        env["NCCL_SOCKET_FAMILY"] = family
    sharing = [m.pod for m in spec.members if m.ip == member.ip]
    if len(sharing) > 1 and sharing.index(pod) > 0:
        env["HCCL_IF_BASE_PORT"] = str(HCCL_BASE_PORT + HCCL_PORTS_PER_PROCESS * sharing.index(pod))
    return env
