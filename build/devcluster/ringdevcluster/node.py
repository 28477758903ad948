"""The dev cluster's one real node: kubelet, kube-proxy, containerd, CNI bridge and CoreDNS.

``ring-devcluster up --with node`` joins a real kubelet to the cluster beside
the kwok nodes, so containers really run: volumes are mounted by the kubelet,
probes are run by it, pods get their own network namespace and IP, Services
work through kube-proxy and names resolve through CoreDNS. What runs:

* **containerd + runc** from Debian (``apt-get install containerd runc``,
  installed by ``up`` when missing), CRI configured as this machine needs
  (:func:`_containerd_config`); its root under the state directory. containerd
  1.6 keeps its sockets and task state in ``/run/containerd`` whatever its
  configuration says, which is one reason why only one real node can exist on
  a machine (:data:`OWNER_FILE` records which cluster has it).
* **CNI**: Debian's ``containernetworking-plugins`` (bridge, host-local,
  loopback). Pods live on the bridge :data:`BRIDGE` that ``up`` creates, with
  an address of each of the cluster's IP families (:func:`addresses`): from
  :data:`POD_CIDR` (IPv4) and :data:`POD_CIDR6` (IPv6, in the unique local
  prefix ``fd72:696e:6700::/48``). The node's own addresses on the bridge,
  :data:`NODE_IP` and :data:`NODE_IP6`, are the pods' gateways and the node's
  InternalIPs (the primary family first). No IP masquerade and no default
  route in the pods: they reach only the bridge (other pods, the node) and,
  through kube-proxy, the Service ranges, which the host routes onto the
  bridge too. A ``FORWARD`` guard chain (iptables and ip6tables) drops
  anything that would leave the bridge for another interface.
* **A second pod network** (opt-in, ``up --second-network``): every pod also
  gets ``eth1`` on bridge :data:`BRIDGE2` (:data:`POD_CIDR2`, and
  :data:`POD_CIDR2_6` with IPv6), a second CNI configuration that containerd
  attaches after the first; its chain ends in :mod:`ringdevcluster.netstatus`,
  which writes the pod's ``k8s.v1.cni.cncf.io/network-status`` annotation
  naming the network :data:`SECOND_NETWORK`, as Multus does for a secondary
  network. Only the pods' own traffic to each other uses it (no Services, no
  routes beyond its subnet); the guard chain keeps it on its bridge too.
  With ``up --second-network --multus`` the meta-plugin is the real one
  instead: the Multus CNI thin plugin (built from the Go module proxy,
  ``build`` module ``multus``) is the node's only CNI configuration
  (:data:`MULTUS_CONFIG`); it runs the cluster network's configuration (its
  first delegate) as ``eth0`` and, for a pod whose ``k8s.v1.cni.cncf.io/networks`` annotation
  asks for it, the NetworkAttachmentDefinition :data:`SECOND_NETWORK`
  (bridge :data:`BRIDGE2`) as ``net1``, and writes the network-status
  annotation itself. The NetworkAttachmentDefinition CRD comes from the
  Multus release's own manifest (:func:`multus_crds`, :func:`multus_objects`).
* **kubelet and kube-proxy** built from the control plane's own
  k8s.io/kubernetes release (the ``node`` wrapper module), with kubeadm's
  defaults except where this machine forces otherwise (docs/devcluster.md, "Real node").
  The node is named :data:`NODE_NAME`, labelled and tainted
  (:data:`NODE_LABEL`, :data:`NODE_TAINT`) so that only pods asking for it
  (:func:`pod_placement`) land on it; kwok nodes keep their own label.
* **CoreDNS** (the ``coredns`` wrapper module) as a host process serving
  the node's bridge addresses (port 53) with kubeadm's stock Corefile minus ``forward`` (nothing
  upstream may be reached); the ``kube-dns`` Service at :data:`DNS_SERVICE_IP`
  points at it through a hand-made EndpointSlice, as the kubelet's
  ``clusterDNS`` does.
* **The API from pods**: the API server listens on loopback only; a relay
  (``node`` module) accepts on the node's primary address (port 443) and forwards the bytes, and the
  ``kubernetes`` Service's EndpointSlice names it, so in-cluster clients work
  unchanged (TLS end to end: the API server's certificate carries the
  Service IP).
* **Images** come from files: a docker-archive tarball imported with
  ``ctr -n k8s.io images import`` (:func:`import_image`). The sandbox image
  :data:`images.PAUSE_IMAGE` is made here from the module's ``pause`` binary.

``down`` (and a fresh ``up`` over a dead cluster) restores the host
(:func:`teardown`): stops the node's processes, kills and deletes every
container of containerd's ``k8s.io`` namespace, unmounts what they left,
removes the CNI network namespaces, the bridge and its route, the
``KUBE-*`` iptables and ip6tables chains of kubelet and kube-proxy and the guard chain, the
``kubepods`` cgroups, and puts back every sysctl the kubelet, kube-proxy or
the bridge plugin changed (recorded before the first start).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import ipaddress
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from ringdevcluster import images, netstatus
from ringdevcluster.api import Api, ApiError
from ringdevcluster.controlplane import DEFAULT_IP_FAMILY, SERVICE_CIDR, SERVICE_CIDR6, Setup, families, service_cidrs
from ringdevcluster.pki import Pki, write_kubeconfig

__all__ = [
    "Addresses",
    "BRIDGE",
    "BRIDGE2",
    "CLUSTER_DOMAIN",
    "CONTAINERD_SOCKET",
    "DNS_SERVICE_IP",
    "DNS_SERVICE_IP6",
    "KUBELET_VERBOSITY",
    "NODE_IP",
    "NODE_IP6",
    "NODE_LABEL",
    "NODE_NAME",
    "NODE_TAINT",
    "NodeError",
    "OWNER_FILE",
    "POD_CIDR",
    "POD_CIDR6",
    "POD_CIDR2",
    "POD_CIDR2_6",
    "SECOND_INTERFACE",
    "SECOND_NETWORK",
    "PROCESSES",
    "addresses",
    "assign_pod_cidrs",
    "check_owner",
    "claim",
    "configure",
    "ensure_packages",
    "import_image",
    "namespace_placement",
    "objects",
    "pending",
    "pod_placement",
    "prepare_host",
    "set_kubelet_verbosity",
    "teardown",
]

Json = dict[str, Any]
Say = Callable[[str], None]

#: The kubelet's log verbosity: 2 logs each PLEG event it acts on
#: (``"SyncLoop (PLEG): event for pod" ... ContainerStarted <container id>``,
#: ``pkg/kubelet/kubelet.go``), the stage the benchmarks time between a
#: container's start and its Running status. A runtime flag (no build cache key
#: depends on it); a running kubelet takes a new level without a restart through
#: ``PUT /api/v1/nodes/<node>/proxy/debug/flags/v`` (:func:`set_kubelet_verbosity`).
KUBELET_VERBOSITY = 2
#: The real node's name, also its kubelet's identity (``system:node:<name>``).
NODE_NAME = "real-node"
#: Label (key, value) of the real node; kwok nodes carry ``type=kwok`` instead.
NODE_LABEL = ("ring-devcluster/node", "real")
#: Taint of the real node: only pods that tolerate it run there.
NODE_TAINT: Json = {"key": NODE_LABEL[0], "value": NODE_LABEL[1], "effect": "NoSchedule"}
#: The bridge the pods' veths attach to, created by ``up`` and removed by ``down``.
BRIDGE = "ringbr0"
#: Pod addresses; the first one is the node's (and the pods' gateway).
POD_CIDR = ipaddress.ip_network("10.244.0.0/24")
NODE_IP = str(POD_CIDR.network_address + 1)
#: IPv6 pod addresses (a /64 of the dev cluster's unique local prefix, see
#: ``controlplane.SERVICE_CIDR6``); the first one is the node's.
POD_CIDR6 = ipaddress.ip_network("fd72:696e:6700:244::/64")
NODE_IP6 = str(POD_CIDR6.network_address + 1)
#: The ``kube-dns`` Service's ClusterIP (the tenth address of the Service range): the kubelet's ``clusterDNS``.
DNS_SERVICE_IP = str(ipaddress.ip_network(SERVICE_CIDR)[10])
#: The second pod network (``up --second-network``): its bridge, ranges (the
#: node's address on it is the first of each) and the name its network-status
#: entry carries (a Multus attachment's ``<namespace>/<name>``), and the pods'
#: interface on it.
BRIDGE2 = "ringbr1"
POD_CIDR2 = ipaddress.ip_network("10.245.0.0/24")
POD_CIDR2_6 = ipaddress.ip_network("fd72:696e:6700:245::/64")
SECOND_NETWORK = "default/ring-fast"
SECOND_INTERFACE = "eth1"
#: With ``--multus``: the interface Multus names a pod's first additional attachment, the pod
#: annotation that asks for attachments, and the node's one CNI configuration file.
MULTUS_INTERFACE = "net1"
NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
MULTUS_CONFIG = "00-multus.conf"
#: The ``kube-dns`` Service's ClusterIP on an IPv6-only cluster.
DNS_SERVICE_IP6 = str(ipaddress.ip_network(SERVICE_CIDR6)[10])
CLUSTER_DOMAIN = "cluster.local"
#: containerd 1.6's socket (``/run/containerd`` is not configurable in practice).
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
#: Which state directory owns the machine's one real node.
OWNER_FILE = Path("/run/ring-devcluster/node-owner")
#: The relay for the ``kubernetes`` Service listens on NODE_IP at this port.
API_RELAY_PORT = 443

#: The node's processes in start order (names of cluster components).
PROCESSES = ("containerd", "coredns", "apiserver-relay", "kube-proxy", "kubelet")

#: Debian packages the node needs, by a file each one installs.
_PACKAGES = {
    "/usr/bin/containerd": "containerd",
    "/usr/bin/ctr": "containerd",
    "/usr/sbin/runc": "runc",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
    "/usr/lib/cni/host-local": "containernetworking-plugins",
    "/usr/lib/cni/loopback": "containernetworking-plugins",
    "/usr/sbin/iptables": "iptables",
    "/usr/sbin/conntrack": "conntrack",
    "/usr/bin/ip": "iproute2",
}
_CNI_BIN_DIR = "/usr/lib/cni"
#: Sysctls the kubelet (setupKernelTunables), kube-proxy or the bridge plugin
#: may change; their values before the first start are put back by ``down``.
_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    # The bridge plugin turns IPv6 forwarding on for an IPv6 gateway (as ip_forward for IPv4).
    "net/ipv6/conf/all/forwarding",
    "net/ipv6/conf/default/forwarding",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
    "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
    "net/netfilter/nf_conntrack_tcp_be_liberal",
)
#: Host paths the node's processes create outside the state directory
#: (containerd's state and the CNI network namespaces; the kubelet's device
#: plugin socket and container log links, whatever ``--root-dir`` and
#: ``podLogsDir`` say; libcni's result cache). Those absent before the first
#: start are removed by ``down``; in the others only the node's entries.
_HOST_PATHS = ("/run/containerd", "/run/netns", "/var/lib/kubelet", "/var/lib/cni", "/var/log/containers")
#: Our own iptables chain in ``filter``: keeps the pod network on the bridge.
_GUARD_CHAIN = "RING-DEVCLUSTER-FWD"
_CHAIN_PREFIXES = ("KUBE-", _GUARD_CHAIN)


class NodeError(RuntimeError):
    """The real node cannot be set up or torn down here; the message says why and what to do."""


@dataclasses.dataclass(frozen=True)
class Addresses:
    """The real node's addresses in a cluster of one IP family setting, one entry per family, primary first.

    ``pod_cidrs`` (the bridge's ranges), ``node_ips`` (the node's address in
    each, the pods' gateway), ``service_cidrs`` (routed onto the bridge) and
    ``dns_service_ip`` (the ``kube-dns`` ClusterIP, of the primary family).
    """

    pod_cidrs: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    node_ips: tuple[str, ...]
    service_cidrs: tuple[str, ...]
    dns_service_ip: str
    #: The second pod network's ranges (used with ``--second-network`` only), one per family.
    second_cidrs: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @property
    def second_ips(self) -> tuple[str, ...]:
        """The node's address in each range of the second pod network (its gateway)."""
        return tuple(str(c.network_address + 1) for c in self.second_cidrs)

    @property
    def node_ip(self) -> str:
        """The node's primary address: its first InternalIP, where the kubelet, kube-proxy and the relay listen."""
        return self.node_ips[0]


def addresses(ip_family: str) -> Addresses:
    """The node's :class:`Addresses` in a cluster of ``ip_family`` (``dual``, ``ipv4``, ``ipv6``)."""
    versions = families(ip_family)
    return Addresses(
        pod_cidrs=tuple({4: POD_CIDR, 6: POD_CIDR6}[v] for v in versions),
        node_ips=tuple({4: NODE_IP, 6: NODE_IP6}[v] for v in versions),
        service_cidrs=tuple(service_cidrs(ip_family)),
        dns_service_ip={4: DNS_SERVICE_IP, 6: DNS_SERVICE_IP6}[versions[0]],
        second_cidrs=tuple({4: POD_CIDR2, 6: POD_CIDR2_6}[v] for v in versions),
    )


def _host_port(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def _prefix_len(ip: str) -> int:
    return 128 if ":" in ip else 32


def pod_placement() -> Json:
    """The pod spec fields that put a pod on the real node: ``{"nodeSelector": ..., "tolerations": [...]}``."""
    return {
        "nodeSelector": {NODE_LABEL[0]: NODE_LABEL[1]},
        "tolerations": [{"key": NODE_TAINT["key"], "operator": "Equal", "value": NODE_TAINT["value"],
                         "effect": NODE_TAINT["effect"]}],
    }  # fmt: skip


def namespace_placement() -> dict[str, str]:
    """Namespace annotations that put every pod of the namespace on the real node.

    For manifests applied unchanged (the shipped Deployment): the API
    server's PodNodeSelector and PodTolerationRestriction admission plugins,
    where enabled, add :func:`pod_placement`'s node selector and toleration
    to each pod created in a namespace carrying these.
    """
    toleration = pod_placement()["tolerations"]
    return {
        "scheduler.alpha.kubernetes.io/node-selector": f"{NODE_LABEL[0]}={NODE_LABEL[1]}",
        "scheduler.alpha.kubernetes.io/defaultTolerations": json.dumps(toleration),
    }


# --------------------------------------------------------------------------
# small host helpers


def _run(argv: Sequence[str], *, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=timeout)
    if check and proc.returncode != 0:
        raise NodeError(
            f"`{shlex.join(argv)}` failed (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc


def _sysctl_path(key: str) -> Path:
    return Path("/proc/sys") / key


def _read_sysctl(key: str) -> str | None:
    try:
        return _sysctl_path(key).read_text().strip()
    except OSError:
        return None


def _write_sysctl(key: str, value: str) -> bool:
    try:
        _sysctl_path(key).write_text(value + "\n")
        return True
    except OSError:
        return False


def _host_file(state_dir: Path) -> Path:
    return state_dir / "node" / "host.json"


def _node_env() -> dict[str, str]:
    """PATH for the node's processes: they run iptables, mount, runc and the CNI plugins."""
    path = os.environ.get("PATH", "")
    extra = [d for d in ("/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin") if d not in path.split(":")]
    return {"PATH": ":".join(filter(None, [path, *extra]))}


# --------------------------------------------------------------------------
# prerequisites


def missing_packages() -> list[str]:
    """The Debian packages the node needs that are not installed (by the files they ship)."""
    return sorted({pkg for path, pkg in _PACKAGES.items() if not os.access(path, os.X_OK)})


def ensure_packages(say: Say) -> None:
    """Install the node's missing Debian packages with apt-get (root only), or raise :class:`NodeError`."""
    missing = missing_packages()
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise NodeError(
            f"the real node needs the Debian packages {' '.join(missing)}; install them "
            f"(apt-get install {' '.join(missing)}) or run without --with node"
        )
    say(f"installing {' '.join(missing)} for the real node (apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
    ):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, timeout=900)
        if proc.returncode != 0:
            raise NodeError(f"`{shlex.join(argv)}` failed (exit {proc.returncode}):\n{proc.stderr.strip()[-2000:]}")
    still = missing_packages()
    if still:
        raise NodeError(f"apt-get installed {' '.join(missing)}, but these are still missing: {' '.join(still)}")


def check_host() -> None:
    """Raise :class:`NodeError` unless this machine can run the node (root, cgroups, nothing else on containerd's socket)."""
    if os.geteuid() != 0:
        raise NodeError("the real node needs root (it creates a bridge, network namespaces, cgroups and mounts)")
    if not Path("/sys/fs/cgroup/memory").is_dir() and not Path("/sys/fs/cgroup/cgroup.controllers").is_file():
        raise NodeError("the real node needs cgroups (v1 with the memory controller, or v2) mounted at /sys/fs/cgroup")


#: The free space below which ``up --with node`` refuses to start: the kubelet's own floor
#: (``evictionHard`` nodefs/imagefs 2Gi) plus room for the tests' containers and logs.
MIN_FREE_BYTES = 5 * 1024**3


def check_disk(state_dir: Path, *, free: Callable[[Path], int] | None = None) -> None:
    """Raise :class:`NodeError` when the filesystem under ``state_dir`` has less than :data:`MIN_FREE_BYTES`
    free (``free(path)`` gives the bytes available; default: ``shutil.disk_usage``).

    Below 2 GiB the kubelet reports DiskPressure, evicts the pods and deletes unused images, the
    imported sandbox image among them (containerd 1.6 cannot pin it), after which every pod fails
    to start with an image pull error that says nothing of the disk: refuse early and say why.
    """
    probe = state_dir
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    available = (free or (lambda p: shutil.disk_usage(p).free))(probe)
    if available < MIN_FREE_BYTES:
        raise NodeError(
            f"the real node needs {MIN_FREE_BYTES / 1024**3:.0f} GiB free on the disk under {state_dir}, "
            f"found {available / 1024**3:.1f} GiB: below 2 GiB its kubelet reports DiskPressure, evicts the "
            "pods and deletes the imported sandbox image (free space, e.g. old .state directories, and retry)"
        )


def _swap_on() -> bool:
    try:
        return len(Path("/proc/swaps").read_text().strip().splitlines()) > 1
    except OSError:
        return False


# --------------------------------------------------------------------------
# configuration


def _containerd_config(home: Path, *, metrics_port: int, second_network: bool, multus: bool = False) -> str:
    root = home / "containerd"
    # CRI settings this machine needs (measured, see docs/design.md "Facts"): root here
    # lacks CAP_SYS_RESOURCE (restrict_oom_score_adj, or every sandbox fails
    # with "can't get final child's PID from pipe: EOF"); the kernel has no
    # AppArmor; cgroups are managed by path (cgroupfs), like the kubelet's.
    return f"""\
version = 2
root = "{root / "root"}"
state = "/run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "{CONTAINERD_SOCKET}"

[metrics]
  address = "127.0.0.1:{metrics_port}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{root / "opt"}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{images.PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{home / "cni" / "bin" if second_network else _CNI_BIN_DIR}"
    conf_dir = "{home / "cni" / "net.d"}"
    max_conf_num = {2 if second_network and not multus else 1}
"""


def _cni_config(home: Path, *, addrs: Addresses) -> Json:
    # Bridge without masquerade and without a default route: pods reach the
    # bridge (other pods, the node at NODE_IP / NODE_IP6) and the Service
    # ranges, which kube-proxy rewrites to endpoints on the bridge. Nothing
    # else. One host-local range set per family: a dual-stack pod gets one
    # address of each.
    return {
        "cniVersion": "1.0.0",
        "name": "ring-devcluster",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "isDefaultGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [
                        [{"subnet": str(c), "gateway": ip}]
                        for c, ip in zip(addrs.pod_cidrs, addrs.node_ips, strict=True)
                    ],
                    "routes": [{"dst": c, "gw": ip} for c, ip in zip(addrs.service_cidrs, addrs.node_ips, strict=True)],
                    "dataDir": str(home / "cni" / "ipam"),
                },
            }
        ],
    }


