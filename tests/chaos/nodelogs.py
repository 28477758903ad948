"""The node chaos run's judges on plain data: trainer runs from kubelet-timestamped logs,
the time to training again, mixed epochs (:mod:`tests.chaos.node` collects the logs).

Each trainer run prints ``RUN ring_epoch=E restart=R`` first (the job's
command does), then train.py's ``step=K ...`` lines and ``done ...
weights_sha256=...``, then ``RESULT {json}``; the kubelet prefixes each
line with its RFC 3339 timestamp (``timestamps=True``).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]

RUN_LINE = re.compile(r"^RUN ring_epoch=(\d+) restart=(\d*)$")
STEP_LINE = re.compile(r"^step=(\d+) ")
DONE_LINE = re.compile(r"^done .*weights_sha256=([0-9a-f]+)")


@dataclass
class TrainerRun:
    """One start of train.py inside one container: its epoch and its steps (kubelet timestamps)."""

    pod: str
    epoch: int
    started: float
    steps: list[tuple[int, float]] = field(default_factory=list)
    result: Json | None = None
    #: The final weights' SHA-256 from train.py's ``done`` line (printed before its RESULT).
    weights: str | None = None


def _stamp(text: str) -> float:
    # RFC 3339 with nanoseconds: keep microseconds for fromisoformat.
    head, _, frac = text.rstrip("Z").partition(".")
    return dt.datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00").timestamp()


def parse_runs(pod: str, text: str) -> list[TrainerRun]:
    """The trainer runs of one container's log (``timestamps=True``)."""
    runs: list[TrainerRun] = []
    for raw in text.splitlines():
        stamp, _, line = raw.partition(" ")
        try:
            at = _stamp(stamp)
        except ValueError:
            continue
        if m := RUN_LINE.match(line):
            runs.append(TrainerRun(pod, int(m.group(1)), at))
        elif runs and (m := STEP_LINE.match(line)):
            runs[-1].steps.append((int(m.group(1)), at))
        elif runs and (m := DONE_LINE.match(line)):
            runs[-1].weights = m.group(1)
        elif runs and line.startswith("RESULT "):
            runs[-1].result = json.loads(line[len("RESULT ") :])
    return runs


def stepped_since(
    runs: list[TrainerRun], pods: list[str], since: float, *, restarted: bool = False
) -> dict[str, float]:
    """Each pod's first step after ``since`` (those of ``pods`` that stepped).

    ``restarted``: only steps of trainer runs started after ``since`` count (the
    fault restarts every trainer; the old ones may still finish a step or two
    while the fault takes effect).
    """
    first: dict[str, float] = {}
    for run in runs:
        if run.pod not in pods or (restarted and run.started <= since):
            continue
        for _, at in run.steps:
            if at > since and (run.pod not in first or at < first[run.pod]):
                first[run.pod] = at
    return first


def mixed_epochs(runs: list[TrainerRun], timeline: list[tuple[float, int]], *, lag: float = 1.5) -> dict[str, int]:
    """Steps done together by runs of different epochs; steps by a run whose epoch was superseded.

    ``timeline``: (time, epoch) of the ConfigMap as observed (sampled every
    0.2 s); a step more than ``lag`` after a newer epoch was seen is stale.
    """
    events = sorted((step, at, run.epoch, run.pod) for run in runs for step, at in run.steps)
    together = 0
    by_step: dict[int, list[tuple[float, int]]] = {}
    for step, at, epoch, _ in events:
        by_step.setdefault(step, []).append((at, epoch))
    for attempts in by_step.values():
        attempts.sort()
        group: list[tuple[float, int]] = []
        for at, epoch in attempts:
            if group and at - group[-1][0] > 3.0:
                together += len({e for _, e in group}) > 1
                group = []
            group.append((at, epoch))
        together += len({e for _, e in group}) > 1
    superseded, late = 0, 0.0
    for _, at, epoch, _ in events:
        newer = [t for t, e in timeline if e > epoch]
        if newer and at > min(newer) + lag:
            superseded += 1
            late = max(late, at - min(newer))
    return {
        "steps_with_mixed_epochs": together,
        "steps_after_a_newer_epoch": superseded,
        "old_epoch_stepped_on_s": round(late, 1),
    }
