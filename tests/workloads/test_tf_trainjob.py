"""A two-worker TensorFlow TrainJob trains in sync with TF_CONFIG from ring-controller.

The whole chain is real: Kubeflow Trainer turns the TrainJob (example
runtime ``build/examples/trainer/tensorflow-runtime.yaml``) into a JobSet, the
JobSet controller into an Indexed Job, the Job controller into pods, kwok runs
them with loopback IPs, ring-controller publishes the spec. For each pod a
real TensorFlow worker runs here as that pod's container would:
``ring-launch -- python train.py`` with the pod's downward-API environment
(``POD_NAME``, ``POD_UID``, ``POD_NAMESPACE``, ``RING_JOB_NAME``). Worker 0
watches the ConfigMap through the API, as the runtime's container does
(``--from-api``); worker 1 reads a kubelet-style projection of it (file mode).

Ports: TensorFlow's gRPC server binds ``0.0.0.0:<port>``, so two workers on
this machine need different ports, but every pod of the Job comes from one
template (the runtime's ``TF_WORKER_PORT`` is the same for all). Patching a
port annotation onto a pod after creation races kwok, which runs a pod within
~100 ms, and the controller may already have published the template's port.
So the test runtime adds a scheduling gate to the pod template (Pod
scheduling readiness, GA since Kubernetes 1.30): pods are created but not
scheduled, hence never Running and never members of the spec; the test sets
each pod's ``ring-controller/port`` annotation (which the contract ranks
above ``TF_WORKER_PORT``) and removes the gate in ONE JSON patch. Only then
can the scheduler bind it and kwok run it, so the first spec that counts it
already has its own port. It is the same pattern a quota or placement
controller uses to finish a pod before it may run.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from ringdevcluster.volumes import ConfigMapVolume
from tests.support import tfharness
from tests.support.controllerproc import ControllerProcess
from tests.support.kubehelp import read_spec, running_pods, wait_for, wait_spec
from tests.support.tfharness import WorkerGroup, WorkerSpec
from tests.support.workloads import (
    GATE,
    TRAINER,
    Timeline,
    cluster_runtime,
    jobset_pods,
    tensorflow_runtime,
    timeline_wait,
    trainjob,
)

pytestmark = pytest.mark.e2e

STEPS = 6
RING_LAUNCH = str(Path(sys.executable).with_name("ring-launch"))


@pytest.fixture(scope="module")
def cifar_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tfharness.make_cifar10(tmp_path_factory.mktemp("cifar10"), per_batch=64, seed=23)


def _completion_index(pod: Any) -> int:
    return int(pod.metadata.labels["batch.kubernetes.io/job-completion-index"])


def test_two_worker_trainjob_trains_in_sync_through_trainer_and_jobset(
    k8s: Any, namespace: str, kubeconfig: Path, controller: ControllerProcess, tmp_path: Path, cifar_dir: Path
) -> None:
    name, configmap = "tf2", "rings-config-tf2"
    timeline = Timeline(k8s, namespace)
    volume: ConfigMapVolume | None = None
    try:
        with cluster_runtime(k8s, tensorflow_runtime(f"tf-e2e-{namespace}", gated=True)) as runtime:
            k8s.custom.create_namespaced_custom_object(
                *TRAINER, namespace, "trainjobs", trainjob(name, runtime=runtime["metadata"]["name"], nodes=2)
            )
            # The Job controller creates both pods; the gate keeps them Pending and unbound.
            gated = wait_for(
                lambda: (lambda pods: pods if len(pods) == 2 else None)(jobset_pods(k8s, namespace, name)),
                timeout=60, what="the TrainJob's two gated pods",
            )  # fmt: skip
            gated.sort(key=_completion_index)
            assert [p.spec.scheduling_gates[0].name for p in gated] == [GATE, GATE]
            assert all(p.spec.node_name is None and p.status.phase == "Pending" for p in gated)
            waiting = wait_spec(k8s, namespace, configmap, status="initializing")
            assert waiting["members"] == [] and waiting["expected"] == 2

            ports = tfharness.free_ports(2)
            specs = []
            for i, pod in enumerate(gated):
                downward = {
                    "POD_NAME": pod.metadata.name, "POD_UID": pod.metadata.uid, "POD_NAMESPACE": namespace,
                    "RING_JOB_NAME": pod.metadata.labels["jobset.sigs.k8s.io/jobset-name"], "RING_TIMEOUT": "120",
                }  # fmt: skip
                if i == 0:
                    launch = [RING_LAUNCH, "--from-api", "--kubeconfig", str(kubeconfig)]
                else:
                    directory = tmp_path / "volume"
                    volume = ConfigMapVolume(
                        kubeconfig=str(kubeconfig), namespace=namespace, name=configmap, directory=directory
                    ).start()
                    launch = [RING_LAUNCH, "--config-dir", str(directory)]
                result = tmp_path / f"result-{i}.json"
                train = tfharness.train_argv(cifar_dir, steps=STEPS, result=result)
                specs.append(
                    WorkerSpec(
                        name=f"worker-{i}",
                        argv=[*launch, "--", *train],
                        env=tfharness.worker_env(**downward),
                        result=result,
                    )
                )
            with WorkerGroup(specs, log_dir=tmp_path / "logs") as group:
                # Containers wait in ring-launch (started before their peers
                # run); then each pod gets its port and may run.
                wait_for(
                    lambda: all("waiting up to" in w.stderr() for w in group.workers),
                    timeout=60, what="both launchers waiting for the spec",
                )  # fmt: skip
                for pod, port in zip(gated, ports, strict=True):
                    k8s.core.patch_namespaced_pod(pod.metadata.name, namespace, [
                        {"op": "add", "path": "/metadata/annotations/ring-controller~1port", "value": str(port)},
                        {"op": "remove", "path": "/spec/schedulingGates"},
                    ])  # fmt: skip
                codes = group.wait(timeout=240)
                group.assert_all_succeeded(codes)
                results, logs = group.results(), group.describe()
            spec = read_spec(k8s, namespace, configmap)
            assert spec is not None and spec["status"] == "completed"
            completed = timeline_wait(timeline, configmap, spec["epoch"])
    finally:
        if volume is not None:
            volume.stop()
        timeline.stop()

    live: dict[str, Any] | None = running_pods(k8s, namespace, [p.metadata.name for p in gated])
    assert live is not None
    # One spec, made for these pods with their own ports, ranked by completion index.
    assert [m["pod"] for m in spec["members"]] == [p.metadata.name for p in gated]
    expected = [f"{live[m['pod']].status.pod_ip}:{port}" for m, port in zip(spec["members"], ports, strict=True)]
    assert [f"{m['ip']}:{m['port']}" for m in spec["members"]] == expected
    for i in range(2):
        r = results[f"worker-{i}"]
        assert r["tf_config_source"] == "environment"
        assert r["tf_config"] == {"cluster": {"worker": expected}, "task": {"type": "worker", "index": i}}
        assert r["workers"] == 2 and r["steps"] == STEPS
    assert results["worker-1"]["losses"] == results["worker-0"]["losses"], logs
    assert results["worker-1"]["weights_sha256"] == results["worker-0"]["weights_sha256"], logs
    last_running = max(timeline.running[p.metadata.name] for p in gated)
    lags = {
        ("api", "file")[i]: round(results[f"worker-{i}"]["timestamps"]["start"] - last_running, 3) for i in range(2)
    }
    print(
        f"\nFIGURE TrainJob e2e: last pod Running -> spec completed {completed - last_running:.3f}s; -> TF_CONFIG in worker (s): {lags}"
    )