def _second_bridge(home: Path, *, addrs: Addresses) -> Json:
    # The second network: its own bridge and range, no gateway route, no masquerade.
    return {
        "type": "bridge",
        "bridge": BRIDGE2,
        "isGateway": True,
        "isDefaultGateway": False,
        "ipMasq": False,
        "hairpinMode": True,
        "ipam": {
            "type": "host-local",
            "ranges": [
                [{"subnet": str(c), "gateway": ip}] for c, ip in zip(addrs.second_cidrs, addrs.second_ips, strict=True)
            ],
            "dataDir": str(home / "cni" / "ipam"),
        },
    }


def _multus_config(home: Path, *, cluster: Json, kubeconfig: Path, bin_dir: Path) -> Json:
    # Multus' documented configuration keys (docs/configuration.md of the
    # release). The cluster network is given inline (``delegates``), not by
    # path (``clusterNetwork``): v4.2.3 caches a configuration list it loaded
    # from a file with its plugins' own keys dropped (types.PluginConf), so
    # the DEL of every pod failed ("bridge ... no IP ranges specified"), its
    # sandbox was never removed and the kubelet never gave it a terminal
    # phase. Attachments come from the pods' annotation (no defaultNetworks).
    return {
        "cniVersion": "1.0.0",
        "name": "multus-cni-network",
        "type": "multus",
        "kubeconfig": str(kubeconfig),
        "delegates": [cluster],
        "confDir": str(home / "cni" / "multus" / "net.d"),
        "cniDir": str(home / "cni" / "multus" / "cache"),
        "binDir": str(bin_dir),
        "logFile": str(home / "cni" / "multus" / "multus.log"),
        "logLevel": "verbose",
        "logToStderr": True,
    }


