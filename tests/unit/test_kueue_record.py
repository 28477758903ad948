"""The Kueue tier's record (tests/bench/kueue.py): per-test outcomes from JUnit XML, build times from the log."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench import kueue

_JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="0" tests="3">
<testcase classname="tests.kueue.test_kueue_admission" name="test_a[jobset]" time="12.345"/>
<testcase classname="tests.kueue.test_kueue_admission" name="test_a[trainjob]" time="20.0"><failure message="boom"/></testcase>
<testcase classname="tests.kueue.test_kueue_admission" name="test_b" time="0.04"/>
</testsuite></testsuites>
"""

_LOG = """ring-devcluster: building 1 of 5 modules (kueue) into /root/.cache/ring-devcluster/bin
ring-devcluster: building kueue v0.19.2 (kueue); log: /x.log
ring-devcluster: built kueue v0.19.2 in 6m12s (1905 packages compiled, 15 manifests)
"""


def test_each_test_case_and_each_built_module_is_recorded(tmp_path: Path) -> None:
    report = tmp_path / "kueue.xml"
    report.write_text(_JUNIT)
    log = tmp_path / "build.log"
    log.write_text(_LOG)
    out = tmp_path / "kueue.json"
    code = kueue.main(
        ["record", "--junit", str(report), "--exit-code", "1", "--build-log", str(log), "--build-seconds", "380",
         "--up-seconds", "40", "--tests-seconds", "33", "--versions", "jobset=v0.12.0,kueue=v0.19.2",
         "--command", "build/kueue.sh --record", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    doc = json.loads(out.read_text())
    assert (doc["outcome"], doc["passed"], doc["failed"]) == ("failed", 2, 1)
    assert doc["built"] == {"jobset": "cached", "trainer": "cached", "kueue": "6m12s"}
    assert doc["versions"] == {"jobset": "v0.12.0", "kueue": "v0.19.2"}
    assert doc["seconds"] == {"build": 380, "up": 40, "tests": 33}
    assert doc["tests"] == [
        {"name": "test_a[jobset]", "outcome": "passed", "seconds": 12.3},
        {"name": "test_a[trainjob]", "outcome": "failure", "seconds": 20.0},
        {"name": "test_b", "outcome": "passed", "seconds": 0.0},
    ]


def test_a_run_that_built_nothing_keeps_the_last_build_on_record(tmp_path: Path) -> None:
    report = tmp_path / "kueue.xml"
    report.write_text(_JUNIT)
    out = tmp_path / "kueue.json"
    argv = ["record", "--junit", str(report), "--exit-code", "0", "--build-seconds", "1", "--up-seconds", "1",
            "--tests-seconds", "1", "--command", "build/kueue.sh --record", "--out", str(out)]  # fmt: skip
    (tmp_path / "cold.log").write_text(_LOG)
    (tmp_path / "warm.log").write_text("ring-devcluster: nothing to build\n")
    kueue.main([*argv, "--build-log", str(tmp_path / "cold.log")])
    cold = json.loads(out.read_text())["last_build"]
    assert list(cold) == ["kueue"] and cold["kueue"]["time"] == "6m12s"
    kueue.main([*argv, "--build-log", str(tmp_path / "warm.log")])
    doc = json.loads(out.read_text())
    assert doc["built"]["kueue"] == "cached" and doc["last_build"] == cold
