"""The bench's output: the JSON interface, the targets, the human table, the comparison.

The JSON keys named in issue 6 are an interface (dashboards and
``--compare`` read them) and stay stable: ``latency_ms`` {``p50``, ``p90``,
``p99``, ``max``}, ``controller_cpu_s``, ``controller_rss_mb``,
``rss_per_pod_kib``, ``configmap_writes_per_job``, ``api_requests`` (by
verb), ``events_per_s``. Everything else (``scenario``, ``events``,
``spec``, ``timings_s``, ``machine``, ``targets``, ``by_kind``, ...) is
context that may grow; ``scenario.mix`` says how many jobs of each workload
kind the run had (absent in results from before JobSets could be mixed in:
Volcano Jobs only), and the interface keys count every kind. A figure that was not measured in a run is ``null``, never 0.

Pure functions on plain dicts: unit-tested in ``tests/bench/test_report.py``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from model.volcano import SHORT as VOLCANO

Json = dict[str, Any]

__all__ = [
    "SCHEMA_VERSION",
    "Target",
    "compare",
    "evaluate_targets",
    "flatten",
    "mix_text",
    "render_comparison",
    "render_table",
]

SCHEMA_VERSION = 1

#: Below this many pods the two RSS samples are too close for a slope.
MIN_PODS_FOR_SLOPE = 400


@dataclass(frozen=True)
class Target:
    """One target of issue 6: ``value`` must be ``op`` (``<=`` or ``>=``) ``limit``."""

    name: str
    value: float | None
    op: str
    limit: float

    @property
    def met(self) -> bool:
        """False when the figure is missing or on the wrong side of the limit."""
        if self.value is None or (isinstance(self.value, float) and math.isnan(self.value)):
            return False
        return self.value <= self.limit if self.op == "<=" else self.value >= self.limit

    def as_json(self) -> Json:
        return {"name": self.name, "value": self.value, "op": self.op, "limit": self.limit, "met": self.met}


def evaluate_targets(result: Json) -> list[Target]:
    """The targets that apply to ``result``'s scenario, evaluated.

    - every run: each job's spec completed, peak controller RSS at most 150 MB;
    - no devices: p99 latency at most 100 ms, at most 2 ConfigMap writes per
      job (create + completed; counted before any churn);
    - at least ``MIN_PODS_FOR_SLOPE`` pods, no devices: at most 4 KiB per
      tracked pod (a device pod also holds its annotation and parsed devices,
      and the slope of a single big NPU job includes rendering its spec);
    - devices: the spec fits the ConfigMap limit;
    - churn: at least 1,000 pod events per second handled.
    """
    scenario = result["scenario"]
    total = scenario["jobs"] * scenario["pods"]
    targets = [
        Target("jobs_completed", float(result["spec"]["completed_jobs"]), ">=", float(scenario["jobs"])),
        Target("controller_rss_mb", result.get("controller_rss_mb"), "<=", 150.0),
    ]
    if not scenario.get("devices"):
        targets.append(Target("latency_ms.p99", (result.get("latency_ms") or {}).get("p99"), "<=", 100.0))
        targets.append(Target("configmap_writes_per_job", result.get("configmap_writes_per_job"), "<=", 2.0))
    else:
        targets.append(
            Target("spec.max_bytes", float(result["spec"]["max_bytes"]), "<=", float(result["spec"]["limit_bytes"]))
        )
    if total >= MIN_PODS_FOR_SLOPE and not scenario.get("devices"):
        targets.append(Target("rss_per_pod_kib", result.get("rss_per_pod_kib"), "<=", 4.0))
    if scenario.get("churn_s"):
        targets.append(Target("events_per_s", result.get("events_per_s"), ">=", 1000.0))
    return targets


def flatten(doc: Json, prefix: str = "") -> Iterator[tuple[str, float]]:
    """Numeric leaves of ``doc`` as (dotted path, value); lists and strings are skipped."""
    for key, value in doc.items():
        path = f"{prefix}{key}"
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            yield path, float(value)
        elif isinstance(value, dict):
            yield from flatten(value, path + ".")


#: Leaves compared by ``--compare``: the interface keys and the context worth a delta.
COMPARED_PREFIXES = (
    "latency_ms.",
    "controller_cpu_s",
    "controller_rss_mb",
    "rss_per_pod_kib",
    "configmap_writes_per_job",
    "api_requests.",
    "by_kind.",
    "events_per_s",
    "events.",
    "spec.max_bytes",
    "controller_latency_mean_ms",
    "controller_queue.",
    "timings_s.",
    "cpu_s.",
    "apiserver_ms.",
)


def compare(old: Json, new: Json) -> list[tuple[str, float | None, float | None, str]]:
    """Rows (key, old, new, change) for every compared figure present in either run."""
    a = dict(flatten(old))
    b = dict(flatten(new))
    keys = [k for k in dict.fromkeys([*a, *b]) if k.startswith(COMPARED_PREFIXES)]
    rows = []
    for key in keys:
        x, y = a.get(key), b.get(key)
        if x is None or y is None:
            change = "new" if x is None else "gone"
        elif x == 0:
            change = "=" if y == 0 else f"{y - x:+.4g}"
        else:
            change = f"{y - x:+.4g} ({(y - x) / abs(x) * 100:+.1f}%)"
        rows.append((key, x, y, change))
    return rows


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e6 else f"{value:.0f}"
    return str(value)


def _touch_row(touch: Json | None) -> str:
    if not touch:
        return "-"
    delay = touch.get("delay_ms") or {}
    return (
        f"{touch['touched']}/{touch['members']}, {_fmt(touch.get('last_ms'))} "
        f"({_fmt(touch.get('pods_per_s'))} pods/s), {'/'.join(_fmt(delay.get(k)) for k in ('p50', 'p90', 'p99'))}; "
        f"PATCH pods on the API server: {_fmt(touch.get('apiserver_pod_patches'))} "
        f"({_fmt(touch.get('apiserver_pod_patches_per_job'))} per job)"
    )


def mix_text(scenario: Json) -> str:
    """The jobs of each kind, e.g. ``500 vcjob + 500 jobset``; ``vcjob`` alone for a result without a mix."""
    mix = scenario.get("mix") or {VOLCANO: scenario["jobs"]}
    return " + ".join(f"{n} {kind}" for kind, n in mix.items() if n)


def _kind_rows(result: Json) -> list[tuple[str, Any]]:
    """One row per figure that differs by kind, when the run mixed kinds."""
    by_kind = result.get("by_kind") or {}
    if len(by_kind) < 2:
        return []
    rows: list[tuple[str, Any]] = []
    for kind, figures in by_kind.items():
        lat = figures.get("latency_ms") or {}
        check = figures.get("latency_check_ms") or {}
        rows += [
            (
                f"{kind}: latency_ms p50/p90/p99/max (n)",
                "/".join(_fmt(lat.get(k)) for k in ("p50", "p90", "p99", "max")) + f" ({_fmt(lat.get('count'))})",
            ),
            (f"{kind}: second observer p50/p99", "/".join(_fmt(check.get(k)) for k in ("p50", "p99"))),
            (
                f"{kind}: configmap writes per job, controller latency mean (ms), pods touched",
                f"{_fmt(figures.get('configmap_writes_per_job'))}, {_fmt(figures.get('controller_latency_mean_ms'))}, "
                f"{_fmt(figures.get('pod_touches_ok'))}",
            ),
        ]
    return rows


def render_table(result: Json) -> str:
    """The human summary of one run (stdout)."""
    s = result["scenario"]
    lines = [
        f"scenario {s['name']}: {s['jobs']} job(s)"
        + (f" ({mix_text(s)})" if any(n for kind, n in (s.get("mix") or {}).items() if kind != VOLCANO) else "")
        + f" x {s['pods']} pods"
        + (f", {s['devices']} devices each" if s.get("devices") else "")
        + (f", churn ({s.get('churn_mode')}) {s['churn_s']}s" if s.get("churn_s") else "")
        + (f", created at {s['create_qps']:g}/s" if s.get("create_qps") else ""),
        f"machine: {result['machine']['cpus']} cpus, load average {result['machine']['load_avg_start']} at start,"
        f" {result['machine']['load_avg_end']} at end",
    ]
    lat = result.get("latency_ms") or {}
    rows: list[tuple[str, Any]] = [
        ("latency_ms p50/p90/p99/max", "/".join(_fmt(lat.get(k)) for k in ("p50", "p90", "p99", "max"))),
        ("latency samples (unmeasured)", f"{_fmt(lat.get('count'))} ({_fmt(lat.get('unmeasured'))})"),
        *(
            [
                (
                    "second observer p50/p99 (differs by)",
                    "/".join(_fmt((result["latency_check_ms"] or {}).get(k)) for k in ("p50", "p99"))
                    + " ({})".format(
                        "/".join(_fmt((result.get("latency_agreement") or {}).get(k)) for k in ("p50", "p99"))
                    ),
                ),
                (
                    "observer on the load's loop p50/p99",
                    "/".join(_fmt((result.get("latency_in_loop_ms") or {}).get(k)) for k in ("p50", "p99")),
                ),
            ]
            if result.get("latency_check_ms")
            else []
        ),
        *_kind_rows(result),
        ("controller latency mean (ms)", result.get("controller_latency_mean_ms")),
        (
            "controller queue wait / sync mean (ms)",
            "/".join(_fmt((result.get("controller_queue") or {}).get(k)) for k in ("wait_mean_ms", "sync_mean_ms")),
        ),
        (
            "controller syncs (queue adds)",
            f"{_fmt((result.get('controller_queue') or {}).get('syncs'))} ({_fmt((result.get('controller_queue') or {}).get('adds'))})",
        ),
        ("controller_cpu_s", result.get("controller_cpu_s")),
        ("controller_rss_mb (peak)", result.get("controller_rss_mb")),
        ("rss_per_pod_kib", result.get("rss_per_pod_kib")),
        ("configmap_writes_per_job", result.get("configmap_writes_per_job")),
        (
            "controller writes per job",
            ", ".join(f"{k}={_fmt(v)}" for k, v in (result.get("controller_writes_per_job") or {}).items()),
        ),
        (
            "touches: pods, last (ms), delay p50/p90/p99 (ms)",
            _touch_row(result.get("touch")),
        ),
        (
            "API server writes (all clients)",
            ", ".join(f"{k}={_fmt(v)}" for k, v in (result.get("apiserver_writes") or {}).items()),
        ),
        ("api_requests", ", ".join(f"{k}={_fmt(v)}" for k, v in sorted((result.get("api_requests") or {}).items()))),
        ("spec max bytes / limit", f"{_fmt(result['spec']['max_bytes'])} / {_fmt(result['spec']['limit_bytes'])}"),
        ("jobs completed / SpecTooLarge", f"{result['spec']['completed_jobs']} / {result['spec']['too_large_events']}"),
        ("events_per_s", result.get("events_per_s")),
    ]
    events = result.get("events")
    if events:
        rows += [
            (
                "events handled (source)",
                f"{_fmt(events.get('handled'))} in {_fmt(events.get('seconds'))}s ({events.get('source')})",
            ),
            ("events per controller cpu-s", events.get("per_cpu_s")),
            (
                "cpu use during churn (cores)",
                ", ".join(f"{k}={_fmt(v)}" for k, v in (events.get("cpu_util") or {}).items()),
            ),
            ("pods churned (restored after)", f"{_fmt(events.get('replaced'))} ({_fmt(events.get('restored'))})"),
            (
                "re-completion latency p50/p99 (ms)",
                "/".join(_fmt((events.get("latency_ms") or {}).get(k)) for k in ("p50", "p99")),
            ),
            ("settle after churn (s)", events.get("settle_s")),
        ]
    rows += [(f"time {k} (s)", v) for k, v in (result.get("timings_s") or {}).items()]
    rows.append(
        ("cpu seconds while loading", ", ".join(f"{k}={_fmt(v)}" for k, v in (result.get("cpu_s") or {}).items()))
    )
    rows.append(
        (
            "API server mean ms",
            ", ".join(f"{k}={_fmt(v)}" for k, v in (result.get("apiserver_ms") or {}).items() if v is not None),
        )
    )
    width = max(len(k) for k, _ in rows)
    lines += [f"  {k:<{width}}  {_fmt(v)}" for k, v in rows]
    lines.append("targets:")
    for t in result.get("targets") or []:
        lines.append(
            f"  {'met   ' if t['met'] else 'MISSED'} {t['name']} = {_fmt(t['value'])} (target {t['op']} {_fmt(t['limit'])})"
        )
    return "\n".join(lines)


def render_comparison(rows: list[tuple[str, float | None, float | None, str]]) -> str:
    """The ``--compare`` table."""
    width = max([len(r[0]) for r in rows] + [6])
    out = [f"  {'figure':<{width}}  {'old':>12}  {'new':>12}  change"]
    out += [f"  {k:<{width}}  {_fmt(a):>12}  {_fmt(b):>12}  {c}" for k, a, b, c in rows]
    return "\n".join(out)
