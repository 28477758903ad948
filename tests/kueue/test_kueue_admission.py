"""Jobs that Kueue admits, preempts and places, with the real Kueue, JobSet, Job and Trainer controllers.

A job labelled ``kueue.x-k8s.io/queue-name`` is created suspended by
Kueue's webhook and runs only once Kueue admits its Workload; a job Kueue
preempts is suspended again (its pods deleted) and admitted anew later; with
Topology Aware Scheduling Kueue picks each pod's node. What ring-controller
must do through all of it: write a complete spec only once the admitted
job's pods run, never before; a new epoch for each admission, never a spec
mixing the pods of two admissions; and, for ``rank-order: topology``, ranks
that follow the nodes Kueue chose. Everything is awaited on what the API
shows (a Workload's condition, a ConfigMap's content, a pod's status).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from model.keys import RANK_ORDER_ANNOTATION
from ringdevcluster import Cluster
from ringdevcluster.kwok import EXIT_CODE_ANNOTATION
from tests.support.controllerproc import ControllerProcess
from tests.support.factories import jobset, pod_template
from tests.support.kubectlring import ring
from tests.support.kubehelp import Watcher, wait_for, wait_spec
from tests.support.kueue import (
    HOSTNAME,
    KUEUE_ADDONS,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    REQUIRED_TOPOLOGY,
    TOPOLOGY_GATE,
    condition,
    is_true,
    priority_class,
    queue,
    resource_flavor,
    topology,
    workload_of,
)
from tests.support.topology import FIXTURE_LABEL, RACK, SPINE, labelled_nodes, toleration
from tests.support.workloads import JOBSET, TRAINER, cluster_runtime, jobset_pods, tensorflow_runtime, trainjob

pytestmark = pytest.mark.kueue

Json = dict[str, Any]


def _template(*, cpu: str = "1", gpus: int = 0, annotations: dict[str, str] | None = None) -> Json:
    tpl = pod_template(port=3000)
    requests = {"cpu": cpu, **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    tpl["spec"]["containers"][0]["resources"] = {"requests": requests, "limits": dict(requests)}
    if annotations:
        tpl["metadata"]["annotations"] = dict(annotations)
    return tpl


def _queued_jobset(
    k8s: Any,
    namespace: str,
    name: str,
    *,
    pods: int,
    lq: str,
    priority: str | None = None,
    template: Json | None = None,
    annotations: dict[str, str] | None = None,
) -> Json:
    body = jobset(name, namespace=namespace, replicated=[("workers", 1, pods)], template=template or _template())
    body["metadata"]["labels"][QUEUE_LABEL] = lq
    if priority:
        body["metadata"]["labels"][PRIORITY_LABEL] = priority
    if annotations:
        body["metadata"]["annotations"] = dict(annotations)
    created: Json = k8s.custom.create_namespaced_custom_object(*JOBSET, namespace, "jobsets", body)
    return created


def _finish(k8s: Any, namespace: str, name: str) -> None:
    """End the pods of JobSet ``name`` with exit code 0 (kwok makes them Succeeded)."""
    pods = wait_for(lambda: jobset_pods(k8s, namespace, name), what=f"pods of {name}")
    for pod in pods:
        k8s.core.patch_namespaced_pod(
            pod.metadata.name, namespace, {"metadata": {"annotations": {EXIT_CODE_ANNOTATION: "0"}}}
        )


def _workload(k8s: Any, namespace: str, kind: str, name: str, *, until: str, status: str = "True") -> Json:
    """Kueue's Workload of ``kind``/``name`` once its condition ``until`` has ``status``."""

    def check() -> Json | None:
        wl = workload_of(k8s, namespace, kind, name)
        cond = condition(wl, until)
        return wl if cond is not None and cond.get("status") == status else None

    return wait_for(check, timeout=90, what=f"Workload of {kind} {name}: {until}={status}")


