"""Run ``ring-controller`` as a real separate process for tests, benchmarks and the demo.

The controller under test is the installed console script, started with the
flags an operator would use, its JSON log captured to a file. ``stop`` sends
a signal and waits; SIGKILL simulates a crash.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


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

    def __init__(self, *, kubeconfig: str, log_path: Path, namespace: str | None = None, extra: list[str] | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.extra = list(extra or [])
        self.log_path = log_path
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> "ControllerProcess":
        """Start it (again) and wait until /readyz says its caches synced."""
        argv = [
            *controller_command(),
            "--kubeconfig", self.kubeconfig,
            "--metrics-bind-address", f"127.0.0.1:{self.metrics_port}",
            "--health-probe-bind-address", f"127.0.0.1:{self.health_port}",
            "--log-format", "json",
            *self.extra,
        ]
        if self.namespace:
            argv += ["--namespace", self.namespace]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
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
