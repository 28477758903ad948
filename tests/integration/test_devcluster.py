"""The local control plane behaves like a real cluster where the product needs it.

Every test runs against the real processes ``ring-devcluster up`` starts: the
real controller-manager creates pods, the real scheduler binds them, kwok runs
them on fake nodes with loopback IPs, RBAC is enforced, and the harness CRDs
accept (and keep) realistic workload objects.
"""

# The kubernetes client's models type every field Optional; these tests read
# fields the API server always sets, and a None would fail the test anyway.
# mypy: disable-error-code="union-attr,arg-type,index,operator"

from __future__ import annotations

import copy
import ipaddress
import socket
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ringdevcluster import Cluster
from ringdevcluster.kwok import EXIT_CODE_ANNOTATION, NODE_LABEL, POD_NETWORK, node_name
from tests.support.clients import K8s
from tests.support.kubehelp import wait_for

pytestmark = pytest.mark.integration


def _pod(name: str, **spec: Any) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(containers=[client.V1Container(name="main", image="example.invalid/app:1")], **spec),
    )


def _running(k8s: K8s, namespace: str, name: str) -> client.V1Pod | None:
    pod = k8s.core.read_namespaced_pod(name, namespace)
    return pod if pod.status.phase == "Running" and pod.status.pod_ip else None


# --------------------------------------------------------------------------
# workloads


def test_deployment_pods_are_created_scheduled_and_running_with_loopback_ips(k8s: K8s, namespace: str) -> None:
    labels = {"app": "web"}
    deployment = client.V1Deployment(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1DeploymentSpec(
            replicas=3,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(containers=[client.V1Container(name="web", image="example.invalid/web:1")]),
            ),
        ),
    )
    created = k8s.apps.create_namespaced_deployment(namespace, deployment)

    def running_pods() -> list[client.V1Pod] | None:
        pods = k8s.core.list_namespaced_pod(namespace, label_selector="app=web").items
        ok = [p for p in pods if p.status.phase == "Running" and p.status.pod_ip]
        return ok if len(ok) == 3 else None

    pods = wait_for(running_pods, what="3 Running pods")
    nodes = {n.metadata.name: n for n in k8s.core.list_node(label_selector="=".join(NODE_LABEL)).items}

    # Created by the controller-manager: Deployment -> ReplicaSet -> Pod.
    replica_sets = k8s.apps.list_namespaced_replica_set(namespace).items
    assert len(replica_sets) == 1
    assert replica_sets[0].metadata.owner_references[0].uid == created.metadata.uid
    for pod in pods:
        owners = pod.metadata.owner_references
        assert len(owners) == 1
        assert (owners[0].kind, owners[0].uid) == ("ReplicaSet", replica_sets[0].metadata.uid)

    ips = []
    for pod in pods:
        # Bound by the scheduler onto a kwok node ...
        assert pod.spec.node_name in nodes, pod.spec.node_name
        scheduled = [c for c in pod.status.conditions if c.type == "PodScheduled"]
        assert scheduled and scheduled[0].status == "True"
        node = nodes[pod.spec.node_name]
        # ... given an IP from that node's pod CIDR inside 127.1.0.0/16 ...
        ip = ipaddress.ip_address(pod.status.pod_ip)
        assert ip in POD_NETWORK
        assert ip in ipaddress.ip_network(node.spec.pod_cidr)
        # ... and the node's InternalIP as hostIP.
        internal = [a.address for a in node.status.addresses if a.type == "InternalIP"]
        assert pod.status.host_ip == internal[0]
        ips.append(pod.status.pod_ip)
    assert len(set(ips)) == 3

    # The deployment controller sees them available too.
    wait_for(
        lambda: (k8s.apps.read_namespaced_deployment("web", namespace).status.available_replicas or 0) == 3,
        what="deployment availableReplicas == 3",
    )

    # A test process can stand in for the container: bind to the pod IP.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((ips[0], 0))
        sock.listen()
        with socket.create_connection(sock.getsockname(), timeout=5):
            pass