class SpecLog:
    """Every ``cluster.json`` ConfigMap ``name`` shows, in watch order: (status, epoch, member pod uids)."""

    def __init__(self, k8s: Any, namespace: str, name: str) -> None:
        self.seen: list[tuple[str, int, tuple[str, ...]]] = []
        self._lock = threading.Lock()
        self._watcher = Watcher(
            k8s.core.list_namespaced_config_map, namespace, self._on, field_selector=f"metadata.name={name}"
        )

    def _on(self, cm: Any) -> None:
        text = (cm.data or {}).get("cluster.json")
        if text is None:
            return
        spec = json.loads(text)
        entry = (spec["status"], spec["epoch"], tuple(m["uid"] for m in spec["members"]))
        with self._lock:
            if not self.seen or self.seen[-1] != entry:
                self.seen.append(entry)

    def until(self, status: str, epoch: int) -> list[tuple[str, int, tuple[str, ...]]]:
        """What was seen, once the watch delivered ``status`` at ``epoch``."""

        def check() -> list[tuple[str, int, tuple[str, ...]]] | None:
            with self._lock:
                seen = list(self.seen)
            return seen if any(s == status and e == epoch for s, e, _ in seen) else None

        return wait_for(check, timeout=30, what=f"the watch to deliver {status} epoch {epoch}")

    def stop(self) -> None:
        """Stop watching."""
        self._watcher.stop(timeout=5)


@contextlib.contextmanager
def spec_log(k8s: Any, namespace: str, name: str) -> Iterator[SpecLog]:
    """A :class:`SpecLog` of ConfigMap ``name`` for the block."""
    log = SpecLog(k8s, namespace, name)
    try:
        yield log
    finally:
        log.stop()


def _running(k8s: Any, namespace: str, uids: tuple[str, ...]) -> dict[str, Any]:
    """The pods with ``uids``, all Running with an IP (else an empty dict)."""
    pods = {p.metadata.uid: p for p in k8s.core.list_namespaced_pod(namespace).items}
    found = {u: pods[u] for u in uids if u in pods}
    if len(found) != len(uids) or any(p.status.phase != "Running" or not p.status.pod_ip for p in found.values()):
        return {}
    return found


# --------------------------------------------------------------------------
# the harness


def test_kueue_runs_beside_jobset_and_trainer_and_converts_its_kinds_through_its_webhook(
    kueue_cluster: Cluster, k8s: Any, namespace: str
) -> None:
    statuses = {s.name: s for s in kueue_cluster.status()}
    assert set(KUEUE_ADDONS) <= set(kueue_cluster.addons)
    assert statuses["kueue-controller-manager"].healthy, statuses["kueue-controller-manager"].detail
    with queue(k8s, namespace, quota={"cpu": "2"}):
        # Stored as v1beta2; read as v1beta1, the API server calls Kueue's conversion webhook (by URL, cluster CA).
        old = k8s.custom.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", namespace, "localqueues", "lq")
        assert old["apiVersion"] == "kueue.x-k8s.io/v1beta1"
        assert old["spec"]["clusterQueue"] == f"cq-{namespace}"


# --------------------------------------------------------------------------
# admission: suspended until there is quota, then the spec once the pods run


def _waiting_trainjob(k8s: Any, namespace: str, name: str, *, lq: str, runtime: str, priority: str = "") -> Json:
    body = trainjob(name, runtime=runtime, nodes=2)
    body["metadata"]["labels"][QUEUE_LABEL] = lq
    if priority:
        body["metadata"]["labels"][PRIORITY_LABEL] = priority
    body["spec"]["trainer"]["resourcesPerNode"] = {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}
    created: Json = k8s.custom.create_namespaced_custom_object(*TRAINER, namespace, "trainjobs", body)
    return created


