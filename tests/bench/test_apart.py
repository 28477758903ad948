"""The bench's figures from observers apart from the load: how two observers' results are read and compared."""

from __future__ import annotations

from tests.bench.bench import _agreement, _latency_figures


def _observed(latencies: list[float | None], phase: str = "initial") -> dict[str, object]:
    return {
        "completions": [
            {"configmap": f"cm{i}", "epoch": 1, "at": 0.0, "latency_s": s, "phase": phase, "size": 1, "touches": []}
            for i, s in enumerate(latencies)
        ]
    }


def test_latency_figures_take_one_phase_and_count_the_unmeasured() -> None:
    observed = _observed([0.010, 0.020, None, 0.030])
    observed["completions"] += _observed([5.0], phase="churn")["completions"]  # type: ignore[operator]
    figures = _latency_figures(observed, "initial")
    assert figures["count"] == 3 and figures["unmeasured"] == 1 and figures["max"] == 30.0


def test_two_observers_agree_within_20_percent_of_the_larger_and_not_beyond() -> None:
    assert _agreement({"p50": 100.0, "p99": 200.0}, {"p50": 81.0, "p99": 240.0})["agree"]
    apart = _agreement({"p50": 100.0, "p99": 364.0}, {"p50": 18.0, "p99": 71.0})  # the gap issue 36 reported
    assert not apart["agree"] and apart["p99"] == 0.805
    assert not _agreement({"p50": None, "p99": None}, {"p50": 1.0, "p99": 1.0})["agree"]
