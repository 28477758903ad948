"""A 3-worker TensorFlow job with checkpoints on the local control plane, and two ways to recover it.

Used by the supervise end-to-end test and the recovery benchmark. A Volcano
Job's pods are created the way Volcano creates them, kwok runs them with
loopback IPs, and for each pod a real TensorFlow worker runs here as that
pod's container would: ``ring-launch [--supervise] -- python train.py
--checkpoint-dir ...``. One worker reads the spec from a kubelet-style volume,
the others through the API. Every pod gets its own port (the
``ring-controller/port`` annotation): the workers share this machine.

Mid-training (worker 0 past step :data:`FAIL_AT`, so a checkpoint exists),
one of two things happens, the way a cluster does it:

* :meth:`TrainingJob.replace_one` (restart in place): one pod is deleted and
  its container killed (SIGTERM, grace, SIGKILL, as the kubelet does); a
  replacement pod of the same name is created, and its container starts a
  new ``ring-launch --supervise``. The survivors' supervisors see the new
  epoch, stop their trainers and start them again with the new spec.
* :meth:`TrainingJob.restart_whole_job` (Volcano ``RestartJob``, JobSet
  restart): every pod is deleted and every container killed, the job version
  is bumped and all pods are created anew, each with a new launcher.

Recovery time is from the first pod deletion to the moment the last worker has
done its first step after the restart (``timestamps.first_step`` of its final
run), the same clock (``time.time()``) on this machine.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ringdevcluster.volumes import ConfigMapVolume
from tests.support import tfharness
from tests.support.factories import pod_template, volcano_job
from tests.support.kubehelp import create_pods, create_volcano_job, set_job_version, wait_for
from tests.support.tfharness import Worker, WorkerSpec

RING_LAUNCH = str(Path(sys.executable).with_name("ring-launch"))
WORKERS = 3
STEPS = 40
CHECKPOINT_EVERY = 5
FAIL_AT = 12
STEP_DELAY = 0.2
#: SIGTERM -> SIGKILL for trainers, in the supervisor and when a "kubelet" kills a container.
GRACE = 2.0
#: Workers reading the spec from a projected volume (the others use the API).
FILE_MODE = frozenset({2})


@dataclass
class TrainingJob:
    """One Volcano Job of :data:`WORKERS` TensorFlow workers and the processes standing in for its pods."""

    k8s: Any
    namespace: str
    kubeconfig: str
    name: str
    tmp: Path
    cifar: Path
    supervise: bool
    job: dict[str, Any] = field(default_factory=dict)
    version: int = 0
    workers: dict[int, Worker] = field(default_factory=dict)
    retired: list[Worker] = field(default_factory=list)
    volumes: list[ConfigMapVolume] = field(default_factory=list)
    starts: int = 0

    @property
    def configmap(self) -> str:
        return f"rings-config-{self.name}"

    @property
    def checkpoints(self) -> Path:
        return self.tmp / f"{self.name}-checkpoints"

    def result_path(self, index: int) -> Path:
        return self.tmp / f"{self.name}-result-{index}.json"

    def start(self) -> None:
        """Create the job and its pods; start one launcher per pod."""
        self.job = create_volcano_job(
            self.k8s, self.namespace, volcano_job(self.name, tasks=[("worker", WORKERS)], template=pod_template())
        )
        for index in range(WORKERS):
            self._start_pod(index)

    def _start_pod(self, index: int) -> None:
        (port,) = tfharness.free_ports(1)
        (pod,) = create_pods(
            self.k8s,
            self.job,
            [("worker", index)],
            version=self.version,
            annotations={"ring-controller/port": str(port)},
        )
        pod_name = pod["metadata"]["name"]
        self.starts += 1
        if index in FILE_MODE:
            directory = self.tmp / f"{self.name}-volume-{index}-{self.starts}"
            self.volumes.append(
                ConfigMapVolume(
                    kubeconfig=self.kubeconfig, namespace=self.namespace, name=self.configmap, directory=directory
                ).start()
            )
            source = ["--config-dir", str(directory), "--poll-interval", "0.1"]
        else:
            source = ["--from-api", "--kubeconfig", self.kubeconfig, "--namespace", self.namespace]
            source += ["--configmap", self.configmap]
        supervise = ["--supervise", "--grace-period", str(GRACE)] if self.supervise else []
        train = tfharness.train_argv(
            self.cifar,
            steps=STEPS,
            result=self.result_path(index),
            extra=[
                "--checkpoint-dir", str(self.checkpoints), "--checkpoint-every", str(CHECKPOINT_EVERY),
                "--step-delay", str(STEP_DELAY),
            ],
        )  # fmt: skip
        spec = WorkerSpec(
            name=f"{self.name}-{index}-{self.starts}",
            argv=[RING_LAUNCH, *source, *supervise, "--", *train],
            env=tfharness.worker_env(POD_NAME=pod_name, POD_UID=pod["metadata"]["uid"], RING_TIMEOUT="180"),
            result=self.result_path(index),
        )
        self.workers[index] = tfharness.start_worker(spec, log_dir=self.tmp / "logs")

    def wait_for_step(self, step: int, *, index: int = 0, timeout: float = 180) -> None:
        """Block until worker ``index`` has printed ``step=<step>``."""
        worker = self.workers[index]
        wait_for(
            lambda: f"step={step} " in worker.stdout() or worker.returncode is not None,
            timeout=timeout,
            interval=0.05,
            what=f"{worker.name} to reach step {step}",
        )
        if f"step={step} " not in worker.stdout():
            raise tfharness.WorkerGroupError(f"{worker.name} ended early\n{self.describe()}")

    def _delete_pods(self, indices: list[int]) -> None:
        names = [f"{self.name}-worker-{i}" for i in indices]
        for name in names:
            self.k8s.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        dying = [self.workers.pop(i) for i in indices]
        tfharness.stop_workers(dying, grace=GRACE)  # the kubelet killing the containers
        self.retired.extend(dying)
        wait_for(
            lambda: not {p.metadata.name for p in self.k8s.core.list_namespaced_pod(self.namespace).items} & set(names),
            what="deleted pods gone",
        )

    def replace_one(self, index: int) -> float:
        """Delete pod ``index`` and create its replacement; the time of the deletion."""
        t0 = time.time()
        self._delete_pods([index])
        self._start_pod(index)
        return t0

    def restart_whole_job(self) -> float:
        """Delete every pod, bump the job version, create them all anew; the time of the first deletion."""
        t0 = time.time()
        self._delete_pods(list(range(WORKERS)))
        self.version += 1
        set_job_version(self.k8s, self.namespace, self.name, self.version)
        for index in range(WORKERS):
            self._start_pod(index)
        return t0

    def finish(self, *, timeout: float = 300) -> dict[int, dict[str, Any]]:
        """Wait for every current worker; their results (raises with all logs unless all exit 0)."""
        current = [self.workers[i] for i in range(WORKERS)]
        codes = tfharness.wait_workers(current, timeout=timeout, grace=GRACE)
        if any(rc != 0 for rc in codes.values()):
            raise tfharness.WorkerGroupError(f"exit codes {codes}\n{self.describe()}")
        return {i: self.workers[i].result() for i in range(WORKERS)}

    def describe(self) -> str:
        return tfharness.describe([*self.retired, *self.workers.values()], lines=40)

    def stop(self) -> None:
        """Stop every process and projector this job started (safe to call twice)."""
        tfharness.stop_workers([*self.retired, *self.workers.values()], grace=GRACE)
        for volume in self.volumes:
            volume.stop()
        self.volumes.clear()


def recovery_seconds(results: dict[int, dict[str, Any]], t0: float) -> float:
    """From ``t0`` (the first deletion) to the last worker's first step after it."""
    return max(float(r["timestamps"]["first_step"]) for r in results.values()) - t0
