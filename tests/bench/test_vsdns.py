"""``build/bench.sh --vs-dns``'s pure parts: the probe trainer and the summary of trained and probe runs.

No cluster needed: ``python -m pytest -q tests/bench/test_vsdns.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ringdevcluster.harness import parse_log
from tests.bench import vsdns
from tests.support import nodejobs

TF_CONFIG = {"cluster": {"worker": ["10.0.0.1:12345", "10.0.0.2:12345"]}, "task": {"type": "worker", "index": 1}}


def test_probe_reports_the_tf_config_it_was_given_as_train_py_would() -> None:
    env = {**os.environ, "TF_CONFIG": json.dumps(TF_CONFIG)}
    out = subprocess.run([sys.executable, "-c", nodejobs.PROBE], env=env, capture_output=True, text=True, check=True)
    log = parse_log("w-1", "CONTAINER_START 1.5\n" + out.stdout)
    assert log.tf_config == TF_CONFIG
    assert log.result is not None
    assert log.result["timestamps"]["first_step"] is None
    assert log.result["timestamps"]["start"] > 1.5


def test_probe_runtime_runs_the_probe_instead_of_train_py(tmp_path: Path) -> None:
    trained = nodejobs.pod_spec(nodejobs.runtime("ring-api", "a", data_dir=tmp_path))["containers"][0]
    probed = nodejobs.pod_spec(nodejobs.runtime("ring-api", "b", data_dir=tmp_path, trainer="probe"))["containers"][0]
    assert trained["args"][:2] == ["python", "/app/train.py"]
    assert probed["args"] == ["python", "-c", nodejobs.PROBE]
    assert probed["command"] == trained["command"]  # the same launcher and markers before it


def test_only_the_first_e2e_repeats_train() -> None:
    args = argparse.Namespace(e2e_repeats=2)
    assert [vsdns._trainer(args, r) for r in range(4)] == ["tensorflow", "tensorflow", "probe", "probe"]
    assert vsdns._trainer(argparse.Namespace(e2e_repeats=None), 19) == "tensorflow"


def _run(kind: str, overhead: float, first_step: float | None) -> dict[str, Any]:
    return {
        "runtime": kind,
        "workers": 2,
        "last_start_s": 1.0,
        "exported_s": 1.0 + overhead,
        "tf_config_s": 1.1 + overhead,
        "first_step_s": first_step,
        "overhead_s": overhead,
    }


def test_summary_takes_end_to_end_from_trained_runs_and_splits_the_overhead() -> None:
    runs = [
        _run("ring-api", 0.2, 7.0),
        _run("ring-api", 0.4, 9.0),
        _run("ring-api", 0.1, None),
        _run("dns", 10.0, 15.0),
    ]
    summary = vsdns.summarise(runs)
    (ring,) = [r for r in summary["by"] if r["runtime"] == "ring-api"]
    assert ring["runs"] == 3
    assert ring["runs_e2e"] == 2
    assert ring["first_step_s"]["max"] == 9.0
    assert ring["overhead_s"]["p50"] == 0.2
    assert ring["overhead_s_by_trainer"]["probe"]["p50"] == 0.1
    assert ring["overhead_s_by_trainer"]["tensorflow"]["max"] == 0.4
    assert summary["ratio_overhead_p50_by_workers"]["2"] == 50.0
    assert "ring-api 2 workers: trained" in vsdns.render(summary)


def test_merge_summarises_runs_of_several_files_together(tmp_path: Path) -> None:
    first, second, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "out.json"
    first.write_text(json.dumps({"runs": [_run("dns", 10.0, 15.0)], "failures": []}))
    second.write_text(json.dumps({"runs": [_run("ring-api", 0.25, 7.0)], "failures": [{"runtime": "ring-api"}]}))
    assert vsdns.main(["--merge", str(first), str(second), "--json", str(out)]) == 0
    merged = json.loads(out.read_text())
    assert len(merged["runs"]) == 2
    assert merged["ratio_overhead_p50_by_workers"]["2"] == 40.0
    assert merged["failures"] == [{"runtime": "ring-api"}]
