"""Faults on the real node while a real TensorFlow job trains: ``build/chaos.sh --node [--only NAMES] [--json OUT]``.

Each scenario runs, in a namespace of its own on the dev cluster with the real
node (``ring-devcluster up --with node,volcano``: the workloads cluster, never
started or stopped here), a Volcano Job of three TensorFlow workers in the
trainer image (``build/image.sh --trainer``): ``ring-launch --supervise``
around ``train.py`` with checkpoints in a shared host directory, the spec from
the kubelet-mounted ``rings-config`` volume (file mode) or, where the scenario
is about the API, through the API (``--from-api``). ring-controller runs as a
process on this machine, watching that namespace only. Once the workers
train, faults are injected on this machine's own node, each only after the
job trained again since the previous one:

``pod-evicted``
    a worker evicted through the Eviction API; Volcano creates it again
    (same name, new uid and IP): a new epoch, the survivors restart in place.
``container-restart``
    a worker's container SIGKILLed in containerd (as the OOM killer does);
    the kubelet restarts it in place by the pod's ``restartPolicy``.
``kubelet-restart``
    the node's kubelet stopped (SIGTERM) and started again; containers keep
    running.
``containerd-restart``
    containerd stopped and started again; the shims keep the containers.
``node-reboot``
    the kubelet stopped, every container and sandbox of the scenario's pods
    killed, containerd restarted, the kubelet started: the pods come back in
    new sandboxes, possibly with new IPs under the same names and uids (a new
    epoch). Only the scenario's own pods are killed, not the other tenants'.
``api-unreachable-from-pods``
    (API mode) packets from the job's pods to the API relay dropped
    (iptables, this namespace's pod IPs only, replacements included) for
    ``outage`` seconds, and a worker evicted meanwhile: the launchers wait in
    API mode while the controller, on the host, writes the new spec.

Judged per scenario, from the API server's objects and the workers' logs
(kubelet timestamps; each trainer run prints its ``RING_EPOCH`` first):

- ``wrong``: jobs whose spec still disagrees with the oracle
  (:mod:`tests.support.oracle`) ``CONVERGE_TIMEOUT`` after each fault;
- ``stale``: a completed spec naming a pod gone for more than
  ``STALE_GRACE`` (the chaos :class:`~tests.chaos.run.Observer`), plus epoch
  regressions;
- ``mixed_epochs``: training steps completed together by trainers started
  with different epochs (the notes add ``steps_after_a_newer_epoch``: steps
  by a trainer whose epoch the ConfigMap had left more than 1.5 s before,
  and how long the old epoch stepped on: the time a survivor needs to
  notice, or an evicted pod to stop within its grace period);
- ``recovered_s``: per fault, from the fault to every member's first
  training step after it: of a trainer started after the fault where the
  fault ends the trainers (all but the kubelet and containerd restarts),
  else after the fault ended;
- ``in_sync``: at the end every worker's pod ended ``Succeeded`` with its
  trainer's RESULT, every step done, and the same weights (SHA-256 of the
  final weights): the workers finishing one after another disturb nobody.

Host changes are undone in ``finally``: the kubelet and containerd are
started again, the iptables rules removed, the namespace deleted.
"""

from __future__ import annotations

import contextlib
import json
import random
import secrets
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from ringdevcluster import Cluster, load, node
from tests.chaos.nodelogs import TrainerRun, mixed_epochs, parse_runs, stepped_since
from tests.chaos.run import CONVERGE_TIMEOUT, Controller, Observer, World, say
from tests.support import nodejobs
from tests.support.clients import K8s

Json = dict[str, Any]
VOLCANO = ("batch.volcano.sh", "v1alpha1")
WORKERS = 3
CONTAINER = "tensorflow"
CHECKPOINT_EVERY = 5
#: The step budget per fault (a few steps of training again, and those while the spec is checked).
STEPS_BETWEEN = 15
#: Steps every member must do after a recovery before the next fault.
STEPS_AGAIN = 3
STEP_DELAY = 0.3
RECOVERY_TIMEOUT = 420.0
CHAOS_COMMENT = "ring-devcluster-chaos"
#: The trainer image under a tag of its own: other runs and checkouts import their own
#: build as ring-trainer:<version> into the same containerd, and a replacement pod
#: must start the image the job started with.
IMAGE = "ring-trainer:chaos-node"
#: Waiting reasons of a container that will not start by itself.
BROKEN = frozenset({"RunContainerError", "CreateContainerError", "ErrImageNeverPull", "InvalidImageName"})


