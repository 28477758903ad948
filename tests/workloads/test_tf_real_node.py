"""Real TensorFlow in real containers on the real node, TF_CONFIG from ring-controller.

The workers run the trainer image (``build/image.sh --trainer``) in their own
network namespaces, all on the same port; ``rings-config`` is mounted by the
real kubelet (file mode) or read through the API (``--from-api``);
``POD_NAME``/``POD_UID``/``POD_IP`` come from the downward API. Once through a
Volcano Job run by the real Volcano controller (2 workers, file mode), once
through a TrainJob run by the real Trainer and JobSet controllers (4 workers,
API mode), once through an Indexed Job and once through a StatefulSet run by
Kubernetes' own controllers (2 workers each, file mode, ranked by completion
index and by ordinal). The workers must train in sync: identical weights. And a worker
pod deleted mid-run: its replacement starts only with the new epoch.
ring-controller runs as a process on this machine (its deployed form is
tested in test_deployed_controller.py).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from ringdevcluster import node
from tests.support import nodejobs
from tests.support.clients import REPO
from tests.support.controllerproc import ControllerProcess
from tests.support.kubehelp import read_spec, wait_for

pytestmark = pytest.mark.e2e

VOLCANO = ("batch.volcano.sh", "v1alpha1")
VOLCANO_EXAMPLE = REPO / "build" / "examples" / "volcano" / "tf-cifar10.yaml"
Json = dict[str, Any]


@pytest.fixture(scope="module")
def trainer_image() -> str:
    nodejobs.ensure_trainer_images()
    return nodejobs.TRAINER_IMAGE


@pytest.fixture(scope="module")
def cifar(workloads: Any) -> Path:
    return nodejobs.make_data(Path(workloads.state_dir) / "test-cifar10")


def volcano_job(name: str, *, data: Path, workers: int, command: list[str], args: list[str]) -> Json:
    """The Volcano example (build/examples/volcano) on the real node, renamed, with ``command``/``args``."""
    job: Json = yaml.safe_load(VOLCANO_EXAMPLE.read_text())
    job["metadata"]["name"] = name
    job["spec"]["minAvailable"] = workers
    (task,) = job["spec"]["tasks"]
    task["replicas"] = workers
    spec = task["template"]["spec"]
    spec.update(copy.deepcopy(node.pod_placement()))
    spec["restartPolicy"] = "Never"
    spec["terminationGracePeriodSeconds"] = 2
    (container,) = spec["containers"]
    container["image"] = nodejobs.TRAINER_IMAGE
    container["imagePullPolicy"] = "IfNotPresent"
    container["command"] = command
    container["args"] = args
    container["resources"] = {"requests": {"cpu": "100m", "memory": "256Mi"}}
    container["env"] = [e for e in container["env"] if e["name"] != "EPOCHS"] + [
        {"name": "EPOCHS", "value": "1"},
        {"name": "BATCH_SIZE", "value": "16"},
        {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"},
    ]
    for volume in spec["volumes"]:
        if volume["name"] == "rings-config":
            volume["configMap"]["name"] = f"rings-config-{name}"
        if volume["name"] == "cifar-data":
            volume["hostPath"]["path"] = str(data)
    return job


def _volcano_pods(k8s: Any, namespace: str, job: str) -> list[Any]:
    pods = k8s.core.list_namespaced_pod(namespace, label_selector=f"volcano.sh/job-name={job}").items
    return sorted((p for p in pods if p.metadata.deletion_timestamp is None), key=lambda p: p.metadata.name)


def _finished(k8s: Any, namespace: str, pods: list[Any], *, timeout: float = 300) -> list[Any]:
    names = [p.metadata.name for p in pods]

    def done() -> list[Any] | None:
        now = [k8s.core.read_namespaced_pod(n, namespace) for n in names]
        if any(p.status.phase == "Failed" for p in now):
            logs = {p.metadata.name: k8s.core.read_namespaced_pod_log(p.metadata.name, namespace)[-2000:] for p in now}
            raise AssertionError(f"a worker failed: {logs}")
        return now if all(p.status.phase == "Succeeded" for p in now) else None

    return wait_for(done, timeout=timeout, interval=0.5, what="every worker Succeeded")


def _assert_in_sync(logs: list[nodejobs.WorkerLog], pods: list[Any], port: int) -> None:
    results = [w.result for w in logs]
    assert all(results), [w.text[-1500:] for w in logs if not w.result]
    assert len({r["weights_sha256"] for r in results}) == 1, "workers ended with different weights"
    expected = sorted(f"{p.status.pod_ip}:{port}" for p in pods)
    for r in results:
        assert sorted(r["tf_config"]["cluster"]["worker"]) == expected  # IPs, one port for all
    assert len({p.status.pod_ip for p in pods}) == len(pods)


def test_volcano_job_two_workers_file_mode_train_in_sync(
    k8s: Any, namespace: str, controller: ControllerProcess, trainer_image: str, cifar: Path
) -> None:
    job = volcano_job(
        "tfv", data=cifar, workers=2,
        command=[*nodejobs.LAUNCH, "--timeout", "300", "--"], args=["python", "/app/train.py", "--steps", "4", "--result", "-"],
    )  # fmt: skip
    k8s.custom.create_namespaced_custom_object(*VOLCANO, namespace, "jobs", job)
    pods = wait_for(
        lambda: (lambda ps: ps if len(ps) == 2 else None)(_volcano_pods(k8s, namespace, "tfv")),
        timeout=120,
        what="2 Volcano pods",
    )
    pods = _finished(k8s, namespace, pods)
    logs = [
        nodejobs.parse_log(p.metadata.name, k8s.core.read_namespaced_pod_log(p.metadata.name, namespace)) for p in pods
    ]
    _assert_in_sync(logs, pods, 2222)
    assert {r.result["tf_config_source"] for r in logs if r.result} == {"environment"}
    # Ranks follow the task index (pods sorted by name here), whatever order they came up in.
    by_name = {p.metadata.name: p.status.pod_ip for p in pods}
    order = [f"{by_name[f'tfv-worker-{i}']}:2222" for i in range(2)]
    assert all(w.result["tf_config"]["cluster"]["worker"] == order for w in logs if w.result)


def test_trainjob_four_workers_api_mode_train_in_sync(
    k8s: Any, namespace: str, controller: ControllerProcess, trainer_image: str, cifar: Path
) -> None:
    nodejobs.configmap_reader(k8s.rbac, namespace)
    runtime_name = f"{namespace}-api"
    k8s.custom.create_cluster_custom_object(
        *nodejobs.TRAINER,
        "clustertrainingruntimes",
        nodejobs.runtime("ring-api", runtime_name, data_dir=cifar, steps=4),
    )
    try:
        k8s.custom.create_namespaced_custom_object(
            *nodejobs.TRAINER, namespace, "trainjobs",
            nodejobs.trainjob("ring-api", "tj", runtime_name=runtime_name, workers=4),
        )  # fmt: skip
        pods = nodejobs.wait_finished(k8s.core, namespace, "tj", 4, timeout=400)
        logs = nodejobs.logs(k8s.core, namespace, pods)
        assert all(p.status.phase == "Succeeded" for p in pods), [w.text[-1500:] for w in logs]
        _assert_in_sync(logs, pods, nodejobs.PORT)
    finally:
        k8s.custom.delete_cluster_custom_object(*nodejobs.TRAINER, "clustertrainingruntimes", runtime_name)


def test_a_replaced_worker_starts_only_with_the_new_epoch(
    k8s: Any, namespace: str, controller: ControllerProcess, trainer_image: str, cifar: Path
) -> None:
    script = 'echo "EPOCH $RING_EPOCH TF_CONFIG $TF_CONFIG"; exec sleep 600'
    job = volcano_job(
        "rep", data=cifar, workers=2, command=[*nodejobs.LAUNCH, "--timeout", "300", "--"], args=["sh", "-c", script]
    )
    k8s.custom.create_namespaced_custom_object(*VOLCANO, namespace, "jobs", job)

    def epoch_of(pod: str) -> tuple[int, Json] | None:
        try:
            text = k8s.core.read_namespaced_pod_log(pod, namespace) or ""
        except ApiException:  # the container has not started yet
            return None
        match = re.search(r"^EPOCH (\d+) TF_CONFIG (.*)$", text, flags=re.MULTILINE)
        return (int(match.group(1)), json.loads(match.group(2))) if match else None

    pods = wait_for(
        lambda: (lambda ps: ps if len(ps) == 2 and all(p.status.phase == "Running" for p in ps) else None)(
            _volcano_pods(k8s, namespace, "rep")
        ),
        timeout=120,
        what="2 Running workers",
    )
    first = {p.metadata.name: wait_for(lambda p=p: epoch_of(p.metadata.name), what="first TF_CONFIG") for p in pods}
    (epoch,) = {e for e, _ in first.values()}
    victim = pods[1]
    k8s.core.delete_namespaced_pod(victim.metadata.name, namespace, grace_period_seconds=0)

    def replacement() -> Any:
        for p in _volcano_pods(k8s, namespace, "rep"):
            if p.metadata.name == victim.metadata.name and p.metadata.uid != victim.metadata.uid:
                return p
        return None

    new = wait_for(replacement, timeout=120, what="the replacement pod")
    new_epoch, tf_config = wait_for(
        lambda: epoch_of(new.metadata.name), timeout=180, what="the replacement's TF_CONFIG"
    )
    new = k8s.core.read_namespaced_pod(new.metadata.name, namespace)
    assert new_epoch > epoch
    assert f"{new.status.pod_ip}:2222" in tf_config["cluster"]["worker"]
    assert (
        f"{victim.status.pod_ip}:2222" not in tf_config["cluster"]["worker"]
        or new.status.pod_ip == victim.status.pod_ip
    )
    spec = read_spec(k8s, namespace, "rings-config-rep")
    assert spec["epoch"] == new_epoch and {m["uid"] for m in spec["members"]} >= {new.metadata.uid}


INDEXED_JOB_EXAMPLE = REPO / "build" / "examples" / "job" / "tf-indexed-job.yaml"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def indexed_job(name: str, *, data: Path, workers: int, command: list[str], args: list[str]) -> Json:
    """The Indexed Job example (build/examples/job) on the real node, renamed, with ``command``/``args``."""
    job: Json = yaml.safe_load(INDEXED_JOB_EXAMPLE.read_text())
    job["metadata"]["name"] = name
    job["spec"]["completions"] = job["spec"]["parallelism"] = workers
    job["spec"]["backoffLimitPerIndex"] = 0  # a failure fails the test, not a retry
    spec = job["spec"]["template"]["spec"]
    spec.update(copy.deepcopy(node.pod_placement()))
    spec["terminationGracePeriodSeconds"] = 2
    (container,) = spec["containers"]
    container["image"] = nodejobs.TRAINER_IMAGE
    container["command"] = command
    container["args"] = args
    container["resources"] = {"requests": {"cpu": "100m", "memory": "256Mi"}}
    container["env"] = [e for e in container["env"] if e["name"] != "EPOCHS"] + [
        {"name": "EPOCHS", "value": "1"},
        {"name": "BATCH_SIZE", "value": "16"},
        {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"},
    ]
    for volume in spec["volumes"]:
        if volume["name"] == "rings-config":
            volume["configMap"]["name"] = f"rings-config-{name}"
        if volume["name"] == "cifar-data":
            volume["hostPath"]["path"] = str(data)
    return job


def test_indexed_job_two_workers_file_mode_train_in_sync_ranked_by_completion_index(
    k8s: Any, namespace: str, controller: ControllerProcess, trainer_image: str, cifar: Path
) -> None:
    """The shipped Indexed Job example, run by the real Job controller: no Service, no DNS."""
    job = indexed_job(
        "tfij", data=cifar, workers=2,
        command=[*nodejobs.LAUNCH, "--timeout", "300", "--"], args=["python", "/app/train.py", "--steps", "4", "--result", "-"],
    )  # fmt: skip
    k8s.batch.create_namespaced_job(namespace, job)

    def pods_of_job() -> list[Any] | None:
        pods = k8s.core.list_namespaced_pod(namespace, label_selector="batch.kubernetes.io/job-name=tfij").items
        live = [p for p in pods if p.metadata.deletion_timestamp is None]
        return sorted(live, key=lambda p: int(p.metadata.labels[COMPLETION_INDEX])) if len(live) == 2 else None

    pods = _finished(k8s, namespace, wait_for(pods_of_job, timeout=120, what="2 Job pods"))
    logs = [
        nodejobs.parse_log(p.metadata.name, k8s.core.read_namespaced_pod_log(p.metadata.name, namespace)) for p in pods
    ]
    _assert_in_sync(logs, pods, 2222)
    assert {r.result["tf_config_source"] for r in logs if r.result} == {"environment"}
    # Ranks follow the completion index, and each worker's task index is its own completion index.
    order = [f"{p.status.pod_ip}:2222" for p in pods]
    for pod, log in zip(pods, logs, strict=True):
        assert log.result is not None
        assert log.result["tf_config"]["cluster"]["worker"] == order
        assert log.result["tf_config"]["task"] == {
            "type": "worker",
            "index": int(pod.metadata.labels[COMPLETION_INDEX]),
        }
    spec = read_spec(k8s, namespace, "rings-config-tfij")
    assert spec is not None and spec["job"]["apiVersion"] == "batch/v1" and spec["status"] == "completed"
    assert [m["pod"] for m in spec["members"]] == [p.metadata.name for p in pods]
    assert k8s.core.list_namespaced_service(namespace).items == []  # no headless Service anywhere


STATEFULSET_EXAMPLE = REPO / "build" / "examples" / "statefulset" / "tf-statefulset.yaml"
POD_INDEX = "apps.kubernetes.io/pod-index"


def statefulset(name: str, *, data: Path, workers: int, script: str) -> tuple[Json, Json]:
    """The StatefulSet example (build/examples/statefulset) on the real node, renamed: its Service and
    StatefulSet, the container running ``sh -c script`` under the launcher."""
    service, sts = yaml.safe_load_all(STATEFULSET_EXAMPLE.read_text())
    service["metadata"]["name"] = sts["spec"]["serviceName"] = name
    service["spec"]["selector"] = {"app": name}
    sts["metadata"]["name"] = name
    sts["spec"]["replicas"] = workers
    sts["spec"]["selector"]["matchLabels"] = {"app": name}
    sts["spec"]["template"]["metadata"]["labels"]["app"] = name
    spec = sts["spec"]["template"]["spec"]
    spec.update(copy.deepcopy(node.pod_placement()))
    spec["terminationGracePeriodSeconds"] = 2
    (container,) = spec["containers"]
    container["image"] = nodejobs.TRAINER_IMAGE
    container["command"] = [*nodejobs.LAUNCH, "--timeout", "300", "--"]
    container["args"] = ["sh", "-c", script]
    container["resources"] = {"requests": {"cpu": "100m", "memory": "256Mi"}}
    container["env"] = [e for e in container["env"] if e["name"] != "EPOCHS"] + [
        {"name": "EPOCHS", "value": "1"},
        {"name": "BATCH_SIZE", "value": "16"},
        {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"},
    ]
    for volume in spec["volumes"]:
        if volume["name"] == "rings-config":
            volume["configMap"]["name"] = f"rings-config-{name}"
        if volume["name"] == "cifar-data":
            volume["hostPath"]["path"] = str(data)
    return service, sts


def test_statefulset_two_workers_file_mode_train_in_sync_ranked_by_ordinal(
    k8s: Any, namespace: str, controller: ControllerProcess, trainer_image: str, cifar: Path
) -> None:
    """The shipped StatefulSet example, run by the real StatefulSet controller: TF_CONFIG by IP, ranks by ordinal.

    A StatefulSet's pods restart forever, so each worker trains once and then
    sleeps (the example runs ``--supervise``d programs that do not end); the
    test reads every worker's result from its log while it sleeps.
    """
    service, sts = statefulset(
        "tfsts", data=cifar, workers=2, script="python /app/train.py --steps 4 --result - && exec sleep 3600"
    )
    k8s.core.create_namespaced_service(namespace, service)
    k8s.apps.create_namespaced_stateful_set(namespace, sts)

    def trained() -> list[tuple[Any, nodejobs.WorkerLog]] | None:
        pods = k8s.core.list_namespaced_pod(namespace, label_selector="app=tfsts").items
        if len(pods) != 2:
            return None
        done = []
        for pod in sorted(pods, key=lambda p: int(p.metadata.labels[POD_INDEX])):
            if pod.status.container_statuses and any(s.restart_count for s in pod.status.container_statuses):
                logs = k8s.core.read_namespaced_pod_log(pod.metadata.name, namespace, previous=True)[-2000:]
                raise AssertionError(f"{pod.metadata.name} restarted: {logs}")
            try:
                log = nodejobs.parse_log(
                    pod.metadata.name, k8s.core.read_namespaced_pod_log(pod.metadata.name, namespace)
                )
            except ApiException:  # the container has not started yet
                return None
            if log.result is None:
                return None
            done.append((pod, log))
        return done

    results = wait_for(trained, timeout=300, interval=1, what="both StatefulSet workers' results")
    pods = [p for p, _ in results]
    logs = [w for _, w in results]
    _assert_in_sync(logs, pods, 2222)
    assert {r.result["tf_config_source"] for r in logs if r.result} == {"environment"}
    # Ranks follow the ordinal, and each worker's task index is its own ordinal.
    order = [f"{p.status.pod_ip}:2222" for p in pods]
    for pod, log in results:
        assert log.result is not None
        assert log.result["tf_config"]["cluster"]["worker"] == order
        assert log.result["tf_config"]["task"] == {"type": "worker", "index": int(pod.metadata.labels[POD_INDEX])}
    spec = read_spec(k8s, namespace, "rings-config-tfsts")
    assert spec is not None and spec["job"]["kind"] == "StatefulSet" and spec["status"] == "completed"
    assert [m["pod"] for m in spec["members"]] == ["tfsts-0", "tfsts-1"] == [p.metadata.name for p in pods]
