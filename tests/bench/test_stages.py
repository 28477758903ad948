"""The stage timing's pure parts: kubelet log lines, log markers, per-run stages, increments, quantiles.

Run with ``.venv/bin/python -m pytest -q tests/bench``. No cluster needed.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ranktable.clusterspec import spec_to_json
from ranktable.launch.wait import FileSource, Identity, wait_for_spec
from tests.bench.stages import (
    CHAINS,
    klog_time,
    parse_markers,
    parse_pleg,
    quantiles,
    run_stages,
    segments,
    summarise_stages,
)
from tests.support.specs import make_spec

CID = "4f" * 32
SANDBOX = "9a" * 32
#: Lines as a v1.35 kubelet at -v=2 writes them (the event's rendering varies by klog version: both kept).
KUBELET_LOG = f"""\
I1201 23:55:01.100000   4242 kubelet.go:2619] "SyncLoop (PLEG): event for pod" pod="ns/w-0" event={{"ID":"u0","Type":"ContainerStarted","Data":"{SANDBOX}"}}
I1201 23:55:01.250000   4242 kubelet.go:2557] "SyncLoop UPDATE" source="api" pods=["ns/w-0"]
I1201 23:55:02.123456   4242 kubelet.go:2619] "SyncLoop (PLEG): event for pod" pod="ns/w-0" event=&{{ID:u0 Type:ContainerStarted Data:{CID}}}
I1201 23:55:03.000000   4242 kubelet.go:2619] "SyncLoop (PLEG): event for pod" pod="ns/w-0" event=&{{ID:u0 Type:ContainerStarted Data:{CID}}}
I1201 23:55:04.000000   4242 kubelet.go:2619] "SyncLoop (PLEG): event for pod" pod="ns/w-1" event={{"ID":"u1","Type":"ContainerDied","Data":"{"ab" * 32}"}}
"""


def test_klog_header_is_local_wall_clock() -> None:
    expected = time.mktime((2026, 12, 1, 23, 55, 2, 0, 0, -1)) + 0.123456
    assert klog_time("I1201 23:55:02.123456   4242 x.go:1] msg", year=2026) == pytest.approx(expected)
    assert klog_time("ring-launch: not klog", year=2026) is None


def test_pleg_start_is_the_first_container_started_line_of_each_container() -> None:
    found = parse_pleg(KUBELET_LOG, year=2026)
    assert found[CID] == pytest.approx(time.mktime((2026, 12, 1, 23, 55, 2, 0, 0, -1)) + 0.123456)
    assert SANDBOX in found  # the sandbox has its own id: callers look containers up by theirs
    assert "ab" * 32 not in found  # died, not started


def test_markers_of_a_worker_log() -> None:
    text = "\n".join(
        [
            "CONTAINER_START 100.5",
            "ring-launch: pod w-0: waiting up to 300s for a completed spec in /etc/ring-config/cluster.json",
            "ring-launch: SPEC_SEEN 101.25",
            "ring-launch: TF_CONFIG={...}",
            "TF_CONFIG_EXEC 101.3",
            "TF_CONFIG_EXEC 999",  # a second one (a restart) does not move the first
            "TF_CONFIG_READY 50 workers=2",  # the DNS prober's own line is not the exec marker
        ]
    )
    assert parse_markers(text) == {"container_start": 100.5, "spec_seen": 101.25, "exec": 101.3}


def test_the_launcher_prints_spec_seen_with_the_wall_clock(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text(spec_to_json(make_spec([("worker", 2)])))
    lines: list[str] = []
    before = time.time()
    wait_for_spec(FileSource(str(tmp_path)), Identity(pod="job-worker-1"), timeout=5, progress=lines.append)
    seen = parse_markers("\n".join(f"ring-launch: {line}" for line in lines))["spec_seen"]
    assert before <= seen <= time.time()


def test_a_run_stage_is_the_last_worker_and_missing_when_one_lacks_it() -> None:
    workers = [
        {"container_start": 10.0, "exec": 11.0, "spec_seen": 10.9},
        {"container_start": 10.4, "exec": 10.8, "spec_seen": None},
    ]
    at = run_stages(workers, created=9.0)
    assert (at["container_start"], at["exec"]) == (1.4, 2.0)
    assert at["spec_seen"] is None
    assert at["pleg"] is None


def test_segments_follow_the_runtime_path_and_sum_to_the_overhead() -> None:
    registered = {
        "container_start": 1.0,
        "pleg": 1.6,  # the kubelet noticed later than the launcher announced itself
        "running_seen": 2.0,
        "registered_seen": 1.2,
        "spec_completed": 1.3,
        "spec_seen": 1.4,
        "exec": 1.45,
    }
    cuts = segments(registered, CHAINS["ring-registered"])
    assert cuts == pytest.approx({"registered_seen": 0.2, "spec_completed": 0.1, "spec_seen": 0.1, "exec": 0.05})
    # the same times read along the Running path: everything after the container start is "PLEG"
    assert segments(registered, CHAINS["ring-api"])["pleg"] == pytest.approx(0.45)
    file_mode = {"container_start": 0.0, "running_seen": 0.7, "spec_completed": 0.72, "spec_seen": 1.9, "exec": 2.0}
    assert segments(file_mode, CHAINS["ring-file"]) == {
        "pleg": 0.0,  # missing (kubelet log below -v=2): adds nothing, its time goes to the next stage
        "running_seen": 0.7,
        "spec_completed": 0.02,
        "touch_seen": 0.0,
        "spec_seen": 1.18,
        "exec": 0.1,
    }
    late = {"container_start": 0.0, "running_seen": 0.5, "spec_completed": 0.4, "exec": 0.6}
    assert segments(late, CHAINS["ring-api"])["spec_completed"] == 0.0  # reached before the stage ahead of it
    assert sum(segments(late, CHAINS["ring-api"]).values()) == pytest.approx(0.6)
    assert segments({"container_start": 1.0, "exec": None}, CHAINS["dns"]) == {}


def test_quantiles() -> None:
    assert quantiles([]) is None
    q = quantiles(float(x) for x in range(1, 21))  # 1..20
    assert q == {"p50": 10.5, "p95": 19.05, "max": 20.0}


def test_summary_of_runs_measures_after_the_last_container_start() -> None:
    runs = [
        {"stages_s": {"container_start": 1.0, "running_seen": 1.5, "spec_seen": 1.8, "exec": 2.0, "first_step": 9.0}},
        {"stages_s": {"container_start": 2.0, "running_seen": 2.7, "spec_seen": 2.9, "exec": 3.0, "first_step": 11.0}},
    ]
    summary = summarise_stages(runs, order=CHAINS["ring-api"])
    assert summary["after_start"]["running_seen"] == {"p50": 0.6, "p95": 0.69, "max": 0.7}
    assert summary["after_start"]["exec"]["p50"] == 1.0
    assert "pleg" not in summary["after_start"]  # never seen: no figure rather than a made-up one
    assert list(summary["segments"]) == list(CHAINS["ring-api"][1:])
    assert summary["segments"]["spec_seen"]["p50"] == 0.25
    assert summary["end_to_end_s"] == {"p50": 10.0, "p95": 10.9, "max": 11.0}
