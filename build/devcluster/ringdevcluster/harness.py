"""What tests, benchmarks and the demos run against the dev cluster from this checkout.

The cluster itself is the rest of the package; this module is the checkout's
side: ``ring-controller`` as a separate process (:class:`ControllerProcess`),
manifests applied as ``kubectl apply --server-side`` does (:func:`apply`), the
checkout's images on the real node (:func:`ensure_image`), the example
trainer's data and log markers (:func:`make_data`, :func:`parse_log`).

Unlike the rest of the package it needs the ring-controller project installed
(its ``kubernetes`` and ``prometheus_client``), as :mod:`volumes` does; the
``ring-devcluster`` command never imports it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from prometheus_client.parser import text_string_to_metric_families

from ringdevcluster import node
from ringdevcluster.process import free_port

__all__ = [
    "REPO",
    "TRAINER_IMAGE",
    "ControllerProcess",
    "WorkerLog",
    "apply",
    "controller_command",
    "delete",
    "ensure_image",
    "free_port",
    "make_data",
    "parse_log",
]

Json = dict[str, Any]

#: The checkout this package lives in (``build/devcluster/ringdevcluster``).
REPO = Path(__file__).resolve().parents[3]
#: The example trainer's image (``build/image.sh --trainer``).
TRAINER_IMAGE = "ring-trainer:0.1.0"


# --------------------------------------------------------------------------
# ring-controller as a process


def controller_command() -> list[str]:
    """The installed ``ring-controller`` next to this interpreter."""
    exe = Path(sys.executable).with_name("ring-controller")
    if not exe.exists():
        raise RuntimeError(f"{exe} is missing: install the project (pip install -e .) first")
    return [str(exe)]


class ControllerProcess:
    """One ``ring-controller`` process; restartable with the same flags."""

    def __init__(
        self,
        *,
        kubeconfig: str,
        log_path: Path,
        namespace: str | None = None,
        extra: list[str] | None = None,
        command: list[str] | None = None,
    ) -> None:
        """``command`` replaces the installed console script (e.g. the same entry point under a profiler)."""
        self.kubeconfig = kubeconfig
        self.command = command
        self.namespace = namespace
        self.extra = list(extra or [])
        self.log_path = log_path
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *, ready_timeout: float = 30.0) -> ControllerProcess:
        """Start it (again) and wait until /readyz says its caches synced (``ready_timeout`` seconds at most)."""
        argv = [
            *(self.command or controller_command()),
            "--kubeconfig",
            self.kubeconfig,
            "--metrics-bind-address",
            f"127.0.0.1:{self.metrics_port}",
            "--health-probe-bind-address",
            f"127.0.0.1:{self.health_port}",
            "--log-format",
            "json",
            *self.extra,
        ]
        if self.namespace:
            argv += ["--namespace", self.namespace]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        log.close()
        self.wait_ready(ready_timeout)
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Block until /readyz answers 200; raise with the log tail otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"ring-controller exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"ring-controller not ready after {timeout}s:\n{self.log_tail()}")

    def metrics(self) -> str:
        """The /metrics text."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def metric(self, sample: str, /, **labels: str) -> float | None:
        """The sum of the samples named ``sample`` whose labels include ``labels``; None if there are none.

        ``sample`` is a sample name (``workqueue_depth``,
        ``controller_runtime_reconcile_total``, ``..._count``).
        """
        found = [
            found_sample.value
            for family in text_string_to_metric_families(self.metrics())
            for found_sample in family.samples
            if found_sample.name == sample and all(found_sample.labels.get(k) == v for k, v in labels.items())
        ]
        return sum(found) if found else None

    def families(self) -> dict[str, str]:
        """Metric family name -> type, from /metrics."""
        return {f.name: f.type for f in text_string_to_metric_families(self.metrics())}

    def probe(self, path: str) -> int:
        """HTTP status of ``path`` on the health port (0 if nothing answered)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}", timeout=2) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)
        except OSError:
            return 0

    @property
    def pid(self) -> int:
        """The running process's pid."""
        assert self.proc is not None, "not started"
        return self.proc.pid

    def send(self, sig: int) -> None:
        """Send ``sig`` without waiting (SIGSTOP/SIGCONT to freeze and thaw it)."""
        assert self.proc is not None, "not started"
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float) -> int:
        """Wait for the process to exit on its own; returns its exit code."""
        assert self.proc is not None, "not started"
        return self.proc.wait(timeout=timeout)

    def rss_kib(self) -> int:
        """Resident memory of the process in KiB (VmRSS)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def log_lines(self) -> list[str]:
        """Every line the process wrote so far."""
        try:
            return self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return []

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int | None:
        """Signal the process and wait; SIGKILL after ``timeout``. Returns its exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the controller's log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