@pytest.mark.parametrize("kind", ["JobSet", "TrainJob"], ids=["jobset", "trainjob"])
def test_a_job_waiting_for_quota_gets_its_spec_only_once_admitted_and_running(
    kind: str, k8s: Any, kubeconfig: Path, namespace: str, controller: ControllerProcess
) -> None:
    runtime = tensorflow_runtime(f"tf-{namespace}")
    # memory: the example runtime's init container requests some, and Kueue admits no undeclared resource
    with queue(k8s, namespace, quota={"cpu": "2", "memory": "4Gi"}) as lq, cluster_runtime(k8s, runtime):
        _queued_jobset(k8s, namespace, "first", pods=2, lq=lq)
        wait_spec(k8s, namespace, "rings-config-first", timeout=90)  # admitted, its pods run: the quota is used up
        with spec_log(k8s, namespace, "rings-config-second") as log:
            if kind == "JobSet":
                _queued_jobset(k8s, namespace, "second", pods=2, lq=lq)
            else:
                _waiting_trainjob(k8s, namespace, "second", lq=lq, runtime=runtime["metadata"]["name"])
            # Kueue saw it and keeps it waiting: no quota reserved, the job suspended, no pods.
            pending = _workload(k8s, namespace, kind, "second", until="QuotaReserved", status="False")
            assert not is_true(pending, "Admitted")
            plural = ("jobsets", JOBSET) if kind == "JobSet" else ("trainjobs", TRAINER)
            job = k8s.custom.get_namespaced_custom_object(*plural[1], namespace, plural[0], "second")
            assert job["spec"]["suspend"] is True
            waiting = wait_spec(k8s, namespace, "rings-config-second", status="initializing")
            assert waiting["members"] == [] and jobset_pods(k8s, namespace, "second") == []
            why = ring("describe", f"{kind.lower()}/second", "-n", namespace, kubeconfig=kubeconfig)
            assert f"until Kueue admits it from LocalQueue {lq}" in why.stdout, why.stdout + why.stderr

            _finish(k8s, namespace, "first")
            _workload(k8s, namespace, "JobSet", "first", until="Finished")
            admitted = _workload(k8s, namespace, kind, "second", until="Admitted")
            spec = wait_spec(k8s, namespace, "rings-config-second", timeout=90)
            seen = log.until("completed", spec["epoch"])
    assert admitted["status"]["admission"]["clusterQueue"] == f"cq-{namespace}"
    uids = tuple(m["uid"] for m in spec["members"])
    running = wait_for(lambda: _running(k8s, namespace, uids), what="the members' pods Running")
    assert [m["ip"] for m in spec["members"]] == [running[u].status.pod_ip for u in uids]
    assert [(m["rank"], m["index"]) for m in spec["members"]] == [(0, 0), (1, 1)]
    assert spec["job"]["kind"] == kind
    # Nothing but initializing before the one complete spec, which lists the admitted pods.
    assert seen == [("initializing", 0, ()), ("completed", spec["epoch"], uids)]


# --------------------------------------------------------------------------
# preemption: suspended, pods deleted, admitted again with new pods (a JobSet, and a TrainJob through its JobSet)


@pytest.mark.parametrize("kind", ["JobSet", "TrainJob"], ids=["jobset", "trainjob"])
def test_a_preempted_and_readmitted_job_gets_a_new_epoch_never_mixing_the_two_admissions(
    kind: str, k8s: Any, namespace: str, controller: ControllerProcess
) -> None:
    low, high = priority_class(f"low-{namespace}", 100), priority_class(f"high-{namespace}", 1000)
    runtime = tensorflow_runtime(f"tf-{namespace}")
    quota = {"cpu": "2", "memory": "4Gi"}  # memory: the example runtime's init container requests some
    with (
        queue(k8s, namespace, quota=quota, preempt_lower_priority=True, extra=[low, high]) as lq,
        cluster_runtime(k8s, runtime),
    ):
        with spec_log(k8s, namespace, "rings-config-low") as log:
            if kind == "JobSet":
                _queued_jobset(k8s, namespace, "low", pods=2, lq=lq, priority=low["metadata"]["name"])
            else:
                _waiting_trainjob(
                    k8s, namespace, "low", lq=lq, runtime=runtime["metadata"]["name"], priority=low["metadata"]["name"]
                )
            first = wait_spec(k8s, namespace, "rings-config-low", timeout=90)
            _queued_jobset(k8s, namespace, "high", pods=2, lq=lq, priority=high["metadata"]["name"])
            evicted = _workload(k8s, namespace, kind, "low", until="Evicted")
            wait_spec(k8s, namespace, "rings-config-high", timeout=90)
            lost = wait_spec(k8s, namespace, "rings-config-low", status="initializing")
            _finish(k8s, namespace, "high")
            second = wait_spec(
                k8s, namespace, "rings-config-low", timeout=90, where=lambda s: s["epoch"] > lost["epoch"]
            )
            seen = log.until("completed", second["epoch"])
    assert condition(evicted, "Evicted")["reason"] == "Preempted"  # type: ignore[index]
    before = {m["uid"] for m in first["members"]}
    after = {m["uid"] for m in second["members"]}
    assert len(after) == 2 and not before & after, "the second admission's spec lists its own new pods only"
    assert second["epoch"] > lost["epoch"] > first["epoch"]
    completed = [(e, set(u)) for s, e, u in seen if s == "completed"]
    for epoch, uids in completed:
        assert uids <= before or not uids & before, f"epoch {epoch} mixes the two admissions' pods"
    assert [e for e, _ in completed] == sorted({e for e, _ in completed}), "epochs only grow"
    assert completed[0] == (first["epoch"], before) and completed[-1] == (second["epoch"], after)
    # Between them, the spec went back to initializing when the preempted pods went.
    statuses = [s for s, _, _ in seen]
    assert "initializing" in statuses[statuses.index("completed") : len(statuses) - 1]


