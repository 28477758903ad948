"""The exec limit at 20,000 members: what ``ring-launch`` exports always fits ``execve``.

Linux refuses an exec whose one ``KEY=value`` string is over ``MAX_ARG_STRLEN``
(128 KiB) with ``E2BIG``; ``TF_CONFIG`` and ``PADDLE_TRAINER_ENDPOINTS`` of a
20,000-member spec are about 420 KB each. The launcher runs here as a real
process on a real (kubelet-style) volume holding the compressed form the
controller writes for such a job, and execs a real ``python -c``.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from model.keys import CONFIGMAP_DATA_LIMIT
from ranktable.clusterspec import ClusterSpec, spec_to_json
from ranktable.exports import (
    ExecLimitError,
    ExecLimits,
    entry_size,
    exec_limits,
    exec_overflow,
    file_variable,
    member_env,
    oversized,
)
from ranktable.launch import exitcodes
from ranktable.launch.launcher import fit_exec_limit
from ranktable.stored import pack
from ranktable.tfconfig import tf_config
from tests.support import specs
from tests.support.kubeletdir import KubeletDir
from tests.unit.test_launcher import child_env, launcher, run

MEMBERS = 20_000
POD = "job-worker-12345"
#: What the trainer sees: the small variables, the file variables, and TF_CONFIG set in-process by the drop-in.
CHILD = (
    "import json,os;"
    "seen={k:os.environ.get(k) for k in ('TF_CONFIG','PADDLE_TRAINER_ENDPOINTS','RANK','WORLD_SIZE','MASTER_ADDR',"
    "'RING_TF_CONFIG_FILE','RING_PADDLE_TRAINER_ENDPOINTS_FILE')};"
    "from ranktable.tfconfig import setup_tf_config;"
    "seen['dropin']=setup_tf_config();"
    "print(json.dumps(seen))"
)


def big_spec(members: int = MEMBERS) -> ClusterSpec:
    """A completed spec of ``members`` workers with pod-network addresses as long as a real cluster's."""
    return specs.big_spec(members, epoch=3)


@pytest.fixture(scope="module")
def spec() -> ClusterSpec:
    return big_spec()


def test_at_20000_members_two_variables_are_over_the_limit_and_nothing_else(spec: ClusterSpec) -> None:
    limits = exec_limits()
    env = member_env(spec, pod=POD, hostfile_dir="/tmp/ring-launch", rank_table_file="/tmp/hccl.json")
    assert oversized(env, per_string=limits.per_string) == ["PADDLE_TRAINER_ENDPOINTS", "TF_CONFIG"]
    assert entry_size("TF_CONFIG", env["TF_CONFIG"]) > 3 * limits.per_string  # ~420 KB: not a near miss


def test_a_20000_member_launch_execs_the_trainer_with_the_big_values_in_files(
    spec: ClusterSpec, tmp_path: Path
) -> None:
    volume = KubeletDir(tmp_path / "ring-config")
    volume.root.mkdir()
    stored = pack({"cluster.json": spec_to_json(spec)}, limit=CONFIGMAP_DATA_LIMIT)
    assert stored.compressed  # the form the controller writes for this job
    volume.publish(dict(stored.binary_data))
    hostfiles = tmp_path / "hostfiles"
    proc = run(
        launcher(volume.root, "--hostfile-dir", str(hostfiles), command=[sys.executable, "-c", CHILD]),
        child_env(POD_NAME=POD),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout)
    expected = json.dumps(tf_config(spec, pod=POD), separators=(",", ":"))
    assert seen["RANK"] == "12345" and seen["WORLD_SIZE"] == str(MEMBERS) and seen["MASTER_ADDR"] == "10.244.0.1"
    assert seen["TF_CONFIG"] is None and seen["PADDLE_TRAINER_ENDPOINTS"] is None  # not through exec
    assert seen["RING_TF_CONFIG_FILE"] == str(hostfiles / "TF_CONFIG")
    assert (hostfiles / "TF_CONFIG").read_text() == expected
    assert (hostfiles / "PADDLE_TRAINER_ENDPOINTS").read_text().count(",") == MEMBERS - 1
    assert seen["dropin"] == json.loads(expected)  # the trainer's own process gets the whole TF_CONFIG
    per_string = exec_limits().per_string
    size = entry_size("TF_CONFIG", expected)
    assert (
        f"ring-launch: warning: TF_CONFIG is {size:,} bytes, over the exec limit of {per_string:,} bytes per "
        f"variable (Linux MAX_ARG_STRLEN): not exported; its value is in {hostfiles / 'TF_CONFIG'} "
        "($RING_TF_CONFIG_FILE). TensorFlow reads TF_CONFIG only from its environment" in proc.stderr
    )
    assert "E2BIG" not in proc.stderr and "Argument list too long" not in proc.stderr


