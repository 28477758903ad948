"""Start, watch and reliably stop groups of real training processes.

The end-to-end tests run real TensorFlow workers as plain processes on this
machine: hand-configured (``TF_CONFIG`` built by the test) or through
``ring-launch`` against the local control plane. Either way a test needs the
same few things, kept here so every test gets them right:

* **Distinct ports.** TensorFlow's gRPC server binds ``0.0.0.0:<port>``
  whatever host ``TF_CONFIG`` names, so workers sharing this machine (kwok
  pod IPs such as 127.1.0.1 and 127.1.0.2 are all loopback) must use
  different ports. ``free_ports`` hands out ports that are distinct from each
  other and free on the wildcard address at the time of the call.
* **Logs in files.** Each worker's stdout and stderr go to files (pipes can
  fill up and stall a chatty TensorFlow process); failures quote their tails.
* **Bounded waits and hard kills.** MultiWorkerMirroredStrategy workers wait
  for their peers forever, and TensorFlow catches SIGTERM (its preemption
  notifier) and may keep waiting. So a group is waited on with a deadline,
  a worker that fails makes the others be stopped (they would only hang), and
  stopping is SIGTERM to the worker's own process group, then SIGKILL after a
  short grace. Workers are started in their own sessions so that a wrapper
  (``ring-launch``, a shell) and what it runs go down together, and nothing
  else is ever signalled.

The harness knows nothing about TensorFlow beyond that: a worker is an argv
and environment overrides, so the same code drives ``python train.py`` and
``ring-launch -- python train.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from ringdevcluster import process

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The checkout this harness belongs to (workers get it on PYTHONPATH)."""

EXAMPLE_DIR = REPO_ROOT / "build" / "examples" / "tensorflow"
TRAIN_PY = EXAMPLE_DIR / "train.py"
"""The example MultiWorkerMirroredStrategy training program."""


def train_argv(data_dir: Path, *, steps: int, result: Path, extra: Sequence[str] = ()) -> list[str]:
    """The example's command line as the tests run it: batch 16, learning rate 0.05, ``extra``
    options, the result file last."""
    return [
        sys.executable, str(TRAIN_PY), "--data-dir", str(data_dir), "--steps", str(steps),
        "--batch-size", "16", "--learning-rate", "0.05", *extra, "--result", str(result),
    ]  # fmt: skip


MAKE_CIFAR10_PY = EXAMPLE_DIR / "make_cifar10.py"
"""The synthetic CIFAR-10 generator."""

DEFAULT_GRACE_SECONDS = 3.0
"""How long a worker gets between SIGTERM and SIGKILL."""


class WorkerGroupError(AssertionError):
    """A group did not finish cleanly; the message carries every worker's log tail."""


# --------------------------------------------------------------------------
# Ports, TF_CONFIG, data


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 0.0.0.0 right now (TensorFlow binds every interface);
    see :func:`ringdevcluster.process.free_ports`."""
    return process.free_ports(count, host="0.0.0.0")


def tf_config(*, workers: Sequence[str], index: int, task_type: str = "worker") -> str:
    """A ``TF_CONFIG`` value for a worker-only cluster (``workers`` are host:port)."""
    return json.dumps({"cluster": {"worker": list(workers)}, "task": {"type": task_type, "index": index}})


def make_cifar10(out: Path, *, per_batch: int = 64, seed: int = 0) -> Path:
    """Write synthetic CIFAR-10 batches into ``out`` with the example generator."""
    proc = subprocess.run(
        [sys.executable, str(MAKE_CIFAR10_PY), "--out", str(out), "--per-batch", str(per_batch), "--seed", str(seed)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"make_cifar10.py failed ({proc.returncode}): {proc.stderr}")
    return out


def worker_env(**overrides: str) -> dict[str, str]:
    """Environment overrides every TensorFlow worker should get, plus ``overrides``.

    Unbuffered output (progress lines reach the log file as they happen), the
    checkout on ``PYTHONPATH`` (``ranktable`` importable without installing),
    and TensorFlow's INFO chatter off (warnings and errors stay).
    """
    pythonpath = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {"PYTHONUNBUFFERED": "1", "PYTHONPATH": pythonpath, "TF_CPP_MIN_LOG_LEVEL": "1"}
    env.update(overrides)
    return env


# --------------------------------------------------------------------------
# Workers


@dataclass(frozen=True)
class WorkerSpec:
    """One process to start: ``argv`` run with the test's environment plus ``env``.

    ``result`` is the file the worker is expected to write (for ``train.py``,
    its ``--result``); ``None`` if it writes none.
    """

    name: str
    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    result: Path | None = None


@dataclass
class Worker:
    """A started worker. ``returncode`` is None while it runs."""

    spec: WorkerSpec
    process: subprocess.Popen[bytes]
    stdout_path: Path
    stderr_path: Path
    started_at: float
    ended_at: float | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def returncode(self) -> int | None:
        rc = self.process.poll()
        if rc is not None and self.ended_at is None:
            self.ended_at = time.time()
        return rc

    def stdout(self) -> str:
        return _read_text(self.stdout_path)

    def stderr(self) -> str:
        return _read_text(self.stderr_path)

    def result(self) -> dict[str, Any]:
        """The worker's JSON result; fails with its log tail if there is none."""
        if self.spec.result is None:
            raise AssertionError(f"worker {self.name} was not given a result file")
        try:
            doc = json.loads(self.spec.result.read_text())
        except (OSError, ValueError) as err:
            raise WorkerGroupError(f"worker {self.name}: no readable result ({err})\n{describe([self])}") from err
        if not isinstance(doc, dict):
            raise WorkerGroupError(f"worker {self.name}: result is not a JSON object")
        return doc


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])


