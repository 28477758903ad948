"""LeaderWorkerSets on the real control plane: one spec per group, leader first, groups independent.

The LWS controller is not built here (see docs/jobs.md): the test installs
a LeaderWorkerSet CRD of its own (tests/support/crds) and creates each
group's pods with the labels the LWS controller documents
(``leaderworkerset.sigs.k8s.io/name``, ``group-index``, ``worker-index``),
the way it names them; kwok runs them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiextensionsV1Api
from kubernetes.client.rest import ApiException

from tests.support.controllerproc import ControllerProcess
from tests.support.factories import leader_worker_set, lws_pod
from tests.support.kubectlring import ring, table
from tests.support.kubehelp import read_spec, wait_for, wait_spec

pytestmark = pytest.mark.integration

CRD = Path(__file__).resolve().parents[1] / "support" / "crds" / "leaderworkersets.yaml"
LWS = ("leaderworkerset.x-k8s.io", "v1")


@pytest.fixture(scope="module")
def lws_crd(k8s: Any) -> Iterator[None]:
    """The LeaderWorkerSet CRD, established (created once; left for later runs on this cluster)."""
    ext = ApiextensionsV1Api(k8s.api)
    body = yaml.safe_load(CRD.read_text())
    try:
        ext.create_custom_resource_definition(body)
    except ApiException as err:
        if err.status != 409:
            raise
        ext.patch_custom_resource_definition(body["metadata"]["name"], body)

    def established() -> bool:
        crd = ext.read_custom_resource_definition(body["metadata"]["name"])
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    wait_for(established, what="the LeaderWorkerSet CRD established")
    yield


@pytest.fixture
def lws_controller(lws_crd: None, controller: ControllerProcess) -> ControllerProcess:
    """The controller, started after the CRD exists (it looks kinds up once, at start)."""
    return controller


def _create_group(k8s: Any, lws: Any, group: int, size: int, *, tag: str = "") -> None:
    for worker in range(size):
        pod = lws_pod(lws, group=group, worker=worker)
        pod["metadata"].pop("uid")
        # The LWS controller's owners are its StatefulSets; here the set itself, so the pods go with it.
        pod["metadata"]["ownerReferences"] = [
            {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
             "name": lws["metadata"]["name"], "uid": lws["metadata"]["uid"]}
        ]  # fmt: skip
        if tag:
            pod["metadata"]["labels"]["attempt"] = tag
        k8s.core.create_namespaced_pod(lws["metadata"]["namespace"], pod)


def test_each_group_gets_its_own_spec_leader_first_and_groups_are_independent(
    k8s: Any, namespace: str, lws_controller: ControllerProcess, kubeconfig: Path
) -> None:
    body = leader_worker_set("llm", replicas=2, size=3, namespace=namespace)
    lws = k8s.custom.create_namespaced_custom_object(*LWS, namespace, "leaderworkersets", copy.deepcopy(body))
    _create_group(k8s, lws, 0, 3)
    g0 = wait_spec(k8s, namespace, "rings-config-llm-0")
    assert [(m["rank"], m["pod"]) for m in g0["members"]] == [(0, "llm-0"), (1, "llm-0-1"), (2, "llm-0-2")]
    assert g0["job"]["kind"] == "LeaderWorkerSet" and g0["job"]["uid"] == lws["metadata"]["uid"]
    pods = {p.metadata.name: p for p in k8s.core.list_namespaced_pod(namespace).items}
    assert [m["ip"] for m in g0["members"]] == [pods[m["pod"]].status.pod_ip for m in g0["members"]]
    # Group 1 has no pods: it waits on its own.
    assert wait_spec(k8s, namespace, "rings-config-llm-1", status="initializing")["members"] == []
    _create_group(k8s, lws, 1, 3)
    g1 = wait_spec(k8s, namespace, "rings-config-llm-1")
    assert [m["pod"] for m in g1["members"]] == ["llm-1", "llm-1-1", "llm-1-2"]
    # Group 1 recreated (what RecreateGroupOnPodRestart does): a new epoch of group 1 only.
    k8s.core.delete_collection_namespaced_pod(
        namespace, label_selector="leaderworkerset.sigs.k8s.io/group-index=1", grace_period_seconds=0
    )
    wait_for(
        lambda: (
            not k8s.core.list_namespaced_pod(
                namespace, label_selector="leaderworkerset.sigs.k8s.io/group-index=1"
            ).items
        ),
        what="group 1 gone",
    )
    _create_group(k8s, lws, 1, 3, tag="2")
    again = wait_spec(k8s, namespace, "rings-config-llm-1", where=lambda s: s["epoch"] > g1["epoch"])
    assert {m["uid"] for m in again["members"]}.isdisjoint(m["uid"] for m in g1["members"])
    assert read_spec(k8s, namespace, "rings-config-llm-0") == g0
    rows = table(ring("get", "-n", namespace, kubeconfig=kubeconfig).stdout)
    assert [(r["KIND"], r["NAME"], r["STATUS"], r["READY"]) for r in rows] == [
        ("lws", "llm-0", "completed", "3/3"),
        ("lws", "llm-1", "completed", "3/3"),
    ]
