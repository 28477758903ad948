"""Real TensorFlow workers on this machine, without a cluster.

Two MultiWorkerMirroredStrategy workers run ``build/examples/tensorflow/
train.py`` with hand-built ``TF_CONFIG`` naming two kwok-style loopback pod
IPs (127.1.0.1, 127.1.0.2) on distinct ports, train a few steps and must end
in lockstep: each reads a different shard of the data, so identical weights
and identical (all-reduced) loss histories mean the gradients really were
all-reduced across the two processes. The cluster tests reuse
``tfharness`` with ``ring-launch`` in front of the same program.

Also here: the example's data contract (the generator writes the real
"CIFAR-10 python version" format; the trainer refuses missing batches with a
message naming them), which needs no TensorFlow and runs in milliseconds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import pickletools
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from tests.support import tfharness
from tests.support.tfharness import WorkerGroup, WorkerGroupError, WorkerSpec

POD_IPS = ("127.1.0.1", "127.1.0.2")
STEPS = 8
BATCH_FILES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


def _load_train_module() -> ModuleType:
    # train.py is a script, not a package module; its data loader imports
    # only numpy, so loading it here does not pull in TensorFlow.
    spec = importlib.util.spec_from_file_location("example_train", tfharness.TRAIN_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cifar_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tfharness.make_cifar10(tmp_path_factory.mktemp("cifar10"), per_batch=64, seed=7)


# --------------------------------------------------------------------------
# The data contract


class TestSyntheticCifar10:
    def test_batches_have_the_real_layout(self, cifar_dir: Path) -> None:
        for i, name in enumerate(BATCH_FILES, start=1):
            with (cifar_dir / name).open("rb") as f:
                batch = pickle.load(f, encoding="bytes")
            assert list(batch) == [b"batch_label", b"labels", b"data", b"filenames"]
            expected_label = "testing batch 1 of 1" if name == "test_batch" else f"training batch {i} of 5"
            assert batch[b"batch_label"] == expected_label.encode()
            data = batch[b"data"]
            assert isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.shape == (64, 3072)
            assert isinstance(batch[b"labels"], list) and len(batch[b"labels"]) == 64
            assert all(type(label) is int and 0 <= label <= 9 for label in batch[b"labels"])
            assert [type(n) for n in batch[b"filenames"]] == [bytes] * 64
        with (cifar_dir / "batches.meta").open("rb") as f:
            meta = pickle.load(f, encoding="bytes")
        assert meta[b"num_vis"] == 3072 and meta[b"num_cases_per_batch"] == 64
        assert meta[b"label_names"][:2] == [b"airplane", b"automobile"] and len(meta[b"label_names"]) == 10

    def test_pickles_are_protocol_2_with_only_numpy_globals(self, cifar_dir: Path) -> None:
        # What the real files (cPickle) contain, and all a restricted
        # unpickler (Keras's dataset loader, train.py's) lets through.
        raw = (cifar_dir / "data_batch_1").read_bytes()
        ops = list(pickletools.genops(raw))
        assert ops[0][0].name == "PROTO" and ops[0][1] == 2
        globals_used = {arg for op, arg, _ in ops if op.name == "GLOBAL"}
        assert globals_used == {"numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype"}
        assert "BINBYTES" not in {op.name for op, _, _ in ops}

    def test_pixel_layout_is_planar_rgb_row_major(self, cifar_dir: Path) -> None:
        with (cifar_dir / "data_batch_2").open("rb") as f:
            row = pickle.load(f, encoding="bytes")[b"data"][5]
        data = _load_train_module().load_cifar10(cifar_dir)
        image = np.rint(data.x_train[64 + 5] * 255).astype(np.uint8)  # 6th image of batch 2
        for r, c, ch in [(0, 0, 0), (0, 31, 1), (17, 3, 2), (31, 31, 2), (8, 20, 0)]:
            assert image[r, c, ch] == row[ch * 1024 + r * 32 + c]
        assert data.x_train.shape == (320, 32, 32, 3) and data.x_test.shape == (64, 32, 32, 3)

    def test_output_is_a_function_of_the_seed(self, tmp_path: Path) -> None:
        a = tfharness.make_cifar10(tmp_path / "a", per_batch=8, seed=3)
        b = tfharness.make_cifar10(tmp_path / "b", per_batch=8, seed=3)
        c = tfharness.make_cifar10(tmp_path / "c", per_batch=8, seed=4)
        for name in BATCH_FILES:
            assert (a / name).read_bytes() == (b / name).read_bytes()
        assert (a / "data_batch_1").read_bytes() != (c / "data_batch_1").read_bytes()


class TestMissingData:
    def _run(self, data_dir: Path) -> subprocess.CompletedProcess[str]:
        env = tfharness.worker_env(
            TF_CONFIG=tfharness.tf_config(workers=["127.1.0.1:1"], index=0), CIFAR10_DIR=str(data_dir)
        )
        return subprocess.run(
            [sys.executable, str(tfharness.TRAIN_PY), "--steps", "1"],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def test_names_exactly_the_missing_batches(self, cifar_dir: Path, tmp_path: Path) -> None:
        partial = tmp_path / "partial"
        partial.mkdir()
        for name in ("data_batch_1", "data_batch_2", "batches.meta"):
            (partial / name).write_bytes((cifar_dir / name).read_bytes())
        proc = self._run(partial)
        assert proc.returncode == 2, proc.stderr
        error = [line for line in proc.stderr.splitlines() if line.startswith("train: error:")]
        assert len(error) == 1, proc.stderr
        missing = error[0].split("missing in", 1)[1].split("(", 1)[0]
        assert missing.split(":", 1)[0].strip() == str(partial)
        assert [n.strip() for n in missing.split(":", 1)[1].split(",")] == [
            "data_batch_3",
            "data_batch_4",
            "data_batch_5",
            "test_batch",
        ]
        assert proc.stdout == ""  # failed before any training output

    def test_absent_directory_is_named(self, tmp_path: Path) -> None:
        proc = self._run(tmp_path / "nowhere")
        assert proc.returncode == 2
        assert f"CIFAR-10 data directory {tmp_path / 'nowhere'} does not exist" in proc.stderr

    def test_corrupt_batch_is_named(self, cifar_dir: Path, tmp_path: Path) -> None:
        broken = tmp_path / "broken"
        broken.mkdir()
        for name in BATCH_FILES:
            (broken / name).write_bytes((cifar_dir / name).read_bytes())
        (broken / "data_batch_4").write_bytes(b"not a pickle")
        proc = self._run(broken)
        assert proc.returncode == 2
        assert f"{broken / 'data_batch_4'} is not a CIFAR-10 python batch" in proc.stderr


# --------------------------------------------------------------------------
# Two real workers


@pytest.mark.e2e
def test_two_workers_train_in_sync(cifar_dir: Path, tmp_path: Path) -> None:
    ports = tfharness.free_ports(len(POD_IPS))
    assert len(set(ports)) == len(ports)
    addresses = [f"{ip}:{port}" for ip, port in zip(POD_IPS, ports, strict=False)]
    specs = [
        WorkerSpec(
            name=f"worker-{i}",
            argv=tfharness.train_argv(cifar_dir, steps=STEPS, result=tmp_path / f"result-{i}.json"),
            env=tfharness.worker_env(TF_CONFIG=tfharness.tf_config(workers=addresses, index=i)),
            result=tmp_path / f"result-{i}.json",
        )
        for i in range(len(POD_IPS))
    ]
    with WorkerGroup(specs, log_dir=tmp_path / "logs") as group:
        codes = group.wait(timeout=120)
        group.assert_all_succeeded(codes)
        results = group.results()
        logs = group.describe()
        assert group.started_at is not None
        started = group.started_at
        exited = max(w.ended_at or time.time() for w in group.workers)
    ended = time.time()

    r0, r1 = results["worker-0"], results["worker-1"]
    assert [r0["task"], r1["task"]] == [{"type": "worker", "index": 0}, {"type": "worker", "index": 1}]
    assert r0["workers"] == r1["workers"] == 2
    assert r0["steps"] == r1["steps"] == STEPS
    assert r0["global_batch_size"] == 32
    # In sync: same global loss at every step, bit-identical final weights.
    assert r0["losses"] == r1["losses"], logs
    assert r0["weights_sha256"] == r1["weights_sha256"], logs
    assert r0["weights_sum"] == r1["weights_sum"]
    assert all(np.isfinite(r0["losses"])) and r0["losses"][-1] < r0["losses"][0], r0["losses"]

    for i, result in enumerate((r0, r1)):
        lines = (tmp_path / "logs" / f"worker-{i}.out").read_text().splitlines()
        assert lines[0] == f"strategy ready workers=2 task=worker:{i}"
        step_lines = [line for line in lines if line.startswith("step=")]
        assert [line.split()[0] for line in step_lines] == [f"step={k}" for k in range(1, STEPS + 1)]
        assert step_lines[0].split()[1] == f"loss={result['losses'][0]:.6f}"
        ts = result["timestamps"]
        assert ts["start"] <= ts["tensorflow_imported"] <= ts["strategy_ready"] <= ts["first_step"] <= ts["end"]

    ready = max(r["timestamps"]["strategy_ready"] for r in (r0, r1)) - started
    first_step = max(r["timestamps"]["first_step"] for r in (r0, r1)) - started
    tf_import = max(r["timestamps"]["tensorflow_imported"] - r["timestamps"]["start"] for r in (r0, r1))
    print(
        "\n"
        + json.dumps(
            {
                "tf_import_s": round(tf_import, 2),
                "strategy_ready_s": round(ready, 2),
                "first_step_s": round(first_step, 2),
                "last_exit_s": round(exited - started, 2),
                "total_s": round(ended - started, 2),
                "losses": [round(x, 4) for x in r0["losses"]],
            }
        )
    )


@pytest.mark.e2e
def test_harness_stops_a_worker_waiting_for_a_missing_peer(cifar_dir: Path, tmp_path: Path) -> None:
    # Worker 0 of a two-worker cluster whose worker 1 never comes: it waits
    # in the strategy's startup, ignoring SIGTERM once TensorFlow's
    # preemption notifier is installed. The harness must give up at the
    # deadline, kill it, and report its log.
    ports = tfharness.free_ports(2)
    addresses = [f"{ip}:{port}" for ip, port in zip(POD_IPS, ports, strict=False)]
    spec = WorkerSpec(
        name="lonely",
        argv=[sys.executable, str(tfharness.TRAIN_PY), "--data-dir", str(cifar_dir), "--steps", "2"],
        env=tfharness.worker_env(TF_CONFIG=tfharness.tf_config(workers=addresses, index=0)),
    )
    timeout, grace = 10.0, 2.0
    with WorkerGroup([spec], log_dir=tmp_path / "logs", grace=grace) as group:
        began = time.monotonic()
        with pytest.raises(WorkerGroupError, match=re.escape("still running after 10s: ['lonely']")) as raised:
            group.wait(timeout=timeout)
        waited = time.monotonic() - began
        worker = group.workers[0]
        assert worker.returncode in (-signal.SIGTERM, -signal.SIGKILL)
    assert timeout <= waited < timeout + grace + 5
    assert '"task":{"type":"worker","index":0}' in str(raised.value)  # the worker's stderr tail
    assert "strategy ready" not in worker.stdout()
