"""ring-devcluster: a real, local Kubernetes control plane for tests, benchmarks and demos.

etcd, kube-apiserver (RBAC), kube-controller-manager, kube-scheduler and kwok
fake nodes, built from the Go module proxy (``build``), configured
(``controlplane``), run on loopback (``process``, ``api``) and owned by one
state directory (``state``, ``cluster``). Pods on the fake nodes get
loopback IPs from 127.1.0.0/16 (``kwok``), so test processes can stand in for
their containers. Optional real workload controllers (JobSet, Volcano,
Kubeflow Trainer: ``addons``) and one real node (kubelet, kube-proxy,
containerd, CoreDNS: ``node``) run next to it on request. Use the
``ring-devcluster`` command (``cli``) or, from Python::

    from ringdevcluster import ensure_up
    cluster = ensure_up(state_dir=".state/devcluster")
    os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
    # with JobSet, Volcano and Trainer:
    ensure_up(state_dir=".state/workloads", addons=("jobset", "volcano", "trainer"))
    # and the machine's one real node (root):
    ensure_up(state_dir=".state/workloads", addons=("node",))
"""

from ringdevcluster.build import BuildError
from ringdevcluster.cluster import (
    COMPONENTS,
    DEFAULT_NODES,
    Cluster,
    ClusterError,
    ComponentStatus,
    default_state_dir,
    down,
    ensure_up,
    load,
)

__all__ = [
    "COMPONENTS",
    "DEFAULT_NODES",
    "BuildError",
    "Cluster",
    "ClusterError",
    "ComponentStatus",
    "default_state_dir",
    "down",
    "ensure_up",
    "load",
]
