"""Real TensorFlow workers get TF_CONFIG from the controller, through ring-launch.

On the local control plane a Volcano Job's pods are created the way Volcano
creates them; kwok runs them and gives them loopback IPs. For each pod, a real
TensorFlow process runs here as that pod would: ``ring-launch -- python
train.py`` with ``POD_NAME`` (and ``POD_UID``) of its pod. Some read the
spec from a kubelet-style projected directory (file mode), others watch the
ConfigMap through the API (API mode). Every worker must train in lockstep
(identical all-reduced losses and weights) and exit 0.

Workers share this machine, and TensorFlow's gRPC server binds
``0.0.0.0:<port>``, so each pod gets its own port through the
``ring-controller/port`` annotation.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ringdevcluster.volumes import ConfigMapVolume
from tests.support import tfharness
from tests.support.controllerproc import ControllerProcess
from tests.support.factories import pod_template, volcano_job
from tests.support.kubehelp import (
    Watcher,
    create_pods,
    create_volcano_job,
    read_spec,
    running_pods,
    wait_for,
    wait_spec,
)
from tests.support.tfharness import WorkerGroup, WorkerSpec

pytestmark = pytest.mark.e2e

STEPS = 6
RING_LAUNCH = str(Path(sys.executable).with_name("ring-launch"))


@pytest.fixture(scope="module")
def cifar_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tfharness.make_cifar10(tmp_path_factory.mktemp("cifar10"), per_batch=64, seed=11)


class RunningTimes:
    """Records, from a watch, when each pod of a namespace was first seen Running with an IP."""

    def __init__(self, k8s: Any, namespace: str) -> None:
        self.at: dict[str, float] = {}
        self._watcher = Watcher(k8s.core.list_namespaced_pod, namespace, self._on_pod, timeout_seconds=2)

    def _on_pod(self, pod: Any) -> None:
        if pod.status.phase == "Running" and pod.status.pod_ip:
            self.at.setdefault(pod.metadata.name, time.time())

    def stop(self) -> None:
        self._watcher.stop(timeout=5)


def _run_job(
    *, k8s: Any, namespace: str, kubeconfig: str, tmp_path: Path, cifar: Path, workers: int, api_mode: set[int]
) -> dict[str, Any]:
    """Submit a ``workers``-pod job, run one real TF worker per pod; return results and timings."""
    name = f"tf{workers}"
    job = create_volcano_job(k8s, namespace, volcano_job(name, tasks=[("worker", workers)], template=pod_template()))
    ports = tfharness.free_ports(workers)
    times = RunningTimes(k8s, namespace)
    configmap = f"rings-config-{name}"
    names = [f"{name}-worker-{i}" for i in range(workers)]
    volumes, specs = [], []
    for i, pod_name in enumerate(names):
        result = tmp_path / f"result-{i}.json"
        env = tfharness.worker_env(POD_NAME=pod_name, RING_TIMEOUT="120")
        if i in api_mode:
            launch = [
                RING_LAUNCH,
                "--from-api",
                "--kubeconfig",
                kubeconfig,
                "--namespace",
                namespace,
                "--configmap",
                configmap,
            ]
        else:
            directory = tmp_path / f"volume-{i}"
            volumes.append(
                ConfigMapVolume(kubeconfig=kubeconfig, namespace=namespace, name=configmap, directory=directory).start()
            )
            launch = [RING_LAUNCH, "--config-dir", str(directory)]
        specs.append(
            WorkerSpec(
                name=f"worker-{i}",
                argv=[*launch, "--", *tfharness.train_argv(cifar, steps=STEPS, result=result)],
                env=env,
                result=result,
            )
        )
    try:
        # The launchers start first and wait, as in pods whose containers start
        # before their peers are scheduled; then the pods appear.
        with WorkerGroup(specs, log_dir=tmp_path / "logs") as group:
            wait_for(
                lambda: all("ring-launch: waiting: " in w.stderr() for w in group.workers),
                timeout=60,
                what="every launcher waiting for its spec",
            )
            # One port per pod: every pod's process shares this machine.
            pods = [
                create_pods(k8s, job, [("worker", i)], annotations={"ring-controller/port": str(ports[i])})[0]
                for i in range(workers)
            ]
            codes = group.wait(timeout=240)
            group.assert_all_succeeded(codes)
            results = group.results()
            logs = group.describe()
    finally:
        for v in volumes:
            v.stop()
        times.stop()
    spec = read_spec(k8s, namespace, configmap)
    live = running_pods(k8s, namespace, [p["metadata"]["name"] for p in pods])
    return {"results": results, "logs": logs, "spec": spec, "ports": ports, "pods": live, "running_at": times.at}


@pytest.mark.parametrize(
    "workers, api_mode",
    [pytest.param(2, {1}, id="2-workers-file-and-api"), pytest.param(3, {0, 2}, id="3-workers-mixed")],
)
def test_workers_train_in_sync_with_tf_config_from_the_controller(
    k8s: Any,
    namespace: str,
    kubeconfig: Path,
    controller: ControllerProcess,
    tmp_path: Path,
    cifar_dir: Path,
    workers: int,
    api_mode: set[int],
) -> None:
    out = _run_job(
        k8s=k8s,
        namespace=namespace,
        kubeconfig=str(kubeconfig),
        tmp_path=tmp_path,
        cifar=cifar_dir,
        workers=workers,
        api_mode=api_mode,
    )
    results, spec, live = out["results"], out["spec"], out["pods"]
    assert spec is not None and spec["status"] == "completed"
    expected_cluster = [f"{live[m['pod']].status.pod_ip}:{out['ports'][m['index']]}" for m in spec["members"]]
    assert all(addr.startswith("127.1.") for addr in expected_cluster)
    for i in range(workers):
        r = results[f"worker-{i}"]
        assert r["tf_config_source"] == "environment"
        assert r["tf_config"] == {"cluster": {"worker": expected_cluster}, "task": {"type": "worker", "index": i}}
        assert r["workers"] == workers and r["steps"] == STEPS
    first = results["worker-0"]
    for i in range(1, workers):
        assert results[f"worker-{i}"]["losses"] == first["losses"], out["logs"]
        assert results[f"worker-{i}"]["weights_sha256"] == first["weights_sha256"], out["logs"]
    last_running = max(out["running_at"].values())
    lags = [round(results[f"worker-{i}"]["timestamps"]["start"] - last_running, 3) for i in range(workers)]
    modes = ["api" if i in api_mode else "file" for i in range(workers)]
    print(f"\nFIGURE last pod Running -> TF_CONFIG in worker (s): {dict(zip(modes, lags, strict=True))}")


def test_pod_replaced_mid_wait_starts_with_the_new_spec(
    k8s: Any, namespace: str, kubeconfig: Path, controller: ControllerProcess, tmp_path: Path
) -> None:
    """A replacement pod whose volume still shows the old completed spec (kubelet lag)
    must wait for the spec naming ITS uid, and start with the new epoch."""
    job = create_volcano_job(k8s, namespace, volcano_job("rep", tasks=[("worker", 2)], template=pod_template()))
    create_pods(k8s, job, [("worker", 0), ("worker", 1)])
    old = wait_spec(k8s, namespace, "rings-config-rep")
    directory = tmp_path / "volume"
    volume = ConfigMapVolume(
        kubeconfig=str(kubeconfig), namespace=namespace, name="rings-config-rep", directory=directory
    ).start()
    wait_for(lambda: (directory / "cluster.json").exists(), what="projected cluster.json")
    volume.stop()  # the kubelet has not synced yet: the file keeps the old spec
    k8s.core.delete_namespaced_pod("rep-worker-1", namespace, grace_period_seconds=0)
    wait_for(
        lambda: "rep-worker-1" not in {p.metadata.name for p in k8s.core.list_namespaced_pod(namespace).items},
        what="old pod gone",
    )
    (new,) = create_pods(k8s, job, [("worker", 1)])
    err_path = tmp_path / "launcher.err"
    stderr = err_path.open("w")
    launcher = subprocess.Popen(
        [
            RING_LAUNCH,
            "--config-dir",
            str(directory),
            "--timeout",
            "60",
            "--poll-interval",
            "0.1",
            "--",
            sys.executable,
            "-c",
            "import os, json; print(json.dumps({k: os.environ[k] for k in ('TF_CONFIG', 'RING_EPOCH')}))",
        ],
        env={**tfharness.os.environ, "POD_NAME": "rep-worker-1", "POD_UID": new["metadata"]["uid"]},
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )
    stderr.close()  # the launcher has its own copy
    # It has read the stale spec and judged it (its progress line says why it
    # waits), or it has exited: either way it had its chance to start.
    stale = f"waiting: spec completed (epoch {old['epoch']}) for an earlier pod 'rep-worker-1'"
    wait_for(
        lambda: launcher.poll() is not None or stale in err_path.read_text(),
        timeout=30,
        what="the launcher judging the stale spec",
    )
    assert launcher.poll() is None, f"the launcher started on the stale spec:\n{err_path.read_text()}"
    newer = wait_spec(k8s, namespace, "rings-config-rep", where=lambda s: s["epoch"] > old["epoch"])
    volume = ConfigMapVolume(
        kubeconfig=str(kubeconfig), namespace=namespace, name="rings-config-rep", directory=directory
    ).start()
    try:
        out, _ = launcher.communicate(timeout=60)
    finally:
        volume.stop()
    assert launcher.returncode == 0, err_path.read_text()
    env = json.loads(out)
    assert int(env["RING_EPOCH"]) == newer["epoch"] > old["epoch"]
    new_ip = k8s.core.read_namespaced_pod("rep-worker-1", namespace).status.pod_ip
    assert json.loads(env["TF_CONFIG"])["cluster"]["worker"][1] == f"{new_ip}:2222"
    assert json.loads(env["TF_CONFIG"])["task"] == {"type": "worker", "index": 1}
