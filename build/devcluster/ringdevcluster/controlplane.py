"""The control plane's configuration: ports, certificates, files and each process's argv.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, all on
loopback. :func:`configure` writes what they need into a fresh state
directory (CA, serving and client certificates, kubeconfigs, kwok's stages,
the audit policy) and returns their argv as a :class:`Setup`, the same record
the optional components' ``configure`` return (:mod:`addons`, :mod:`node`).
The addresses every part shares (:data:`SERVICE_CIDR`, :data:`SERVICE_CIDR6`
and the addresses taken from them) are defined here once, with the cluster's
IP families (:data:`IP_FAMILIES`: dual-stack by default, IPv4 first).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping, Sequence
from pathlib import Path

from ringdevcluster import kubeversions, kwok
from ringdevcluster.pki import Pki, write_kubeconfig

__all__ = [
    "ADMIN_USER",
    "AUDIT_POLICY",
    "AUDIT_POLICY_FILE",
    "COMPONENTS",
    "DEFAULT_IP_FAMILY",
    "IP_FAMILIES",
    "PORTS",
    "SERVICE_ACCOUNT_ISSUER",
    "SERVICE_CIDR",
    "SERVICE_CIDR6",
    "SERVICE_IP",
    "SERVICE_IP6",
    "Setup",
    "add_flags",
    "argv",
    "check_ip_family",
    "configure",
    "families",
    "service_cidrs",
]

#: The control plane's components in start order; stopped in reverse (after
#: the optional ones, ``Cluster.components``).
COMPONENTS: tuple[str, ...] = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
#: The loopback ports the control plane listens on (keys of ``Cluster.ports``), in allocation order.
PORTS: tuple[str, ...] = ("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
#: The API server's ``--service-cluster-ip-range``; the real node routes it onto its bridge.
SERVICE_CIDR = "10.96.0.0/16"
#: The ``kubernetes`` Service's ClusterIP (the range's first address): the API server's certificate names it.
SERVICE_IP = str(ipaddress.ip_network(SERVICE_CIDR)[1])
#: The IPv6 Service range: a /112 of the dev cluster's unique local prefix
#: ``fd72:696e:6700::/48`` (RFC 4193; the real node's IPv6 pod range is in it too).
SERVICE_CIDR6 = "fd72:696e:6700:96::/112"
#: The ``kubernetes`` Service's ClusterIP on an IPv6-only cluster.
SERVICE_IP6 = str(ipaddress.ip_network(SERVICE_CIDR6)[1])
#: The IP families a dev cluster can run (``up --ip-family``): ``dual`` (IPv4
#: first: Services without ``ipFamilyPolicy`` and the node's primary addresses
#: stay IPv4, pods on the real node also get an IPv6 address), ``ipv4`` or ``ipv6``.
IP_FAMILIES: tuple[str, ...] = ("dual", "ipv4", "ipv6")
DEFAULT_IP_FAMILY = "dual"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
#: The admin user (``system:masters``) of ``<state dir>/kubeconfig``.
ADMIN_USER = "ring-devcluster-admin"


@dataclasses.dataclass(frozen=True)
class Setup:
    """What configuring a part of the cluster made: argv and environment per process, and
    flags the API server must have (the API server is restarted when a part that brings
    some joins a running cluster)."""

    argv: dict[str, list[str]]
    env: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    apiserver_args: list[str] = dataclasses.field(default_factory=list)


def check_ip_family(value: str) -> str:
    """``value`` if it is one of :data:`IP_FAMILIES`; ValueError naming them otherwise."""
    if value not in IP_FAMILIES:
        raise ValueError(f"unknown IP family {value!r}; choose from {', '.join(IP_FAMILIES)}")
    return value


def families(ip_family: str) -> tuple[int, ...]:
    """The IP versions of a cluster of ``ip_family``, primary first: ``(4, 6)``, ``(4,)`` or ``(6,)``."""
    return {"dual": (4, 6), "ipv4": (4,), "ipv6": (6,)}[check_ip_family(ip_family)]


def service_cidrs(ip_family: str) -> list[str]:
    """The Service ranges of a cluster of ``ip_family``, primary first (``--service-cluster-ip-range``)."""
    return [{4: SERVICE_CIDR, 6: SERVICE_CIDR6}[v] for v in families(ip_family)]


def add_flags(argv: list[str], flags: Sequence[str]) -> bool:
    """Append to ``argv`` each ``--flag=value`` of ``flags`` it lacks (replacing another value); True if changed."""
    changed = False
    for flag in flags:
        key = flag.split("=", 1)[0] + "="
        current = [a for a in argv if a.startswith(key)]
        if current == [flag]:
            continue
        argv[:] = [a for a in argv if not a.startswith(key)] + [flag]
        changed = True
    return changed


AUDIT_POLICY_FILE = "audit-policy.yaml"
#: The API server's audit policy: ConfigMap writes (who, when) and Lease
#: writes with their request body (the holder they set); nothing else, so the
#: log stays small. Read it from ``<state dir>/logs/audit.log``.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    namespaces: ["kube-node-lease"]
  - level: Request
    verbs: ["create", "update", "patch"]
    resources: [{group: "coordination.k8s.io", resources: ["leases"]}]
  - level: Metadata
    verbs: ["create", "update", "patch", "delete"]
    resources: [{group: "", resources: ["configmaps"]}]
  - level: None
"""


