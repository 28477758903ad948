"""Workloads run by the real workload controllers: Kubeflow Trainer, JobSet, Volcano.

Here nothing plays a workload controller by hand: a TrainJob becomes a JobSet
through Trainer, the JobSet becomes Jobs through the JobSet controller (its
webhooks served), the Jobs become pods through the Job controller; a Volcano
Job becomes a PodGroup, admitted and placed by Volcano's scheduler, and pods
through Volcano's job controller. kwok runs the pods and gives them loopback
IPs; a real ``ring-controller`` watches the test's namespace.

These tests use their own control plane, ``ring-devcluster up --with
jobset,volcano,trainer`` in ``$RING_DEVCLUSTER_WORKLOADS_STATE`` (default: the
main state directory with ``-workloads`` appended). The real controllers act
on EVERY object of their kinds, so they cannot share a cluster with the tests
that create JobSet and Volcano pods themselves (test_controller_kinds,
test_controller_volcano): they would create the same pods first and overwrite
a Volcano job's version. The fixtures ``kubeconfig`` and ``k8s`` are
overridden for this directory (``tests/workloads/conftest.py``); the
shared ``namespace`` and ``controller`` fixtures follow them.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from ringdevcluster import Cluster
from tests.support.clients import REPO
from tests.support.controllerproc import ControllerProcess
from tests.support.factories import pod_template, volcano_job
from tests.support.kubehelp import create_volcano_job, read_spec, wait_for, wait_spec
from tests.support.workloads import (
    CLUSTER_ADDONS,
    JOBSET,
    TRAINER,
    VOLCANO,
    Json,
    Timeline,
    cluster_runtime,
    jobset_pods,
    tensorflow_runtime,
    timeline_wait,
    trainjob,
)

pytestmark = pytest.mark.integration


def _listening_addresses(pid: int) -> set[str]:
    """``ip:port`` of every TCP socket process ``pid`` listens on (IPv4 and IPv6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                hexip, hexport = local.split(":")
                if width == 8:
                    ip = ".".join(str(int(hexip[i : i + 2], 16)) for i in (6, 4, 2, 0))
                else:
                    ip = "::1" if hexip == "0" * 24 + "01000000" else ("::" if hexip == "0" * 32 else hexip)
                found.add(f"{ip}:{int(hexport, 16)}")
    return found


# --------------------------------------------------------------------------
# the harness itself


def test_workload_controllers_run_healthy_and_listen_on_loopback_only(workloads: Cluster) -> None:
    statuses = {s.name: s for s in workloads.status()}
    addon_processes = [
        "jobset-controller",
        "volcano-controller-manager",
        "volcano-scheduler",
        "trainer-controller-manager",
    ]
    assert set(workloads.addons) == set(CLUSTER_ADDONS)
    for name in addon_processes:
        assert statuses[name].healthy, (name, statuses[name].detail)
        listening = _listening_addresses(statuses[name].pid or 0)
        assert listening, f"{name} listens nowhere (health check?)"
        assert all(a.startswith(("127.0.0.1:", "::1:")) for a in listening), (name, listening)


def test_jobset_webhooks_default_and_trainer_webhook_validates(k8s: Any, namespace: str) -> None:
    # The JobSet mutating webhook fills what the controller relies on.
    template = {"spec": {"template": pod_template()}}
    js = k8s.custom.create_namespaced_custom_object(*JOBSET, namespace, "jobsets", {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "defaults"},
        "spec": {"suspend": True, "replicatedJobs": [{"name": "w", "template": template}]},
    })  # fmt: skip
    rjob = js["spec"]["replicatedJobs"][0]
    assert rjob["template"]["spec"]["completionMode"] == "Indexed"
    assert js["spec"]["successPolicy"]["operator"] == "All"
    # Trainer's validating webhook is called (by URL, with the cluster CA).
    bad = trainjob("bad", runtime="no-such-runtime", nodes=2)
    with pytest.raises(ApiException, match=r"^\(403\)\nReason: Forbidden") as rejected:
        k8s.custom.create_namespaced_custom_object(*TRAINER, namespace, "trainjobs", bad)
    body = str(rejected.value.body)
    assert "no-such-runtime" in body
    assert "validator.trainjob.trainer.kubeflow.org" in body