def test_the_same_environment_unfitted_is_refused_by_the_kernel(spec: ClusterSpec) -> None:
    """The control: the limit the launcher fits is real here (exec of the whole environment: E2BIG)."""
    env = {"PATH": os.environ["PATH"], **member_env(spec, pod=POD)}
    with pytest.raises(OSError, match="Argument list too long") as caught:
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=False)
    assert caught.value.errno == errno.E2BIG


def test_ring_oversized_stop_stops_with_the_variable_its_size_and_the_limit(spec: ClusterSpec, tmp_path: Path) -> None:
    volume = KubeletDir(tmp_path / "ring-config")
    volume.root.mkdir()
    volume.publish(dict(pack({"cluster.json": spec_to_json(spec)}, limit=CONFIGMAP_DATA_LIMIT).binary_data))
    proc = run(
        launcher(volume.root, "--hostfile-dir", str(tmp_path / "h")),
        child_env(POD_NAME=POD, RING_OVERSIZED="stop"),
        timeout=120,
    )
    assert proc.returncode == exitcodes.EXEC_LIMIT == 7
    size = entry_size("PADDLE_TRAINER_ENDPOINTS", ",".join(m.address for m in spec.members))
    assert proc.stderr.strip().splitlines()[-1] == (
        f"ring-launch: error: PADDLE_TRAINER_ENDPOINTS is {size:,} bytes, over the exec limit of "
        f"{exec_limits().per_string:,} bytes per variable (Linux MAX_ARG_STRLEN); RING_OVERSIZED=stop"
    )
    assert not (tmp_path / "h" / "TF_CONFIG").exists()


def test_an_unwritable_directory_stops_rather_than_dropping_the_value() -> None:
    env = {"TF_CONFIG": "x" * 200, "RANK": "0"}
    with pytest.raises(ExecLimitError, match=r"TF_CONFIG is 211 bytes, over the exec limit of 100 bytes per variable"):
        fit_exec_limit(
            env, command=["train"], directory=None, inherited={}, limits=ExecLimits(per_string=100, total=10_000)
        )


def test_fitted_small_variables_pass_unchanged_and_the_big_one_moves_to_its_file(tmp_path: Path) -> None:
    env = {"TF_CONFIG": "x" * 200, "RANK": "0"}
    fitted = fit_exec_limit(
        env, command=["train"], directory=str(tmp_path), inherited={}, limits=ExecLimits(per_string=100, total=10_000)
    )
    assert fitted == {"RANK": "0", file_variable("TF_CONFIG"): str(tmp_path / "TF_CONFIG")}
    assert (tmp_path / "TF_CONFIG").read_text() == "x" * 200


def test_an_environment_over_the_total_stops_naming_the_largest_variable() -> None:
    """The launcher's own environment (the pod's) counts too: a clear line, never a bare E2BIG."""
    inherited = {f"V{i}": "y" * 90 for i in range(50)}
    inherited["HUGE"] = "z" * 94
    limits = ExecLimits(per_string=100, total=5_000)
    with pytest.raises(ExecLimitError, match="in all") as caught:
        fit_exec_limit({"RANK": "0"}, command=["train"], directory=None, inherited=inherited, limits=limits)
    assert str(caught.value).startswith("the command line and environment are ")
    assert str(caught.value).endswith(
        "over the exec limit of 5,000 bytes in all (ARG_MAX); the largest: HUGE, 100 bytes"
    )


def test_an_environment_at_the_limit_fits() -> None:
    """Fit means at most the limit: a string of exactly ``per_string`` bytes passes, one more does not."""
    limits = ExecLimits(per_string=100, total=10_000)
    exact = {"A": "a" * 97}  # "A=" + 97 + NUL = 100
    assert entry_size("A", exact["A"]) == 100
    assert exec_overflow(exact, ["t"], limits=limits) is None
    over = exec_overflow({"A": "a" * 98}, ["t"], limits=limits)
    assert over is not None and (over.what, over.size, over.limit) == ("A", 101, 100)


def test_an_inherited_variable_over_the_limit_is_named() -> None:
    with pytest.raises(ExecLimitError, match=r"^MINE is 101 bytes, over the exec limit of 100 bytes per variable"):
        fit_exec_limit(
            {"RANK": "0"},
            command=["train"],
            directory=None,
            inherited={"MINE": "m" * 95},
            limits=ExecLimits(per_string=100, total=10_000),
        )