def _attachment(home: Path, *, addrs: Addresses) -> Json:
    """The NetworkAttachmentDefinition :data:`SECOND_NETWORK`: the second bridge, for Multus."""
    namespace, name = SECOND_NETWORK.split("/")
    config = {"cniVersion": "1.0.0", "name": name, "plugins": [_second_bridge(home, addrs=addrs)]}
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "ring-devcluster"},
        },
        "spec": {"config": json.dumps(config)},
    }


def multus_crds(state_dir: Path) -> list[Json]:
    """The NetworkAttachmentDefinition CRD of a ``--multus`` cluster (from the Multus release's manifest), or []."""
    path = state_dir / "node" / "cni" / "multus" / "crds.json"
    return json.loads(path.read_text()) if path.exists() else []  # type: ignore[no-any-return]


def multus_objects(state_dir: Path) -> list[tuple[str, Json]]:
    """The NetworkAttachmentDefinition of the second network in a ``--multus`` cluster, as ``(URL path, manifest)``, or []."""
    path = state_dir / "node" / "cni" / "multus" / "attachment.json"
    if not path.exists():
        return []
    nad: Json = json.loads(path.read_text())
    meta = nad["metadata"]
    return [
        (f"/apis/k8s.cni.cncf.io/v1/namespaces/{meta['namespace']}/network-attachment-definitions/{meta['name']}", nad)
    ]