def argv(
    *,
    state_dir: Path,
    binaries: Mapping[str, Path],
    ports: Mapping[str, int],
    pki: Pki,
    ip_family: str = DEFAULT_IP_FAMILY,
    kube: str | None = None,
) -> dict[str, list[str]]:
    """The control plane's processes' argv (:data:`COMPONENTS`), for the files :func:`configure` writes,
    with the Service ranges of ``ip_family``; ``kube`` (the release's full version, None: the pinned
    one) adds its :func:`ringdevcluster.kubeversions.release_flags`."""
    processes = _argv(state_dir=state_dir, binaries=binaries, ports=ports, pki=pki, ip_family=ip_family)
    for process, flags in kubeversions.release_flags(kube).items():
        add_flags(processes[process], flags)
    return processes


def _argv(
    *, state_dir: Path, binaries: Mapping[str, Path], ports: Mapping[str, int], pki: Pki, ip_family: str
) -> dict[str, list[str]]:
    services = ",".join(service_cidrs(ip_family))
    kc = state_dir / "kubeconfigs"
    etcd_url = f"http://127.0.0.1:{ports['etcd']}"
    peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
    return {
        "etcd": [
            str(binaries["etcd"]),
            "--name=devcluster",
            f"--data-dir={state_dir / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=devcluster={peer_url}",
            "--initial-cluster-state=new",
            # A throw-away test cluster: durability is not worth the fsync latency.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ],
        "kube-apiserver": [
            str(binaries["kube-apiserver"]),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports['kube-apiserver']}",
            # The endpoint reconciler would publish the loopback advertise
            # address in Endpoints, which validation rejects; nothing here
            # reaches the API through the `kubernetes` Service anyway.
            "--endpoint-reconciler-type=none",
            f"--tls-cert-file={pki.cert('apiserver')}",
            f"--tls-private-key-file={pki.key('apiserver')}",
            f"--client-ca-file={pki.ca_cert}",
            "--authorization-mode=Node,RBAC",
            # Beside the default plugins: namespaces can pin their pods to a node and
            # give them tolerations (annotations), as an admin places a system namespace;
            # the tests put the shipped controller on the real node that way.
            "--enable-admission-plugins=PodNodeSelector,PodTolerationRestriction",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={state_dir / 'pki' / 'sa.pub'}",
            f"--service-account-signing-key-file={state_dir / 'pki' / 'sa.key'}",
            f"--service-cluster-ip-range={services}",
            "--allow-privileged=true",
            # Who wrote which ConfigMap and Lease, when (the chaos runs check
            # every write against the Lease holder): see AUDIT_POLICY.
            f"--audit-policy-file={state_dir / AUDIT_POLICY_FILE}",
            f"--audit-log-path={state_dir / 'logs' / 'audit.log'}",
            "--audit-log-maxsize=200",
            "--audit-log-maxbackup=1",
            "--profiling=false",
            "--v=1",
        ],
        "kube-controller-manager": [
            str(binaries["kube-controller-manager"]),
            f"--kubeconfig={kc / 'kube-controller-manager.kubeconfig'}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['kube-controller-manager']}",
            "--leader-elect=false",
            # All default controllers: garbage collector, job, deployment,
            # replicaset, namespace, serviceaccount(-token), node lifecycle...
            # Pod CIDRs are set by the harness (kwok nodes: 127.1.N.0/24,
            # outside any cluster CIDR the range allocator would accept; the
            # real node: its bridge's ranges, one per family), so no
            # --allocate-node-cidrs.
            "--controllers=*",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={state_dir / 'pki' / 'sa.key'}",
            f"--root-ca-file={pki.ca_cert}",
            f"--cluster-signing-cert-file={pki.ca_cert}",
            f"--cluster-signing-key-file={pki.ca_key}",
            f"--service-cluster-ip-range={services}",
            "--kube-api-qps=100",
            "--kube-api-burst=200",
            "--profiling=false",
            "--v=1",
        ],
        "kube-scheduler": [
            str(binaries["kube-scheduler"]),
            f"--kubeconfig={kc / 'kube-scheduler.kubeconfig'}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['kube-scheduler']}",
            "--leader-elect=false",
            "--profiling=false",
            "--v=1",
        ],
        "kwok": [
            str(binaries["kwok"]),
            f"--kubeconfig={kc / 'kwok.kubeconfig'}",
            f"--config={state_dir / 'kwok.yaml'}",
            "--manage-nodes-with-label-selector=" + "=".join(kwok.NODE_LABEL),
            "--node-lease-duration-seconds=40",
            # Fallback for a labelled node without a pod CIDR (ours all have one).
            "--cidr=127.1.255.0/24",
            "--node-ip=127.0.0.1",
            f"--server-address=127.0.0.1:{ports['kwok']}",
        ],
    }


