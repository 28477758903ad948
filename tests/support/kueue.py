"""Kueue's objects for the tests on the cluster that runs it (``ring-devcluster up --with kueue``).

Kueue admits a job (here a JobSet or a TrainJob) that names a LocalQueue in
the label :data:`QUEUE_LABEL`: its webhook creates it suspended, its job
controller makes a Workload of it, and its scheduler reserves quota in the
LocalQueue's ClusterQueue and unsuspends the job, adding the flavor's node
labels and tolerations to the pod templates. A higher-priority Workload
(:data:`PRIORITY_LABEL` names a WorkloadPriorityClass) may preempt it: Kueue
suspends the job again (its pods are deleted) and admits it anew later. With
Topology Aware Scheduling (a ResourceFlavor naming a Topology), Kueue also
chooses each pod's node: the pods come with a scheduling gate that Kueue
lifts once it has set their ``kubernetes.io/hostname`` node selector.

The builders write Kueue's ``v1beta2`` API (the version Kueue v0.19 stores).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kubernetes.client.rest import ApiException

Json = dict[str, Any]

KUEUE = ("kueue.x-k8s.io", "v1beta2")
#: The optional components of the Kueue tests' cluster (kueue and trainer imply jobset).
KUEUE_ADDONS = ("jobset", "trainer", "kueue")
#: A job is Kueue's when it names a LocalQueue (same namespace) in this label.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: The WorkloadPriorityClass of a job.
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
#: On a pod template: the topology level all its pods must share (else the job waits).
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
#: On a pod template: the topology level its pods should share where they fit.
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
#: The gate Kueue puts on the pods of a topology-aware admission until it has placed them.
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
HOSTNAME = "kubernetes.io/hostname"

_PLURALS = {
    "ResourceFlavor": "resourceflavors",
    "ClusterQueue": "clusterqueues",
    "Topology": "topologies",
    "WorkloadPriorityClass": "workloadpriorityclasses",
}


def _object(kind: str, name: str, spec: Json | None = None, **fields: Any) -> Json:
    body: Json = {"apiVersion": "/".join(KUEUE), "kind": kind, "metadata": {"name": name}, **fields}
    if spec is not None:
        body["spec"] = spec
    return body


def topology(name: str, levels: Sequence[str]) -> Json:
    """A Topology whose levels are the node labels ``levels``, outermost first."""
    return _object("Topology", name, {"levels": [{"nodeLabel": label} for label in levels]})


def resource_flavor(
    name: str,
    *,
    node_labels: Mapping[str, str] | None = None,
    tolerations: Sequence[Json] = (),
    topology_name: str | None = None,
) -> Json:
    """A ResourceFlavor: the nodes it stands for (``node_labels``), what their pods tolerate, their Topology."""
    spec: Json = {}
    if node_labels:
        spec["nodeLabels"] = dict(node_labels)
    if tolerations:
        spec["tolerations"] = list(tolerations)
    if topology_name:
        spec["topologyName"] = topology_name
    return _object("ResourceFlavor", name, spec)


def cluster_queue(name: str, *, flavor: str, quota: Mapping[str, str], preempt_lower_priority: bool = False) -> Json:
    """A ClusterQueue for every namespace: ``quota`` (resource -> nominal quantity) in ``flavor``.

    ``preempt_lower_priority``: a pending Workload may evict admitted ones
    of lower priority in this queue to fit.
    """
    spec: Json = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": list(quota),
                "flavors": [{"name": flavor, "resources": [{"name": r, "nominalQuota": q} for r, q in quota.items()]}],
            }
        ],
    }
    if preempt_lower_priority:
        spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
    return _object("ClusterQueue", name, spec)


def priority_class(name: str, value: int) -> Json:
    """A WorkloadPriorityClass (higher ``value`` wins)."""
    return _object("WorkloadPriorityClass", name, value=value)


def local_queue(name: str, *, namespace: str, cluster_queue_name: str) -> Json:
    """A LocalQueue in ``namespace`` feeding ClusterQueue ``cluster_queue_name``."""
    body = _object("LocalQueue", name, {"clusterQueue": cluster_queue_name})
    body["metadata"]["namespace"] = namespace
    return body


@contextlib.contextmanager
def cluster_objects(k8s: Any, objects: Sequence[Json]) -> Iterator[None]:
    """Create Kueue's cluster-scoped ``objects`` for the block; delete them afterwards (in reverse, not waiting)."""
    created: list[Json] = []
    try:
        for body in objects:
            k8s.custom.create_cluster_custom_object(*KUEUE, _PLURALS[body["kind"]], body)
            created.append(body)
        yield
    finally:
        for body in reversed(created):
            with contextlib.suppress(ApiException):
                k8s.custom.delete_cluster_custom_object(*KUEUE, _PLURALS[body["kind"]], body["metadata"]["name"])


def create_local_queue(k8s: Any, body: Json) -> Json:
    """Create LocalQueue ``body`` (deleted with its namespace)."""
    namespace = body["metadata"]["namespace"]
    created: Json = k8s.custom.create_namespaced_custom_object(*KUEUE, namespace, "localqueues", body)
    return created


def workload_of(k8s: Any, namespace: str, kind: str, name: str) -> Json | None:
    """The Workload Kueue made of job ``kind``/``name`` (its owner), None while there is none."""
    items = k8s.custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"]
    for item in items:
        for ref in item["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == kind and ref.get("name") == name:
                return item  # type: ignore[no-any-return]
    return None


def condition(obj: Json | None, kind: str) -> Json | None:
    """Condition ``kind`` of ``obj``'s status, None if absent."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond  # type: ignore[no-any-return]
    return None


def is_true(obj: Json | None, kind: str) -> bool:
    """Condition ``kind`` of ``obj`` is ``True``."""
    cond = condition(obj, kind)
    return cond is not None and cond.get("status") == "True"


@contextlib.contextmanager
def queue(
    k8s: Any,
    namespace: str,
    *,
    quota: Mapping[str, str],
    flavor: Json | None = None,
    preempt_lower_priority: bool = False,
    extra: Sequence[Json] = (),
) -> Iterator[str]:
    """A LocalQueue ``lq`` in ``namespace`` on a ClusterQueue of its own, Active; yields its name.

    The ClusterQueue has ``quota`` in ``flavor`` (default: a flavor of its
    own standing for any node); ``extra`` cluster-scoped objects (a Topology,
    priority classes) are created first. All are deleted after the block.
    """
    from tests.support.kubehelp import wait_for

    flavor = flavor or resource_flavor(f"any-{namespace}")
    cq = cluster_queue(
        f"cq-{namespace}", flavor=flavor["metadata"]["name"], quota=quota, preempt_lower_priority=preempt_lower_priority
    )
    with cluster_objects(k8s, [*extra, flavor, cq]):
        create_local_queue(k8s, local_queue("lq", namespace=namespace, cluster_queue_name=cq["metadata"]["name"]))
        wait_for(
            lambda: is_true(
                k8s.custom.get_cluster_custom_object(*KUEUE, "clusterqueues", cq["metadata"]["name"]), "Active"
            ),
            what=f"ClusterQueue {cq['metadata']['name']} Active",
        )
        yield "lq"
