"""PodGroups get their spec on a real Kubernetes 1.37 control plane (the generic path).

The dev cluster serves ``scheduling.k8s.io/v1beta1`` from 1.37 on
(``ring-devcluster`` turns on ``GenericWorkload`` and the API's
``--runtime-config``), and its real kube-scheduler gangs the pods that name
a group: none is scheduled before ``minCount`` of them exist. Pods made by
hand (a kind nobody wrote code for) are ranked by their
``ring-controller.io/rank`` annotation, an Indexed Job's pods in a group by
their completion index; bad input (two pods with one rank, a rank out of
range, a pod without one, a group that does not exist or is not labelled,
a group without a gang count) is a Warning Event, a metric and a reason in
``kubectl ring``, with nothing wrong written.

Opt-in (marker ``podgroups``): run when ``RING_DEVCLUSTER_KUBE`` names 1.37
or newer (``build/matrix.sh``; ``build/podgroups.sh`` records the results in
tests/bench/figures/podgroups-1.37.json), deselected in the default run,
whose cluster is 1.35.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.controllerproc import ControllerProcess
from tests.support.factories import group_pod, indexed_job, pod_group
from tests.support.kubectlring import ring, section, table
from tests.support.kubehelp import events_for, read_configmap, wait_for, wait_spec

pytestmark = [pytest.mark.integration, pytest.mark.podgroups]

INDEX = "batch.kubernetes.io/job-completion-index"
GROUPS = ("scheduling.k8s.io", "v1beta1")


def _create_group(k8s: Any, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    body["metadata"]["namespace"] = namespace
    created: dict[str, Any] = k8s.custom.create_namespaced_custom_object(*GROUPS, namespace, "podgroups", body)
    return created


def _create_pod(k8s: Any, namespace: str, body: dict[str, Any]) -> None:
    body["metadata"]["namespace"] = namespace
    k8s.core.create_namespaced_pod(namespace, body)


def _pods(k8s: Any, namespace: str) -> dict[str, Any]:
    return {p.metadata.name: p for p in k8s.core.list_namespaced_pod(namespace).items}


def _warning(k8s: Any, namespace: str, name: str, reason: str) -> Any | None:
    return next(
        (e for e in events_for(k8s, namespace, name) if e.type == "Warning" and e.reason == reason),
        None,
    )


def _ok(result: Any) -> str:
    assert result.returncode == 0, result.stderr
    return str(result.stdout)


def test_the_server_serves_podgroups_and_the_controller_watches_them(
    k8s: Any, namespace: str, controller: ControllerProcess
) -> None:
    assert k8s.custom.list_namespaced_custom_object(*GROUPS, namespace, "podgroups")["items"] == []
    assert controller.metric("ringcontroller_api_available", api="podgroups") == 1


def test_pods_made_by_hand_are_ranked_by_their_rank_annotation(
    k8s: Any, namespace: str, controller: ControllerProcess, kubeconfig: Path
) -> None:
    group = _create_group(k8s, namespace, pod_group("gang", 3))
    # Names sort against the ranks; the pods are created in yet another order.
    for name, rank in (("alpha", 2), ("zeta", 0), ("mid", 1)):
        _create_pod(k8s, namespace, group_pod("gang", name, rank=rank))
    spec = wait_spec(k8s, namespace, "rings-config-gang")
    assert spec["job"]["kind"] == "PodGroup" and spec["job"]["apiVersion"] == "scheduling.k8s.io/v1beta1"
    assert spec["job"]["uid"] == group["metadata"]["uid"] and spec["expected"] == 3
    assert [(m["rank"], m["pod"]) for m in spec["members"]] == [(0, "zeta"), (1, "mid"), (2, "alpha")]
    pods = _pods(k8s, namespace)
    assert [m["ip"] for m in spec["members"]] == [pods[m["pod"]].status.pod_ip for m in spec["members"]]
    # The API server kept the gated field (the scheduler ganged the pods by it).
    # (read as sent: the Python client's V1PodSpec predates the field and would drop it)
    raw = json.loads(k8s.core.read_namespaced_pod("mid", namespace, _preload_content=False).data)
    assert raw["spec"]["schedulingGroup"] == {"podGroupName": "gang"}
    (row,) = table(_ok(ring("get", "-n", namespace, kubeconfig=kubeconfig)))
    assert (row["KIND"], row["NAME"], row["STATUS"], row["READY"]) == ("pg", "gang", "completed", "3/3")
    text = _ok(ring("describe", "-n", namespace, "pg/gang", kubeconfig=kubeconfig))
    assert "PodGroup (scheduling.k8s.io/v1beta1), pg/gang" in text
    assert [r["POD"] for r in table(section(text, "Members (rank order):"))] == ["zeta", "mid", "alpha"]
    env = _ok(ring("env", "-n", namespace, "mid", kubeconfig=kubeconfig))
    assert "RANK=1" in env and "WORLD_SIZE=3" in env
    assert (controller.metric("ringcontroller_watch_events_total", resource="podgroups.scheduling.k8s.io") or 0) >= 1


def test_a_raised_min_count_is_a_new_epoch_with_the_new_member(
    k8s: Any, namespace: str, controller: ControllerProcess
) -> None:
    _create_group(k8s, namespace, pod_group("elastic", 2))
    for rank in (0, 1):
        _create_pod(k8s, namespace, group_pod("elastic", f"w{rank}", rank=rank))
    first = wait_spec(k8s, namespace, "rings-config-elastic")
    k8s.custom.patch_namespaced_custom_object(
        *GROUPS, namespace, "podgroups", "elastic", {"spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}}
    )
    waiting = wait_spec(k8s, namespace, "rings-config-elastic", status="initializing")
    _create_pod(k8s, namespace, group_pod("elastic", "w2", rank=2))
    grown = wait_spec(k8s, namespace, "rings-config-elastic", where=lambda s: s["expected"] == 3)
    assert first["epoch"] < waiting["epoch"] < grown["epoch"]
    assert grown["members"][:2] == first["members"] and grown["members"][2]["pod"] == "w2"


def test_an_indexed_jobs_pods_in_a_labelled_group_are_ranked_by_completion_index(
    k8s: Any, namespace: str, controller: ControllerProcess
) -> None:
    _create_group(k8s, namespace, pod_group("trainers", 3))
    wait_spec(k8s, namespace, "rings-config-trainers", status="initializing")  # the controller has the group
    body = indexed_job("train", 3, namespace=namespace)
    # A Job without labels takes its pod template's (the API server's defaulting), the selection
    # label included: the Job is labelled too, and is served through the group its pods name.
    body["metadata"]["labels"] = {}
    body["spec"]["template"]["spec"]["schedulingGroup"] = {"podGroupName": "trainers"}
    job = k8s.batch.create_namespaced_job(namespace, body)
    assert job.metadata.labels.get("ring-controller.atlas") == "tensorflow"
    spec = wait_spec(k8s, namespace, "rings-config-trainers")
    assert spec["job"]["kind"] == "PodGroup"
    pods = _pods(k8s, namespace)
    assert [int(pods[m["pod"]].metadata.labels[INDEX]) for m in spec["members"]] == [0, 1, 2]
    assert read_configmap(k8s, namespace, "rings-config-train") is None


@pytest.mark.parametrize(
    ("ranks", "reason", "says"),
    [
        pytest.param([0, 1, 1], "DuplicateIndex", "all claim worker index 1", id="two-pods-one-rank"),
        pytest.param([0, 2], "IndexOutOfRange", "(index 2)", id="rank-out-of-range"),
        pytest.param([0, None], "MissingIndex", "ring-controller.io/rank", id="no-rank"),
    ],
)
def test_bad_ranks_are_a_warning_and_nothing_wrong_is_written(
    k8s: Any,
    namespace: str,
    controller: ControllerProcess,
    kubeconfig: Path,
    ranks: list[int | None],
    reason: str,
    says: str,
) -> None:
    _create_group(k8s, namespace, pod_group("bad", 2))
    for i, rank in enumerate(ranks):
        _create_pod(k8s, namespace, group_pod("bad", f"p{i}", rank=rank))
    event = wait_for(lambda: _warning(k8s, namespace, "bad", reason), what=f"the {reason} Event")
    assert says in event.message and event.involved_object.kind == "PodGroup"
    spec = wait_spec(k8s, namespace, "rings-config-bad", status="initializing")
    assert spec["members"] == []
    metric = {"DuplicateIndex": "duplicate_index", "IndexOutOfRange": "index_out_of_range"}.get(reason, "missing_index")
    assert (controller.metric("ringcontroller_invalid_inputs_total", reason=metric) or 0) >= 1
    text = _ok(ring("describe", "-n", namespace, "pg/bad", kubeconfig=kubeconfig))
    assert says in text
    # Fixed by hand (the last pod goes), the group completes; the daemon kept running.
    k8s.core.delete_namespaced_pod(f"p{len(ranks) - 1}", namespace, grace_period_seconds=0)
    if len(ranks) == 2:
        _create_pod(k8s, namespace, group_pod("bad", "fixed", rank=1))
    done = wait_spec(k8s, namespace, "rings-config-bad")
    assert [m["rank"] for m in done["members"]] == [0, 1]


@pytest.mark.parametrize("labelled", [False, True], ids=["unlabelled-group", "no-such-group"])
def test_a_pod_naming_a_group_nothing_serves_gets_a_warning_on_the_pod(
    k8s: Any, namespace: str, controller: ControllerProcess, kubeconfig: Path, labelled: bool
) -> None:
    if not labelled:
        body = pod_group("plain", 1)
        body["metadata"]["labels"] = {}
        _create_group(k8s, namespace, body)
    _create_pod(k8s, namespace, group_pod("plain", "lonely", rank=0))
    event = wait_for(lambda: _warning(k8s, namespace, "lonely", "PodGroupNotServed"), what="the Event on the pod")
    assert event.involved_object.kind == "Pod" and "names PodGroup plain" in event.message
    assert (controller.metric("ringcontroller_invalid_inputs_total", reason="podgroup_not_served") or 0) >= 1
    assert read_configmap(k8s, namespace, "rings-config-plain") is None
    result = ring("env", "-n", namespace, "lonely", kubeconfig=kubeconfig)
    assert result.returncode == 1 and "names PodGroup plain (spec.schedulingGroup)" in result.stderr


def test_a_group_without_a_gang_count_is_invalid(
    k8s: Any, namespace: str, controller: ControllerProcess, kubeconfig: Path
) -> None:
    _create_group(k8s, namespace, pod_group("basic", basic=True))
    event = wait_for(lambda: _warning(k8s, namespace, "basic", "InvalidWorkload"), what="the InvalidWorkload Event")
    assert "basic scheduling" in event.message
    assert read_configmap(k8s, namespace, "rings-config-basic") is None
    (row,) = table(_ok(ring("get", "-n", namespace, kubeconfig=kubeconfig)))
    assert (row["KIND"], row["STATUS"]) == ("pg", "invalid")
