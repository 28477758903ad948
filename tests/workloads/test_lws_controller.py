"""LeaderWorkerSets run by the real LWS controller: one spec per group, leader first, groups independent.

Nothing here plays the LWS controller: a LeaderWorkerSet becomes the leader
StatefulSet ``<lws>`` through the LWS controller (``ring-devcluster up --with
lws``, v0.9.0 built from the Go module proxy, its webhooks served), the
StatefulSet controller makes each leader pod ``<lws>-<group>``, the LWS
controller makes one worker StatefulSet ``<lws>-<group>`` per leader pod, and
LWS's pod webhook labels every pod (a leader's ``group-index``, a worker's
``worker-index`` from its ordinal). kwok runs the pods. The pure label
logic is tested on pods made by hand (tests/integration/test_controller_lws.py,
the default run); these tests prove it against what the controller really
writes.

Opt-in (marker ``lws``, ``build/test.sh --with lws`` or ``RING_TEST_LWS=1``):
the controller's cold build is minutes on two cores (docs/performance.md,
"Opt-in suites"). They use a cluster of their own, ``ring-devcluster up
--with lws`` in ``$RING_DEVCLUSTER_LWS_STATE`` (default: the main state
directory with ``-lws`` appended): the LWS controller acts on every
LeaderWorkerSet, so it cannot share the cluster of the tests that make the
pods by hand. This module overrides ``kubeconfig`` and ``k8s`` for that; the
shared ``namespace`` and ``controller`` fixtures follow them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringdevcluster import Cluster
from tests.support.clients import REPO, K8s, lws_state_dir
from tests.support.clusterup import bring_up
from tests.support.controllerproc import ControllerProcess
from tests.support.factories import leader_worker_set
from tests.support.kubectlring import ring, table
from tests.support.kubehelp import read_configmap, read_spec, wait_spec

pytestmark = [pytest.mark.integration, pytest.mark.lws]

LWS = ("leaderworkerset.x-k8s.io", "v1")
NAME = "leaderworkerset.sigs.k8s.io/name"
GROUP = "leaderworkerset.sigs.k8s.io/group-index"
WORKER = "leaderworkerset.sigs.k8s.io/worker-index"
EXAMPLE = REPO / "build" / "examples" / "lws" / "tf-lws.yaml"
Json = dict[str, Any]


@pytest.fixture(scope="module")
def lws_cluster(pytestconfig: pytest.Config) -> Cluster:
    """The control plane with the real LWS controller (started, repaired or reused)."""
    return bring_up(pytestconfig, state_dir=lws_state_dir(), what="the control plane with lws", addons=("lws",))


@pytest.fixture(scope="module")
def kubeconfig(lws_cluster: Cluster) -> Path:
    """Admin kubeconfig of the LWS cluster (overrides the main cluster's)."""
    return lws_cluster.kubeconfig


@pytest.fixture(scope="module")
def k8s(kubeconfig: Path) -> Iterator[K8s]:
    """Admin clients of the LWS cluster (overrides the main cluster's)."""
    clients = K8s.from_kubeconfig(kubeconfig)
    yield clients
    clients.api.close()  # type: ignore[no-untyped-call]


def _live_pods(k8s: Any, namespace: str, lws: str, group: int) -> list[Any]:
    pods = k8s.core.list_namespaced_pod(namespace, label_selector=f"{NAME}={lws},{GROUP}={group}").items
    return sorted(
        (p for p in pods if p.metadata.deletion_timestamp is None), key=lambda p: int(p.metadata.labels[WORKER])
    )


def _owner(obj: Any) -> tuple[str, str]:
    (ref,) = [r for r in obj.metadata.owner_references or [] if r.controller]
    return ref.kind, ref.name


def test_the_real_controller_makes_the_groups_and_each_gets_its_own_spec_leader_first(
    k8s: Any, namespace: str, controller: ControllerProcess, kubeconfig: Path
) -> None:
    body = leader_worker_set("llm", replicas=2, size=3, namespace=namespace)
    body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["ports"] = [
        {"name": "tf-port", "containerPort": 2222}
    ]
    lws = k8s.custom.create_namespaced_custom_object(*LWS, namespace, "leaderworkersets", body)
    specs = {g: wait_spec(k8s, namespace, f"rings-config-llm-{g}", timeout=120) for g in (0, 1)}
    for group, spec in specs.items():
        pods = _live_pods(k8s, namespace, "llm", group)
        # What the real controller made: the leader <lws>-<group> (worker 0), workers <lws>-<group>-<ordinal>.
        assert [p.metadata.name for p in pods] == [f"llm-{group}", f"llm-{group}-1", f"llm-{group}-2"]
        assert [p.metadata.labels[WORKER] for p in pods] == ["0", "1", "2"]
        assert _owner(pods[0]) == ("StatefulSet", "llm") and _owner(pods[1]) == ("StatefulSet", f"llm-{group}")
        # One spec per group: leader first, then by worker index; addresses by IP.
        assert [(m["rank"], m["pod"]) for m in spec["members"]] == [(i, p.metadata.name) for i, p in enumerate(pods)]
        assert [m["ip"] for m in spec["members"]] == [p.status.pod_ip for p in pods]
        assert spec["job"]["kind"] == "LeaderWorkerSet" and spec["job"]["uid"] == lws["metadata"]["uid"]
        assert spec["expected"] == 3
    # The StatefulSets the controller made: the leaders' (one replica per group), one of workers per group.
    leaders = k8s.apps.read_namespaced_stateful_set("llm", namespace)
    assert leaders.spec.replicas == 2 and _owner(leaders) == ("LeaderWorkerSet", "llm")
    for group in (0, 1):
        workers = k8s.apps.read_namespaced_stateful_set(f"llm-{group}", namespace)
        assert workers.spec.replicas == 2 and _owner(workers) == ("Pod", f"llm-{group}")
    rows = table(ring("get", "-n", namespace, kubeconfig=kubeconfig).stdout)
    assert [(r["KIND"], r["NAME"], r["STATUS"], r["READY"]) for r in rows] == [
        ("lws", "llm-0", "completed", "3/3"),
        ("lws", "llm-1", "completed", "3/3"),
    ]

    # A worker of group 1 deleted: the real controller replaces it (or, under
    # RecreateGroupOnPodRestart, the whole group); group 1 gets a new epoch
    # without the old pod, group 0 keeps its spec and its ConfigMap untouched.
    cm0 = read_configmap(k8s, namespace, "rings-config-llm-0")
    victim = _live_pods(k8s, namespace, "llm", 1)[2]
    k8s.core.delete_namespaced_pod(victim.metadata.name, namespace)

    def replaced(spec: Json) -> bool:
        live = [p.metadata.uid for p in _live_pods(k8s, namespace, "llm", 1)]
        uids = [m["uid"] for m in spec["members"]]
        return spec["epoch"] > specs[1]["epoch"] and victim.metadata.uid not in uids and uids == live

    again = wait_spec(k8s, namespace, "rings-config-llm-1", timeout=120, where=replaced)
    assert [(m["rank"], m["pod"]) for m in again["members"]] == [(0, "llm-1"), (1, "llm-1-1"), (2, "llm-1-2")]
    assert read_spec(k8s, namespace, "rings-config-llm-0") == specs[0]
    assert (
        read_configmap(k8s, namespace, "rings-config-llm-0").metadata.resource_version == cm0.metadata.resource_version
    )


def test_the_shipped_example_is_what_the_real_controller_accepts_and_each_group_completes(
    k8s: Any, namespace: str, controller: ControllerProcess
) -> None:
    """build/examples/lws/tf-lws.yaml through the real CRD schema and webhooks, its groups' specs complete."""
    example: Json = yaml.safe_load(EXAMPLE.read_text())
    k8s.core.create_namespaced_service_account(namespace, {"metadata": {"name": "ring-launch"}})
    body = copy.deepcopy(example)
    spec = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    for container in spec["containers"]:  # kwok's nodes are small; the rest stays as shipped
        container["resources"] = {"requests": {"cpu": "10m", "memory": "16Mi"}}
    lws = k8s.custom.create_namespaced_custom_object(*LWS, namespace, "leaderworkersets", body)
    size, replicas = example["spec"]["leaderWorkerTemplate"]["size"], example["spec"]["replicas"]
    for group in range(replicas):
        got = wait_spec(k8s, namespace, f"rings-config-tf-lws-{group}", timeout=120)
        pods = _live_pods(k8s, namespace, "tf-lws", group)
        assert [m["pod"] for m in got["members"]] == [p.metadata.name for p in pods] and len(pods) == size
        assert {m["port"] for m in got["members"]} == {2222}
        # The env the example builds its ConfigMap name from is there, as the pod webhook left it.
        env = {e.name: e for e in pods[0].spec.containers[0].env}
        assert env["LWS_GROUP"].value_from.field_ref.field_path.endswith(f"['{GROUP}']")
        assert pods[-1].metadata.labels[GROUP] == str(group)
    assert lws["metadata"]["labels"] == example["metadata"]["labels"]