def describe(workers: Iterable[Worker], *, lines: int = 25) -> str:
    """Exit status and the last ``lines`` of stdout/stderr of every worker."""
    parts = []
    for w in workers:
        parts.append(
            f"--- {w.name} pid={w.process.pid} rc={w.returncode} argv={list(w.spec.argv)}\n"
            f"[stdout]\n{_tail(w.stdout(), lines)}\n[stderr]\n{_tail(w.stderr(), lines)}"
        )
    return "\n".join(parts)


def start_worker(spec: WorkerSpec, *, log_dir: Path) -> Worker:
    """Start one worker in its own session, output to ``log_dir/<name>.{out,err}``.

    The caller owns the worker and must stop it (``stop_workers``) or use a
    ``WorkerGroup``, which does.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    stdout_path = log_dir / f"{spec.name}.out"
    stderr_path = log_dir / f"{spec.name}.err"
    env = dict(os.environ)
    env.update(spec.env)
    with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
        process = subprocess.Popen(
            list(spec.argv),
            env=env,
            cwd=spec.cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    return Worker(spec=spec, process=process, stdout_path=stdout_path, stderr_path=stderr_path, started_at=time.time())


def _signal_group(worker: Worker, sig: signal.Signals) -> None:
    # The worker leads its own session/process group (start_new_session), so
    # its pid is the group id; once it has been reaped the id may be reused,
    # so only signal workers that are still ours and unreaped.
    if worker.process.returncode is not None:
        return
    try:
        os.killpg(worker.process.pid, sig)
    except ProcessLookupError:
        pass


def stop_workers(workers: Sequence[Worker], *, grace: float = DEFAULT_GRACE_SECONDS) -> None:
    """Stop every still-running worker: SIGTERM, then SIGKILL after ``grace`` s.

    Always returns with every worker reaped.
    """
    running = [w for w in workers if w.returncode is None]
    for w in running:
        _signal_group(w, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(w.returncode is None for w in running) and time.monotonic() < deadline:
        time.sleep(0.05)
    for w in running:
        if w.returncode is None:
            _signal_group(w, signal.SIGKILL)
    for w in running:
        w.process.wait()
        w.returncode  # noqa: B018  (records ended_at)


def wait_workers(
    workers: Sequence[Worker],
    *,
    timeout: float,
    fail_fast: bool = True,
    grace: float = DEFAULT_GRACE_SECONDS,
) -> dict[str, int]:
    """Wait until every worker has exited; return ``{name: returncode}``.

    On timeout every worker still running is stopped and ``WorkerGroupError``
    is raised with all logs. With ``fail_fast`` a worker exiting non-zero
    stops the others at once (peers of a dead MWMS worker never finish); the
    return codes are then returned as they are, for the caller to assert on.
    """
    deadline = time.monotonic() + timeout
    while True:
        codes = {w.name: w.returncode for w in workers}
        if all(rc is not None for rc in codes.values()):
            return {name: rc for name, rc in codes.items() if rc is not None}
        if fail_fast and any(rc not in (None, 0) for rc in codes.values()):
            stop_workers(workers, grace=grace)
            return {w.name: w.process.wait() for w in workers}
        if time.monotonic() >= deadline:
            stop_workers(workers, grace=grace)
            raise WorkerGroupError(
                f"workers still running after {timeout:.0f}s: "
                f"{[name for name, rc in codes.items() if rc is None]}\n{describe(workers)}"
            )
        time.sleep(0.05)


class WorkerGroup:
    """Start a group of workers and guarantee that none outlives the block.

    ``with WorkerGroup(specs, log_dir=d) as group: codes = group.wait(timeout=60)``.
    Leaving the block (normally or by an exception) stops whatever is still
    running, so a failed assertion never leaves TensorFlow processes behind.
    """

    def __init__(self, specs: Sequence[WorkerSpec], *, log_dir: Path, grace: float = DEFAULT_GRACE_SECONDS) -> None:
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"worker names must be unique: {names}")
        self.specs = list(specs)
        self.log_dir = log_dir
        self.grace = grace
        self.workers: list[Worker] = []
        self.started_at: float | None = None

    def __enter__(self) -> WorkerGroup:
        self.started_at = time.time()
        try:
            for spec in self.specs:
                self.workers.append(start_worker(spec, log_dir=self.log_dir))
        except BaseException:
            stop_workers(self.workers, grace=self.grace)
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stop_workers(self.workers, grace=self.grace)

    def wait(self, *, timeout: float, fail_fast: bool = True) -> dict[str, int]:
        """See ``wait_workers``."""
        return wait_workers(self.workers, timeout=timeout, fail_fast=fail_fast, grace=self.grace)

    def assert_all_succeeded(self, codes: Mapping[str, int]) -> None:
        """Raise with every worker's logs unless every return code is 0."""
        if any(rc != 0 for rc in codes.values()):
            raise WorkerGroupError(f"worker exit codes {dict(codes)}\n{describe(self.workers)}")

    def results(self) -> dict[str, dict[str, Any]]:
        """Every worker's JSON result, by worker name."""
        return {w.name: w.result() for w in self.workers}

    def describe(self) -> str:
        return describe(self.workers)