@dataclass(frozen=True)
class NodeSize:
    faults: int  # per scenario
    outage: float  # api-unreachable-from-pods: seconds


QUICK = NodeSize(faults=1, outage=30.0)
FULL = NodeSize(faults=3, outage=60.0)


@dataclass
class NodeResult:
    """One scenario's figures: the JSON keys the issue names, and ``notes``."""

    name: str
    faults: int = 0
    specs_checked: int = 0
    wrong: int = 0
    stale: int = 0
    mixed_epochs: int = 0
    recovered_s: list[float | None] = field(default_factory=list)
    in_sync: bool | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    def failed(self) -> bool:
        return (
            bool(self.wrong or self.stale or self.mixed_epochs or not self.in_sync or None in self.recovered_s)
            or self.faults == 0
        )


# -- the job ------------------------------------------------------------------------------------


def tf_job(name: str, *, data: Path, checkpoints: Path, steps: int, api: bool) -> Json:
    """A Volcano Job of :data:`WORKERS` supervised TensorFlow workers on the real node."""
    source = ["--from-api", "--configmap", f"rings-config-{name}"] if api else []
    # The trainer image holds no ring-controller: the launcher comes from the controller
    # image through an init container, as in the shipped examples.
    launch = [*nodejobs.LAUNCH, "--supervise", "--grace-period", "3", "--timeout", "900", *source, "--"]
    train = (
        'echo "RUN ring_epoch=$RING_EPOCH restart=$RING_RESTART_COUNT"; '
        f"exec python /app/train.py --steps {steps} --checkpoint-dir /checkpoints "
        f"--checkpoint-every {CHECKPOINT_EVERY} --step-delay {STEP_DELAY} --result -"
    )
    downward = [
        {"name": env, "valueFrom": {"fieldRef": {"fieldPath": path}}}
        for env, path in (
            ("POD_NAME", "metadata.name"),
            ("POD_NAMESPACE", "metadata.namespace"),
            ("POD_UID", "metadata.uid"),
            ("POD_IP", "status.podIP"),
        )
    ]
    mounts = [
        {"name": "ring-launch", "mountPath": "/ring", "readOnly": True},
        {"name": "cifar-data", "mountPath": "/data", "readOnly": True},
        {"name": "checkpoints", "mountPath": "/checkpoints"},
    ]
    volumes: list[Json] = [
        {"name": "ring-launch", "emptyDir": {}},
        {"name": "cifar-data", "hostPath": {"path": str(data), "type": "Directory"}},
        {"name": "checkpoints", "hostPath": {"path": str(checkpoints), "type": "Directory"}},
    ]
    if not api:
        mounts.append({"name": "rings-config", "mountPath": "/etc/ring-config", "readOnly": True})
        volumes.append({"name": "rings-config", "configMap": {"name": f"rings-config-{name}"}})
    pod_spec = {
        **node.pod_placement(),
        "restartPolicy": "OnFailure",
        "terminationGracePeriodSeconds": 5,
        "initContainers": [
            {
                "name": "ring-launch",
                "image": nodejobs.CONTROLLER_IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python3", "/opt/ring-launch/ring-launch.pyz", "--install", "/ring"],
                "volumeMounts": [{"name": "ring-launch", "mountPath": "/ring"}],
            }
        ],
        "containers": [
            {
                "name": CONTAINER,
                "image": IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "command": launch,
                "args": ["sh", "-c", train],
                "env": [
                    *downward,
                    {"name": "CIFAR10_DIR", "value": "/data"},
                    {"name": "EPOCHS", "value": "1000"},
                    {"name": "BATCH_SIZE", "value": "16"},
                    {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"},
                ],
                "ports": [{"name": "tf-port", "containerPort": 2222}],
                "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
                "volumeMounts": mounts,
            }
        ],
        "volumes": volumes,
    }
    return {
        "apiVersion": "/".join(VOLCANO),
        "kind": "Job",
        "metadata": {"name": name, "labels": {"ring-controller.atlas": "tensorflow"}},
        "spec": {
            "minAvailable": WORKERS,
            "schedulerName": "volcano",
            "queue": "default",
            "maxRetry": 20,
            "tasks": [
                {
                    "name": "worker",
                    "replicas": WORKERS,
                    "template": {"metadata": {"labels": {"ring-controller.atlas": "tensorflow"}}, "spec": pod_spec},
                }
            ],
        },
    }


# -- the workers' logs --------------------------------------------------------------------------


class Logs:
    """Keeps every container instance's log of the namespace (current and previous), polled."""

    def __init__(self, k8s: Any, namespace: str) -> None:
        self.k8s, self.namespace = k8s, namespace
        self.texts: dict[tuple[str, str, int], str] = {}  # (pod, uid, restartCount) -> log
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Logs:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _read(self, pod: str, *, previous: bool) -> str | None:
        try:
            text: str = self.k8s.core.read_namespaced_pod_log(
                pod, self.namespace, container=CONTAINER, timestamps=True, previous=previous, _request_timeout=20
            )
        except Exception:  # noqa: BLE001 - not started yet, gone, or the kubelet restarting
            return None
        return text

    def poll(self) -> None:
        pods = self.k8s.core.list_namespaced_pod(self.namespace, _request_timeout=20).items
        for p in pods:
            for status in p.status.container_statuses or []:
                if status.name != CONTAINER:
                    continue
                count = status.restart_count or 0
                if (status.state.running or status.state.terminated) is not None:
                    text = self._read(p.metadata.name, previous=False)
                    if text:
                        with self._lock:
                            self.texts[(p.metadata.name, p.metadata.uid, count)] = text
                if count and (p.metadata.name, p.metadata.uid, count - 1) not in self.texts:
                    text = self._read(p.metadata.name, previous=True)
                    if text:
                        with self._lock:
                            self.texts[(p.metadata.name, p.metadata.uid, count - 1)] = text

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                self.poll()
            self._stop.wait(1.0)

    def runs(self) -> list[TrainerRun]:
        with self._lock:
            items = sorted(self.texts.items())
        return [run for (pod, _, _), text in items for run in parse_runs(pod, text)]


# -- host faults --------------------------------------------------------------------------------


def _ctr(*argv: str, check: bool = True) -> str:
    proc = subprocess.run(
        ["ctr", "--address", node.CONTAINERD_SOCKET, "-n", "k8s.io", *argv],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if check and proc.returncode != 0:
        raise RuntimeError(f"ctr {' '.join(argv)}: {proc.stderr.strip()}")
    return proc.stdout


def containers_of(namespace: str) -> list[str]:
    """Ids of every container and sandbox containerd holds for pods of ``namespace``."""
    out = _ctr("containers", "ls", "-q", f'labels."io.kubernetes.pod.namespace"=={namespace}')
    return out.split()


def kill_task(container_id: str) -> None:
    _ctr("tasks", "kill", "--signal", "SIGKILL", container_id, check=False)


class Blocker:
    """Drops packets from this namespace's pods to the API relay (``NODE_IP:443``), new pods included."""

    def __init__(self, k8s: Any, namespace: str) -> None:
        self.k8s, self.namespace = k8s, namespace
        self.blocked: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _rule(self, op: str, ip: str) -> list[str]:
        return [
            "iptables", op, "INPUT", "-s", ip, "-d", node.NODE_IP, "-p", "tcp", "--dport", str(node.API_RELAY_PORT),
            "-m", "comment", "--comment", f"{CHAOS_COMMENT} {self.namespace}", "-j", "DROP",
        ]  # fmt: skip

    def _block_new(self) -> None:
        for p in self.k8s.core.list_namespaced_pod(self.namespace, _request_timeout=10).items:
            ip = p.status.pod_ip
            if ip and ip not in self.blocked:
                subprocess.run(self._rule("-I", ip), check=True, timeout=30)
                self.blocked.add(ip)

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                self._block_new()
            self._stop.wait(0.2)

    def __enter__(self) -> Blocker:
        self._block_new()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for ip in self.blocked:
            subprocess.run(self._rule("-D", ip), check=False, timeout=30)


# -- one scenario -------------------------------------------------------------------------------


class NodeRun:
    def __init__(self, cluster: Cluster, size: NodeSize, seed: int, logs: Path, work: Path) -> None:
        self.cluster, self.size, self.seed, self.logs, self.work = cluster, size, seed, logs, work
        self.k8s: Any = K8s.from_kubeconfig(cluster.kubeconfig)
        self.data = nodejobs.make_data(work / "cifar10")
        self._broken: dict[str, float] = {}

    @contextlib.contextmanager
    def namespace(self, name: str, *, api: bool) -> Iterator[World]:
        ns = f"chaos-node-{name}-{secrets.token_hex(3)}"[:63]
        self.k8s.core.create_namespace({"metadata": {"name": ns}})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.k8s.core.read_namespaced_service_account("default", ns)
                break
            except ApiException:
                time.sleep(0.2)
        if api:
            nodejobs.configmap_reader(self.k8s.rbac, ns)
        try:
            yield World(self.cluster, self.k8s, ns, random.Random(f"{self.seed}-{name}"))
        finally:
            with contextlib.suppress(Exception):
                self.k8s.core.delete_namespace(ns, grace_period_seconds=0)

    def check_startable(self, world: World) -> None:
        """Raise if a container of the job cannot be created or started for a minute (a wrong image, a
        broken runtime): no fault recovers from that, so no waiting it out."""
        now = time.monotonic()
        for p in self.pods(world).values():
            for c in p.status.container_statuses or []:
                waiting = c.state.waiting if c.state else None
                key = f"{p.metadata.name}/{p.metadata.uid}"
                if waiting is not None and waiting.reason in BROKEN:
                    since = self._broken.setdefault(key, now)
                    if now - since > 60:
                        raise RuntimeError(f"{p.metadata.name}: {waiting.reason}: {waiting.message}")
                else:
                    self._broken.pop(key, None)

    def pods(self, world: World) -> dict[str, Any]:
        pods = self.k8s.core.list_namespaced_pod(world.namespace, _request_timeout=20).items
        return {p.metadata.name: p for p in pods if p.metadata.deletion_timestamp is None}

    def wait_training(
        self,
        world: World,
        logs: Logs,
        since: float,
        names: list[str],
        *,
        restarted: bool = False,
        after: float | None = None,
    ) -> float | None:
        """Seconds from ``since`` until every member stepped after ``after`` (default ``since``), in a
        trainer run started after ``since`` if ``restarted`` (None: not within the timeout)."""
        deadline = time.monotonic() + RECOVERY_TIMEOUT
        while time.monotonic() < deadline:
            first = stepped_since(logs.runs(), names, since, restarted=restarted)
            if after is not None:
                first = {pod: at for pod, at in first.items() if at > after}
            if len(first) == len(names):
                return max(first.values()) - since
            self.check_startable(world)
            time.sleep(1.0)
        return None

    def run(
        self, name: str, fault: Callable[[World, str, Logs], None], *, api: bool = False, restarts: bool = True
    ) -> NodeResult:
        """One scenario; ``restarts``: the fault ends every trainer (recovery counts new trainer runs only),
        else training goes on and recovery is the first step of every member after the fault ended."""
        result = NodeResult(name)
        job = "tf"
        names = [f"{job}-worker-{i}" for i in range(WORKERS)]
        # Training goes on through a fault that does not end the trainers: budget for its length too.
        steps = 2 * CHECKPOINT_EVERY + (STEPS_BETWEEN if restarts else 4 * STEPS_BETWEEN) * self.size.faults + 30
        checkpoints = self.work / f"checkpoints-{name}-{secrets.token_hex(3)}"
        checkpoints.mkdir(parents=True)
        checkpoints.chmod(0o777)
        with self.namespace(name, api=api) as world:
            controller = Controller(self.cluster.kubeconfig, world.namespace, self.logs / f"node-{name}.log")
            controller.start()
            timeline: list[tuple[float, int]] = []
            try:
                with Observer(world, controller.since) as observer, Logs(self.k8s, world.namespace) as logs:
                    sampler = _EpochTimeline(observer, f"rings-config-{job}", timeline)
                    with sampler:
                        body = tf_job(job, data=self.data, checkpoints=checkpoints, steps=steps, api=api)
                        self.k8s.custom.create_namespaced_custom_object(*VOLCANO, world.namespace, "jobs", body)
                        t_created = time.time()
                        started = self.wait_training(world, logs, t_created, names)
                        if started is None:
                            raise RuntimeError(f"{name}: the job never trained; logs in {self.logs}")
                        result.notes["first_training_s"] = round(started, 1)
                        trained = t_created  # the first fault once a checkpoint exists, the next ones
                        need = 2 * CHECKPOINT_EVERY  # once every member trained again for a few steps
                        for n in range(self.size.faults):
                            if not self._wait_steps(world, logs, names, trained, need):
                                result.notes["job_ended_before_fault"] = n + 1
                                break
                            t0 = time.time()
                            fault(world, f"{job}-worker-{1 + n % (WORKERS - 1)}", logs)
                            result.faults += 1
                            ended = time.time()
                            took = self.wait_training(world, logs, t0, names, restarted=restarts)
                            if not restarts:  # did it train on after the fault ended, too?
                                on = self.wait_training(world, logs, ended, names)
                                result.notes.setdefault("training_after_the_fault_ended_s", []).append(
                                    None if on is None else round(ended - t0 + on, 1)
                                )
                            result.notes.setdefault("fault_s", []).append(round(ended - t0, 1))
                            result.recovered_s.append(None if took is None else round(took, 1))
                            say(
                                f"{name}: fault {n + 1}: training again after {took if took is None else round(took, 1)}s"
                            )
                            seconds, checked, wrong = world.converge(time.monotonic(), CONVERGE_TIMEOUT)
                            result.specs_checked += checked
                            result.wrong += len(wrong)
                            if wrong:
                                result.notes.setdefault("wrong", []).append(wrong)
                            if took is None:
                                break
                            trained, need = t0 + took, STEPS_AGAIN
                        result.in_sync, final = self._finish(world, logs, names, steps)
                        result.notes["final"] = final
                    runs = logs.runs()
                mixed = mixed_epochs(runs, timeline)
                result.mixed_epochs = mixed["steps_with_mixed_epochs"]
                result.notes.update(mixed)
                result.stale = len(observer.stale) + len(observer.regressions)
                result.notes["epochs"] = sorted({e for _, e in timeline})
                result.notes["trainer_runs"] = len(runs)
            finally:
                controller.stop()
        return result

    def _wait_steps(self, world: World, logs: Logs, names: list[str], since: float, steps: int) -> bool:
        """Until every member did ``steps`` steps after ``since``; False if the job ended first."""
        deadline = time.monotonic() + RECOVERY_TIMEOUT
        while time.monotonic() < deadline:
            done = {n: 0 for n in names}
            for run in logs.runs():
                if run.pod in done:
                    done[run.pod] += sum(1 for _, at in run.steps if at > since)
            if all(count >= steps for count in done.values()):
                return True
            pods = self.pods(world)
            if all(n in pods and pods[n].status.phase in ("Succeeded", "Failed") for n in names):
                return False
            self.check_startable(world)
            time.sleep(0.5)
        raise RuntimeError(f"the workers did not do {steps} steps within {RECOVERY_TIMEOUT:.0f}s")

    def _finish(self, world: World, logs: Logs, names: list[str], steps: int) -> tuple[bool, Json]:
        """Wait until every member's pod ended (its launcher and trainer exited); (all ended well:
        ``Succeeded`` with the trainer's RESULT, every step done, the same final weights; per-pod summary).

        A worker that finishes must not disturb the others: a supervisor that took the first
        finished pod for a lost member would stop its own trainer before the RESULT (the pod
        then never ends ``Succeeded`` with one).
        """
        deadline = time.monotonic() + RECOVERY_TIMEOUT
        while time.monotonic() < deadline:
            pods = self.pods(world)
            if all(n in pods and pods[n].status.phase in ("Succeeded", "Failed") for n in names):
                break
            self.check_startable(world)
            time.sleep(1.0)
        logs.poll()
        pods = self.pods(world)
        last = {r.pod: r for r in sorted(logs.runs(), key=lambda r: r.started) if r.pod in names}
        final: Json = {}
        for n, run in last.items():
            r = run.result or {}
            statuses = (pods[n].status.container_statuses or []) if n in pods else []
            final[n] = {
                "epoch": run.epoch,
                "last_step": max((s for s, _ in run.steps), default=None),
                "weights_sha256": (run.weights or "")[:16],
                "result": run.result is not None,
                "resumed_from_step": r.get("resumed_from_step"),
                "restart_count": r.get("restart_count"),
                "container_restarts": sum(c.restart_count or 0 for c in statuses),
                "phase": pods[n].status.phase if n in pods else None,
            }
        digests = {v["weights_sha256"] for v in final.values()}
        ok = (
            len(final) == len(names)
            and len(digests) == 1
            and "" not in digests
            and all(v["last_step"] == steps and v["result"] and v["phase"] == "Succeeded" for v in final.values())
        )
        return ok, final


class _EpochTimeline:
    """Appends (time, epoch) whenever the observer's epoch of ``configmap`` changes."""

    def __init__(self, observer: Observer, configmap: str, out: list[tuple[float, int]]) -> None:
        self.observer, self.configmap, self.out = observer, configmap, out
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            epoch = self.observer.epochs.get(self.configmap)
            if epoch is not None and (not self.out or self.out[-1][1] != epoch):
                self.out.append((time.time(), epoch))
            self._stop.wait(0.1)

    def __enter__(self) -> _EpochTimeline:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# -- the scenarios ------------------------------------------------------------------------------


def _evict(run: NodeRun, world: World, pod: str) -> None:
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": world.namespace}}
    run.k8s.core.create_namespaced_pod_eviction(pod, world.namespace, body)


def _container_id(run: NodeRun, world: World, pod: str) -> str:
    status = run.k8s.core.read_namespaced_pod(pod, world.namespace).status
    (container,) = [c for c in status.container_statuses or [] if c.name == CONTAINER]
    return str(container.container_id).split("://", 1)[1]


def _start(run: NodeRun, component: str) -> None:
    """Start ``component`` again; the kubelet exits at once while containerd's CRI is not serving
    yet ("server is not initialized yet", right after containerd reports healthy): retried."""
    deadline = time.monotonic() + 60
    while True:
        try:
            run.cluster.start_component(component)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _restart(run: NodeRun, component: str) -> None:
    try:
        run.cluster.stop_component(component, grace=30.0)
    finally:
        _start(run, component)


def _reboot(run: NodeRun, world: World) -> None:
    run.cluster.stop_component("kubelet", grace=30.0)
    try:
        for cid in containers_of(world.namespace):
            kill_task(cid)
        run.cluster.stop_component("containerd", grace=30.0)
    finally:
        _start(run, "containerd")
        _start(run, "kubelet")


def scenario(run: NodeRun, name: str) -> NodeResult:
    outage = run.size.outage

    def api_outage(world: World, pod: str, _: Logs) -> None:
        with Blocker(run.k8s, world.namespace):
            _evict(run, world, pod)
            time.sleep(outage)  # the fault itself lasts this long (not a wait for an effect)

    # name: (the fault, API mode, it ends every trainer)
    faults: dict[str, tuple[Callable[[World, str, Logs], None], bool, bool]] = {
        "pod-evicted": (lambda world, pod, _: _evict(run, world, pod), False, True),
        "container-restart": (lambda world, pod, _: kill_task(_container_id(run, world, pod)), False, True),
        "kubelet-restart": (lambda world, pod, _: _restart(run, "kubelet"), False, False),
        "containerd-restart": (lambda world, pod, _: _restart(run, "containerd"), False, False),
        "node-reboot": (lambda world, pod, _: _reboot(run, world), False, True),
        "api-unreachable-from-pods": (api_outage, True, True),
    }
    fault, api, restarts = faults[name]
    return run.run(name, fault, api=api, restarts=restarts)


NODE_SCENARIOS = (
    "pod-evicted",
    "container-restart",
    "kubelet-restart",
    "containerd-restart",
    "node-reboot",
    "api-unreachable-from-pods",
)


def table(results: list[NodeResult]) -> str:
    head = ("scenario", "faults", "specs checked", "wrong", "stale", "mixed epochs", "in sync", "recovered s p50/max")
    rows = []
    for r in results:
        done = [s for s in r.recovered_s if s is not None]
        rec = f"{statistics.median(done):.1f}/{max(done):.1f}" if done else "-"
        if None in r.recovered_s:
            rec += " (not recovered)"
        rows.append(
            (r.name, str(r.faults), str(r.specs_checked), str(r.wrong), str(r.stale), str(r.mixed_epochs),
             str(r.in_sync), rec)
        )  # fmt: skip
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=False)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in rows]
    return "\n".join(lines)


