"""The bench's pure parts: percentiles, /metrics parsing, targets, comparison.

Run with ``.venv/bin/python -m pytest -q tests/bench``. No cluster needed.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.bench.bench import lease_figures
from tests.bench.leaseaudit import lease_writes
from tests.bench.load import plan_jobs
from tests.bench.measure import histogram_mean, parse_metrics, percentiles
from tests.bench.report import compare, evaluate_targets, render_table

METRICS = """\
# HELP ringcontroller_api_requests_total Requests
# TYPE ringcontroller_api_requests_total counter
ringcontroller_api_requests_total{code="200",verb="list"} 3.0
ringcontroller_api_requests_total{code="201",verb="create"} 400.0
ringcontroller_api_requests_total{code="409",verb="create"} 2.0
ringcontroller_api_requests_total{code="200",verb="update"} 200.0
workqueue_depth{controller="ring-controller",name="ring-controller",priority=""} 0.0
ringcontroller_spec_latency_seconds_bucket{le="0.01"} 150.0
ringcontroller_spec_latency_seconds_sum 3.0
ringcontroller_spec_latency_seconds_count 200.0
weird{msg="a \\"quoted\\" value"} 1
"""


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param([5.0], {"p50": 5.0, "p90": 5.0, "p99": 5.0, "max": 5.0}, id="one"),
        pytest.param(
            [float(i) for i in range(1, 101)], {"p50": 50.0, "p90": 90.0, "p99": 99.0, "max": 100.0}, id="hundred"
        ),
        pytest.param([4.0, 1.0, 3.0, 2.0], {"p50": 2.0, "p90": 4.0, "p99": 4.0, "max": 4.0}, id="unsorted-four"),
        pytest.param([], {}, id="empty"),
    ],
)
def test_percentiles_are_nearest_rank(values: list[float], expected: dict[str, float]) -> None:
    assert percentiles(values) == expected


def test_metrics_sum_by_label_and_histogram_mean() -> None:
    m = parse_metrics(METRICS)
    assert m.sum("ringcontroller_api_requests_total") == 605.0
    assert m.sum("ringcontroller_api_requests_total", verb="create") == 402.0
    assert m.by_label("ringcontroller_api_requests_total", "verb") == {"list": 3.0, "create": 402.0, "update": 200.0}
    assert m.sum("workqueue_depth", name="ring-controller") == 0.0
    assert m.has("workqueue_depth") and not m.has("workqueue_adds_total")
    assert histogram_mean(m, "ringcontroller_spec_latency_seconds") == pytest.approx(0.015)
    assert m.sum("weird", msg='a "quoted" value') == 1.0


def test_metrics_delta_counts_new_series_from_zero() -> None:
    before = parse_metrics('c_total{verb="create"} 10\n')
    after = parse_metrics('c_total{verb="create"} 15\nc_total{verb="update"} 4\n')
    delta = after.delta(before)
    assert delta.by_label("c_total", "verb") == {"create": 5.0, "update": 4.0}


def _result(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "scenario": {"name": "200x8", "jobs": 200, "pods": 8, "devices": 0, "churn_s": None},
        "latency_ms": {"p50": 10.0, "p90": 20.0, "p99": 90.0, "max": 120.0, "count": 200},
        "controller_cpu_s": 12.0,
        "controller_rss_mb": 120.0,
        "rss_per_pod_kib": 3.5,
        "configmap_writes_per_job": 2.0,
        "api_requests": {"create": 400, "update": 200},
        "events_per_s": None,
        "spec": {"max_bytes": 2000, "limit_bytes": 1032192, "completed_jobs": 200, "too_large_events": 0},
        "machine": {"cpus": 2, "load_avg_start": [1.0, 1.0, 1.0], "load_avg_end": [2.0, 1.0, 1.0]},
    }
    for key, value in over.items():
        doc[key] = value
    return doc


def _missed(doc: dict[str, Any]) -> set[str]:
    return {t.name for t in evaluate_targets(doc) if not t.met}


def test_targets_met_and_missed() -> None:
    assert _missed(_result()) == set()
    slow = _result(latency_ms={"p50": 10.0, "p90": 20.0, "p99": 100.5, "max": 200.0})
    assert _missed(slow) == {"latency_ms.p99"}
    chatty = _result(configmap_writes_per_job=2.5, controller_rss_mb=151.0, rss_per_pod_kib=None)
    assert _missed(chatty) == {"configmap_writes_per_job", "controller_rss_mb", "rss_per_pod_kib"}


def test_device_scenario_checks_size_not_latency_and_churn_checks_rate() -> None:
    big = _result(scenario={"name": "1x1024", "jobs": 1, "pods": 1024, "devices": 8, "churn_s": None})
    big["spec"] = {"max_bytes": 1_100_000, "limit_bytes": 1032192, "completed_jobs": 0, "too_large_events": 1}
    big["latency_ms"] = {}
    assert _missed(big) == {"spec.max_bytes", "jobs_completed"}
    churn = _result(
        scenario={"name": "20x8-churn", "jobs": 20, "pods": 8, "devices": 0, "churn_s": 30.0}, events_per_s=999.0
    )
    assert _missed(churn) == {"events_per_s"}
    churn["events_per_s"] = 1000.0
    assert _missed(churn) == set()


def test_small_runs_are_not_held_to_the_memory_slope() -> None:
    small = _result(scenario={"name": "1x8", "jobs": 1, "pods": 8, "devices": 0, "churn_s": None}, rss_per_pod_kib=20.0)
    small["spec"]["completed_jobs"] = 1
    assert _missed(small) == set()


def test_compare_reports_changes_and_new_figures() -> None:
    old = _result()
    new = copy.deepcopy(old)
    new["latency_ms"]["p99"] = 45.0
    new["api_requests"]["get"] = 3
    rows = {key: (a, b, change) for key, a, b, change in compare(old, new)}
    assert rows["latency_ms.p99"] == (90.0, 45.0, "-45 (-50.0%)")
    assert rows["api_requests.get"] == (None, 3.0, "new")
    assert rows["controller_rss_mb"][2] == "+0 (+0.0%)"
    assert "scenario.jobs" not in rows  # the scenario is context, not a figure


def test_table_names_every_target() -> None:
    doc = _result()
    doc["targets"] = [t.as_json() for t in evaluate_targets(doc)]
    text = render_table(doc)
    assert "scenario 200x8: 200 job(s) x 8 pods" in text
    assert "MISSED" not in text and "met    latency_ms.p99 = 90" in text


def test_plan_names_sort_in_creation_order() -> None:
    plans = plan_jobs(jobs=12, pods=8)
    assert [p.name for p in plans][:3] == ["bench-00", "bench-01", "bench-02"]
    assert plans[11].configmap == "rings-config-bench-11"
    assert plans[0].slots()[-1] == "bench-00/7"


def test_lease_figures_read_the_renewal_histogram_and_the_elector_log_lines() -> None:
    m = parse_metrics(
        'ringcontroller_lease_renewal_seconds_count{name="bench"} 4.0\n'
        'ringcontroller_lease_renewal_seconds_sum{name="bench"} 6.0\n'
    )
    lines = [
        '{"event": "leader.acquired", "level": "info"}',
        '{"event": "leader.renew_slow", "seconds": 2.5, "left": 6.1, "woke_late": 0.2}',
        '{"event": "leader.renew_slow", "seconds": 3.75, "left": 4.0, "woke_late": 1.5}',
        '{"event": "leader.renew_failed", "error": "TimeoutError: ", "woke_late": 2.0}',
        "not json",
        '{"event": "leader.lost", "reason": "renew deadline exceeded"}',
    ]
    assert lease_figures(m, lines) == {
        "renewals": 4,
        "mean_s": 1.5,
        "slow": 2,
        "slowest_s": 3.75,
        "least_left_s": 4.0,
        "woke_late_max_s": 2.0,
        "failed_attempts": 1,
        "lost": ["renew deadline exceeded"],
    }
    assert lease_figures(parse_metrics(""), [])["mean_s"] is None


def test_lease_writes_from_the_audit_log() -> None:
    def entry(ns: str, got: str, done: str, stamp: str, verb: str = "update", holder: str = "a") -> str:
        return json.dumps({
            "verb": verb, "stage": "ResponseComplete",
            "objectRef": {"resource": "leases", "namespace": ns, "name": "bench"},
            "requestReceivedTimestamp": got, "stageTimestamp": done,
            "requestObject": {"spec": {"renewTime": stamp, "holderIdentity": holder}},
        })  # fmt: skip

    lines = [
        entry(
            "ns", "2026-12-03T09:00:00.500000Z", "2026-12-03T09:00:00.600000Z", "2026-12-03T09:00:00.400000Z", "create"
        ),
        entry("other", "2026-12-03T09:00:01.000000Z", "2026-12-03T09:00:01.100000Z", "2026-12-03T09:00:01.000000Z"),
        entry("ns", "2026-12-03T09:00:03.500000Z", "2026-12-03T09:00:05.500000Z", "2026-12-03T09:00:02.500000Z"),
        '{"verb": "get", "objectRef": {"resource": "pods", "namespace": "ns"}}',
        entry(
            "ns",
            "2026-12-03T09:00:30.000000Z",
            "2026-12-03T09:00:30.100000Z",
            "2026-12-03T09:00:30.000000Z",
            holder="b",
        ),
    ]
    got = lease_writes(lines, "ns")
    assert got["writes"] == 2 and got["holder"] == "a"  # b's term after a fail-over is not counted
    assert got["apart_s"] == {"count": 1, "min": 3.0, "p50": 3.0, "p90": 3.0, "max": 3.0}
    assert got["server_s"]["max"] == 2.0 and got["server_s"]["min"] == 0.1
    assert got["client_to_server_s"]["max"] == 1.0