def test_indexed_job_pods_stay_running_until_told_to_exit(k8s: K8s, namespace: str) -> None:
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name="train"),
        spec=client.V1JobSpec(
            completions=2,
            parallelism=2,
            completion_mode="Indexed",
            backoff_limit=0,
            template=client.V1PodTemplateSpec(
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[client.V1Container(name="worker", image="example.invalid/train:1")],
                )
            ),
        ),
    )
    k8s.batch.create_namespaced_job(namespace, job)

    def running() -> list[client.V1Pod] | None:
        pods = k8s.core.list_namespaced_pod(namespace, label_selector="job-name=train").items
        ok = [p for p in pods if p.status.phase == "Running"]
        return ok if len(ok) == 2 else None

    pods = wait_for(running, what="2 Running job pods")
    first, second = sorted(pods, key=lambda p: p.metadata.annotations["batch.kubernetes.io/job-completion-index"])
    assert [p.metadata.annotations["batch.kubernetes.io/job-completion-index"] for p in (first, second)] == ["0", "1"]

    # kwok's stock stages complete a Job's pods as soon as they run. Proof that
    # kwok had its chance at the second pod: it acts on a later change, the
    # first pod told to exit (a stage it walks after the second pod's Running).
    k8s.core.patch_namespaced_pod(
        first.metadata.name, namespace, {"metadata": {"annotations": {EXIT_CODE_ANNOTATION: "0"}}}
    )
    wait_for(
        lambda: k8s.core.read_namespaced_pod(first.metadata.name, namespace).status.phase == "Succeeded",
        what="the first pod Succeeded",
    )
    assert _running(k8s, namespace, second.metadata.name), "kwok ended a pod nobody told to exit"

    k8s.core.patch_namespaced_pod(
        second.metadata.name, namespace, {"metadata": {"annotations": {EXIT_CODE_ANNOTATION: "0"}}}
    )
    wait_for(
        lambda: (k8s.batch.read_namespaced_job("train", namespace).status.succeeded or 0) == 2,
        what="the Job to complete",
    )


def test_pod_exit_code_annotation_fails_the_pod(k8s: K8s, namespace: str) -> None:
    k8s.core.create_namespaced_pod(namespace, _pod("crash", restart_policy="Never"))
    wait_for(lambda: _running(k8s, namespace, "crash"), what="pod Running")
    k8s.core.patch_namespaced_pod("crash", namespace, {"metadata": {"annotations": {EXIT_CODE_ANNOTATION: "137"}}})
    pod = wait_for(
        lambda: (p := k8s.core.read_namespaced_pod("crash", namespace)).status.phase == "Failed" and p,
        what="pod Failed",
    )
    assert pod.status.container_statuses[0].state.terminated.exit_code == 137


def test_orphaned_configmap_is_garbage_collected(k8s: K8s, namespace: str) -> None:
    owner = k8s.core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"))
    )
    k8s.core.delete_namespaced_config_map("owner", namespace)

    def dependent(name: str, owner_name: str, uid: str) -> client.V1ConfigMap:
        ref = client.V1OwnerReference(api_version="v1", kind="ConfigMap", name=owner_name, uid=uid)
        return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, owner_references=[ref]), data={"k": "v"})

    # Points at an object that no longer exists: the garbage collector removes it.
    k8s.core.create_namespaced_config_map(namespace, dependent("orphan", "owner", owner.metadata.uid))
    # Control: the same shape with a live owner survives.
    live = k8s.core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="live-owner"))
    )
    k8s.core.create_namespaced_config_map(namespace, dependent("kept", "live-owner", live.metadata.uid))

    def gone() -> bool:
        try:
            k8s.core.read_namespaced_config_map("orphan", namespace)
        except ApiException as err:
            if err.status == 404:
                return True
            raise
        return False

    wait_for(gone, timeout=60, what="the orphaned ConfigMap to be garbage-collected")
    assert k8s.core.read_namespaced_config_map("kept", namespace).data == {"k": "v"}