def _write_multus(home: Path, *, addrs: Addresses, server: str, pki: Pki, binaries: Mapping[str, Path]) -> None:
    """Multus as the node's CNI configuration, its kubeconfig, the CRD and the attachment to apply."""
    if "multus" not in binaries:
        raise NodeError("--multus: no multus binary (ring-devcluster build --with multus)")
    directory = home / "cni" / "multus"
    (directory / "net.d").mkdir(parents=True, exist_ok=True)
    cert, key = pki.issue("multus", cn="ring-devcluster-multus", groups=["system:masters"])
    kubeconfig = write_kubeconfig(
        directory / "kubeconfig", server=server, ca_cert=pki.ca_cert, client_cert=cert, client_key=key,
        user="ring-devcluster-multus",
    )  # fmt: skip
    bin_dir = _cni_bin_dir(home)
    link = bin_dir / "multus"
    link.unlink(missing_ok=True)
    link.symlink_to(binaries["multus"])
    manifest = Path(binaries["multus"]).parent / "assets" / "deployments" / "multus-daemonset.yml"
    crds = [d for d in yaml.safe_load_all(manifest.read_text()) if d and d.get("kind") == "CustomResourceDefinition"]
    if not crds:
        raise NodeError(f"no CustomResourceDefinition in {manifest}")
    (directory / "crds.json").write_text(json.dumps(crds))
    (directory / "attachment.json").write_text(json.dumps(_attachment(home, addrs=addrs)))
    (home / "cni" / "net.d" / MULTUS_CONFIG).write_text(
        json.dumps(
            _multus_config(home, cluster=_cni_config(home, addrs=addrs), kubeconfig=kubeconfig, bin_dir=bin_dir),
            indent=2,
        )
    )


def _second_cni_config(home: Path, *, addrs: Addresses, server: str, pki: Pki) -> Json:
    # The second bridge, then the plugin that writes the pod's network-status.
    return {
        "cniVersion": "1.0.0",
        "name": "ring-devcluster-second",
        "plugins": [
            _second_bridge(home, addrs=addrs),
            {
                "type": netstatus.PLUGIN_TYPE,
                "network": SECOND_NETWORK,
                "defaultNetwork": "ring-devcluster",
                "defaultInterface": "eth0",
                "server": server,
                "ca": str(pki.ca_cert),
                "cert": str(pki.cert("cni-network-status")),
                "key": str(pki.key("cni-network-status")),
            },
        ],
    }


def _cni_bin_dir(home: Path) -> Path:
    """A CNI bin directory for the second network: Debian's plugins, linked, and the network-status plugin."""
    bin_dir = home / "cni" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for plugin in Path(_CNI_BIN_DIR).iterdir() if Path(_CNI_BIN_DIR).is_dir() else ():
        link = bin_dir / plugin.name
        if not link.is_symlink():
            link.symlink_to(plugin)
    wrapper = bin_dir / netstatus.PLUGIN_TYPE
    wrapper.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(netstatus.__file__)}\n")
    wrapper.chmod(0o755)
    return bin_dir


def _kubelet_config(home: Path, *, pki: Pki, health_port: int, addrs: Addresses) -> Json:
    config: Json = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # Serve on the bridge address only (the API server reaches it there).
        "address": addrs.node_ip,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": health_port,
        "tlsCertFile": str(pki.cert("kubelet-serving")),
        "tlsPrivateKeyFile": str(pki.key("kubelet-serving")),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki.ca_cert)},
        },
        "authorization": {"mode": "Webhook"},
        # This machine: cgroups v1 (1.35 refuses them unless told), no systemd.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
        "clusterDNS": [addrs.dns_service_ip],
        "clusterDomain": CLUSTER_DOMAIN,
        # No upstream DNS may be reached: pods get no host nameserver.
        "resolvConf": str(home / "kubelet" / "resolv.conf"),
        "podLogsDir": str(home / "pod-logs"),
        # Images come from files, not a registry: never garbage-collect them.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        # The node shares the machine's disk with builds, caches and other
        # clusters: the default percentages (imagefs/nodefs 15%/10% free) put
        # a big, mostly full disk under DiskPressure, which evicts pods and
        # deletes the imported images that cannot be pulled back. Absolute
        # floors keep the protection against a really full disk.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "2Gi",
            "nodefs.inodesFree": "5%",
            "imagefs.available": "2Gi",
            "imagefs.inodesFree": "5%",
        },
        "registerWithTaints": [NODE_TAINT],
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        # syncFrequency (1m), configMapAndSecretChangeDetectionStrategy (Watch)
        # and the rest stay at their defaults, as on a kubeadm node.
    }
    if _swap_on():
        config["failSwapOn"] = False
    return config