def _typed_paths(schema: Json, path: str = "") -> dict[str, str]:
    """Every schema path that declares a type (``x-int-or-string`` counted as one)."""
    out = {}
    if "type" in schema or schema.get("x-kubernetes-int-or-string"):
        out[path] = str(schema.get("type", "int-or-string"))
    for key, sub in (schema.get("properties") or {}).items():
        out.update(_typed_paths(sub, f"{path}.{key}"))
    if isinstance(schema.get("items"), dict):
        out.update(_typed_paths(schema["items"], f"{path}[]"))
    if isinstance(schema.get("additionalProperties"), dict):
        out.update(_typed_paths(schema["additionalProperties"], f"{path}{{}}"))
    return out


def test_harness_crd_schemas_agree_with_the_products_crds(k8s: Any, workloads: Cluster) -> None:
    """Every field the harness's own schemas type (the fields ring-controller reads)
    has the same type in the product's CRD the workload controllers run with."""
    from kubernetes.client import ApiextensionsV1Api

    ext = ApiextensionsV1Api(k8s.api)
    crd_dir = REPO / "build" / "devcluster" / "ringdevcluster" / "crds"
    ours = [d for f in sorted(crd_dir.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    assert {d["metadata"]["name"] for d in ours} >= {
        "jobs.batch.volcano.sh",
        "jobsets.jobset.x-k8s.io",
        "trainjobs.trainer.kubeflow.org",
    }
    checked = 0
    for doc in ours:
        served = k8s.api.sanitize_for_serialization(ext.read_custom_resource_definition(doc["metadata"]["name"]))
        # The served CRD is the product's (controller-gen annotates it), not ours.
        assert "controller-gen.kubebuilder.io/version" in (served["metadata"].get("annotations") or {}), doc[
            "metadata"
        ]["name"]
        for version in doc["spec"]["versions"]:
            theirs = next(v for v in served["spec"]["versions"] if v["name"] == version["name"])
            assert ("status" in (version.get("subresources") or {})) == ("status" in (theirs.get("subresources") or {}))
            mine, product = (
                _typed_paths(version["schema"]["openAPIV3Schema"]),
                _typed_paths(theirs["schema"]["openAPIV3Schema"]),
            )
            mismatched = {p: (t, product.get(p)) for p, t in mine.items() if product.get(p) != t}
            assert not mismatched, (doc["metadata"]["name"], mismatched)
            checked += len(mine)
    assert checked > 100


# --------------------------------------------------------------------------
# Kubeflow Trainer -> JobSet -> Job -> pods


def test_trainjob_via_trainer_jobset_and_job_controllers_completes_in_index_order(
    k8s: Any, namespace: str, controller: ControllerProcess
) -> None:
    timeline = Timeline(k8s, namespace)
    try:
        with cluster_runtime(k8s, tensorflow_runtime(f"tf-{namespace}")) as runtime:
            tj = k8s.custom.create_namespaced_custom_object(
                *TRAINER, namespace, "trainjobs", trainjob("tf", runtime=runtime["metadata"]["name"], nodes=3)
            )
            spec = wait_spec(k8s, namespace, "rings-config-tf", timeout=60)
            pods = {p.metadata.name: p for p in jobset_pods(k8s, namespace, "tf")}
            completed = timeline_wait(timeline, "rings-config-tf", spec["epoch"])
    finally:
        timeline.stop()
    # Trainer made the JobSet (named and owned as Trainer does); the JobSet
    # controller one Indexed Job of 3 (the runtime's layout); the Job controller the pods.
    js = k8s.custom.get_namespaced_custom_object(*JOBSET, namespace, "jobsets", "tf")
    (owner,) = js["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "TrainJob",
        "tf",
        tj["metadata"]["uid"],
        True,
    )
    (job,) = k8s.batch.list_namespaced_job(namespace).items
    assert (job.metadata.name, job.spec.completions, job.spec.completion_mode) == ("tf-node-0", 3, "Indexed")
    assert job.metadata.owner_references[0].kind == "JobSet"
    # The spec: the TrainJob, its 3 nodes ranked by completion index, real IPs.
    assert spec["job"]["kind"] == "TrainJob" and spec["job"]["uid"] == tj["metadata"]["uid"]
    assert len(spec["members"]) == 3 and sorted(pods) == sorted(m["pod"] for m in spec["members"])
    assert [(m["rank"], m["task"], m["index"]) for m in spec["members"]] == [(i, "node", i) for i in range(3)]
    for m in spec["members"]:
        pod = pods[m["pod"]]
        assert pod.metadata.labels["batch.kubernetes.io/job-completion-index"] == str(m["index"])
        assert m["pod"].startswith(f"tf-node-0-{m['index']}-")
        assert m["uid"] == pod.metadata.uid and m["ip"] == pod.status.pod_ip and m["ip"].startswith("127.1.")
        # TF_WORKER_PORT: the TrainJob's env (23456) overrides the runtime's (12345), through Trainer.
        assert m["port"] == 23456
    last_running = max(timeline.running[name] for name in pods)
    print(f"\nFIGURE TrainJob (3 nodes) last pod Running -> spec completed (watch): {completed - last_running:.3f}s")


# --------------------------------------------------------------------------
# Volcano


def _volcano_pods(k8s: Any, namespace: str, job: str, version: int) -> dict[str, Any]:
    pods = k8s.core.list_namespaced_pod(namespace, label_selector=f"volcano.sh/job-name={job}").items
    return {
        p.metadata.name: p
        for p in pods
        if p.metadata.deletion_timestamp is None
        and (p.metadata.annotations or {}).get("volcano.sh/job-version") == str(version)
    }


def test_volcano_job_via_volcano_completes_and_follows_a_restart(
    k8s: Any, namespace: str, controller: ControllerProcess
) -> None:
    manifest = volcano_job("vc", tasks=[("chief", 1), ("worker", 2)], template=pod_template(port=4100))
    # Written out as Volcano's admission webhook (not run here) would default
    # it: Volcano's scheduler places the gang of 3; restarts allowed (maxRetry 3,
    # also the CRD's default since Volcano 1.11; 0 would fail the job at its
    # first restart).
    manifest["spec"].update(schedulerName="volcano", maxRetry=3)
    job = create_volcano_job(k8s, namespace, manifest)
    first = wait_spec(k8s, namespace, "rings-config-vc", timeout=60)
    pods = _volcano_pods(k8s, namespace, "vc", 0)
    assert first["job"]["uid"] == job["metadata"]["uid"] and first["job"]["version"] == 0
    assert [(m["rank"], m["task"], m["index"]) for m in first["members"]] == [
        (0, "chief", 0),
        (1, "worker", 0),
        (2, "worker", 1),
    ]
    for m in first["members"]:
        pod = pods[m["pod"]]
        assert pod.spec.scheduler_name == "volcano" and pod.metadata.owner_references[0].kind == "Job"
        assert m["uid"] == pod.metadata.uid and m["ip"] == pod.status.pod_ip and m["port"] == 4100
    # The scheduler moves the PodGroup from Inqueue to Running in a later session
    # (Volcano 1.15: often after the pods already run and the spec is complete).
    group = wait_for(
        lambda: next(
            (
                g
                for g in k8s.custom.list_namespaced_custom_object(
                    "scheduling.volcano.sh", "v1beta1", namespace, "podgroups"
                )["items"]
                if (g.get("status") or {}).get("phase") == "Running"
            ),
            None,
        ),
        timeout=30,
        what="the job's PodGroup Running",
    )
    assert group["spec"]["minMember"] == 3

    # RestartJob, the way `vcctl job restart` asks for it: a bus.volcano.sh Command.
    uid = job["metadata"]["uid"]
    target = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "vc", "uid": uid}
    k8s.custom.create_namespaced_custom_object("bus.volcano.sh", "v1alpha1", namespace, "commands", {
        "apiVersion": "bus.volcano.sh/v1alpha1", "kind": "Command",
        "metadata": {"name": "restart-vc", "ownerReferences": [{**target, "controller": True}]},
        "action": "RestartJob", "target": target,
    })  # fmt: skip

    def restarted() -> tuple[Json, dict[str, Any]] | None:
        version = (
            k8s.custom.get_namespaced_custom_object(*VOLCANO, namespace, "jobs", "vc")
            .get("status", {})
            .get("version", 0)
        )
        spec = read_spec(k8s, namespace, "rings-config-vc")
        live = _volcano_pods(k8s, namespace, "vc", version)
        if (
            spec
            and version > 0
            and spec["status"] == "completed"
            and spec["job"]["version"] == version
            and len(live) == 3
        ):
            return spec, live
        return None

    second, live = wait_for(restarted, timeout=60, what="the spec of the restarted job version")
    assert {m["uid"] for m in second["members"]} == {p.metadata.uid for p in live.values()}
    assert not {m["uid"] for m in second["members"]} & {m["uid"] for m in first["members"]}
    assert [(m["task"], m["index"]) for m in second["members"]] == [("chief", 0), ("worker", 0), ("worker", 1)]
    assert all(m["ip"] == live[m["pod"]].status.pod_ip for m in second["members"])
