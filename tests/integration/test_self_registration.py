"""Self-registration on the real control plane: a Pending member whose launcher registered counts.

The second worker is bound to a node no kubelet (and no kwok) runs, so it
stays Pending until the test, acting as that node's kubelet, writes its
status; its launcher's registration is the annotation a launcher writes
(:func:`ranktable.registration.registration_value`). The first worker runs on
a kwok node as usual.
"""

from __future__ import annotations

from typing import Any

import pytest

from model.keys import REGISTERED_ANNOTATION, SELF_REGISTER_ANNOTATION
from ranktable.registration import registration_value
from tests.support.controllerproc import ControllerProcess
from tests.support.factories import pod_template, volcano_job
from tests.support.kubehelp import create_pods, create_volcano_job, read_configmap, read_spec, wait_for, wait_spec

pytestmark = pytest.mark.integration

HOST_IP = "10.0.0.77"
REGISTERED_IP = "127.1.200.2"


def _reconciles(proc: ControllerProcess) -> float:
    return sum(
        proc.metric("controller_runtime_reconcile_total", result=r) or 0.0
        for r in ("success", "error", "requeue", "requeue_after")
    )


def _start_pending(k8s: Any, namespace: str, job: dict[str, Any], node: str) -> str:
    """Worker 1 bound to ``node``, Pending with the node's address, as a kubelet reports it before its containers run."""
    (pod,) = create_pods(k8s, job, [("worker", 1)], node=node)
    name = pod["metadata"]["name"]
    k8s.core.patch_namespaced_pod_status(name, namespace, {"status": {"phase": "Pending", "hostIP": HOST_IP}})
    return name


def _register(k8s: Any, namespace: str, pod: str) -> None:
    value = registration_value(ip=REGISTERED_IP, started="2026-12-01T23:00:00Z")
    k8s.core.patch_namespaced_pod(pod, namespace, {"metadata": {"annotations": {REGISTERED_ANNOTATION: value}}})


def test_a_registered_pending_member_completes_the_spec_and_its_running_status_changes_nothing(
    k8s: Any, namespace: str, idle_node: str, registering_controller: ControllerProcess
) -> None:
    job = create_volcano_job(
        k8s, namespace, volcano_job("reg", tasks=[("worker", 2)], templates={"worker": pod_template(port=3000)})
    )
    create_pods(k8s, job, [("worker", 0)])
    pending = _start_pending(k8s, namespace, job, idle_node)
    _register(k8s, namespace, pending)
    spec = wait_spec(k8s, namespace, "rings-config-reg")
    assert [(m["pod"], m["ip"], m["node"]) for m in spec["members"]][1] == (pending, REGISTERED_IP, idle_node)
    assert k8s.core.read_namespaced_pod(pending, namespace).status.phase == "Pending"
    written = read_configmap(k8s, namespace, "rings-config-reg").metadata.resource_version

    # The kubelet's relist: Running with the IP the launcher registered. The controller
    # sees it (one more reconcile) and has nothing to write: same members, same epoch.
    before = _reconciles(registering_controller)
    k8s.core.patch_namespaced_pod_status(
        pending, namespace, {"status": {"phase": "Running", "podIP": REGISTERED_IP, "podIPs": [{"ip": REGISTERED_IP}]}}
    )
    wait_for(lambda: _reconciles(registering_controller) > before, what="the controller syncing the Running pod")
    after = read_configmap(k8s, namespace, "rings-config-reg")
    assert after.metadata.resource_version == written
    assert read_spec(k8s, namespace, "rings-config-reg") == spec


def test_a_job_that_opts_out_waits_for_the_kubelet(
    k8s: Any, namespace: str, idle_node: str, registering_controller: ControllerProcess
) -> None:
    raw = volcano_job("out", tasks=[("worker", 2)], templates={"worker": pod_template(port=3000)})
    raw["metadata"]["annotations"] = {SELF_REGISTER_ANNOTATION: "false"}
    job = create_volcano_job(k8s, namespace, raw)
    create_pods(k8s, job, [("worker", 0)])
    pending = _start_pending(k8s, namespace, job, idle_node)
    wait_spec(k8s, namespace, "rings-config-out", status="initializing")
    before = _reconciles(registering_controller)
    _register(k8s, namespace, pending)
    wait_for(lambda: _reconciles(registering_controller) > before, what="the controller syncing the registration")
    assert read_spec(k8s, namespace, "rings-config-out")["status"] == "initializing"  # type: ignore[index]
    k8s.core.patch_namespaced_pod_status(
        pending, namespace, {"status": {"phase": "Running", "podIP": REGISTERED_IP, "podIPs": [{"ip": REGISTERED_IP}]}}
    )
    spec = wait_spec(k8s, namespace, "rings-config-out")
    assert spec["members"][1]["ip"] == REGISTERED_IP