def _kube_proxy_config(*, kubeconfig: Path, health_port: int, metrics_port: int, addrs: Addresses) -> Json:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "hostnameOverride": NODE_NAME,
        "bindAddress": addrs.node_ip,  # the node IP (primary family), without waiting for the Node object
        "healthzBindAddress": f"127.0.0.1:{health_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        # NodePorts only on the bridge addresses, never on loopback (no
        # route_localnet) or the machine's other interfaces. One per family:
        # a family without an entry here would get NodePorts on every address.
        "nodePortAddresses": [f"{ip}/{_prefix_len(ip)}" for ip in addrs.node_ips],
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
        # 0: leave the host's conntrack table size and timeouts as they are.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


def _corefile(*, kubeconfig: Path, health_port: int, ready_port: int, metrics_port: int, addrs: Addresses) -> str:
    # kubeadm's stock Corefile (v1.35, cmd/kubeadm/app/phases/addons/dns),
    # except: bind to the node's bridge address; health, ready and metrics on
    # loopback ports; the API through a kubeconfig (a host process, not a
    # pod); no `forward` (nothing upstream may be reached here).
    return f"""\
.:53 {{
    bind {" ".join(addrs.node_ips)}
    errors
    health 127.0.0.1:{health_port} {{
       lameduck 5s
    }}
    ready 127.0.0.1:{ready_port}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
       kubeconfig {kubeconfig}
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }}
    prometheus 127.0.0.1:{metrics_port}
    cache 30 {{
       disable success {CLUSTER_DOMAIN}
       disable denial {CLUSTER_DOMAIN}
    }}
    loop
    reload
    loadbalance
}}
"""


def configure(
    *,
    state_dir: Path,
    server: str,
    pki: Pki,
    ports: Mapping[str, int],
    binaries: Mapping[str, Path],
    ip_family: str = DEFAULT_IP_FAMILY,
    second_network: bool = False,
    multus: bool = False,
) -> Setup:
    """Write the node's certificates, kubeconfigs and configuration files under
    ``state_dir/node``; return its processes' argv and environment and the flags
    the API server needs to reach the kubelet.

    Call once per cluster (it issues new certificates). ``binaries`` maps binary
    names to their cached paths (``kubelet``, ``kube-proxy``, ``relay``,
    ``coredns``); containerd is Debian's. ``ip_family`` is the cluster's
    (``controlplane.IP_FAMILIES``): the node's addresses are :func:`addresses`'.
    ``second_network`` adds the second pod network (see the module doc),
    attached by Multus (``binaries["multus"]``) with ``multus``.
    """
    addrs = addresses(ip_family)
    home = state_dir / "node"
    for sub in ("containerd", "cni/net.d", "cni/ipam", "kubelet", "kube-proxy", "coredns", "pod-logs", "images"):
        (home / sub).mkdir(parents=True, exist_ok=True)

    def kubeconfig(process: str, cn: str, groups: Sequence[str]) -> Path:
        cert, key = pki.issue(process, cn=cn, groups=groups)
        return write_kubeconfig(
            home / process / "kubeconfig", server=server, ca_cert=pki.ca_cert, client_cert=cert, client_key=key, user=cn
        )

    kubelet_kc = kubeconfig("kubelet", f"system:node:{NODE_NAME}", ["system:nodes"])
    proxy_kc = kubeconfig("kube-proxy", "system:kube-proxy", [])
    coredns_kc = kubeconfig("coredns", "ring-devcluster-coredns", ["system:masters"])
    pki.issue(
        "kubelet-serving", cn=f"system:node:{NODE_NAME}", server_names=[NODE_NAME], server_ips=list(addrs.node_ips)
    )
    # The API server's client identity towards the kubelet (logs, exec), as kubeadm's.
    pki.issue("apiserver-kubelet-client", cn="kube-apiserver-kubelet-client", groups=["system:masters"])

    containerd_conf = home / "containerd" / "config.toml"
    containerd_conf.write_text(
        _containerd_config(home, metrics_port=ports["containerd-metrics"], second_network=second_network, multus=multus)
    )
    if second_network and multus:
        _write_multus(home, addrs=addrs, server=server, pki=pki, binaries=binaries)
    elif second_network:
        pki.issue("cni-network-status", cn="ring-devcluster-network-status", groups=["system:masters"])
        _cni_bin_dir(home)
        (home / "cni" / "net.d" / "20-ring-devcluster-second.conflist").write_text(
            json.dumps(_second_cni_config(home, addrs=addrs, server=server, pki=pki), indent=2)
        )
    (home / "cni" / "net.d" / "10-ring-devcluster.conflist").write_text(
        json.dumps(_cni_config(home, addrs=addrs), indent=2)
    )
    (home / "kubelet" / "resolv.conf").write_text("")
    kubelet_conf = home / "kubelet" / "config.yaml"
    kubelet_conf.write_text(
        yaml.safe_dump(
            _kubelet_config(home, pki=pki, health_port=ports["kubelet-health"], addrs=addrs), sort_keys=False
        )
    )
    proxy_conf = home / "kube-proxy" / "config.yaml"
    proxy_conf.write_text(
        yaml.safe_dump(
            _kube_proxy_config(
                kubeconfig=proxy_kc,
                health_port=ports["kube-proxy-health"],
                metrics_port=ports["kube-proxy-metrics"],
                addrs=addrs,
            ),
            sort_keys=False,
        )
    )
    corefile = home / "coredns" / "Corefile"
    corefile.write_text(
        _corefile(
            kubeconfig=coredns_kc,
            health_port=ports["coredns-health"],
            ready_port=ports["coredns-ready"],
            metrics_port=ports["coredns-metrics"],
            addrs=addrs,
        )
    )
    api_port = int(server.rsplit(":", 1)[1])
    containerd = shutil.which("containerd", path=_node_env()["PATH"]) or "/usr/bin/containerd"
    argv = {
        "containerd": [containerd, f"--config={containerd_conf}", "--log-level=warn"],
        "coredns": [str(binaries["coredns"]), "-conf", str(corefile)],
        "apiserver-relay": [
            str(binaries["relay"]),
            f"--listen={_host_port(addrs.node_ip, API_RELAY_PORT)}",
            f"--to=127.0.0.1:{api_port}",
            f"--health=127.0.0.1:{ports['apiserver-relay-health']}",
        ],
        "kube-proxy": [str(binaries["kube-proxy"]), f"--config={proxy_conf}", "--v=1"],
        "kubelet": [
            str(binaries["kubelet"]),
            f"--config={kubelet_conf}",
            f"--kubeconfig={kubelet_kc}",
            f"--root-dir={home / 'kubelet' / 'root'}",
            f"--cert-dir={home / 'kubelet' / 'pki'}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={','.join(addrs.node_ips)}",
            f"--node-labels={NODE_LABEL[0]}={NODE_LABEL[1]}",
            f"--v={KUBELET_VERBOSITY}",
        ],
    }
    env = {name: _node_env() for name in argv}
    apiserver_args = [
        f"--kubelet-client-certificate={pki.cert('apiserver-kubelet-client')}",
        f"--kubelet-client-key={pki.key('apiserver-kubelet-client')}",
        f"--kubelet-certificate-authority={pki.ca_cert}",
        # The node's name is not resolvable here: reach the kubelet at its InternalIP.
        "--kubelet-preferred-address-types=InternalIP",
    ]
    host = {"kube_proxy": str(binaries["kube-proxy"]), "pause": str(binaries["pause"]), "ip_family": ip_family}
    (home / "binaries.json").write_text(json.dumps(host))
    return Setup(argv=argv, env=env, apiserver_args=apiserver_args)