# --------------------------------------------------------------------------
# authentication and authorization


def test_user_without_rbac_bindings_is_forbidden(devcluster: Cluster, k8s: K8s, namespace: str) -> None:
    from kubernetes import config

    path = devcluster.user_kubeconfig(user="nobody-in-particular", groups=["ring-test:none"])
    api = config.new_client_from_config(config_file=str(path))  # type: ignore[no-untyped-call]
    try:
        core = client.CoreV1Api(api)
        # 403 (authenticated, not authorised), not 401: the certificate is valid.
        with pytest.raises(ApiException, match=r"^\(403\)\nReason: Forbidden") as raised:
            core.list_namespaced_pod(namespace)
        assert "nobody-in-particular" in raised.value.body

        # The same user is allowed once RBAC says so: the 403 was RBAC's.
        binding = client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="nobody-can-view"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="view"),
            subjects=[
                client.RbacV1Subject(kind="User", name="nobody-in-particular", api_group="rbac.authorization.k8s.io")
            ],
        )
        k8s.rbac.create_namespaced_role_binding(namespace, binding)

        def allowed() -> bool:
            try:
                return core.list_namespaced_pod(namespace).items == []
            except ApiException as err:
                if err.status != 403:  # RBAC's cache may lag the binding briefly
                    raise
                return False

        wait_for(allowed, what="the RoleBinding to take effect")
    finally:
        api.close()


# --------------------------------------------------------------------------
# CRDs

VOLCANO_JOB: dict[str, Any] = {
    "apiVersion": "batch.volcano.sh/v1alpha1",
    "kind": "Job",
    "metadata": {"name": "tf-mnist", "labels": {"ring-controller.atlas": "tensorflow"}},
    "spec": {
        "schedulerName": "volcano",
        "minAvailable": 3,
        "queue": "default",
        "plugins": {"svc": [], "env": []},
        "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
        "tasks": [
            {
                "name": "ps",
                "replicas": 1,
                "template": {
                    "metadata": {"labels": {"ring-controller.atlas": "tensorflow"}},
                    "spec": {
                        "restartPolicy": "OnFailure",
                        "containers": [
                            {
                                "name": "tf",
                                "image": "example.invalid/tf:2",
                                "ports": [{"name": "tf-port", "containerPort": 2222}],
                            }
                        ],
                    },
                },
            },
            {
                "name": "worker",
                "replicas": 2,
                "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}],
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "tf", "image": "example.invalid/tf:2", "futureContainerField": {"x": 1}}
                        ]
                    }
                },
                "futureTaskField": "kept",
            },
        ],
        "futureSpecField": {"nested": [1, 2, 3]},
    },
}

JOBSET: dict[str, Any] = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "torch"},
    "spec": {
        "network": {"enableDNSHostnames": True},
        "failurePolicy": {"maxRestarts": 3},
        "replicatedJobs": [
            {
                "name": "node",
                "replicas": 1,
                "template": {
                    "spec": {
                        "parallelism": 4,
                        "completions": 4,
                        "completionMode": "Indexed",
                        "backoffLimit": 0,
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [{"name": "trainer", "image": "example.invalid/torch:2"}],
                            }
                        },
                    }
                },
            }
        ],
        "successPolicy": {"operator": "All", "targetReplicatedJobs": ["node"]},
    },
}

CLUSTER_TRAINING_RUNTIME: dict[str, Any] = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "ring-test-tensorflow"},
    "spec": {
        "mlPolicy": {"numNodes": 2},
        "podGroupPolicy": {"coscheduling": {"scheduleTimeoutSeconds": 120}},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "replicas": 1,
                        "template": {
                            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                            "spec": {
                                "template": {
                                    "spec": {"containers": [{"name": "node", "image": "example.invalid/tf:2"}]}
                                }
                            },
                        },
                    }
                ]
            }
        },
    },
}

