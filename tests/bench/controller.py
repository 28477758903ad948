"""The controller under test, as a separate process the bench can measure.

Like :class:`tests.controllerproc.ControllerProcess` (the installed console
script, the flags an operator would use, a JSON log to a file), plus what
the bench needs: the process id for ``/proc`` readings, and an optional
cProfile run (:mod:`tests.bench.profiled`, a CPU-time profile written when
the daemon exits on SIGTERM). Kept separate so the bench's
process handling does not change under the integration tests' helper.
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

__all__ = ["BenchController"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BenchController:
    """One ``ring-controller`` process watching ``namespace``.

    Protocol: ``start`` once (returns when /readyz says the caches synced),
    read ``pid``/``metrics`` while it runs, ``stop`` once at the end.
    """

    def __init__(
        self, *, kubeconfig: Path, log_path: Path, namespace: str, extra: list[str] | None = None, profile: Path | None = None
    ) -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.namespace = namespace
        self.extra = list(extra or [])
        self.profile = profile
        self.metrics_port = _free_port()
        self.health_port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        """The command line: the console script, or the same entry point under cProfile."""
        if self.profile is not None:
            command = [sys.executable, "-m", "tests.bench.profiled", str(self.profile)]
        else:
            exe = Path(sys.executable).with_name("ring-controller")
            if not exe.exists():
                raise RuntimeError(f"{exe} is missing: install the project (pip install -e .) first")
            command = [str(exe)]
        return [
            *command,
            "--kubeconfig", str(self.kubeconfig),
            "--namespace", self.namespace,
            "--metrics-bind-address", f"127.0.0.1:{self.metrics_port}",
            "--health-probe-bind-address", f"127.0.0.1:{self.health_port}",
            "--log-format", "json",
            *self.extra,
        ]  # fmt: skip

    def start(self, *, timeout: float = 60.0) -> None:
        """Start the process and wait for /readyz; raises with the log tail on failure."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv(), stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ring-controller exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"ring-controller not ready after {timeout}s:\n{self.log_tail()}")

    @property
    def pid(self) -> int:
        """The process id (for ``/proc`` readings)."""
        assert self.proc is not None, "not started"
        return self.proc.pid

    def metrics(self) -> str:
        """The /metrics text."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            return str(r.read().decode())

    def stop(self, *, timeout: float = 60.0) -> int | None:
        """SIGTERM and wait (SIGKILL after ``timeout``); returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
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
