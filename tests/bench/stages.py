"""Stage timestamps: where the time goes between a container's start and its trainer's start.

``build/bench.sh --vs-dns`` and ``--delivery`` record, per worker and run,
the wall-clock time (``time.time()``, this machine's clock: the node, the
control plane and the bench share it) of each stage a worker passes:

===================  ====================================================
``container_start``  the container's first command (``CONTAINER_START``)
``pleg``             the kubelet's PLEG relist saw it started (its log at
                     ``-v=2``: ``SyncLoop (PLEG) ... ContainerStarted <id>``)
``running_seen``     a watch saw the pod Running with an IP
``registered_seen``  a watch saw the launcher's registration annotation
``spec_completed``   a watch saw the job's spec ``completed``
``touch_seen``       a watch saw the controller's epoch annotation
``spec_seen``        the launcher saw the completed spec (``SPEC_SEEN``)
``exec``             TF_CONFIG exported: the command the launcher or the
                     DNS prober execs prints ``TF_CONFIG_EXEC``
``trainer_start``    train.py's first line
``first_step``       train.py's first training step done
===================  ====================================================

A run's stage time is when *every* worker had passed it (the latest
worker's), in seconds after the TrainJob's creation; a stage a runtime does
not have (the DNS baseline has no spec) is ``None``. The discovery overhead
is ``exec - container_start``: what a runtime adds once the last container
runs. To stack the stages, :func:`segments` cuts that span at each stage of
the runtime's path (:data:`CHAINS`: with self-registration the spec waits for
the launchers' announcements, not for the kubelet's Running status), in
order; a stage reached before the one ahead of it adds nothing.

Pure functions here (unit-tested in ``tests/bench/test_stages.py``), plus
:class:`StageWatch` (the watches) and :class:`KubeletLog` (the log tail).
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model.keys import EPOCH_ANNOTATION
from ranktable.clusterspec import REGISTERED_ANNOTATION
from tests.support.kubehelp import Watcher
from tests.support.nodejobs import EXEC_MARKER

Json = dict[str, Any]

__all__ = [
    "CHAINS",
    "DISCOVERY",
    "STAGES",
    "KubeletLog",
    "StageWatch",
    "klog_time",
    "parse_markers",
    "parse_pleg",
    "quantiles",
    "run_stages",
    "segments",
    "summarise_stages",
]

#: Every stage, in the order a worker of a ring-controller job passes them.
STAGES = (
    "container_start",
    "pleg",
    "running_seen",
    "registered_seen",
    "spec_completed",
    "touch_seen",
    "spec_seen",
    "exec",
    "trainer_start",
    "first_step",
)
#: The stages of the discovery overhead, from the last container's start to TF_CONFIG exported.
DISCOVERY = STAGES[: STAGES.index("exec") + 1]
#: The path each runtime's discovery takes (what waits for what), for :func:`segments`.
CHAINS: dict[str, tuple[str, ...]] = {
    "dns": ("container_start", "pleg", "running_seen", "exec"),
    "ring-file": ("container_start", "pleg", "running_seen", "spec_completed", "touch_seen", "spec_seen", "exec"),
    "ring-api": ("container_start", "pleg", "running_seen", "spec_completed", "spec_seen", "exec"),
    "ring-registered": ("container_start", "registered_seen", "spec_completed", "spec_seen", "exec"),
}

_HEX_ID = re.compile(r"\b[0-9a-f]{64}\b")
_KLOG = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6})")


def klog_time(line: str, *, year: int) -> float | None:
    """The unix time of a klog line's header (``I1201 23:55:01.123456``, local time), None if it has none."""
    m = _KLOG.match(line)
    if m is None:
        return None
    month, day, hour, minute, second, micro = (int(g) for g in m.groups())
    local = time.struct_time((year, month, day, hour, minute, second, 0, 0, -1))
    return time.mktime(local) + micro / 1e6


def parse_pleg(text: str, *, year: int) -> dict[str, float]:
    """Container id -> when the kubelet first acted on its ``ContainerStarted`` PLEG event."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if "SyncLoop (PLEG)" not in line or "ContainerStarted" not in line:
            continue
        at = klog_time(line, year=year)
        if at is None:
            continue
        for cid in _HEX_ID.findall(line):
            out.setdefault(cid, at)
    return out


def parse_markers(text: str) -> dict[str, float]:
    """The stage markers in a worker's log: ``container_start``, ``spec_seen``, ``exec`` (first of each)."""
    out: dict[str, float] = {}
    names = {"CONTAINER_START": "container_start", EXEC_MARKER: "exec"}
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "ring-launch:" and len(words) > 2 and words[1] == "SPEC_SEEN":
            out.setdefault("spec_seen", float(words[2]))
        elif words[0] in names and len(words) > 1:
            try:
                out.setdefault(names[words[0]], float(words[1]))
            except ValueError:
                continue
    return out


def run_stages(workers: Sequence[Mapping[str, float | None]], *, created: float) -> dict[str, float | None]:
    """Seconds after ``created`` at which every worker had passed each stage (None if one lacks it)."""
    out: dict[str, float | None] = {}
    for stage in STAGES:
        values = [w.get(stage) for w in workers]
        out[stage] = (
            round(max(v for v in values if v is not None) - created, 3)
            if values and all(v is not None for v in values)
            else None
        )
    return out


