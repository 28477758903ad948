"""Reading the controller under test: its process (``/proc``) and its ``/metrics``.

The controller runs as a separate process, so everything the bench knows
about its cost comes from two places an operator also has:

- ``/proc/PID/stat`` (user + system CPU ticks) and ``/proc/PID/status``
  (``VmRSS`` now, ``VmHWM`` the peak resident set since start);
- the Prometheus text of ``/metrics``, parsed into samples here (only the
  plain ``name{labels} value`` lines the client library writes; no
  exemplars, no timestamps).

Pure functions on text where possible, so the parsing is unit-tested.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Metrics",
    "ProcSample",
    "histogram_mean",
    "parse_metrics",
    "percentiles",
    "proc_sample",
]

_CLK_TCK = os.sysconf("SC_CLK_TCK")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class ProcSample:
    """One reading of a process: CPU seconds so far, resident and peak resident MiB."""

    cpu_s: float
    rss_mb: float
    hwm_mb: float


def proc_sample(pid: int) -> ProcSample:
    """Read ``pid``'s CPU time and memory now; raises OSError if it is gone."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # Field 2 (comm) may contain spaces: fields after it start at state (3).
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])
    rss_kib = hwm_kib = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kib = int(line.split()[1])
        elif line.startswith("VmHWM:"):
            hwm_kib = int(line.split()[1])
    return ProcSample(cpu_s=(utime + stime) / _CLK_TCK, rss_mb=rss_kib / 1024, hwm_mb=hwm_kib / 1024)


Labels = frozenset[tuple[str, str]]


class Metrics:
    """Samples of one ``/metrics`` scrape, looked up by name and label subset."""

    def __init__(self, samples: Mapping[tuple[str, Labels], float]) -> None:
        self.samples = dict(samples)

    def has(self, metric: str, /) -> bool:
        """True if any sample of ``metric`` exists."""
        return any(n == metric for n, _ in self.samples)

    def sum(self, metric: str, /, **match: str) -> float:
        """Sum of the samples of ``metric`` whose labels include ``match``."""
        wanted = set(match.items())
        return sum(v for (n, labels), v in self.samples.items() if n == metric and wanted <= labels)

    def by_label(self, metric: str, label: str, /, **match: str) -> dict[str, float]:
        """Samples of ``metric`` (matching ``match``) summed per value of ``label``."""
        wanted = set(match.items())
        out: dict[str, float] = {}
        for (n, labels), v in self.samples.items():
            if n != metric or not wanted <= labels:
                continue
            key = dict(labels).get(label, "")
            out[key] = out.get(key, 0.0) + v
        return out

    def delta(self, earlier: Metrics) -> Metrics:
        """This scrape minus ``earlier`` (for counters; series absent before count from 0)."""
        return Metrics({k: v - earlier.samples.get(k, 0.0) for k, v in self.samples.items()})


def parse_metrics(text: str) -> Metrics:
    """Parse Prometheus text exposition (comments and malformed lines are skipped)."""
    samples: dict[tuple[str, Labels], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line.strip())
        if m is None:
            continue
        name, raw_labels, raw_value = m.groups()
        try:
            value = float(raw_value)
        except ValueError:
            continue
        labels = frozenset(
            (k, v.replace('\\"', '"').replace("\\\\", "\\")) for k, v in _LABEL.findall(raw_labels or "")
        )
        samples[(name, labels)] = value
    return Metrics(samples)


def histogram_mean(metrics: Metrics, name: str) -> float | None:
    """``name_sum / name_count`` of a histogram, None when it has no observations."""
    count = metrics.sum(f"{name}_count")
    return metrics.sum(f"{name}_sum") / count if count else None


def percentiles(values: Sequence[float], points: Iterable[int] = (50, 90, 99)) -> dict[str, float]:
    """Nearest-rank percentiles ``p<N>`` plus ``max`` of ``values`` (empty dict if none).

    Nearest rank: the smallest value with at least N % of the values at or
    below it, so every reported figure is one that was really measured.
    """
    if not values:
        return {}
    ordered = sorted(values)
    out = {f"p{p}": ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] for p in points}
    out["max"] = ordered[-1]
    return out