# --------------------------------------------------------------------------
# Topology Aware Scheduling: Kueue places the pods, topology ranks follow

#: Node index -> rack, all under spine s1; the names alternate racks, so name order is not rack order.
RACKS = {240: "r2", 241: "r1", 242: "r2", 243: "r1"}


@pytest.fixture
def tas_nodes(k8s: Any, namespace: str) -> Iterator[tuple[str, list[str]]]:
    """Four labelled kwok nodes of 8 GPUs each; yields (their fixture label value, names)."""
    fixture = f"kueue-{namespace}"[:63]
    layout = {i: {SPINE: "s1", RACK: rack} for i, rack in RACKS.items()}
    with labelled_nodes(k8s, layout, fixture=fixture) as names:
        yield fixture, names


def test_topology_aware_admission_places_the_pods_and_topology_ranks_follow_the_placement(
    k8s: Any, namespace: str, tas_nodes: tuple[str, list[str]], controller: ControllerProcess
) -> None:
    fixture, nodes = tas_nodes
    topo = topology(f"topo-{namespace}", [SPINE, RACK, HOSTNAME])
    flavor = resource_flavor(
        f"tas-{namespace}",
        node_labels={FIXTURE_LABEL: fixture},
        tolerations=[toleration()],  # the labelled nodes' taint: Kueue adds it to the pods it admits
        topology_name=topo["metadata"]["name"],
    )
    # One pod per node: each wants all 8 GPUs of a node; all four within spine s1.
    template = _template(gpus=8, annotations={REQUIRED_TOPOLOGY: SPINE})
    with queue(k8s, namespace, quota={"cpu": "16", "nvidia.com/gpu": "32"}, flavor=flavor, extra=[topo]) as lq:
        _queued_jobset(
            k8s, namespace, "tas", pods=4, lq=lq, template=template, annotations={RANK_ORDER_ANNOTATION: "topology"}
        )
        admitted = _workload(k8s, namespace, "JobSet", "tas", until="Admitted")
        spec = wait_spec(k8s, namespace, "rings-config-tas", timeout=90)
    (assignment,) = admitted["status"]["admission"]["podSetAssignments"]
    # Kueue records the assignment at its lowest level (each pod's node); the levels above follow from the nodes
    assert assignment["topologyAssignment"]["levels"] == [HOSTNAME]
    pods = {p.metadata.uid: p for p in jobset_pods(k8s, namespace, "tas")}
    for m in spec["members"]:
        pod = pods[m["uid"]]
        # Kueue chose the node (its hostname selector, its gate lifted); the scheduler only bound it there.
        assert pod.spec.node_selector[HOSTNAME] == pod.spec.node_name == m["node"]
        assert TOPOLOGY_GATE not in [g.name for g in pod.spec.scheduling_gates or []]
    assert sorted(m["node"] for m in spec["members"]) == sorted(nodes)
    rack = {name: RACKS[index] for index, name in zip(RACKS, nodes, strict=True)}
    expected = sorted(spec["members"], key=lambda m: ("s1", rack[m["node"]], m["node"], m["index"]))
    assert [(m["rank"], m["index"], m["node"]) for m in spec["members"]] == [
        (rank, m["index"], m["node"]) for rank, m in enumerate(expected)
    ]
    assert spec["rankOrder"] == "topology"
    assert spec["members"][0]["topology"] == ["s1", "r1", spec["members"][0]["node"]]
