"""Run ``ring-controller`` as a real separate process for tests, benchmarks and the demo.

The controller under test is the installed console script, started with the
flags an operator would use, its JSON log captured to a file. ``stop`` sends
a signal and waits; SIGKILL simulates a crash, SIGSTOP a
frozen process (``send``). ``metric`` reads one value from /metrics, ``probe`` one
health endpoint.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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

    def start(self) -> ControllerProcess:
        """Start it (again) and wait until /readyz says its caches synced."""
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
        self.wait_ready()
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
