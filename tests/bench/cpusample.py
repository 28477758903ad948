"""Who used the CPU while a job's workers were discovering each other: every process, sampled from /proc.

    python -m tests.bench.cpusample record OUT.jsonl            # until interrupted (Ctrl-C / SIGTERM)
    python -m tests.bench.cpusample window RUNS.json OUT.jsonl [--before 0.5]

``record`` reads every process's CPU time (``/proc/PID/stat``: user +
system clock ticks) every 20 ms and writes one JSON line per sample: its
wall time and the ticks each *group* of processes used since the sample
before (:func:`group`: the launchers, the bench's marker shells, the API
server, the kubelet, containerd and its shims, etcd, ring-controller, the
sampler itself, the rest). A process seen for the first time counts all of
its ticks. Run it beside ``build/bench.sh --vs-dns --json RUNS.json`` on
the same machine (every run there records its ``created`` wall time).

``window`` sums, for each run of ``RUNS.json``, the CPU seconds of each
group from ``--before`` seconds ahead of the last container start to
TF_CONFIG exported everywhere (the discovery overhead's span and a little
before it), and prints them per run and in total, with the cores busy
(CPU seconds over wall seconds). Pure functions (:func:`group`,
:func:`window`) are unit-tested in tests/bench/test_cpusample.py.

This is how docs/performance.md's CPU breakdown of the 8-worker runs was
taken. A sampler costs CPU too (its own group says how much: about 8 % of
one core here).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

INTERVAL = 0.02
GROUPS = (
    "launcher",
    "trainer",
    "container shells",
    "kube-apiserver",
    "kubelet",
    "containerd",
    "etcd",
    "ring-controller",
    "sampler",
    "other",
)


def group(comm: str, cmdline: str) -> str:
    """The group of a process by its ``comm`` and command line (see the module docstring)."""
    if "ring-launch" in cmdline and comm.startswith("python"):
        return "launcher"
    if "train.py" in cmdline or '"RESULT "' in cmdline:  # train.py, or the bench's probe in its place
        return "trainer"
    if "tests.bench.cpusample" in cmdline:
        return "sampler"
    if comm in ("sh", "date") and ("CONTAINER_START" in cmdline or "TF_CONFIG_EXEC" in cmdline):
        return "container shells"
    if comm.startswith("containerd") or comm.startswith("runc"):
        return "containerd"
    for name in ("kube-apiserver", "kubelet", "etcd", "ring-controller"):
        if comm.startswith(name[:15]):  # comm is cut at 15 characters
            return name
    return "other"


def window(samples: Iterable[Mapping[str, Any]], start: float, end: float, *, hz: float) -> dict[str, float]:
    """CPU seconds per group of the samples taken within [``start``, ``end``] (their ``d``: ticks since the one before)."""
    ticks: Counter[str] = Counter()
    for sample in samples:
        if start <= sample["t"] <= end:
            ticks.update(sample["d"])
    return {name: round(ticks[name] / hz, 3) for name in sorted(ticks)}


def _processes() -> Iterable[tuple[str, str, int]]:
    """(pid, stat text, ticks) of every process readable now."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        yield pid, stat, int(fields[11]) + int(fields[12])


def _comm(stat: str) -> str:
    return stat[stat.find("(") + 1 : stat.rfind(")")]


def _describe(pid: str, comm: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        cmdline = ""
    return group(comm, cmdline)


def record(out: Path) -> None:
    """Sample until SIGINT or SIGTERM; one JSON line per sample (see the module docstring)."""
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    before: dict[str, int] = {}
    groups: dict[str, tuple[str, str]] = {}  # pid -> (comm, group): described again when comm changes (an exec)
    with out.open("w", encoding="utf-8") as handle:
        while not stop:
            now = time.time()
            used: Counter[str] = Counter()
            seen: dict[str, int] = {}
            for pid, stat, ticks in _processes():
                comm = _comm(stat)
                if pid not in groups or groups[pid][0] != comm:  # a container's first process execs several times
                    groups[pid] = (comm, _describe(pid, comm))
                seen[pid] = ticks
                spent = ticks - before.get(pid, 0)
                if spent > 0:
                    used[groups[pid][1]] += spent
            for pid in set(groups) - set(seen):
                del groups[pid]
            before = seen
            handle.write(json.dumps({"t": round(now, 3), "d": dict(used)}) + "\n")
            handle.flush()
            time.sleep(INTERVAL)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="sample every process's CPU every 20 ms into OUT.jsonl until interrupted")
    rec.add_argument("out", type=Path)
    win = sub.add_parser("window", help="CPU seconds per group within each run's discovery span")
    win.add_argument("runs", type=Path, help="the --json of build/bench.sh --vs-dns")
    win.add_argument("samples", type=Path, help="what `record` wrote")
    win.add_argument("--before", type=float, default=0.5, help="seconds ahead of the last container start (0.5)")
    args = p.parse_args(argv)
    if args.command == "record":
        record(args.out)
        return 0
    runs = json.loads(args.runs.read_text())["runs"]
    samples = [json.loads(line) for line in args.samples.read_text().splitlines() if line.strip()]
    hz = float(os.sysconf("SC_CLK_TCK"))
    total: Counter[str] = Counter()
    wall = 0.0
    for run in runs:
        if "created" not in run or run.get("exported_s") is None:
            continue
        start = run["created"] + run["last_start_s"] - args.before
        end = run["created"] + run["exported_s"]
        used = window(samples, start, end, hz=hz)
        total.update(used)
        wall += end - start
        cpu = sum(used.values())
        print(
            f"{run['runtime']} {run['workers']} workers #{run.get('repeat', '?')}: {end - start:.2f} s, "
            f"{cpu:.2f} CPU-s ({cpu / (end - start):.2f} cores): "
            + ", ".join(f"{name} {seconds:.2f}" for name, seconds in sorted(used.items(), key=lambda kv: -kv[1]))
        )
    if wall:
        cpu = sum(total.values())
        print(
            f"all: {wall:.2f} s, {cpu:.2f} CPU-s ({cpu / wall:.2f} cores): "
            + ", ".join(f"{name} {seconds:.2f}" for name, seconds in sorted(total.items(), key=lambda kv: -kv[1]))
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