TRAINJOB: dict[str, Any] = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "metadata": {"name": "tf-train"},
    "spec": {
        "runtimeRef": {"name": "ring-test-tensorflow"},
        "trainer": {
            "numNodes": 4,
            "image": "example.invalid/tf:2",
            "command": ["ring-launch", "--", "python", "train.py"],
            "env": [{"name": "TF_WORKER_PORT", "value": "2222"}],
            "resourcesPerNode": {"limits": {"huawei.com/Ascend910": "8"}},
        },
        "podTemplateOverrides": [{"targetJobs": [{"name": "node"}], "spec": {"nodeSelector": {"type": "kwok"}}}],
    },
}


def _plural(obj: dict[str, Any]) -> tuple[str, str, str]:
    group, version = obj["apiVersion"].split("/")
    plural = {"Job": "jobs", "JobSet": "jobsets", "TrainJob": "trainjobs"}[obj["kind"]]
    return group, version, plural


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(VOLCANO_JOB, id="volcano-job-two-tasks"),
        pytest.param(JOBSET, id="jobset-indexed-job"),
        pytest.param(TRAINJOB, id="trainjob-numnodes"),
    ],
)
def test_crd_accepts_realistic_object_and_preserves_unknown_fields(
    k8s: K8s, namespace: str, obj: dict[str, Any]
) -> None:
    group, version, plural = _plural(obj)
    created = k8s.custom.create_namespaced_custom_object(group, version, namespace, plural, copy.deepcopy(obj))
    read = k8s.custom.get_namespaced_custom_object(group, version, namespace, plural, obj["metadata"]["name"])
    assert read["metadata"]["uid"] == created["metadata"]["uid"]
    # Everything sent comes back: typed fields and unknown ones (futureSpecField,
    # podTemplateOverrides, fields inside pod templates) alike.
    expected = copy.deepcopy(obj["spec"])
    if obj["kind"] == "TrainJob":
        # Schema defaults fill in the runtime reference's group and kind.
        expected["runtimeRef"] = {
            "name": "ring-test-tensorflow",
            "apiGroup": "trainer.kubeflow.org",
            "kind": "ClusterTrainingRuntime",
        }
    if obj["kind"] == "Job":
        # The real CRD's defaults (Volcano 1.11: maxRetry, 1.14: queue).
        expected.setdefault("maxRetry", 3)
        expected.setdefault("queue", "default")
    assert read["spec"] == expected


def test_volcano_job_schema_rejects_wrong_types_and_has_status_subresource(k8s: K8s, namespace: str) -> None:
    bad = copy.deepcopy(VOLCANO_JOB)
    bad["spec"]["tasks"][0]["replicas"] = "two"
    with pytest.raises(ApiException, match=r"^\(422\)\nReason: Unprocessable Entity") as raised:
        k8s.custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", bad)
    assert "spec.tasks[0].replicas" in raised.value.body

    k8s.custom.create_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs", copy.deepcopy(VOLCANO_JOB)
    )
    # Status is written through /status only (what the Volcano controller does) ...
    k8s.custom.patch_namespaced_custom_object_status(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs", "tf-mnist",
        {"status": {"version": 2, "state": {"phase": "Running"}, "running": 3}},
    )  # fmt: skip
    # ... and a main-resource update cannot change it.
    k8s.custom.patch_namespaced_custom_object(
        "batch.volcano.sh",
        "v1alpha1",
        namespace,
        "jobs",
        "tf-mnist",
        {"status": {"version": 9}, "spec": {"minAvailable": 2}},
    )
    read = k8s.custom.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", "tf-mnist")
    assert read["status"]["version"] == 2
    assert read["status"]["state"]["phase"] == "Running"
    assert read["spec"]["minAvailable"] == 2


def test_cluster_training_runtime_is_cluster_scoped(k8s: K8s) -> None:
    args = ("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes")
    name = CLUSTER_TRAINING_RUNTIME["metadata"]["name"]
    try:
        k8s.custom.delete_cluster_custom_object(*args, name)
    except ApiException as err:
        if err.status != 404:
            raise
    k8s.custom.create_cluster_custom_object(*args, copy.deepcopy(CLUSTER_TRAINING_RUNTIME))
    try:
        read = k8s.custom.get_cluster_custom_object(*args, name)
        assert "namespace" not in read["metadata"]
        assert read["spec"] == CLUSTER_TRAINING_RUNTIME["spec"]
    finally:
        k8s.custom.delete_cluster_custom_object(*args, name)


