"""Indexed Jobs and StatefulSets get their spec on the real control plane.

The real controller-manager runs them (``--controllers=*``: the Job and
StatefulSet controllers create the pods, kwok runs them): ranks follow the
completion index and the ordinal, a replaced index, a suspension and a scale
are new epochs, and bad input (an unrunnable Job, a pod template without the
runtime label, two pods claiming one index) is a Warning Event and a reason
in ``kubectl ring describe`` with nothing wrong written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.controllerproc import ControllerProcess
from tests.support.factories import indexed_job, statefulset, volcano_job
from tests.support.kubectlring import ring, section, table
from tests.support.kubehelp import (
    SpecRecorder,
    create_pods,
    create_volcano_job,
    events_for,
    read_configmap,
    wait_for,
    wait_spec,
)

pytestmark = pytest.mark.integration

INDEX = "batch.kubernetes.io/job-completion-index"
ORDINAL = "apps.kubernetes.io/pod-index"


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


def test_indexed_job_ranks_by_completion_index_and_a_replaced_index_is_a_new_epoch(
    k8s: Any, namespace: str, controller: ControllerProcess, kubeconfig: Path
) -> None:
    body = indexed_job("tf", 3, port=4100, namespace=namespace)
    body["spec"].pop("backoffLimit")
    body["spec"]["backoffLimitPerIndex"] = 2  # a lost pod is retried under its index
    job = k8s.batch.create_namespaced_job(namespace, body)
    first = wait_spec(k8s, namespace, "rings-config-tf")
    assert first["job"]["kind"] == "Job" and first["job"]["apiVersion"] == "batch/v1"
    assert first["job"]["uid"] == job.metadata.uid and first["expected"] == 3
    pods = _pods(k8s, namespace)
    assert [int(pods[m["pod"]].metadata.labels[INDEX]) for m in first["members"]] == [0, 1, 2]
    assert [m["ip"] for m in first["members"]] == [pods[m["pod"]].status.pod_ip for m in first["members"]]
    assert [(m["rank"], m["index"], m["port"]) for m in first["members"]] == [(i, i, 4100) for i in range(3)]
    # The real Job controller replaces a lost pod under its index.
    victim = first["members"][1]["pod"]
    k8s.core.delete_namespaced_pod(victim, namespace, grace_period_seconds=0)
    second = wait_spec(
        k8s, namespace, "rings-config-tf", where=lambda s: victim not in [m["pod"] for m in s["members"]]
    )
    assert second["epoch"] > first["epoch"]
    assert [m["pod"] for m in second["members"]][0::2] == [m["pod"] for m in first["members"]][0::2]
    replacement = _pods(k8s, namespace)[second["members"][1]["pod"]]
    assert replacement.metadata.labels[INDEX] == "1"
    (row,) = table(_ok(ring("get", "-n", namespace, kubeconfig=kubeconfig)))
    assert (row["KIND"], row["NAME"], row["STATUS"], row["READY"]) == ("job", "tf", "completed", "3/3")
    text = _ok(ring("describe", "-n", namespace, "job/tf", kubeconfig=kubeconfig))
    assert "Job (batch/v1), job/tf" in text
    # The informer's metrics name the kind's resource.
    assert (controller.metric("ringcontroller_watch_events_total", resource="jobs.batch") or 0) >= 1
    assert [r["POD"] for r in table(section(text, "Members (rank order):"))] == [m["pod"] for m in second["members"]]


def test_suspending_and_resuming_an_indexed_job_follow_the_epoch_rule(
    k8s: Any, namespace: str, controller: ControllerProcess, kubeconfig: Path
) -> None:
    body = indexed_job("queued", 2, namespace=namespace)
    body["spec"]["suspend"] = True  # as Kueue creates it
    k8s.batch.create_namespaced_job(namespace, body)
    waiting = wait_spec(k8s, namespace, "rings-config-queued", status="initializing")
    assert waiting["epoch"] == 0 and waiting["members"] == []
    why = section(_ok(ring("describe", "-n", namespace, "job/queued", kubeconfig=kubeconfig)), "Why it waits:")
    assert "the Job is suspended (spec.suspend)" in why
    recorder = SpecRecorder(k8s, namespace, "rings-config-queued")
    try:
        k8s.batch.patch_namespaced_job("queued", namespace, {"spec": {"suspend": False}})  # admitted
        first = wait_spec(k8s, namespace, "rings-config-queued")
        k8s.batch.patch_namespaced_job("queued", namespace, {"spec": {"suspend": True}})  # preempted
        paused = wait_spec(
            k8s, namespace, "rings-config-queued", status="initializing", where=lambda s: s["epoch"] > first["epoch"]
        )
        wait_for(lambda: not _pods(k8s, namespace), what="the Job controller to delete the pods")
        k8s.batch.patch_namespaced_job("queued", namespace, {"spec": {"suspend": False}})
        again = wait_spec(k8s, namespace, "rings-config-queued", where=lambda s: s["epoch"] > paused["epoch"])
    finally:
        seen = recorder.stop()
    assert (first["epoch"], paused["epoch"], again["epoch"]) == (1, 2, 3)
    assert {m["uid"] for m in again["members"]}.isdisjoint(m["uid"] for m in first["members"])
    assert seen == [("initializing", 0), ("completed", 1), ("initializing", 2), ("completed", 3)]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        pytest.param({"parallelism": 2}, "spec.parallelism 2 < spec.completions 3", id="parallelism-below-completions"),
        pytest.param(
            {"template_label": None}, "the pod template has no label ring-controller.atlas", id="unlabelled-template"
        ),
    ],
)
def test_an_indexed_job_that_cannot_complete_is_invalid_and_nothing_is_written(
    k8s: Any, namespace: str, controller: ControllerProcess, kubeconfig: Path, change: dict[str, Any], says: str
) -> None:
    body = indexed_job("bad", 3, namespace=namespace)
    if "template_label" in change:
        body["spec"]["template"]["metadata"]["labels"] = {"app": "bad"}
    else:
        body["spec"].update(change)
    k8s.batch.create_namespaced_job(namespace, body)
    event = wait_for(lambda: _warning(k8s, namespace, "bad", "InvalidWorkload"), what="the InvalidWorkload Event")
    assert says in event.message and event.involved_object.kind == "Job"
    assert (controller.metric("ringcontroller_invalid_inputs_total", reason="invalid_workload") or 0) >= 1
    assert read_configmap(k8s, namespace, "rings-config-bad") is None
    text = _ok(ring("describe", "-n", namespace, "job/bad", kubeconfig=kubeconfig))
    assert says in section(text, "Why it waits:")
    (row,) = table(_ok(ring("get", "-n", namespace, kubeconfig=kubeconfig)))
    assert row["STATUS"] == "invalid"
    # A good job after it still completes; the daemon kept running.
    k8s.batch.create_namespaced_job(namespace, indexed_job("good", 2, namespace=namespace))
    assert len(wait_spec(k8s, namespace, "rings-config-good")["members"]) == 2
    assert read_configmap(k8s, namespace, "rings-config-bad") is None


@pytest.mark.parametrize("parallel", [True, False], ids=["Parallel", "OrderedReady"])
def test_statefulset_ranks_by_ordinal_and_scaling_is_a_new_epoch(
    k8s: Any, namespace: str, controller: ControllerProcess, kubeconfig: Path, parallel: bool
) -> None:
    sts = k8s.apps.create_namespaced_stateful_set(
        namespace, statefulset("web", 3, parallel=parallel, namespace=namespace)
    )
    first = wait_spec(k8s, namespace, "rings-config-web")
    assert first["job"]["kind"] == "StatefulSet" and first["job"]["uid"] == sts.metadata.uid
    assert [m["pod"] for m in first["members"]] == ["web-0", "web-1", "web-2"]
    pods = _pods(k8s, namespace)
    assert [pods[m["pod"]].metadata.labels[ORDINAL] for m in first["members"]] == ["0", "1", "2"]
    assert [m["ip"] for m in first["members"]] == [pods[m["pod"]].status.pod_ip for m in first["members"]]
    k8s.apps.patch_namespaced_stateful_set_scale("web", namespace, {"spec": {"replicas": 4}})
    up = wait_spec(k8s, namespace, "rings-config-web", where=lambda s: s["expected"] == 4)
    assert up["epoch"] > first["epoch"] and [m["pod"] for m in up["members"]] == [f"web-{i}" for i in range(4)]
    assert up["members"][:3] == first["members"]
    k8s.apps.patch_namespaced_stateful_set_scale("web", namespace, {"spec": {"replicas": 2}})
    down = wait_spec(k8s, namespace, "rings-config-web", where=lambda s: s["expected"] == 2)
    assert down["epoch"] > up["epoch"] and down["members"] == first["members"][:2]
    text = _ok(ring("describe", "-n", namespace, "sts/web", kubeconfig=kubeconfig))
    assert "StatefulSet (apps/v1), sts/web" in text
    assert (controller.metric("ringcontroller_watch_events_total", resource="statefulsets.apps") or 0) >= 1


def test_two_pods_claiming_one_index_wait_with_an_event_and_nothing_wrong_is_written(
    k8s: Any, namespace: str, controller: ControllerProcess, kubeconfig: Path
) -> None:
    job = create_volcano_job(k8s, namespace, volcano_job("dup", tasks=[("worker", 2)]))
    create_pods(k8s, job, [("worker", 0), ("worker", 1)])
    # A second pod for worker 1 (made by hand, under another name, with the same labels).
    create_pods(k8s, job, [("worker", 1)], name_suffix="-byhand")
    event = wait_for(lambda: _warning(k8s, namespace, "dup", "DuplicateIndex"), what="the DuplicateIndex Event")
    assert event.message == (
        "pods dup-worker-1, dup-worker-1-byhand all claim worker index 1: none of them counts while more than one runs"
    )
    spec = wait_spec(k8s, namespace, "rings-config-dup", status="initializing")
    assert spec["members"] == []
    text = _ok(ring("describe", "-n", namespace, "vcjob/dup", kubeconfig=kubeconfig))
    assert [r["STATE"] for r in table(section(text, "Members (rank order, as the controller sees them now):"))] == [
        "counts",
        "duplicate index",
    ]
    k8s.core.delete_namespaced_pod("dup-worker-1-byhand", namespace, grace_period_seconds=0)
    done = wait_spec(k8s, namespace, "rings-config-dup")
    assert [m["pod"] for m in done["members"]] == ["dup-worker-0", "dup-worker-1"]