def configure(
    *,
    state_dir: Path,
    server: str,
    pki: Pki,
    ports: Mapping[str, int],
    binaries: Mapping[str, Path],
    ip_family: str = DEFAULT_IP_FAMILY,
    kube: str | None = None,
) -> Setup:
    """Create the CA, the control plane's certificates, kubeconfigs and files in an empty ``state_dir``;
    return its processes' argv.

    ``ports`` holds at least :data:`PORTS`; ``server`` is the API server's URL on them;
    ``ip_family`` one of :data:`IP_FAMILIES`; ``kube`` is the release's full version (None: the
    pinned one), whose flags :func:`argv` adds.
    """
    pki.init_ca()
    pki.issue(
        "apiserver",
        cn="kube-apiserver",
        server_names=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                      "kubernetes.default.svc.cluster.local"],
        server_ips=["127.0.0.1", SERVICE_IP, SERVICE_IP6],
    )  # fmt: skip
    pki.service_account_keys()
    identities = {
        "admin": (ADMIN_USER, ["system:masters"]),
        "kube-controller-manager": ("system:kube-controller-manager", []),
        "kube-scheduler": ("system:kube-scheduler", []),
        # kwok updates node and pod status of every fake node: an admin.
        "kwok": ("ring-devcluster-kwok", ["system:masters"]),
    }
    for name, (cn, groups) in identities.items():
        cert, key = pki.issue(name, cn=cn, groups=groups)
        if name != "admin":
            write_kubeconfig(
                state_dir / "kubeconfigs" / f"{name}.kubeconfig",
                server=server, ca_cert=pki.ca_cert, client_cert=cert, client_key=key, user=cn,
            )  # fmt: skip
    (state_dir / "kwok.yaml").write_text(kwok.STAGES)
    (state_dir / AUDIT_POLICY_FILE).write_text(AUDIT_POLICY)
    return Setup(
        argv=argv(state_dir=state_dir, binaries=binaries, ports=ports, pki=pki, ip_family=ip_family, kube=kube)
    )
