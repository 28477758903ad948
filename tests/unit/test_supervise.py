"""``ring-launch --print`` and ``--supervise`` with real processes on a kubelet-style directory.

The supervised CMD is a small Python script that reports on stdout, one line
per event ("started <restart count> <epoch> <MASTER_ADDR>", "term <restart
count>"), and then blocks. The test reads those lines from ring-launch's
stdout (CMD inherits it): each read is the synchronisation point, so no test
sleeps to wait for something to happen.
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

import ranktable
from ranktable import frozen
from ranktable.clusterspec import STATUS_INITIALIZING, ClusterSpec, spec_to_json
from ranktable.hccl import render_hccl
from ranktable.stored import pack, plain_size
from tests.support.kubeletdir import KubeletDir
from tests.support.specs import make_spec

REPO = str(Path(ranktable.__file__).resolve().parent.parent)
POD = "job-worker-1"

CHILD = """\
import os, signal, sys
restart = os.environ["RING_RESTART_COUNT"]
mode = sys.argv[1]
def say(text):  # os.write: a signal may arrive while print() still holds stdout's lock
    os.write(1, (text + "\\n").encode())
def on_term(signum, frame):
    say(f"term {restart}")
    os._exit(7)
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, on_term)
say(f"started {restart} {os.environ['RING_EPOCH']} {os.environ['MASTER_ADDR']}")
if mode == "exit":
    sys.exit(int(sys.argv[2]))
while True:
    signal.pause()