def main(*, names: list[str], quick: bool, seed: int, state_dir: Path, json_out: Path | None) -> int:
    """Run the node scenarios ``names`` on the cluster in ``state_dir`` (never started or stopped here)."""
    unknown = set(names) - set(NODE_SCENARIOS)
    if unknown:
        raise SystemExit(f"build/chaos.sh --node: unknown scenario(s): {', '.join(sorted(unknown))}")
    cluster = load(state_dir)
    if cluster is None or "node" not in cluster.addons or "volcano" not in cluster.addons:
        raise SystemExit(
            f"build/chaos.sh --node needs the dev cluster with the real node and Volcano in {state_dir} "
            "(ring-devcluster up --with node,volcano --state-dir ...; build/test.sh brings it up)"
        )
    cluster.wait_healthy(["kube-apiserver", *node.PROCESSES])
    nodejobs.ensure_trainer_images()  # the trainer image and the controller image (the launcher's init container)
    _ctr("images", "tag", "--force", f"docker.io/library/{nodejobs.TRAINER_IMAGE}", f"docker.io/library/{IMAGE}")
    digest = next(
        (w for w in _ctr("images", "ls", f"name==docker.io/library/{IMAGE}").split() if w.startswith("sha256:")), "?"
    )
    say(f"trainer image {IMAGE}: {digest}")
    stamp = time.strftime("%Y%m%dT%H%M%S")
    logs = state_dir / "chaos-node-logs" / stamp
    logs.mkdir(parents=True, exist_ok=True)
    run = NodeRun(cluster, QUICK if quick else FULL, seed, logs, state_dir / "chaos-node")
    results = []
    started = time.monotonic()
    for name in names:
        say(f"node scenario {name} (seed {seed}{', quick' if quick else ''})")
        t0 = time.monotonic()
        try:
            r = scenario(run, name)
        except Exception as e:  # noqa: BLE001 - one broken scenario is reported, the others still run
            r = NodeResult(name, notes={"error": f"{type(e).__name__}: {e}"})
        r.notes["seconds"] = round(time.monotonic() - t0, 1)
        say(f"{name}: {json.dumps(asdict(r))}")
        results.append(r)
        cluster.wait_healthy(["kube-apiserver", *node.PROCESSES])
    print(table(results))
    if json_out:
        json_out.write_text(
            json.dumps(
                {
                    "seed": seed,
                    "quick": quick,
                    "seconds": round(time.monotonic() - started, 1),
                    "scenarios": [asdict(r) for r in results],
                },
                indent=2,
            )
        )
    failed = [r.name for r in results if r.failed()]
    if failed:
        say(f"FAILED: {', '.join(failed)} (logs: {logs})")
        return 1
    say(f"all node scenarios passed (logs: {logs})")
    return 0
