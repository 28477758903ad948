"""Process supervision: start a component, identify it later, stop exactly it.

A pid file records the pid, the kernel's start time of that pid
(``/proc/PID/stat`` field 22) and the binary; a process is ours only if all
three still match (:class:`PidRecord`). Stopping therefore never signals a
process that merely inherited a recycled pid, and never anything this tool did
not start. Processes run in their own session, so they outlive the Python
process that started them (``up`` returns, the cluster keeps running).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ringdevcluster.errors import ClusterError

__all__ = [
    "GRACE_SECONDS",
    "PidRecord",
    "free_port",
    "free_ports",
    "proc_argv0",
    "proc_start_time",
    "read_record",
    "reap",
    "spawn",
    "stop_pid_file",
    "tail",
]

# SIGTERM grace before SIGKILL. The API server holds watch connections open for
# up to a minute on SIGTERM; all state is in etcd, so a short grace is safe.
GRACE_SECONDS = 3.0


def proc_start_time(pid: int) -> int | None:
    """The kernel start time of ``pid``, or None if it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 2 (comm) is parenthesised and may contain spaces: split after it.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def proc_argv0(pid: int) -> str | None:
    """The first word of ``pid``'s command line, or None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.split(b"\0", 1)[0].decode(errors="replace") if raw else None


@dataclasses.dataclass(frozen=True)
class PidRecord:
    """What a pid file says: the process is ours while pid, start time and binary all match."""

    pid: int
    start_time: int
    binary: str

    def alive(self) -> bool:
        """True while the recorded process (not a successor on a recycled pid) runs."""
        return self.start_time == proc_start_time(self.pid) and proc_argv0(self.pid) == self.binary


# Children started by this Python process, so stopping them also reaps them
# (a zombie would otherwise linger until this process exits).
_children: dict[int, subprocess.Popen[bytes]] = {}


def reap(pid: int) -> None:
    """Collect the exit status of ``pid`` if it is a child of ours that ended."""
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        del _children[pid]


def read_record(path: Path) -> PidRecord | None:
    """The record in pid file ``path``, or None if it is missing or unreadable."""
    try:
        raw = json.loads(path.read_text())
        return PidRecord(pid=int(raw["pid"]), start_time=int(raw["start_time"]), binary=str(raw["binary"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError as err:
        if err.errno != errno.ESRCH:
            raise


def stop_pid_file(path: Path, *, grace: float = GRACE_SECONDS) -> bool:
    """Stop the process ``path`` records if it is still that process; remove ``path``.

    SIGTERM, then SIGKILL after ``grace`` seconds. Returns True if it ran.
    """
    record = read_record(path)
    stopped = False
    if record is not None and record.alive():
        stopped = True
        _signal(record.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while record.alive() and time.monotonic() < deadline:
            reap(record.pid)
            time.sleep(0.05)
        if record.alive():
            _signal(record.pid, signal.SIGKILL)
            while record.alive():
                reap(record.pid)
                time.sleep(0.02)
        reap(record.pid)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return stopped


def tail(log_path: Path, lines: int = 12) -> str:
    """The last ``lines`` lines of ``log_path`` ("" if it cannot be read)."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return ""
    return "".join(text.splitlines(keepends=True)[-lines:])


def spawn(name: str, argv: Sequence[str], *, log_path: Path, pid_path: Path, cwd: Path, env: Mapping[str, str]) -> int:
    """Start component ``name`` as ``argv`` in its own session, output appended to ``log_path``; return its pid.

    Returns once the child has exec'd ``argv[0]`` and ``pid_path`` records it;
    raises :class:`ClusterError` (with the log's tail) if it exits at once.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    pid_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(argv)}\n".encode())
        log.flush()
        child = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,  # survives Ctrl-C of the caller and its exit
        )
    _children[child.pid] = child
    # Until the child has exec'd, /proc shows the Python interpreter: wait
    # for the binary, so the pid record written below identifies it.
    start_time = None
    deadline = time.monotonic() + 10
    while child.poll() is None and time.monotonic() < deadline:
        start_time = proc_start_time(child.pid)
        if start_time is not None and proc_argv0(child.pid) == argv[0]:
            break
        time.sleep(0.005)
    if child.poll() is not None or start_time is None:
        raise ClusterError(f"{name} exited at once (code {child.poll()}); see {log_path}\n{tail(log_path)}")
    record = {"pid": child.pid, "start_time": start_time, "binary": argv[0]}
    tmp = pid_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(pid_path)
    return child.pid


def free_ports(count: int, *, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct TCP ports free on ``host`` right now (the kernel's choice).

    All sockets are held open until every port is chosen, so the ports are
    distinct. Another process may still take one before its user binds it;
    that user then fails with a bind error in its log.
    """
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port(*, host: str = "127.0.0.1") -> int:
    """One TCP port free on ``host`` right now (see :func:`free_ports`)."""
    return free_ports(1, host=host)[0]
