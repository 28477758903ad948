"""Workers that finish keep their places: the real controller, the real API server, kwok running the pods.

Issue 27: when the first workers of a job exited 0 (pods ``Succeeded``), the
controller wrote a new epoch, and the slower workers' supervisors killed
their trainers at the very end of the job. Here a 3-worker Volcano Job (its
pods made as Volcano makes them) completes, then its pods are set
``Succeeded`` through the status subresource one by one, as a kubelet does.

Proof that the controller processed each finished pod, without sleeping: right
after the status, the test changes that pod's epoch annotation. The controller
puts the annotation back (its touch) only from a sync that read the pod as it
is now (``Succeeded``, the later annotation) and found the spec still
completed at that epoch; that sync would have written the ConfigMap first
(the write comes before the touch). The ConfigMap's resourceVersion must not
have moved.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from model.keys import EPOCH_ANNOTATION
from tests.support.controllerproc import ControllerProcess
from tests.support.factories import pod_template, volcano_job
from tests.support.kubectlring import ring
from tests.support.kubehelp import all_members, create_pods, create_volcano_job, read_configmap, wait_for, wait_spec

pytestmark = pytest.mark.integration


def _annotation(k8s: Any, namespace: str, pod: str) -> str | None:
    annotations = k8s.core.read_namespaced_pod(pod, namespace).metadata.annotations or {}
    return annotations.get(EPOCH_ANNOTATION)  # type: ignore[no-any-return]


def _completed(k8s: Any, namespace: str, name: str, workers: int) -> tuple[dict[str, Any], Any]:
    """A Volcano Job of ``workers`` whose spec completed and whose members all show its epoch (touched)."""
    # The pods mount their spec (as under ring-launch): the controller touches them with its epoch.
    template = pod_template(configmap=f"rings-config-{name}")
    job = create_volcano_job(k8s, namespace, volcano_job(name, tasks=[("worker", workers)], template=template))
    create_pods(k8s, job, all_members(job))
    spec = wait_spec(k8s, namespace, f"rings-config-{name}")
    epoch = str(spec["epoch"])
    wait_for(
        lambda: all(_annotation(k8s, namespace, m["pod"]) == epoch for m in spec["members"]),
        what=f"every member annotated with epoch {epoch}",
    )
    return spec, read_configmap(k8s, namespace, f"rings-config-{name}")


def _finish(k8s: Any, namespace: str, pod: str, *, configmap: str, epoch: str, before: str) -> None:
    """Set ``pod`` Succeeded, then wait until the controller processed it; fail if it rewrote the ConfigMap."""
    k8s.core.patch_namespaced_pod_status(pod, namespace, {"status": {"phase": "Succeeded"}})
    k8s.core.patch_namespaced_pod(pod, namespace, {"metadata": {"annotations": {EPOCH_ANNOTATION: "changed-by-test"}}})

    def outcome() -> str | None:
        cm = read_configmap(k8s, namespace, configmap)
        if cm.metadata.resource_version != before:
            return f"ConfigMap rewritten: {json.loads(cm.data['cluster.json'])}"
        return "touched" if _annotation(k8s, namespace, pod) == epoch else None

    seen = wait_for(outcome, what=f"the controller to process {pod} Succeeded")
    assert seen == "touched", seen
    assert k8s.core.read_namespaced_pod(pod, namespace).status.phase == "Succeeded"


def test_workers_finishing_one_by_one_leave_the_spec_and_its_epoch_as_written(
    k8s: Any, namespace: str, kubeconfig: Path, controller: ControllerProcess
) -> None:
    spec, cm = _completed(k8s, namespace, "ends", 3)
    before, epoch = cm.metadata.resource_version, str(spec["epoch"])
    written = cm.data
    pods = [m["pod"] for m in spec["members"]]

    _finish(k8s, namespace, pods[0], configmap="rings-config-ends", epoch=epoch, before=before)
    for pod in pods[1:]:
        _finish(k8s, namespace, pod, configmap="rings-config-ends", epoch=epoch, before=before)

    after = read_configmap(k8s, namespace, "rings-config-ends")
    assert (after.metadata.resource_version, after.data) == (before, written)

    # kubectl ring: still completed at the same epoch, every slot a finished member.
    described = ring("describe", "-n", namespace, "ends", "-o", "json", kubeconfig=kubeconfig)
    assert described.returncode == 0, described.stderr
    data = json.loads(described.stdout)
    assert (data["status"], data["epoch"], data["ready"]) == ("completed", spec["epoch"], 3)
    assert [(s["pod"], s["state"]) for s in data["slots"]] == [(p, "finished") for p in pods]
    text = ring("describe", "-n", namespace, "ends", kubeconfig=kubeconfig).stdout
    assert f"Finished (Succeeded), keeping their places (the spec does not change): {', '.join(pods)}" in text


def test_a_failed_member_is_lost_a_new_epoch_as_before(k8s: Any, namespace: str, controller: ControllerProcess) -> None:
    spec, _ = _completed(k8s, namespace, "fails", 3)
    k8s.core.patch_namespaced_pod_status(spec["members"][1]["pod"], namespace, {"status": {"phase": "Failed"}})
    lost = wait_spec(
        k8s, namespace, "rings-config-fails", status="initializing", where=lambda s: s["epoch"] == spec["epoch"] + 1
    )
    assert lost["members"] == []
