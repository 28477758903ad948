"""ring-launch and its waiting core, on real kubelet-style directories and real processes.

The directory helper reproduces the kubelet's atomic ConfigMap volume update
(timestamped directory, ``..data`` symlink renamed over, user-visible symlinks
into ``..data``, old directory removed). The launcher runs as a real
subprocess that execs a real ``python -c`` printing its environment.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import ranktable
from ranktable.clusterspec import STATUS_INITIALIZING, ClusterSpec, PodNotInSpec, SpecError, spec_to_json
from ranktable.hccl import render_hccl
from ranktable.launch.wait import (
    FileSource,
    Identity,
    Observation,
    Ready,
    WaitTimeout,
    identity_from_env,
    wait_for_spec,
)
from ranktable.tfconfig import setup_tf_config
from tests.support.kubeletdir import KubeletDir
from tests.support.specs import make_spec

REPO = str(Path(ranktable.__file__).resolve().parent.parent)
KEYS = ("TF_CONFIG", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RANK_TABLE_FILE", "RING_EPOCH")
PRINT_ENV = f"import json,os;print(json.dumps({{'pid':os.getpid(),**{{k:os.environ.get(k) for k in {KEYS!r}}}}}))"


@pytest.fixture
def volume(tmp_path: Path) -> KubeletDir:
    root = tmp_path / "ring-config"
    root.mkdir()
    return KubeletDir(root)


# The file source ----------------------------------------------------------------


def test_reads_racing_atomic_swaps_never_see_torn_or_mixed_versions(volume: KubeletDir) -> None:
    volume.publish(
        {"cluster.json": json.dumps({"epoch": 0, "pad": "x" * 8000}), "hccl.json": json.dumps({"marker": 0})}
    )
    source = FileSource(str(volume.root))
    stop = threading.Event()

    def writer() -> None:
        for epoch in range(1, 151):
            volume.publish(
                {
                    "cluster.json": json.dumps({"epoch": epoch, "pad": "x" * 8000}),
                    "hccl.json": json.dumps({"marker": epoch}),
                }
            )
        stop.set()

    thread = threading.Thread(target=writer)
    thread.start()
    seen = set()
    reads = 0
    while not stop.is_set() or reads == 0:
        obs = source.read()
        assert obs.cluster is not None and obs.hccl is not None
        epoch = json.loads(obs.cluster)["epoch"]
        assert json.loads(obs.hccl)["marker"] == epoch
        seen.add(epoch)
        reads += 1
    thread.join()
    assert len(seen) > 1  # the reads really overlapped the swaps


def test_plain_directory_and_missing_files(tmp_path: Path) -> None:
    assert FileSource(str(tmp_path / "absent")).read() == Observation(cluster=None, hccl=None, final=False)
    (tmp_path / "cluster.json").write_text("{}")
    assert FileSource(str(tmp_path)).read() == Observation(cluster="{}", hccl=None, final=False)


# The waiting logic, on scripted observations -----------------------------------------


class Scripted:
    """A source replaying observations, then repeating the last one until the deadline."""

    where = "scripted"

    def __init__(self, *observations: Observation) -> None:
        self.observations = observations
        self.served = 0

    def observe(self, deadline: float) -> Iterator[Observation]:
        for obs in self.observations:
            self.served += 1
            yield obs
        while time.monotonic() < deadline:
            time.sleep(0.005)
            self.served += 1
            yield self.observations[-1]

    def rank_table_path(self, hccl: str) -> str:
        return "/nowhere/hccl.json"


def seen(spec: ClusterSpec | str | None, hccl: str | None = None, *, final: bool = False) -> Observation:
    text = spec_to_json(spec) if isinstance(spec, ClusterSpec) else spec
    return Observation(cluster=text, hccl=hccl, final=final)


ME = Identity(pod="job-worker-1")


def test_waits_through_missing_and_initializing_to_completed() -> None:
    lines: list[str] = []
    ready = wait_for_spec(
        Scripted(
            seen(None),
            seen(make_spec([("worker", 2)], status=STATUS_INITIALIZING, present={0})),
            seen(make_spec([("worker", 2)], epoch=2)),
        ),
        ME,
        timeout=5,
        progress=lines.append,
    )
    assert isinstance(ready, Ready)
    assert (ready.spec.epoch, ready.member.rank, ready.hccl) == (2, 1, None)
    assert any("does not exist yet" in line for line in lines)
    assert lines[-1].startswith("spec completed: epoch 2, 2 members; pod job-worker-1 is rank 1")


def test_a_torn_read_is_retried() -> None:
    full = spec_to_json(make_spec([("worker", 2)]))
    ready = wait_for_spec(Scripted(seen(full[:40]), seen(full[:40]), seen(full)), ME, timeout=5)
    assert ready.member.pod == "job-worker-1"


def test_a_spec_that_stays_malformed_is_an_error() -> None:
    source = Scripted(seen('{"status": "completed"'))
    with pytest.raises(SpecError, match=r"malformed spec in scripted: not valid JSON.*unchanged over 3 reads"):
        wait_for_spec(source, ME, timeout=5)
    assert source.served == 3


def test_a_schema_error_from_the_api_is_an_error_at_once() -> None:
    with pytest.raises(SpecError, match="job.kind: missing"):
        wait_for_spec(Scripted(seen('{"status":"completed","job":{}}', final=True)), ME, timeout=5)


def test_timeout_says_what_it_saw_last() -> None:
    lines: list[str] = []
    start = time.monotonic()
    with pytest.raises(WaitTimeout, match=re.escape("; last seen: spec initializing: epoch 4, members 1/2")):
        wait_for_spec(
            Scripted(seen(make_spec([("worker", 2)], status=STATUS_INITIALIZING, present={1}, epoch=4))),
            ME,
            timeout=0.3,
            progress=lines.append,
        )
    waited = time.monotonic() - start
    print(f"\nFIGURE launcher timeout 0.3s gave up after {waited:.3f}s")
    assert waited >= 0.3  # never gives up before its timeout (a rule, not a speed)
    assert len(lines) <= 3  # announced, one state line; no line per poll


def test_completed_spec_without_this_pod_times_out_listing_its_pods() -> None:
    listing = "'job-worker-7' is not in the cluster spec (epoch 9), which lists: job-worker-0, job-worker-1"
    with pytest.raises(PodNotInSpec, match=re.escape(listing) + r" \(waited 0s"):
        wait_for_spec(Scripted(seen(make_spec([("worker", 2)], epoch=9))), Identity(pod="job-worker-7"), timeout=0.2)


def test_a_stale_spec_for_a_predecessor_pod_is_waited_out() -> None:
    old = make_spec([("worker", 2)], epoch=3)
    new = make_spec([("worker", 2)], epoch=4)
    me = Identity(pod="job-worker-1", uid="uid-job-worker-1")
    stale_uid = spec_to_json(old).replace('"uid":"uid-job-worker-1"', '"uid":"uid-before"')
    stale_ip = spec_to_json(old)
    lines: list[str] = []
    ready = wait_for_spec(Scripted(seen(stale_uid), seen(stale_uid), seen(new)), me, timeout=5, progress=lines.append)
    assert ready.spec.epoch == 4
    assert any("for an earlier pod 'job-worker-1' (uid uid-before" in line for line in lines)
    with pytest.raises(WaitTimeout, match="with ip 127.1.0.2 for this pod, whose ip is 10.0.0.9"):
        wait_for_spec(Scripted(seen(stale_ip)), Identity(pod="job-worker-1", ip="10.0.0.9"), timeout=0.2)


def test_npu_job_waits_for_a_completed_rank_table() -> None:
    spec = make_spec([("worker", 2)], devices=2)
    pending = render_hccl(make_spec([("worker", 2)], devices=2, status=STATUS_INITIALIZING))
    with pytest.raises(WaitTimeout, match="hccl.json still initializing"):
        wait_for_spec(Scripted(seen(spec, pending)), ME, timeout=0.2)
    ready = wait_for_spec(Scripted(seen(spec, pending), seen(spec, render_hccl(spec))), ME, timeout=5)
    assert ready.hccl == render_hccl(spec)
    assert wait_for_spec(Scripted(seen(spec)), ME, timeout=5).hccl is None


@pytest.mark.parametrize(
    ("flag", "env", "expected"),
    [
        pytest.param("from-flag", {"POD_NAME": "from-env", "HOSTNAME": "host"}, "from-flag", id="flag-first"),
        pytest.param(None, {"POD_NAME": "from-env", "HOSTNAME": "host"}, "from-env", id="pod-name-next"),
        pytest.param(None, {"HOSTNAME": "host"}, "host", id="hostname-last"),
        pytest.param(None, {"POD_NAME": "", "HOSTNAME": "host"}, "host", id="empty-pod-name-ignored"),
    ],
)
def test_identity_rules(monkeypatch: pytest.MonkeyPatch, flag: str | None, env: dict[str, str], expected: str) -> None:
    for key in ("POD_NAME", "HOSTNAME", "POD_UID", "POD_IP"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert identity_from_env(flag).pod == expected


def test_identity_falls_back_to_the_host_name_and_reads_uid_and_ip(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    for key in ("POD_NAME", "HOSTNAME"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("POD_UID", "u-1")
    monkeypatch.setenv("POD_IP", "10.1.2.3")
    assert identity_from_env() == Identity(pod=socket.gethostname(), uid="u-1", ip="10.1.2.3")


def test_setup_tf_config_drop_in(volume: KubeletDir, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CONFIG", "stale")
    monkeypatch.delenv("POD_UID", raising=False)
    monkeypatch.delenv("POD_IP", raising=False)
    volume.publish_spec(make_spec([("chief", 1), ("worker", 1)]))
    config = setup_tf_config(config_dir=str(volume.root), timeout=2, pod="job-worker-0")
    assert config == {
        "cluster": {"chief": ["127.1.0.1:2222"], "worker": ["127.1.0.2:2223"]},
        "task": {"type": "worker", "index": 0},
    }
    assert json.loads(os.environ["TF_CONFIG"]) == config
    with pytest.raises(
        WaitTimeout,
        match=r"waiting for a completed spec in \S+/missing/cluster\.json; last seen: .* does not exist yet",
    ):
        setup_tf_config(config_dir=str(volume.root / "missing"), timeout=0.1, pod="job-worker-0")


# The launcher as a process ----------------------------------------------------------


def launcher(
    config_dir: Path, *args: str, env: dict[str, str] | None = None, command: list[str] | None = None
) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "ranktable.launch.launcher",
        "--config-dir",
        str(config_dir),
        "--poll-interval",
        "0.02",
        *args,
    ]
    return [*argv, "--", *(command if command is not None else [sys.executable, "-c", PRINT_ENV])]


def child_env(**values: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "PYTHONPATH": REPO, **values}


def run(argv: list[str], env: dict[str, str], timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)


def test_launcher_waits_for_the_swap_then_execs_with_the_env(volume: KubeletDir) -> None:
    volume.publish_spec(make_spec([("worker", 2)], status=STATUS_INITIALIZING, present={0}, devices=2))
    proc = subprocess.Popen(
        launcher(volume.root, "--timeout", "10"),
        env=child_env(POD_NAME="job-worker-1", HOSTNAME="not-me"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Wait until it reports having seen the initializing spec (its state, not a delay).
    assert proc.stderr is not None
    seen: list[str] = []
    while not any("waiting: spec initializing" in line for line in seen) and len(seen) < 20:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
    assert any("waiting: spec initializing" in line and "members 1/2" in line for line in seen), seen
    assert proc.poll() is None  # still waiting on the initializing spec
    spec = make_spec([("worker", 2)], devices=2, epoch=5)
    volume.publish_spec(spec, hccl=True)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    env = json.loads(out)
    assert env["pid"] == proc.pid  # exec'd in place, not a child
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"worker": ["127.1.0.1:2222", "127.1.0.2:2223"]},
        "task": {"type": "worker", "index": 1},
    }
    assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"], env["MASTER_PORT"], env["RING_EPOCH"]) == (
        "1",
        "2",
        "127.1.0.1",
        "2222",
        "5",
    )
    assert env["RANK_TABLE_FILE"] == str(volume.root / "hccl.json")
    assert "epoch 5" in err


def test_launcher_without_devices_sets_no_rank_table(volume: KubeletDir) -> None:
    volume.publish_spec(make_spec([("chief", 1), ("worker", 1)]))
    result = run(launcher(volume.root, "--timeout", "5"), child_env(HOSTNAME="job-chief-0"))
    assert result.returncode == 0, result.stderr
    env = json.loads(result.stdout)
    assert env["RANK_TABLE_FILE"] is None
    assert json.loads(env["TF_CONFIG"])["task"] == {"type": "chief", "index": 0}


def test_launcher_exit_code_and_signals_pass_through(volume: KubeletDir) -> None:
    volume.publish_spec(make_spec([("worker", 1)]))
    seven = [sys.executable, "-c", "raise SystemExit(7)"]
    exits = run(launcher(volume.root, command=seven), child_env(POD_NAME="job-worker-0"))
    assert exits.returncode == 7
    trap = (
        "import signal,sys,time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(42));"
        "print('ready', flush=True); time.sleep(30)"
    )
    proc = subprocess.Popen(
        launcher(volume.root, command=[sys.executable, "-c", trap]),
        env=child_env(POD_NAME="job-worker-0"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 42


def test_launcher_times_out_with_124_saying_what_it_saw(volume: KubeletDir) -> None:
    volume.publish_spec(make_spec([("worker", 2)], status=STATUS_INITIALIZING, present={1}, epoch=2))
    result = run(launcher(volume.root, "--timeout", "0.2"), child_env(POD_NAME="job-worker-1"))
    assert result.returncode == 124
    assert "timed out after 0s" in result.stderr
    assert "last seen: spec initializing: epoch 2, members 1/2" in result.stderr
    assert result.stdout == ""


def test_launcher_pod_missing_from_completed_spec_exits_3_listing_pods(volume: KubeletDir) -> None:
    volume.publish_spec(make_spec([("worker", 2)]))
    result = run(launcher(volume.root, "--timeout", "0.2"), child_env(POD_NAME="job-worker-5"))
    assert result.returncode == 3
    assert (
        "'job-worker-5' is not in the cluster spec (epoch 1), which lists: job-worker-0, job-worker-1" in result.stderr
    )


def test_launcher_malformed_spec_exits_65(volume: KubeletDir) -> None:
    volume.publish({"cluster.json": '{"status": "completed", "members": []}'})
    result = run(launcher(volume.root, "--timeout", "5"), child_env(POD_NAME="job-worker-0"))
    assert result.returncode == 65
    assert "malformed spec in" in result.stderr and "job: missing" in result.stderr


def test_launcher_tensorflow_rule_violation_exits_65(volume: KubeletDir) -> None:
    volume.publish_spec(make_spec([("chief", 2)]))
    result = run(launcher(volume.root, "--timeout", "5"), child_env(POD_NAME="job-chief-0"))
    assert result.returncode == 65
    assert "at most one 'chief' task" in result.stderr


@pytest.mark.parametrize(
    ("argv", "code", "fragment"),
    [
        pytest.param(
            [
                "--timeout",
                "1",
                "--",
            ],
            2,
            "no command given",
            id="empty-command",
        ),
        pytest.param(["--timeout", "1"], 2, "no command given", id="no-separator"),
        pytest.param(["--bogus", "--", "true"], 2, "unrecognized arguments: --bogus", id="unknown-option"),
        pytest.param(["--timeout", "0", "--", "true"], 2, "must be positive", id="zero-timeout"),
        pytest.param(["--from-api", "--", "true"], 2, "--from-api needs --namespace", id="api-without-configmap"),
    ],
)
def test_launcher_usage_errors(tmp_path: Path, argv: list[str], code: int, fragment: str) -> None:
    result = run(
        [sys.executable, "-m", "ranktable.launch.launcher", "--config-dir", str(tmp_path), *argv],
        child_env(POD_NAME="p"),
    )
    assert result.returncode == code
    assert fragment in result.stderr


def test_launcher_command_not_found_exits_127(volume: KubeletDir) -> None:
    volume.publish_spec(make_spec([("worker", 1)]))
    result = run(launcher(volume.root, command=["/nonexistent/trainer"]), child_env(POD_NAME="job-worker-0"))
    assert result.returncode == 127
    assert "command not found: /nonexistent/trainer" in result.stderr


def test_launcher_command_not_executable_exits_126(volume: KubeletDir, tmp_path: Path) -> None:
    volume.publish_spec(make_spec([("worker", 1)]))
    script = tmp_path / "trainer.sh"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o644)  # no execute bit
    result = run(launcher(volume.root, command=[str(script)]), child_env(POD_NAME="job-worker-0"))
    assert result.returncode == 126
    assert f"command not executable: {script}" in result.stderr
    assert "ran" not in result.stdout


@pytest.mark.parametrize(
    "value", ["ten", "", "nan", "-5", "0"], ids=["word", "empty-means-default", "nan", "negative", "zero"]
)
def test_launcher_ring_timeout_from_env(volume: KubeletDir, value: str) -> None:
    # Nothing published: a valid timeout would wait; a bad one must be a usage error at once.
    argv = [sys.executable, "-m", "ranktable.launch.launcher", "--config-dir", str(volume.root), "--", "true"]
    if value == "":
        # Empty means unset (default 600 s): it waits, so it is still running when we look.
        proc = subprocess.Popen(argv, env=child_env(POD_NAME="p", RING_TIMEOUT=""), stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stderr is not None
            assert "waiting up to 600s" in proc.stderr.readline()
            assert proc.poll() is None
        finally:
            proc.kill()
            proc.wait()
        return
    result = run(argv, child_env(POD_NAME="p", RING_TIMEOUT=value), timeout=10)
    assert result.returncode == 2, result.stderr
    if value == "ten":
        assert "RING_TIMEOUT='ten' is not a number of seconds" in result.stderr
    else:
        assert "must be positive" in result.stderr


def test_launcher_ring_timeout_from_env_is_used(volume: KubeletDir) -> None:
    volume.publish_spec(make_spec([("worker", 2)], status=STATUS_INITIALIZING, present={0}))
    argv = [sys.executable, "-m", "ranktable.launch.launcher", "--config-dir", str(volume.root), "--", "true"]
    result = run(argv, child_env(POD_NAME="job-worker-1", RING_TIMEOUT="0.2"), timeout=10)
    assert result.returncode == 124, result.stderr
    assert "waiting up to 0.2s" in result.stderr


def test_launcher_import_stays_light() -> None:
    probe = (
        "import sys, ranktable.launch.launcher, ranktable.tfconfig;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'kubernetes', 'tensorflow', 'urllib3', 'yaml'}))"
    )
    result = run([sys.executable, "-c", probe], child_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_main_returns_usage_code_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    from ranktable.launch.launcher import main

    assert main(["--help"]) == 0
    assert "exit codes:" in capsys.readouterr().out
    assert main([]) == 2