def objects(*, ip_family: str) -> list[tuple[str, Json]]:
    """The API objects the node needs, as ``(object URL path, manifest)`` to server-side apply.

    The ``kube-dns`` Service at :data:`DNS_SERVICE_IP` (:data:`DNS_SERVICE_IP6`
    on an IPv6-only cluster) and EndpointSlices (not managed by the
    EndpointSlice controller: the Services have no selector) pointing
    ``kube-dns`` at CoreDNS and ``kubernetes`` at the relay, both on the
    node's primary address (:func:`addresses` of ``ip_family``).
    """
    addrs = addresses(ip_family)
    managed = {"app.kubernetes.io/managed-by": "ring-devcluster"}
    dns_service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "kube-dns",
            "namespace": "kube-system",
            "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS", **managed},
        },
        "spec": {
            "clusterIP": addrs.dns_service_ip,
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
            ],
        },
    }

    def slice_(namespace: str, service: str, ports: list[Json]) -> tuple[str, Json]:
        name = f"{service}-ring-devcluster"
        body = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {
                    "kubernetes.io/service-name": service,
                    "endpointslice.kubernetes.io/managed-by": "ring-devcluster",
                    **managed,
                },
            },
            "addressType": "IPv6" if ":" in addrs.node_ip else "IPv4",
            "endpoints": [{"addresses": [addrs.node_ip], "conditions": {"ready": True}, "nodeName": NODE_NAME}],
            "ports": ports,
        }
        return f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices/{name}", body

    return [
        ("/api/v1/namespaces/kube-system/services/kube-dns", dns_service),
        slice_(
            "kube-system",
            "kube-dns",
            [{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}],
        ),
        slice_("default", "kubernetes", [{"name": "https", "port": API_RELAY_PORT, "protocol": "TCP"}]),
    ]


def pending(get: Callable[[str], Json | None]) -> list[str]:
    """What the node still waits for (empty: Ready, under no disk, memory or PID pressure, without the
    not-ready taint)."""
    node = get(f"/api/v1/nodes/{NODE_NAME}")
    if node is None:
        return [f"node/{NODE_NAME} (not registered)"]
    conditions = node.get("status", {}).get("conditions") or []
    ready: Json = next((c for c in conditions if c.get("type") == "Ready"), {})
    if ready.get("status") != "True":
        return [f"node/{NODE_NAME} (not Ready: {ready.get('reason') or 'no status'} {ready.get('message') or ''})"]
    pressure = [c for c in conditions if c.get("type") in _PRESSURE and c.get("status") == "True"]
    if pressure:
        # The kubelet evicts pods under any of these and, for disk, deletes images it cannot pull back.
        return [f"node/{NODE_NAME} ({c['type']}: {c.get('message') or c.get('reason') or ''})" for c in pressure]
    taints = node.get("spec", {}).get("taints") or []
    if any(t.get("key") == "node.kubernetes.io/not-ready" for t in taints):
        return [f"node/{NODE_NAME} (not-ready taint)"]
    return []


#: The Node conditions under which the kubelet evicts pods.
_PRESSURE = ("DiskPressure", "MemoryPressure", "PIDPressure")


def assign_pod_cidrs(api: Api, *, ip_family: str) -> list[str]:
    """Set the real node's ``spec.podCIDRs`` to its bridge's ranges (primary first) unless it has some; return them.

    The dev cluster assigns node pod ranges itself (the controller-manager
    runs without ``--allocate-node-cidrs``: the kwok nodes' loopback ranges
    lie outside any cluster CIDR), so the Node tells what the CNI hands out.
    The field can only be set once; a node that already has ranges keeps them.
    """
    cidrs = [str(c) for c in addresses(ip_family).pod_cidrs]
    found = api.get(f"/api/v1/nodes/{NODE_NAME}") or {}
    current: list[str] = list(found.get("spec", {}).get("podCIDRs") or [])
    if current:
        return current
    patch = {"spec": {"podCIDR": cidrs[0], "podCIDRs": cidrs}}
    api.request("PATCH", f"/api/v1/nodes/{NODE_NAME}", patch, content_type="application/merge-patch+json")
    return cidrs


def set_kubelet_verbosity(api: Api, level: int = KUBELET_VERBOSITY) -> str:
    """Set the running kubelet's log verbosity to ``level``, without restarting it.

    Through the API server's node proxy to the kubelet's ``/debug/flags/v``
    (``enableDebugFlagsHandler``, on by default): the change lasts until the
    kubelet restarts, which then takes :data:`KUBELET_VERBOSITY` from its argv.
    Returns the kubelet's answer; raises :class:`ApiError` if it refuses.
    """
    request = urllib.request.Request(
        f"{api.server}/api/v1/nodes/{NODE_NAME}/proxy/debug/flags/v", data=str(level).encode(), method="PUT"
    )
    request.add_header("Content-Type", "text/plain")
    try:
        with api.opener.open(request, timeout=10) as resp:
            return str(resp.read().decode(errors="replace")).strip()
    except urllib.error.HTTPError as err:
        raise ApiError(err.code, err.read(2000).decode(errors="replace")) from None


# --------------------------------------------------------------------------
# host state: claim, prepare, tear down


def owner() -> Path | None:
    """The state directory whose cluster holds the machine's real node, if any is recorded."""
    try:
        text = OWNER_FILE.read_text().strip()
    except OSError:
        return None
    return Path(text) if text else None


def check_owner(state_dir: Path, *, alive: Callable[[Path], bool]) -> None:
    """Raise :class:`NodeError` if the cluster of another state directory holds the real node (see :func:`claim`)."""
    current = owner()
    if current is not None and current != state_dir and alive(current):
        raise NodeError(
            f"this machine's real node belongs to the cluster in {current}; there can be only one "
            f"(containerd's /run/containerd is machine-wide): stop it first with "
            f"`ring-devcluster down --state-dir {current}`"
        )


