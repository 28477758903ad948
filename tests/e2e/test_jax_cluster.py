"""Real JAX processes form one cluster from variables ring-launch derived from the controller's spec.

A Volcano Job of 2 workers on the local control plane; kwok runs its pods
with loopback IPs. For each pod one real process runs here as that pod would:
``ring-launch -- python build/examples/jax/distributed.py`` (pod 0 reads the
spec from a kubelet-style volume, pod 1 through the API). Process 0 hosts
JAX's coordinator on its pod IP and member port (the pod's
``ring-controller/port`` annotation: both processes share this machine);
``jax.distributed.initialize()`` must connect both and an all-gather across
them must return both processes' values.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ringdevcluster.volumes import ConfigMapVolume
from tests.support import tfharness
from tests.support.controllerproc import ControllerProcess
from tests.support.factories import pod_template, volcano_job
from tests.support.kubehelp import create_pods, create_volcano_job, read_spec, running_pods
from tests.support.tfharness import WorkerGroup, WorkerSpec

pytestmark = pytest.mark.e2e

RING_LAUNCH = str(Path(sys.executable).with_name("ring-launch"))
DISTRIBUTED_PY = tfharness.REPO_ROOT / "build" / "examples" / "jax" / "distributed.py"


def test_two_jax_processes_initialize_from_the_controllers_spec(
    k8s: Any, namespace: str, kubeconfig: Path, controller: ControllerProcess, tmp_path: Path
) -> None:
    job = create_volcano_job(k8s, namespace, volcano_job("jax", tasks=[("worker", 2)], template=pod_template()))
    ports = tfharness.free_ports(2)
    directory = tmp_path / "volume-0"
    volume = ConfigMapVolume(
        kubeconfig=str(kubeconfig), namespace=namespace, name="rings-config-jax", directory=directory
    ).start()
    launches = [
        [RING_LAUNCH, "--config-dir", str(directory), "--poll-interval", "0.1"],
        [RING_LAUNCH, "--from-api", "--kubeconfig", str(kubeconfig), "--namespace", namespace,
         "--configmap", "rings-config-jax"],
    ]  # fmt: skip
    specs = [
        WorkerSpec(
            name=f"jax-{i}",
            argv=[*launches[i], "--", sys.executable, str(DISTRIBUTED_PY), "--result", str(tmp_path / f"r{i}.json")],
            env=tfharness.worker_env(POD_NAME=f"jax-worker-{i}", RING_TIMEOUT="120", JAX_PLATFORMS="cpu"),
            result=tmp_path / f"r{i}.json",
        )
        for i in range(2)
    ]
    try:
        with WorkerGroup(specs, log_dir=tmp_path / "logs") as group:
            pods = [
                create_pods(k8s, job, [("worker", i)], annotations={"ring-controller/port": str(ports[i])})[0]
                for i in range(2)
            ]
            started = time.monotonic()
            codes = group.wait(timeout=180)
            group.assert_all_succeeded(codes)
            results = group.results()
            print(f"\nFIGURE 2 JAX processes: pods created -> both done: {time.monotonic() - started:.1f}s")
    finally:
        volume.stop()
    spec = read_spec(k8s, namespace, "rings-config-jax")
    live = running_pods(k8s, namespace, [p["metadata"]["name"] for p in pods])
    assert spec is not None and live is not None
    coordinator = f"{live['jax-worker-0'].status.pod_ip}:{ports[0]}"
    assert coordinator.startswith("127.1.")
    for i in range(2):
        r = results[f"jax-{i}"]
        assert r["process_id"] == i
        assert (r["process_count"], r["device_count"]) == (2, 2)
        assert r["gathered"] == [100, 101]
        assert r["coordinator"] == coordinator
