"""JobSets, TrainJobs and Deployments get their spec on the real control plane.

Deployments are run by the real controller-manager (ReplicaSet, pods). JobSet
pods are created the way the JobSet and Job controllers create them, unless
the cluster runs the real JobSet controller (see test_workload_controllers).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.controllerproc import ControllerProcess
from tests.support.factories import deployment, jobset, jobset_job
from tests.support.kubehelp import running_pods, wait_for, wait_spec

pytestmark = pytest.mark.integration


def test_deployment_completes_and_a_replaced_pod_bumps_the_epoch(
    k8s: Any, namespace: str, controller: ControllerProcess
) -> None:
    k8s.apps.create_namespaced_deployment(namespace, deployment("web", 2))
    first = wait_spec(k8s, namespace, "rings-config-web")
    assert first["job"]["kind"] == "Deployment" and len(first["members"]) == 2
    live = wait_for(lambda: running_pods(k8s, namespace, [m["pod"] for m in first["members"]]), what="pods running")
    assert [m["ip"] for m in first["members"]] == [live[m["pod"]].status.pod_ip for m in first["members"]]
    assert all(m["port"] == 4000 for m in first["members"])
    victim = first["members"][0]["pod"]
    k8s.core.delete_namespaced_pod(victim, namespace, grace_period_seconds=0)
    second = wait_spec(
        k8s,
        namespace,
        "rings-config-web",
        where=lambda s: s["epoch"] > first["epoch"] and victim not in [m["pod"] for m in s["members"]],
    )
    assert len(second["members"]) == 2 and first["members"][1]["pod"] in [m["pod"] for m in second["members"]]
    # Documented order: creation time, then name (timestamps have 1 s resolution).
    pods = {p.metadata.name: p for p in k8s.core.list_namespaced_pod(namespace).items}
    names = [m["pod"] for m in second["members"]]
    assert names == sorted(names, key=lambda n: (pods[n].metadata.creation_timestamp, n))


def test_jobset_with_indexed_jobs_completes_in_index_order(
    k8s: Any, namespace: str, controller: ControllerProcess
) -> None:
    js = k8s.custom.create_namespaced_custom_object(
        "jobset.x-k8s.io",
        "v1alpha2",
        namespace,
        "jobsets",
        jobset("js", namespace=namespace, replicated=[("workers", 2, 2)]),
    )
    # The Jobs as the JobSet controller makes them (second one first); the
    # real Job controller makes their Indexed pods.
    for j in (1, 0):
        k8s.batch.create_namespaced_job(namespace, jobset_job(js, rjob="workers", job_index=j))
    spec = wait_spec(k8s, namespace, "rings-config-js")
    assert spec["job"]["kind"] == "JobSet" and spec["job"]["uid"] == js["metadata"]["uid"]
    assert [(m["task"], m["index"]) for m in spec["members"]] == [("workers", i) for i in range(4)]
    pods = {p.metadata.name: p for p in k8s.core.list_namespaced_pod(namespace).items}
    placed = [
        (
            int(pods[m["pod"]].metadata.labels["jobset.sigs.k8s.io/job-index"]),
            int(pods[m["pod"]].metadata.labels["batch.kubernetes.io/job-completion-index"]),
        )
        for m in spec["members"]
    ]
    assert placed == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [m["ip"] for m in spec["members"]] == [pods[m["pod"]].status.pod_ip for m in spec["members"]]


def test_trainjob_takes_numnodes_from_its_runtime_and_ranks_by_completion_index(
    k8s: Any, namespace: str, controller: ControllerProcess
) -> None:
    runtime_name = f"rt-{namespace}"[:60]
    k8s.custom.create_cluster_custom_object(
        "trainer.kubeflow.org",
        "v1alpha1",
        "clustertrainingruntimes",
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "ClusterTrainingRuntime",
            "metadata": {"name": runtime_name},
            "spec": {"mlPolicy": {"numNodes": 3}, "template": {"spec": {"replicatedJobs": []}}},
        },
    )
    try:
        tj = k8s.custom.create_namespaced_custom_object(
            "trainer.kubeflow.org",
            "v1alpha1",
            namespace,
            "trainjobs",
            {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": "tj", "labels": {"ring-controller.atlas": "tensorflow"}},
                "spec": {
                    "runtimeRef": {
                        "name": runtime_name,
                        "kind": "ClusterTrainingRuntime",
                        "apiGroup": "trainer.kubeflow.org",
                    }
                },
            },
        )
        # The JobSet as Trainer makes it: same name, owned by the TrainJob, one
        # Job with completions = numNodes (a custom runtime's layout).
        owner = {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "name": "tj",
            "uid": tj["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        js = k8s.custom.create_namespaced_custom_object(
            "jobset.x-k8s.io",
            "v1alpha2",
            namespace,
            "jobsets",
            jobset("tj", namespace=namespace, replicated=[("node", 1, 3)], owner=owner),
        )
        k8s.batch.create_namespaced_job(namespace, jobset_job(js, rjob="node", job_index=0))
        spec = wait_spec(k8s, namespace, "rings-config-tj")
        assert spec["job"]["kind"] == "TrainJob" and spec["job"]["uid"] == tj["metadata"]["uid"]
        pods = {p.metadata.name: p for p in k8s.core.list_namespaced_pod(namespace).items}
        assert [
            int(pods[m["pod"]].metadata.labels["batch.kubernetes.io/job-completion-index"]) for m in spec["members"]
        ] == [0, 1, 2]
        assert [m["ip"] for m in spec["members"]] == [pods[m["pod"]].status.pod_ip for m in spec["members"]]
        assert [m["role"] for m in spec["members"]] == ["worker"] * 3
        # JobSet restarts (a failed node): its restart count is the TrainJob's version.
        k8s.custom.patch_namespaced_custom_object_status(
            "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", "tj", {"status": {"restarts": 1}}
        )
        wait_spec(k8s, namespace, "rings-config-tj", status="initializing", where=lambda s: s["job"]["version"] == 1)
        k8s.batch.delete_namespaced_job("tj-node-0", namespace, propagation_policy="Foreground", grace_period_seconds=0)
        wait_for(
            lambda: (
                not k8s.core.list_namespaced_pod(namespace).items and not k8s.batch.list_namespaced_job(namespace).items
            ),
            what="old Job and pods gone",
        )
        k8s.batch.create_namespaced_job(namespace, jobset_job(js, rjob="node", job_index=0, restart=1))
        again = wait_spec(k8s, namespace, "rings-config-tj", where=lambda s: s["job"]["version"] == 1)
        assert again["epoch"] == spec["epoch"] + 2 and len(again["members"]) == 3
    finally:
        k8s.custom.delete_cluster_custom_object(
            "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", runtime_name
        )