def claim(state_dir: Path, *, alive: Callable[[Path], bool], release: Callable[[Path], None], say: Say) -> None:
    """Record ``state_dir`` as the owner of the machine's one real node.

    If another state directory owns it and ``alive(that_dir)`` says its node
    still runs, raise :class:`NodeError`; a dead owner is cleaned up first
    with ``release(that_dir)`` (its :func:`teardown`).
    """
    OWNER_FILE.parent.mkdir(parents=True, exist_ok=True)
    with open(OWNER_FILE.parent / "node.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two `up --with node` at once: one wins, the other sees it
        check_owner(state_dir, alive=alive)
        current = owner()
        if current is not None and current != state_dir:
            say(f"cleaning up the real node left behind by {current}")
            release(current)
        if Path(CONTAINERD_SOCKET).exists() and current is None:
            # A containerd we did not start (a system service) owns the socket.
            probe = _run(["ctr", "--address", CONTAINERD_SOCKET, "--timeout", "2s", "version"], check=False)
            if probe.returncode == 0:
                raise NodeError(
                    f"another containerd already serves {CONTAINERD_SOCKET}; the dev cluster's node needs its own "
                    "(stop that one, e.g. `systemctl stop containerd`)"
                )
        OWNER_FILE.parent.mkdir(parents=True, exist_ok=True)  # release() may have cleaned /run
        OWNER_FILE.write_text(f"{state_dir}\n")


def prepare_host(state_dir: Path, *, ip_family: str, second_network: bool = False, say: Say) -> None:
    """Record the host's sysctls (once), then create the bridge with its addresses of ``ip_family``, the
    routes of the Service ranges onto it and the guard chain (iptables, ip6tables) (idempotent); with
    ``second_network`` the second bridge too."""
    addrs = addresses(ip_family)
    host_file = _host_file(state_dir)
    if not host_file.exists():
        record = {
            "sysctls": {k: v for k in _SYSCTLS if (v := _read_sysctl(k)) is not None},
            "absent": [p for p in _HOST_PATHS if not os.path.lexists(p)],
            "created": time.time(),
        }
        host_file.parent.mkdir(parents=True, exist_ok=True)
        host_file.write_text(json.dumps(record, indent=2))
    links = _run(["ip", "-j", "link", "show"]).stdout
    cidrs = ", ".join(f"{ip}/{c.prefixlen}" for ip, c in zip(addrs.node_ips, addrs.pod_cidrs, strict=True))
    if not any(link.get("ifname") == BRIDGE for link in json.loads(links or "[]")):
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        say(f"created bridge {BRIDGE} ({cidrs})")
    for ip, cidr in zip(addrs.node_ips, addrs.pod_cidrs, strict=True):
        # nodad: an IPv6 address stays "tentative" during duplicate address
        # detection, and CoreDNS, the relay and the kubelet could not bind it.
        _run(["ip", "addr", "replace", f"{ip}/{cidr.prefixlen}", "dev", BRIDGE, *(["nodad"] if ":" in ip else [])])
    _run(["ip", "link", "set", BRIDGE, "up"])
    # Service IPs belong on the bridge too: traffic to a ClusterIP without a
    # Service must not follow the default route off the machine.
    for service, ip in zip(addrs.service_cidrs, addrs.node_ips, strict=True):
        _run(["ip", "route", "replace", service, "dev", BRIDGE, "src", ip])
    if second_network:
        if not any(link.get("ifname") == BRIDGE2 for link in json.loads(links or "[]")):
            _run(["ip", "link", "add", BRIDGE2, "type", "bridge"])
            gateways = ", ".join(
                f"{ip}/{c.prefixlen}" for ip, c in zip(addrs.second_ips, addrs.second_cidrs, strict=True)
            )
            say(f"created bridge {BRIDGE2} ({gateways}) for the second pod network")
        for ip, cidr in zip(addrs.second_ips, addrs.second_cidrs, strict=True):
            _run(["ip", "addr", "replace", f"{ip}/{cidr.prefixlen}", "dev", BRIDGE2, *(["nodad"] if ":" in ip else [])])
        _run(["ip", "link", "set", BRIDGE2, "up"])
    for exe in ("iptables", "ip6tables"):
        _run([exe, "-w", "-N", _GUARD_CHAIN], check=False)
        _run([exe, "-w", "-F", _GUARD_CHAIN])
        for bridge in (BRIDGE, BRIDGE2):
            for rule in (
                ["-i", bridge, "-o", bridge, "-j", "RETURN"],
                ["-i", bridge, "-j", "DROP"],
                ["-o", bridge, "-j", "DROP"],
            ):
                _run([exe, "-w", "-A", _GUARD_CHAIN, *rule])
        if _run([exe, "-w", "-C", "FORWARD", "-j", _GUARD_CHAIN], check=False).returncode != 0:
            _run([exe, "-w", "-I", "FORWARD", "1", "-j", _GUARD_CHAIN])


def import_image(archive: Path) -> None:
    """Import a docker-archive tarball into the node's containerd (namespace ``k8s.io``)."""
    _run(["ctr", "--address", CONTAINERD_SOCKET, "-n", "k8s.io", "images", "import", str(archive)], timeout=300)


def image_names() -> set[str]:
    """The image references the node's containerd holds."""
    out = _run(["ctr", "--address", CONTAINERD_SOCKET, "-n", "k8s.io", "images", "ls", "-q"]).stdout
    return set(out.split())


def import_pause(state_dir: Path) -> bool:
    """Import the sandbox image (built from the cached ``pause`` binary) unless present; True if imported."""
    if images.PAUSE_IMAGE in image_names():
        return False
    binaries = json.loads((state_dir / "node" / "binaries.json").read_text())
    archive = images.write_docker_archive(
        state_dir / "node" / "images" / "pause.tar",
        name=images.PAUSE_IMAGE,
        files=images.pause_files(Path(binaries["pause"])),
        entrypoint=["/pause"],
    )
    import_image(archive)
    return True


def _mountpoints() -> list[str]:
    points = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            field = line.split()[4]
            points.append(field.encode().decode("unicode_escape"))
    return points


def _unmount_under(prefixes: Sequence[str]) -> int:
    """Lazily unmount every mount point under ``prefixes``, deepest first; return the count."""
    count = 0
    for point in sorted(
        {p for p in _mountpoints() if any(p == pre or p.startswith(pre.rstrip("/") + "/") for pre in prefixes)},
        key=len,
        reverse=True,
    ):
        if _run(["umount", "-l", point], check=False).returncode == 0:
            count += 1
    return count


def _iptables_cleanup() -> None:
    """Remove every chain named KUBE-* (kubelet, kube-proxy) or ours, with the rules jumping to them."""
    for exe in ("iptables", "ip6tables"):
        if shutil.which(exe, path=_node_env()["PATH"]) is None:
            continue
        for table in ("filter", "nat", "mangle", "raw"):
            listed = _run([exe, "-w", "-t", table, "-S"], check=False)
            if listed.returncode != 0:
                continue
            rules = listed.stdout.splitlines()
            ours = [r.split()[1] for r in rules if r.startswith("-N ") and r.split()[1].startswith(_CHAIN_PREFIXES)]
            if not ours:
                continue
            for rule in rules:
                words = shlex.split(rule)
                if words[:1] == ["-A"] and not words[1].startswith(_CHAIN_PREFIXES) and "-j" in words:
                    target = words[words.index("-j") + 1]
                    if target in ours:
                        _run([exe, "-w", "-t", table, "-D", *words[1:]], check=False)
            for chain in ours:
                _run([exe, "-w", "-t", table, "-F", chain], check=False)
            for chain in ours:
                _run([exe, "-w", "-t", table, "-X", chain], check=False)


def _remove_cgroups(name: str = "kubepods") -> list[str]:
    """rmdir every ``<hierarchy>/<name>`` cgroup tree (leaves first); return what could not be removed."""
    left = []
    root = Path("/sys/fs/cgroup")
    candidates = [root / name] + [h / name for h in root.iterdir() if h.is_dir()] if root.is_dir() else []
    for top in candidates:
        if not top.is_dir():
            continue
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
        for directory in [*dirs, top]:
            try:
                directory.rmdir()
            except OSError:
                left.append(str(directory))
    return left


def _kill_cgroup_members(name: str = "kubepods") -> int:
    """SIGKILL every process in a ``<hierarchy>/<name>`` cgroup: the node's containers, and nothing else.

    Needed when containerd died first: its shims then leave the containers running.
    """
    pids: set[int] = set()
    root = Path("/sys/fs/cgroup")
    tops = [root / name] + [h / name for h in root.iterdir() if h.is_dir()] if root.is_dir() else []
    for top in tops:
        if top.is_dir():
            for procs in top.rglob("cgroup.procs"):
                with contextlib.suppress(OSError, ValueError):
                    pids.update(int(p) for p in procs.read_text().split())
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def _kill_shims() -> int:
    """SIGKILL containerd shims serving our socket (left when containers could not be deleted)."""
    killed = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and CONTAINERD_SOCKET.encode() in argv:
            with contextlib.suppress(OSError):
                os.kill(int(proc.name), signal.SIGKILL)
                killed += 1
    return killed


def _delete_containers() -> int:
    """Kill and delete every task and container in containerd's ``k8s.io`` namespace; return the count."""
    ctr = ["ctr", "--address", CONTAINERD_SOCKET, "--timeout", "10s", "-n", "k8s.io"]
    listed = _run([*ctr, "containers", "ls", "-q"], check=False)
    if listed.returncode != 0:
        return 0
    ids = listed.stdout.split()
    for cid in ids:
        _run([*ctr, "tasks", "kill", "-a", "-s", "SIGKILL", cid], check=False)
    for cid in ids:
        _run([*ctr, "tasks", "delete", "-f", cid], check=False)
        _run([*ctr, "containers", "delete", cid], check=False)
    return len(ids)


def teardown(state_dir: Path, *, stop: Callable[[str], bool], say: Say) -> list[str]:
    """Stop the node of ``state_dir`` and restore the host; return the names of the processes stopped.

    ``stop(name)`` stops the cluster component ``name`` if it runs (True if it
    did). Safe to call again and on a state directory without a node. Pods
    are not drained: their containers are killed (a dev cluster's pods are
    disposable).
    """
    home = state_dir / "node"
    pid_files = [state_dir / "run" / f"{name}.pid" for name in PROCESSES]
    if not _host_file(state_dir).exists() and not any(p.exists() for p in pid_files):
        return []  # never started here, or already torn down
    stopped = [name for name in ("kubelet",) if stop(name)]
    containers = _delete_containers()
    stopped += [name for name in ("kube-proxy", "coredns", "apiserver-relay", "containerd") if stop(name)]
    shims = _kill_shims()
    strays = _kill_cgroup_members()
    try:
        binaries = json.loads((home / "binaries.json").read_text())
    except (OSError, ValueError):
        binaries = {}
    if binaries.get("kube_proxy") and os.access(binaries["kube_proxy"], os.X_OK):
        # kube-proxy's own clean-up of its iptables (and nftables/ipvs) state.
        _run([binaries["kube_proxy"], "--cleanup", "--v=0"], check=False, timeout=60)
    _iptables_cleanup()
    mounts = _unmount_under(["/run/containerd", str(home)])
    netns = 0
    for entry in sorted(Path("/run/netns").glob("cni-*")) if Path("/run/netns").is_dir() else []:
        _run(["umount", "-l", str(entry)], check=False)
        with contextlib.suppress(OSError):
            entry.unlink()
            netns += 1
    left = _remove_cgroups()
    deadline = time.monotonic() + 5
    while left and time.monotonic() < deadline:  # killed processes take a moment to leave their cgroups
        time.sleep(0.2)
        left = _remove_cgroups()
    for service in (SERVICE_CIDR, SERVICE_CIDR6):
        _run(["ip", "route", "del", service, "dev", BRIDGE], check=False)
    _run(["ip", "link", "del", BRIDGE], check=False)
    _run(["ip", "link", "del", BRIDGE2], check=False)
    logs = home / "pod-logs"
    containers_dir = Path("/var/log/containers")
    if containers_dir.is_dir():
        for link in containers_dir.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(str(logs)):
                    link.unlink()
    restored = []
    host_file = _host_file(state_dir)
    try:
        record = json.loads(host_file.read_text())
    except (OSError, ValueError):
        record = {}
    for key, value in (record.get("sysctls") or {}).items():
        if _read_sysctl(key) != value and _write_sysctl(key, value):
            restored.append(f"{key.replace('/', '.')}={value}")
    absent = set(record.get("absent") or ())
    for path in _HOST_PATHS:
        if path not in absent:
            continue
        if path == "/run/netns":
            with contextlib.suppress(OSError):
                os.rmdir(path)  # only if empty: another tool's namespaces stay
        else:
            shutil.rmtree(path, ignore_errors=True)
    results = Path("/var/lib/cni/results")
    if results.is_dir():
        for cached in [*results.glob("ring-devcluster-*"), *results.glob("cni-loopback-*")]:
            with contextlib.suppress(OSError):
                cached.unlink()
    with contextlib.suppress(FileNotFoundError):
        host_file.unlink()
    if owner() == state_dir:
        # The owner file goes; its directory and node.lock stay. Unlinking a
        # lock file that claim() may hold (it tears down a dead owner under
        # the lock) would let a second claim lock a new file beside it.
        with contextlib.suppress(FileNotFoundError):
            OWNER_FILE.unlink()
    say(
        f"real node removed: {containers} containers, {shims} stray shims, {strays} stray container processes, "
        f"{mounts} mounts, {netns} network namespaces, bridges {BRIDGE}, {BRIDGE2}; "
        f"sysctls restored: {', '.join(restored) or 'none changed'}"
        + (f"; {len(left)} cgroups still busy, e.g. {left[0]}" if left else "")
    )
    return stopped
