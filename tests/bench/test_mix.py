"""Volcano Jobs and JobSets mixed in one bench run: the plans, their names and slots, the figures by kind.

Pure parts only (``build/bench.sh --jobsets N`` runs them on a cluster). Run with
``.venv/bin/python -m pytest -q tests/bench``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.bench.bench import by_kind_figures, parse
from tests.bench.load import JOBSET, VOLCANO, mix_of, plan_jobs
from tests.bench.measure import parse_metrics
from tests.bench.observer import _slot
from tests.bench.report import mix_text, render_table
from tests.support.factories import jobset, jobset_pod, pod_template, volcano_job, volcano_pod


def test_without_jobsets_every_plan_is_a_volcano_job_named_as_before() -> None:
    plans = plan_jobs(jobs=12, pods=8)
    assert {p.kind for p in plans} == {VOLCANO}
    assert [p.name for p in plans][:2] == ["bench-00", "bench-01"]
    assert plans[0].slots()[-1] == "bench-00/7"
    assert mix_of(plans) == {VOLCANO: 12, JOBSET: 0}


@pytest.mark.parametrize(
    ("jobs", "jobsets"),
    [
        pytest.param(1000, 500, id="half"),
        pytest.param(10, 3, id="three-of-ten"),
        pytest.param(7, 6, id="all-but-one"),
        pytest.param(4, 4, id="all"),
        pytest.param(5, 0, id="none"),
    ],
)
def test_jobsets_are_spread_evenly_so_every_prefix_holds_its_share(jobs: int, jobsets: int) -> None:
    plans = plan_jobs(jobs=jobs, pods=8, jobsets=jobsets)
    assert mix_of(plans) == {VOLCANO: jobs - jobsets, JOBSET: jobsets}
    for k in range(jobs + 1):  # the bench's first half is such a prefix
        assert sum(p.kind == JOBSET for p in plans[:k]) == k * jobsets // jobs


def test_half_and_half_alternates_and_names_say_the_kind_in_creation_order() -> None:
    plans = plan_jobs(jobs=1000, pods=8, jobsets=500)
    assert [p.kind for p in plans[:4]] == [VOLCANO, JOBSET, VOLCANO, JOBSET]
    assert [p.name for p in plans[:2]] == ["bench-000", "bench-001-js"]
    assert sorted(p.name for p in plans) == [p.name for p in plans]
    assert len({p.configmap for p in plans}) == 1000
    js = plans[1]
    assert js.configmap == "rings-config-bench-001-js"
    assert js.devices == 0 and js.pods == 8


def test_a_jobset_plans_slots_are_what_the_observer_reads_from_its_job_controllers_pods() -> None:
    plan = plan_jobs(jobs=2, pods=4, jobsets=1)[1]
    js = jobset(plan.name, replicated=[("workers", 1, plan.pods)], uid="u1")
    pods = [jobset_pod(js, rjob="workers", job_index=0, completion=i) for i in range(plan.pods)]
    assert [_slot(p["metadata"]) for p in pods] == plan.slots()
    assert plan.slots()[0] == "bench-1-js-workers-0/0"
    assert plan.slots(range(2, 4)) == ["bench-1-js-workers-0/2", "bench-1-js-workers-0/3"]


def test_a_volcano_plans_slots_are_what_the_observer_reads_from_its_pods() -> None:
    plan = plan_jobs(jobs=2, pods=3, jobsets=1)[0]
    job = volcano_job(plan.name, tasks=[("worker", plan.pods)], template=pod_template(configmap=plan.configmap))
    assert [_slot(volcano_pod(job, task="worker", index=i)["metadata"]) for i in range(3)] == plan.slots()


@pytest.mark.parametrize(
    ("jobs", "jobsets", "devices", "match"),
    [
        pytest.param(4, 5, 0, "jobsets must be 0..4", id="more-than-jobs"),
        pytest.param(4, -1, 0, "jobsets must be 0..4", id="negative"),
        pytest.param(4, 2, 8, "without devices", id="devices"),
    ],
)
def test_impossible_mixes_are_refused(jobs: int, jobsets: int, devices: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        plan_jobs(jobs=jobs, pods=8, jobsets=jobsets, devices=devices)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--jobs", "1", "--jobsets", "1"], "needs --jobs 2 or more", id="one-job"),
        pytest.param(["--jobs", "4", "--jobsets", "5"], "between 0 and --jobs", id="too-many"),
        pytest.param(["--jobs", "4", "--jobsets", "2", "--churn", "10"], "--devices or --churn", id="churn"),
        pytest.param(["--jobs", "4", "--jobsets", "2", "--devices", "8"], "--devices or --churn", id="devices"),
    ],
)
def test_the_flags_refuse_mixes_the_bench_cannot_run(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit, match="2"):
        parse(argv)
    assert message in capsys.readouterr().err


def test_the_default_is_volcano_only() -> None:
    assert parse(["--jobs", "1000", "--pods", "8"]).jobsets == 0
    assert parse(["--jobs", "1000", "--pods", "8", "--jobsets", "500"]).jobsets == 500


def _completion(configmap: str, latency_s: float | None, phase: str = "initial") -> dict[str, Any]:
    return {"configmap": configmap, "epoch": 2, "at": 1.0, "latency_s": latency_s, "phase": phase, "touches": []}


def test_figures_by_kind_split_the_completions_and_the_controllers_counters() -> None:
    plans = plan_jobs(jobs=4, pods=8, jobsets=2)  # bench-0, bench-1-js, bench-2, bench-3-js
    record = {
        "completions": [
            _completion("rings-config-bench-0", 0.010),
            _completion("rings-config-bench-1-js", 0.100),
            _completion("rings-config-bench-2", 0.030),
            _completion("rings-config-bench-3-js", None),  # seen before its last member: unmeasured
            _completion("rings-config-bench-0", 5.0, phase="churn"),  # not the initial load
        ]
    }
    check = {"completions": [_completion("rings-config-bench-0", 0.012), _completion("rings-config-bench-1-js", 0.2)]}
    metrics = parse_metrics(
        'ringcontroller_configmap_writes_total{kind="vcjob",verb="create",result="ok"} 2\n'
        'ringcontroller_configmap_writes_total{kind="vcjob",verb="update",result="ok"} 2\n'
        'ringcontroller_configmap_writes_total{kind="jobset",verb="create",result="ok"} 2\n'
        'ringcontroller_configmap_writes_total{kind="jobset",verb="update",result="ok"} 3\n'
        'ringcontroller_spec_latency_seconds_sum{kind="vcjob"} 0.04\n'
        'ringcontroller_spec_latency_seconds_count{kind="vcjob"} 2\n'
        'ringcontroller_spec_latency_seconds_sum{kind="jobset"} 0\n'
        'ringcontroller_spec_latency_seconds_count{kind="jobset"} 0\n'
        'ringcontroller_pod_touches_total{kind="vcjob",result="ok"} 16\n'
        'ringcontroller_pod_touches_total{kind="jobset",result="ok"} 8\n'
        'ringcontroller_pod_touches_total{kind="jobset",result="gone"} 1\n'
    )
    figures = by_kind_figures(record, check, plans, metrics)
    assert list(figures) == [VOLCANO, JOBSET]
    volcano, js = figures[VOLCANO], figures[JOBSET]
    assert volcano["jobs"] == 2 and js["jobs"] == 2
    assert volcano["latency_ms"] == {"p50": 10.0, "p90": 30.0, "p99": 30.0, "max": 30.0, "count": 2, "unmeasured": 0}
    assert js["latency_ms"] == {"p50": 100.0, "p90": 100.0, "p99": 100.0, "max": 100.0, "count": 1, "unmeasured": 1}
    assert volcano["latency_check_ms"]["p50"] == 12.0 and js["latency_check_ms"]["p50"] == 200.0
    assert volcano["configmap_writes_per_job"] == 2.0 and js["configmap_writes_per_job"] == 2.5
    assert volcano["controller_latency_mean_ms"] == 20.0 and js["controller_latency_mean_ms"] is None
    assert volcano["pod_touches_ok"] == 16 and js["pod_touches_ok"] == 8


def test_a_volcano_only_run_has_one_kind() -> None:
    figures = by_kind_figures({"completions": []}, {"completions": []}, plan_jobs(jobs=2, pods=2), parse_metrics(""))
    assert list(figures) == [VOLCANO]


def _doc(mix: dict[str, int] | None, by_kind: dict[str, Any]) -> dict[str, Any]:
    scenario: dict[str, Any] = {"name": "4x8", "jobs": 4, "pods": 8, "devices": 0, "churn_s": None}
    if mix is not None:
        scenario["mix"] = mix
    lat = {"p50": 10.0, "p90": 20.0, "p99": 30.0, "max": 40.0, "count": 2}
    return {
        "scenario": scenario,
        "latency_ms": lat,
        "by_kind": by_kind,
        "spec": {"max_bytes": 2000, "limit_bytes": 1048576, "completed_jobs": 4, "too_large_events": 0},
        "machine": {"cpus": 2, "load_avg_start": [1.0, 1.0, 1.0], "load_avg_end": [2.0, 1.0, 1.0]},
    }


def test_the_table_shows_the_mix_and_the_latency_of_each_kind_only_when_mixed() -> None:
    kind = {"jobs": 2, "latency_ms": {"p50": 11.0, "p90": 12.0, "p99": 13.0, "max": 14.0, "count": 2}}
    mixed = render_table(_doc({VOLCANO: 2, JOBSET: 2}, {VOLCANO: kind, JOBSET: {**kind, "latency_ms": {"p50": 77.0}}}))
    assert "scenario 4x8: 4 job(s) (2 vcjob + 2 jobset) x 8 pods" in mixed
    assert "vcjob: latency_ms p50/p90/p99/max (n)" in mixed and "11/12/13/14 (2)" in mixed
    assert "jobset: latency_ms p50/p90/p99/max (n)" in mixed and "77/-/-/- (-)" in mixed
    alone = render_table(_doc({VOLCANO: 4, JOBSET: 0}, {VOLCANO: kind}))
    assert "scenario 4x8: 4 job(s) x 8 pods" in alone
    assert "vcjob:" not in alone


def test_a_result_from_before_the_mix_reads_as_volcano_only() -> None:
    assert mix_text({"jobs": 1000}) == "1000 vcjob"
    assert mix_text({"jobs": 4, "mix": {VOLCANO: 2, JOBSET: 2}}) == "2 vcjob + 2 jobset"
