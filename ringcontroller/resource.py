"""Where a resource type lives in the API: one :class:`Resource` for the daemon and the plugin.

Pure (no client): the daemon's client (:mod:`ringcontroller.kube`) and the
read-only plugin (:mod:`ringcontroller.kubectl_ring.api`) both build their
URL paths here, so a name is quoted the same way in both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

from model import hypernode, trainjob
from model.kinds import WorkloadKind

__all__ = [
    "CONFIGMAPS",
    "EVENTS",
    "HYPERNODES",
    "LEASES",
    "NODES",
    "PODS",
    "RESOURCE_CLAIMS",
    "RESOURCE_CLAIMS_OLDER",
    "RUNTIMES",
    "VOLCANO_JOBS",
    "Resource",
    "of_kind",
]


@dataclass(frozen=True, slots=True)
class Resource:
    """A resource type by API group, version and plural (``group`` ``""`` is the core group).

    ``namespaced`` False: cluster-scoped, a namespace given to :meth:`path`
    is ignored. ``str(resource)`` is ``plural`` for the core group and
    ``plural.group`` otherwise (``pods``, ``jobs.batch.volcano.sh``): the
    label used in logs and metrics.
    """

    group: str
    version: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The URL path of the collection (in ``namespace``; None or "": all namespaces) or of
        object ``name``. Both are URL-quoted: a value cannot add a path segment or a query."""
        prefix = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            prefix += f"/namespaces/{quote(namespace, safe='')}"
        prefix += f"/{self.plural}"
        if name:
            prefix += f"/{quote(name, safe='')}"
        return prefix

    def __str__(self) -> str:
        return self.plural if not self.group else f"{self.plural}.{self.group}"


PODS: Final = Resource("", "v1", "pods")
CONFIGMAPS: Final = Resource("", "v1", "configmaps")
EVENTS: Final = Resource("", "v1", "events")
#: Nodes (cluster-scoped): their labels give the topology path (:mod:`model.topology`).
NODES: Final = Resource("", "v1", "nodes", namespaced=False)
#: Volcano's HyperNodes (cluster-scoped): network domains, a source of topology paths.
HYPERNODES: Final = Resource(hypernode.GROUP, hypernode.VERSION, hypernode.PLURAL, namespaced=False)
LEASES: Final = Resource("coordination.k8s.io", "v1", "leases")
#: DRA ResourceClaims (``resource.k8s.io/v1``, Kubernetes 1.34+): a NIC's address in ``status.devices[].networkData``.
RESOURCE_CLAIMS: Final = Resource("resource.k8s.io", "v1", "resourceclaims")
#: The older versions of :data:`RESOURCE_CLAIMS` with the same ``status.devices[].networkData``, newest
#: first: ``v1beta2`` (Kubernetes 1.33) and ``v1beta1`` (1.32; 1.33), served where DRA is turned on.
RESOURCE_CLAIMS_OLDER: Final = (
    Resource("resource.k8s.io", "v1beta2", "resourceclaims"),
    Resource("resource.k8s.io", "v1beta1", "resourceclaims"),
)
VOLCANO_JOBS: Final = Resource("batch.volcano.sh", "v1alpha1", "jobs")
#: Kubeflow Trainer's ClusterTrainingRuntimes (cluster-scoped): where a TrainJob without numNodes finds its count.
RUNTIMES: Final = Resource(trainjob.GROUP, trainjob.VERSION, trainjob.RUNTIME_PLURAL, namespaced=False)


def of_kind(kind: WorkloadKind) -> Resource:
    """Where the workloads of ``kind`` live."""
    return Resource(kind.group, kind.version, kind.plural)
