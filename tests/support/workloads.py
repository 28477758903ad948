"""Workloads for the cluster that runs the real Trainer, JobSet and Volcano controllers.

The example runtime and TrainJob (build/examples/trainer), their API groups, and
a watch-based :class:`Timeline` of pods and ConfigMaps.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException

from tests.support.clients import REPO
from tests.support.kubehelp import Watcher, wait_for

#: The workload controllers this cluster runs (trainer implies jobset).
WORKLOAD_CONTROLLERS = ("jobset", "volcano", "trainer")
#: Every optional component of this cluster: the controllers, the real node and the Prometheus scraping it.
CLUSTER_ADDONS = (*WORKLOAD_CONTROLLERS, "node", "prometheus")
RUNTIME_EXAMPLE = REPO / "build" / "examples" / "trainer" / "tensorflow-runtime.yaml"
TRAINJOB_EXAMPLE = REPO / "build" / "examples" / "trainer" / "trainjob.yaml"
#: The Volcano-gang variant: Queue, script ConfigMap, RBAC, runtime and TrainJob in one file.
VOLCANO_RUNTIME_EXAMPLE = REPO / "build" / "examples" / "trainer" / "tensorflow-volcano-runtime.yaml"
TRAINER = ("trainer.kubeflow.org", "v1alpha1")
JOBSET = ("jobset.x-k8s.io", "v1alpha2")
VOLCANO = ("batch.volcano.sh", "v1alpha1")
SCHEDULING = ("scheduling.volcano.sh", "v1beta1")
#: The annotation Trainer's Volcano plugin reads the PodGroup's queue from.
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"

Json = dict[str, Any]


class Timeline:
    """Watch receive times, in this process, of pods first Running with an IP and of the ConfigMap's states.

    Both come from watches opened before the workload is created, so the
    first completed ``cluster.json`` minus the last pod's Running is the spec
    latency as a client would feel it (each side includes one watch delivery;
    see :func:`timeline_wait`).
    """

    def __init__(self, k8s: Any, namespace: str) -> None:
        self.running: dict[str, float] = {}
        self.specs: list[tuple[float, str, Json]] = []  # (time, configmap, cluster.json)
        self._watchers = [
            Watcher(k8s.core.list_namespaced_pod, namespace, self._on_pod, timeout_seconds=2, retry=0.1),
            Watcher(k8s.core.list_namespaced_config_map, namespace, self._on_cm, timeout_seconds=2, retry=0.1),
        ]

    def _on_pod(self, pod: Any) -> None:
        if pod.status.phase == "Running" and pod.status.pod_ip:
            self.running.setdefault(pod.metadata.name, time.time())

    def _on_cm(self, cm: Any) -> None:
        data = cm.data or {}
        if "cluster.json" in data:
            self.specs.append((time.time(), cm.metadata.name, json.loads(data["cluster.json"])))

    def stop(self) -> None:
        for w in self._watchers:
            w.stop(timeout=5)


#: Scheduling gate the e2e runtime puts on its pods (see tests/e2e/test_tf_trainjob.py).
GATE = "ring-controller.test/port"


def tensorflow_runtime(name: str, *, gated: bool = False) -> Json:
    """The example ClusterTrainingRuntime (build/examples/trainer), renamed; optionally with a scheduling gate."""
    runtime: Json = yaml.safe_load(RUNTIME_EXAMPLE.read_text())
    runtime["metadata"]["name"] = name
    if gated:
        pod_spec = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        pod_spec["schedulingGates"] = [{"name": GATE}]
    return runtime


def trainjob(name: str, *, runtime: str, nodes: int) -> Json:
    """The example TrainJob (build/examples/trainer), renamed, on ``runtime`` with ``nodes`` nodes."""
    tj: Json = yaml.safe_load(TRAINJOB_EXAMPLE.read_text())
    tj["metadata"]["name"] = name
    tj["spec"]["runtimeRef"]["name"] = runtime
    tj["spec"]["trainer"]["numNodes"] = nodes
    return tj


@contextlib.contextmanager
def cluster_runtime(k8s: Any, runtime: Json) -> Iterator[Json]:
    """Create a ClusterTrainingRuntime for the block; delete it afterwards (without waiting:
    Trainer keeps its in-use finalizer until the namespace's TrainJobs are gone)."""
    created = k8s.custom.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", runtime)
    try:
        yield created
    finally:
        with contextlib.suppress(ApiException):
            k8s.custom.delete_cluster_custom_object(*TRAINER, "clustertrainingruntimes", runtime["metadata"]["name"])


def jobset_pods(k8s: Any, namespace: str, jobset: str) -> list[Any]:
    """The live pods of JobSet ``jobset``."""
    pods = k8s.core.list_namespaced_pod(namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={jobset}").items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def timeline_wait(timeline: Timeline, configmap: str, epoch: int) -> float:
    """When the timeline saw ``configmap`` completed at ``epoch`` (waiting for the watch to catch up)."""
    return wait_for(
        lambda: next(
            (
                t
                for t, name, s in timeline.specs
                if name == configmap and s["status"] == "completed" and s["epoch"] == epoch
            ),
            None,
        ),
        timeout=10,
        what=f"the watch to see {configmap} completed",
    )


def volcano_example(namespace: str) -> list[Json]:
    """The documents of the Volcano-gang example, ready to apply in ``namespace``.

    Changed only where a shared cluster needs it: namespaced objects get
    ``namespace``; the two cluster-scoped ones (the Queue and the
    ClusterTrainingRuntime) get ``-<namespace>`` appended to their names, and
    the references to them (the runtime's queue annotation, the TrainJob's
    ``runtimeRef``) follow. Fails if the file no longer has the expected
    objects or references.
    """
    docs = [d for d in yaml.safe_load_all(VOLCANO_RUNTIME_EXAMPLE.read_text()) if d]
    by_kind: dict[str, list[Json]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
    (queue,), (runtime,), (tj,) = by_kind["Queue"], by_kind["ClusterTrainingRuntime"], by_kind["TrainJob"]
    annotations = runtime["spec"]["template"]["metadata"]["annotations"]
    assert annotations[QUEUE_ANNOTATION] == queue["metadata"]["name"], "the runtime must name the example's queue"
    assert tj["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"], "the TrainJob must name the runtime"
    for doc in (queue, runtime):
        doc["metadata"]["name"] = f"{doc['metadata']['name']}-{namespace}"
    annotations[QUEUE_ANNOTATION] = queue["metadata"]["name"]
    tj["spec"]["runtimeRef"]["name"] = runtime["metadata"]["name"]
    for doc in docs:
        if doc["kind"] not in ("Queue", "ClusterTrainingRuntime"):
            doc["metadata"]["namespace"] = namespace
    return docs


def podgroups(k8s: Any, namespace: str) -> list[Json]:
    """The Volcano PodGroups in ``namespace``."""
    items: list[Json] = k8s.custom.list_namespaced_custom_object(*SCHEDULING, namespace, "podgroups")["items"]
    return items