# --------------------------------------------------------------------------
# the checkout's manifests, images and example trainer on the cluster


#: Images (re)built from this checkout and imported in this test session.
_IMPORTED: set[str] = set()


def ensure_image(image: str, flag: str) -> None:
    """Build ``image`` from this checkout and import it into the node's containerd, once per
    process: a test session, a demo (``build/image.sh FLAG --import``; its layers are cached: seconds once built).

    Not skipped when the tag is already there: the node outlives test runs and checkouts, and an
    image imported from other code under the same tag would be tested instead of this one.
    """
    if image not in _IMPORTED:
        subprocess.run([str(REPO / "build" / "image.sh"), flag, "--import"], check=True)
        _IMPORTED.add(image)
    if f"docker.io/library/{image}" not in node.image_names():
        raise RuntimeError(f"{image} is not in the node's containerd after build/image.sh {flag} --import")


def apply(api: client.ApiClient, docs: list[Json], *, manager: str = "ring-controller-tests") -> None:
    """Server-side apply of ``docs`` in order, as ``kubectl apply --server-side`` does."""
    dynamic = DynamicClient(api)  # type: ignore[no-untyped-call]
    for doc in docs:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        namespace = doc["metadata"].get("namespace")
        # Trainer's webhook checks a TrainJob's runtime in its own informer
        # cache: a runtime applied just before may not be there yet, and the
        # TrainJob is refused (403, "... must be created before the TrainJob").
        # That refusal is retried until the webhook has seen the runtime.
        deadline = time.monotonic() + APPLY_RETRY_SECONDS
        while True:
            try:
                resource.server_side_apply(body=doc, namespace=namespace, field_manager=manager, force_conflicts=True)
                break
            except ApiException as e:
                if not (_runtime_not_seen_yet(e) and time.monotonic() < deadline):
                    raise
                time.sleep(0.5)


#: How long :func:`apply` retries a TrainJob whose runtime Trainer's webhook has not seen yet.
APPLY_RETRY_SECONDS = 60.0


def _runtime_not_seen_yet(e: ApiException) -> bool:
    """Whether ``e`` is Trainer's webhook refusing a TrainJob whose runtime its cache lacks."""
    return e.status == 403 and "must be created before the TrainJob" in str(e.body or "")


def delete(api: client.ApiClient, doc: Json) -> None:
    """Delete the object ``doc`` names (404 is fine)."""
    resource = DynamicClient(api).resources.get(  # type: ignore[no-untyped-call]
        api_version=doc["apiVersion"], kind=doc["kind"]
    )
    try:
        resource.delete(name=doc["metadata"]["name"], namespace=doc["metadata"].get("namespace"))
    except ApiException as e:
        if e.status != 404:
            raise


def make_data(directory: Path) -> Path:
    """Small CIFAR-10 pickle batches in ``directory``, readable by the containers' user."""
    if not (directory / "test_batch").exists():
        directory.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                str(REPO / "build/examples/tensorflow/make_cifar10.py"),
                "--out",
                str(directory),
                "--per-batch",
                "64",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    for path in [directory, *directory.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return directory


@dataclasses.dataclass
class WorkerLog:
    """What one worker's log says (None where it says nothing)."""

    pod: str
    container_start: float | None
    result: Json | None
    tf_config_ready: float | None
    text: str

    @property
    def tf_config(self) -> Json | None:
        return self.result["tf_config"] if self.result else None


def parse_log(pod: str, text: str) -> WorkerLog:
    """The markers of one worker's log (see the module doc)."""
    start = ready = None
    result = None
    for line in text.splitlines():
        if line.startswith("CONTAINER_START "):
            start = float(line.split()[1])
        elif line.startswith("TF_CONFIG_READY "):
            ready = float(line.split()[1])
        elif line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
    return WorkerLog(pod=pod, container_start=start, result=result, tf_config_ready=ready, text=text)