"""


def moved(spec: ClusterSpec, *, epoch: int, master_ip: str) -> ClusterSpec:
    """``spec`` at ``epoch`` with rank 0 at a new IP (its pod replaced)."""
    first = frozen.replace(spec.members[0], ip=master_ip, uid="uid-replacement")
    return frozen.replace(spec, epoch=epoch, members=(first, *spec.members[1:]))


@pytest.fixture
def volume(tmp_path: Path) -> KubeletDir:
    root = tmp_path / "ring-config"
    root.mkdir()
    return KubeletDir(root)


@pytest.fixture
def child(tmp_path: Path) -> Path:
    path = tmp_path / "child.py"
    path.write_text(CHILD)
    return path


class Launch:
    """``ring-launch`` as a process; ``line()`` reads CMD's next stdout line with a deadline.

    A thread per pipe reads whole lines into a queue: a ``select`` on the pipe
    beside a buffered ``readline`` misses lines that arrived in one chunk with
    the line read before them (on a loaded machine ring-launch's lines often do).
    """

    def __init__(self, argv: list[str], *, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        self._out: queue.Queue[str | None] = queue.Queue()
        self._err: queue.Queue[str | None] = queue.Queue()
        self._pumps = [
            threading.Thread(target=_pump, args=(self.proc.stdout, self._out), daemon=True),
            threading.Thread(target=_pump, args=(self.proc.stderr, self._err), daemon=True),
        ]
        for pump in self._pumps:
            pump.start()

    def line(self, timeout: float = 20) -> str:
        try:
            line = self._out.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no output within {timeout}s; stderr so far:\n{self.stderr_now()}") from None
        assert line is not None, f"stdout ended; stderr:\n{self.stderr_now()}"
        return line.strip()

    def stderr_until(self, fragment: str, timeout: float = 20) -> None:
        """Read ring-launch's stderr up to the first line holding ``fragment``."""
        seen = []
        while True:
            try:
                line = self._err.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no {fragment!r} on stderr within {timeout}s: {seen}") from None
            assert line is not None, f"stderr ended before {fragment!r}: {seen}"
            seen.append(line)
            if fragment in line:
                return

    def stderr_now(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        return "".join(_drain(self._err))

    def finish(self, timeout: float = 20) -> tuple[int, str, str]:
        self.proc.wait(timeout=timeout)
        for pump in self._pumps:
            pump.join(timeout=timeout)
        return self.proc.returncode, "".join(_drain(self._out)), "".join(_drain(self._err))

    def exited(self, code: int) -> str:
        """Wait for ring-launch to end, check that it exited with ``code``; its stderr."""
        returncode, _, err = self.finish()
        assert returncode == code, err
        return err

    def kill(self) -> None:
        """Stop ring-launch and, through it, CMD (which runs in a session of its own)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def _pump(stream: IO[str] | None, lines: queue.Queue[str | None]) -> None:
    """Put each line of ``stream`` into ``lines``, then ``None`` at its end."""
    assert stream is not None
    for line in iter(stream.readline, ""):
        lines.put(line)
    lines.put(None)


def _drain(lines: queue.Queue[str | None]) -> list[str]:
    """The lines ``lines`` holds now (not the end marker)."""
    drained = []
    while True:
        try:
            line = lines.get_nowait()
        except queue.Empty:
            return drained
        if line is not None:
            drained.append(line)


@pytest.fixture
def launches() -> Iterator[list[Launch]]:
    started: list[Launch] = []
    yield started
    for launch in started:
        launch.kill()


def env_for(**values: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "PYTHONPATH": REPO, "POD_NAME": POD, **values}


def ring_launch(config_dir: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ranktable.launch.launcher",
        "--config-dir",
        str(config_dir),
        "--poll-interval",
        "0.02",
        "--timeout",
        "20",
        *args,
    ]


def supervise(
    launches: list[Launch],
    volume: KubeletDir,
    child: Path,
    *args: str,
    mode: str = "wait",
    tmp: Path,
    env: dict[str, str] | None = None,
) -> Launch:
    argv = ring_launch(
        volume.root, "--supervise", "--hostfile-dir", str(tmp / "hosts"), *args, "--", sys.executable, str(child)
    )
    launch = Launch([*argv, *mode.split()], env=env_for(**(env or {})))
    launches.append(launch)
    return launch


#: The spec :func:`started` starts CMD on: two workers at epoch 1, this pod rank 1, rank 0 at 127.1.0.1.
FIRST = make_spec([("worker", 2)], epoch=1)
#: Epoch 2 of the same job while its pods are replaced: initializing, no member yet.
REFORMING = make_spec([("worker", 2)], status=STATUS_INITIALIZING, epoch=2, present=set())


def started(
    launches: list[Launch], volume: KubeletDir, child: Path, *args: str, mode: str = "wait", tmp: Path
) -> Launch:
    """:func:`supervise` on :data:`FIRST`, returned once CMD has said it started."""
    volume.publish_spec(FIRST)
    launch = supervise(launches, volume, child, *args, mode=mode, tmp=tmp)
    assert launch.line() == "started 0 1 127.1.0.1"
    return launch


# --print ---------------------------------------------------------------------------


def test_print_env_is_shell_quoted_and_evaluates_to_the_exported_values(volume: KubeletDir, tmp_path: Path) -> None:
    volume.publish_spec(make_spec([("worker", 3)], epoch=4))
    hosts = tmp_path / "hosts"
    result = subprocess.run(
        ring_launch(volume.root, "--hostfile-dir", str(hosts), "--print", "env"),
        env=env_for(),
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines == sorted(lines) and all("=" in line for line in lines)
    script = f'eval {shlex.quote(result.stdout)}; printf \'%s\\n\' "$TF_CONFIG" "$JAX_PROCESS_ID" "$RING_HOSTFILE"'
    shell = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=10, check=True)
    tf_config, process_id, hostfile = shell.stdout.splitlines()
    assert json.loads(tf_config)["task"] == {"type": "worker", "index": 1}
    assert process_id == "1"
    assert Path(hostfile).read_text() == "127.1.0.1 slots=1\n127.1.0.2 slots=1\n127.1.0.3 slots=1\n"
    assert (hosts / "hostfile.mpich").read_text() == "127.1.0.1:1\n127.1.0.2:1\n127.1.0.3:1\n"


@pytest.mark.parametrize("form", ["json", "hostfile"])
def test_print_json_and_hostfile(volume: KubeletDir, tmp_path: Path, form: str) -> None:
    volume.publish_spec(make_spec([("worker", 2)], epoch=2))
    result = subprocess.run(
        ring_launch(volume.root, "--hostfile-dir", str(tmp_path), "--print", form),
        env=env_for(),
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert result.returncode == 0, result.stderr
    if form == "json":
        env = json.loads(result.stdout)
        assert (env["PADDLE_TRAINER_ID"], env["RING_EPOCH"], env["MS_ROLE"]) == ("1", "2", "MS_WORKER")
    else:
        assert result.stdout == "127.1.0.1 slots=1\n127.1.0.2 slots=1\n"


def test_print_refuses_a_command(volume: KubeletDir) -> None:
    result = subprocess.run(
        [*ring_launch(volume.root, "--print", "env"), "--", "true"], env=env_for(), capture_output=True, text=True
    )
    assert result.returncode == 2 and "--print takes no command" in result.stderr


def test_unwritable_hostfile_dir_leaves_the_hostfile_variables_out(volume: KubeletDir, tmp_path: Path) -> None:
    volume.publish_spec(make_spec([("worker", 2)]))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = subprocess.run(
        ring_launch(volume.root, "--hostfile-dir", str(blocker / "sub"), "--print", "json"),
        env=env_for(),
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert result.returncode == 0, result.stderr
    assert "RING_HOSTFILE" not in json.loads(result.stdout)
    assert "cannot write hostfiles" in result.stderr


# --supervise -------------------------------------------------------------------------


def test_new_epoch_restarts_cmd_with_the_new_env_and_signals_are_forwarded(
    volume: KubeletDir, child: Path, launches: list[Launch], tmp_path: Path
) -> None:
    launch = started(launches, volume, child, tmp=tmp_path)
    volume.publish_spec(moved(FIRST, epoch=2, master_ip="127.1.0.9"))
    assert launch.line() == "term 0"
    assert launch.line() == "started 1 2 127.1.0.9"
    assert (tmp_path / "hosts" / "hostfile").read_text().startswith("127.1.0.9 slots=1\n")
    os.kill(launch.proc.pid, signal.SIGTERM)  # to ring-launch: forwarded to CMD
    assert launch.line() == "term 1"
    err = launch.exited(7)  # CMD's own exit code
    assert "new membership: epoch 1 -> 2" in err


def test_initializing_epoch_stops_cmd_and_restart_waits_for_completed(
    volume: KubeletDir, child: Path, launches: list[Launch], tmp_path: Path
) -> None:
    launch = started(launches, volume, child, tmp=tmp_path)
    volume.publish_spec(REFORMING)
    assert launch.line() == "term 0"  # stopped at once: the old ring is gone
    volume.publish_spec(moved(FIRST, epoch=3, master_ip="127.1.0.7"))
    assert launch.line() == "started 1 3 127.1.0.7"  # never started on the initializing spec


def test_cmd_ignoring_sigterm_is_killed_after_the_grace_period(
    volume: KubeletDir, child: Path, launches: list[Launch], tmp_path: Path
) -> None:
    launch = started(launches, volume, child, "--grace-period", "0.2", mode="ignore-term", tmp=tmp_path)
    volume.publish_spec(moved(FIRST, epoch=2, master_ip="127.1.0.9"))
    assert launch.line() == "started 1 2 127.1.0.9"
    os.kill(launch.proc.pid, signal.SIGTERM)  # forwarded, ignored again: SIGKILL after the grace period
    err = launch.exited(128 + signal.SIGKILL)
    assert err.count("SIGKILL") >= 2, err  # once for the restart, once for the forwarded SIGTERM


@pytest.mark.parametrize("code", [0, 42], ids=["success", "failure"])
def test_cmd_ending_by_itself_gives_its_exit_code(
    volume: KubeletDir, child: Path, launches: list[Launch], tmp_path: Path, code: int
) -> None:
    started(launches, volume, child, "--grace-period", "0.5", mode=f"exit {code}", tmp=tmp_path).exited(code)


def test_max_restarts_spent_exits_4(volume: KubeletDir, child: Path, launches: list[Launch], tmp_path: Path) -> None:
    launch = started(launches, volume, child, "--max-restarts", "1", tmp=tmp_path)
    volume.publish_spec(moved(FIRST, epoch=2, master_ip="127.1.0.8"))
    assert launch.line() == "term 0"
    assert launch.line() == "started 1 2 127.1.0.8"
    volume.publish_spec(moved(FIRST, epoch=3, master_ip="127.1.0.9"))
    assert launch.line() == "term 1"
    err = launch.exited(4)
    assert "--max-restarts 1 spent" in err


def test_pod_dropped_from_the_new_spec_exits_3(
    volume: KubeletDir, child: Path, launches: list[Launch], tmp_path: Path
) -> None:
    launch = started(launches, volume, child, "--timeout", "1", tmp=tmp_path)
    volume.publish_spec(make_spec([("worker", 1)], epoch=2))  # scaled down: job-worker-1 is gone
    assert launch.line() == "term 0"
    err = launch.exited(3)
    assert "not in the cluster spec (epoch 2)" in err


def test_sigint_while_waiting_for_the_new_spec_exits_130(
    volume: KubeletDir, child: Path, launches: list[Launch], tmp_path: Path
) -> None:
    launch = started(launches, volume, child, tmp=tmp_path)
    volume.publish_spec(REFORMING)
    assert launch.line() == "term 0"
    os.kill(launch.proc.pid, signal.SIGINT)
    launch.exited(130)


def test_cmd_failing_just_before_the_new_epoch_is_restarted(
    volume: KubeletDir, child: Path, launches: list[Launch], tmp_path: Path
) -> None:
    """A trainer that dies of its peer's loss a moment before the spec changes is restarted, not reported."""
    volume.publish_spec(FIRST)
    argv = ring_launch(volume.root, "--supervise", "--grace-period", "30", "--hostfile-dir", str(tmp_path / "h"))
    script = (
        "import os, sys; print('started', os.environ['RING_RESTART_COUNT'], flush=True);"
        "sys.exit(0 if os.environ['RING_RESTART_COUNT'] != '0' else 9)"
    )
    launch = Launch([*argv, "--", sys.executable, "-c", script], env=env_for())
    launches.append(launch)
    assert launch.line() == "started 0"
    launch.stderr_until("CMD exited with 9")  # failed by itself; ring-launch now waits up to the grace period
    volume.publish_spec(moved(FIRST, epoch=2, master_ip="127.1.0.9"))
    assert launch.line() == "started 1"
    assert "restart 1 (epoch 2)" in launch.exited(0)


def test_restarts_on_new_epochs_leave_one_local_rank_table(
    volume: KubeletDir, child: Path, launches: list[Launch], tmp_path: Path
) -> None:
    """The compressed form: every start writes a local copy for RANK_TABLE_FILE, and the old epochs' copies go."""

    def publish(spec: ClusterSpec) -> str:
        files = {"cluster.json": spec_to_json(spec), "hccl.json": render_hccl(spec)}
        volume.publish(dict(pack(files, limit=plain_size(files) - 1).binary_data))
        return files["hccl.json"]

    def local_tables() -> list[str]:
        (directory,) = tmp.iterdir()  # $TMPDIR/ring-hccl-<uid>
        return [p.read_text() for p in directory.iterdir() if p.name != ".lock"]

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    spec = make_spec([("worker", 2)], epoch=1, devices=1)
    table = publish(spec)
    launch = supervise(launches, volume, child, tmp=tmp_path, env={"TMPDIR": str(tmp)})
    assert launch.line() == "started 0 1 127.1.0.1"
    assert local_tables() == [table]
    for restart in (1, 2):
        table = publish(moved(spec, epoch=restart + 1, master_ip=f"127.1.0.{restart + 7}"))
        assert launch.line() == f"term {restart - 1}"
        assert launch.line() == f"started {restart} {restart + 1} 127.1.0.{restart + 7}"
        assert local_tables() == [table]