# --------------------------------------------------------------------------
# harness control


def test_stopped_scheduler_leaves_pods_pending_until_restarted(devcluster: Cluster, k8s: K8s, namespace: str) -> None:
    assert devcluster.stop_component("kube-scheduler")
    try:
        assert devcluster.pid("kube-scheduler") is None
        statuses = {s.name: s for s in devcluster.status()}
        assert not statuses["kube-scheduler"].running
        assert statuses["kube-apiserver"].healthy
        created = k8s.core.create_namespaced_pod(namespace, _pod("waiting"))
        # The rest of the cluster acts on a later change: a pod bound by hand
        # (no scheduler needed) is run by kwok. "waiting", created before it,
        # has not been written since its create: no scheduler bound it.
        k8s.core.create_namespaced_pod(namespace, _pod("bound", node_name=node_name(0)))
        wait_for(lambda: _running(k8s, namespace, "bound"), what="the pod bound by hand Running")
        pod = k8s.core.read_namespaced_pod("waiting", namespace)
        assert pod.spec.node_name is None and pod.status.phase == "Pending"
        assert pod.metadata.resource_version == created.metadata.resource_version
    finally:
        devcluster.start_component("kube-scheduler")
    wait_for(lambda: _running(k8s, namespace, "waiting"), what="pod Running after the scheduler restarts")


def test_the_running_release_is_the_one_served_and_another_is_not_swapped_in(devcluster: Cluster, k8s: K8s) -> None:
    from ringdevcluster import ClusterError, ensure_up

    running = devcluster.versions["kube"]
    assert client.VersionApi(k8s.api).get_code().git_version == running  # the stamp is the release built
    other = "v1.31.14" if running != "v1.31.14" else "v1.32.13"
    with pytest.raises(ClusterError, match=rf"runs Kubernetes {running}, not {other}: stop it first"):
        ensure_up(state_dir=devcluster.state_dir, kube=other)
    assert devcluster.healthy()  # untouched


def test_the_cluster_is_dual_stack_ipv4_first_and_keeps_its_family(
    devcluster: Cluster, k8s: K8s, namespace: str
) -> None:
    from ringdevcluster import ClusterError, controlplane, ensure_up

    assert devcluster.ip_family == controlplane.DEFAULT_IP_FAMILY == "dual"
    ports = [client.V1ServicePort(port=2222)]
    # Without ipFamilyPolicy a Service stays IPv4 (the first family), as on a single-stack IPv4 cluster.
    plain = k8s.core.create_namespaced_service(
        namespace, client.V1Service(metadata=client.V1ObjectMeta(name="plain"), spec=client.V1ServiceSpec(ports=ports))
    )
    assert plain.spec.ip_families == ["IPv4"]
    assert ipaddress.ip_address(plain.spec.cluster_ip) in ipaddress.ip_network(controlplane.SERVICE_CIDR)
    # Asked for, a Service gets one ClusterIP of each family, the IPv6 one from the IPv6 range.
    both = k8s.core.create_namespaced_service(
        namespace,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="both"),
            spec=client.V1ServiceSpec(ports=ports, ip_family_policy="RequireDualStack"),
        ),
    )
    v4, v6 = both.spec.cluster_ips
    assert ipaddress.ip_address(v4) in ipaddress.ip_network(controlplane.SERVICE_CIDR)
    assert ipaddress.ip_address(v6) in ipaddress.ip_network(controlplane.SERVICE_CIDR6)
    with pytest.raises(ClusterError, match="is dual, not ipv6: stop it first"):
        ensure_up(state_dir=devcluster.state_dir, ip_family="ipv6")
    assert devcluster.healthy()  # untouched