def segments(stages: Mapping[str, float | None], order: Sequence[str]) -> dict[str, float]:
    """The span from ``order[0]`` to ``order[-1]`` cut at each stage reached, as increments.

    Keyed by the stage that ends the increment. A stage that is missing, or
    reached before the latest of the stages listed ahead of it, adds 0; the
    increments sum to ``stages[order[-1]] - stages[order[0]]`` (both must be
    known, else the result is empty).
    """
    first, last = stages.get(order[0]), stages.get(order[-1])
    if first is None or last is None:
        return {}
    out: dict[str, float] = {}
    reached = first
    for stage in order[1:]:
        at = last if stage == order[-1] else stages.get(stage)
        target = reached if at is None else min(max(at, reached), max(last, reached))
        out[stage] = round(target - reached, 3)
        reached = target
    return out


def quantiles(values: Iterable[float]) -> dict[str, float] | None:
    """p50 / p95 / max of ``values`` (p95 linearly interpolated), None for none."""
    xs = sorted(values)
    if not xs:
        return None

    def at(q: float) -> float:
        pos = q * (len(xs) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    return {"p50": round(statistics.median(xs), 3), "p95": round(at(0.95), 3), "max": round(xs[-1], 3)}


def summarise_stages(runs: Sequence[Json], *, order: Sequence[str]) -> Json:
    """Per run group: each stage after the last container start, each increment, and end to end.

    ``runs`` carry ``stages_s`` (:func:`run_stages`). Returns
    ``{"after_start": {stage: quantiles}, "segments": {stage: quantiles},
    "end_to_end_s": quantiles}``: stage times minus the run's
    ``container_start``, the increments of :func:`segments` along ``order``, and the
    TrainJob's creation to every worker past step 1.
    """
    after: dict[str, list[float]] = {}
    cuts: dict[str, list[float]] = {}
    for run in runs:
        stages = run["stages_s"]
        start = stages.get("container_start")
        for stage in STAGES[1:]:
            value = stages.get(stage)
            if start is not None and value is not None:
                after.setdefault(stage, []).append(value - start)
        for stage, value in segments(stages, order).items():
            cuts.setdefault(stage, []).append(value)
    return {
        "after_start": {s: quantiles(after[s]) for s in STAGES if s in after},
        "segments": {s: quantiles(cuts[s]) for s in order[1:] if s in cuts},
        "end_to_end_s": quantiles(r["stages_s"]["first_step"] for r in runs if r["stages_s"].get("first_step")),
    }


# -- recording ---------------------------------------------------------------


@dataclass
class PodTimes:
    """What the watches saw of one pod (wall-clock times)."""

    name: str
    running_seen: float | None = None
    registered_seen: float | None = None
    touch_seen: float | None = None
    container_id: str | None = None


@dataclass
class StageWatch:
    """Pod and ConfigMap watches of one namespace from threads: the watch-side stages.

    ``start`` before creating anything (a watch opened later would date what it
    lists at its opening); ``stop`` at the end. Pods are keyed by uid.
    """

    core: Any
    namespace: str
    pods: dict[str, PodTimes] = field(default_factory=dict)
    completed: dict[str, float] = field(default_factory=dict)  # ConfigMap name -> first seen completed
    _watchers: list[Any] = field(default_factory=list)

    def start(self) -> None:
        self._watchers = [
            Watcher(self.core.list_namespaced_pod, self.namespace, self._on_pod, timeout_seconds=60),
            Watcher(self.core.list_namespaced_config_map, self.namespace, self._on_configmap, timeout_seconds=60),
        ]

    def stop(self) -> None:
        for w in self._watchers:
            w.stop(timeout=0)

    def _on_pod(self, pod: Any) -> None:
        now = time.time()
        meta, status = pod.metadata, pod.status
        seen = self.pods.setdefault(meta.uid, PodTimes(name=meta.name))
        if meta.deletion_timestamp is None and status is not None:
            if seen.running_seen is None and status.phase == "Running" and status.pod_ip:
                seen.running_seen = now
            for c in status.container_statuses or []:
                if c.container_id and seen.container_id is None:
                    seen.container_id = c.container_id.split("://", 1)[-1]
        notes = meta.annotations or {}
        if seen.registered_seen is None and notes.get(REGISTERED_ANNOTATION):
            seen.registered_seen = now
        if seen.touch_seen is None and notes.get(EPOCH_ANNOTATION):
            seen.touch_seen = now

    def _on_configmap(self, cm: Any) -> None:
        now = time.time()
        raw = (cm.data or {}).get("cluster.json")
        if not raw or cm.metadata.name in self.completed:
            return
        try:
            if json.loads(raw).get("status") == "completed":
                self.completed[cm.metadata.name] = now
        except ValueError:
            return


class KubeletLog:
    """The node's kubelet log from a point on: :meth:`mark`, run, then :meth:`pleg`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def mark(self) -> None:
        """Remember the log's end: :meth:`pleg` reads what comes after it."""
        self._offset = self.path.stat().st_size if self.path.exists() else 0

    def pleg(self) -> dict[str, float]:
        """:func:`parse_pleg` of the log written since :meth:`mark`."""
        with open(self.path, "rb") as handle:
            handle.seek(self._offset)
            text = handle.read().decode(errors="replace")
        return parse_pleg(text, year=time.localtime().tm_year)
