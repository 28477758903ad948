"""Launcher start -> spec observed, and the cost of waiting: before and after the one-file launcher.

    build/bench.sh --launcher [--repeats 5] [--concurrency 1,8] [--wait 60] [--before REF] [--json OUT]

Start: N launchers (``--concurrency``) start at once, each with
``--print json`` against a spec that is already completed, in file mode (a
kubelet-style directory) and API mode (a ConfigMap on the real API server,
the admin kubeconfig's client certificate). Per launcher: wall seconds from
process start to exit (it exits right after it observed the spec and printed
the variables) and CPU seconds (user + system, from ``wait4``'s rusage).
"before" runs ``python -m ranktable.launcher`` from ``git archive REF``
(default: where this branch left main) with this virtualenv's Python, as the
console script did; "after" runs ``python3 -I -S dist/ring-launch.pyz``
(built from the work tree).

Wait: one file-mode launcher waits ``--wait`` seconds on an initializing spec;
then the completed spec is swapped in the kubelet's way. Reported: its CPU
seconds over the whole run, and over ``--swaps`` short waits (p50 and max)
the latency from the swap to the launcher's "spec completed" line (the
figure the 50 ms target is about) and to its exit.

Prints a table; ``--json`` writes the figures. The cluster is the tests'
(``$RING_DEVCLUSTER_STATE``), brought up or reused like the tests do.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ranktable.clusterspec import STATUS_INITIALIZING
from tests.support import launcherpyz
from tests.support.clients import REPO, K8s, devcluster_state_dir
from tests.support.kubehelp import create_namespace, delete_namespace
from tests.support.kubeletdir import KubeletDir
from tests.support.launcherapi import put_spec
from tests.support.specs import make_spec

POD = "job-worker-3"
CM = "rings-config-bench"


def _say(message: str) -> None:
    print(f"bench-launcher: {message}", file=sys.stderr, flush=True)


def before_tree(ref: str, into: Path) -> Path:
    """``ranktable`` as it was at ``ref`` (git archive), unpacked under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, "ranktable"], check=True, capture_output=True
    ).stdout
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def run_at_once(argvs: Sequence[Sequence[str]], env: dict[str, str], cwd: Path) -> list[tuple[float, float, int]]:
    """Start every argv at once in ``cwd``; per process (wall s, CPU s, exit code).

    ``cwd`` must not hold a ``ranktable``: ``python -m`` puts it first on the path.
    """
    started: dict[int, float] = {}
    for argv in argvs:
        t0 = time.monotonic()
        proc = subprocess.Popen(list(argv), env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started[proc.pid] = t0
    results = []
    while started:
        pid, status, usage = os.wait4(-1, 0)
        if pid in started:
            results.append(
                (
                    time.monotonic() - started.pop(pid),
                    usage.ru_utime + usage.ru_stime,
                    os.waitstatus_to_exitcode(status),
                )
            )
    return results


def summary(rows: list[tuple[float, float, int]]) -> dict[str, float]:
    walls = [r[0] for r in rows]
    cpus = [r[1] for r in rows]
    failed = [r[2] for r in rows if r[2] != 0]
    if failed:
        raise RuntimeError(f"{len(failed)} launchers failed (exit {failed[0]})")
    return {
        "wall_p50": statistics.median(walls),
        "wall_max": max(walls),
        "cpu_mean": statistics.mean(cpus),
        "cpu_max": max(cpus),
        "n": len(rows),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--launcher", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--concurrency", default="1,8")
    p.add_argument("--wait", type=float, default=60.0, help="seconds of the file-mode wait (default 60)")
    p.add_argument("--swaps", type=int, default=10, help="swap -> exit samples (default 10)")
    p.add_argument("--parts", default="start,wait", help="which measurements (default start,wait)")
    p.add_argument("--before", default=None, help="git ref of the old launcher (default: merge-base with main)")
    p.add_argument("--json", type=Path, metavar="OUT")
    args = p.parse_args(argv)

    from ringdevcluster import ensure_up

    cluster = ensure_up(state_dir=devcluster_state_dir(), say=_say)
    k8s = K8s.from_kubeconfig(cluster.kubeconfig)
    ref = (
        args.before
        or subprocess.run(
            ["git", "-C", str(REPO), "merge-base", "HEAD", "main"], check=True, capture_output=True, text=True
        ).stdout.strip()
    )
    work = Path(tempfile.mkdtemp(prefix="bench-launcher-"))
    old = before_tree(ref, work / "before")
    pyz = launcherpyz.build(work / "ring-launch.pyz")
    namespace = create_namespace(k8s, f"bench-launcher-{os.getpid()}")
    figures: dict[str, Any] = {"before_ref": ref, "start": {}, "wait": {}}
    try:
        volume = KubeletDir(work / "config")
        (work / "config").mkdir()
        spec = make_spec([("worker", 8)])
        volume.publish_spec(spec)
        put_spec(k8s, namespace, CM, spec)
        variants = {
            "before": [sys.executable, "-m", "ranktable.launcher"],
            "after": [sys.executable, "-I", "-S", str(pyz)],
        }
        env_of = {
            "before": {"PATH": os.environ["PATH"], "PYTHONPATH": str(old), "POD_NAME": POD},
            "after": {"PATH": os.environ["PATH"], "POD_NAME": POD},
        }
        modes = {
            "file": ["--config-dir", str(volume.root)],
            "api": ["--from-api", "--kubeconfig", str(cluster.kubeconfig), "--namespace", namespace, "--configmap", CM],
        }
        lines = [f"{'variant':8} {'mode':5} {'N':>3} {'wall p50':>9} {'wall max':>9} {'CPU-s/launcher':>15}"]
        for mode, mode_args in modes.items() if "start" in args.parts.split(",") else ():
            for n in [int(x) for x in args.concurrency.split(",")]:
                for variant, base in variants.items():
                    rows: list[tuple[float, float, int]] = []
                    for _ in range(args.repeats):
                        argv1 = [*base, *mode_args, "--timeout", "60", "--print", "json"]
                        rows += run_at_once([argv1] * n, env_of[variant], work)
                    s = summary(rows)
                    figures["start"][f"{variant}/{mode}/{n}"] = s
                    lines.append(
                        f"{variant:8} {mode:5} {n:>3} {s['wall_p50']:>8.3f}s {s['wall_max']:>8.3f}s {s['cpu_mean']:>14.3f}"
                    )
                    _say(lines[-1])
        for variant, base in variants.items() if "wait" in args.parts.split(",") else ():
            figures["wait"][variant] = wait_figures(base, env_of[variant], work / f"wait-{variant}", args)
            w = figures["wait"][variant]
            lines.append(
                f"{variant:8} file wait {args.wait:g}s: CPU {w['cpu_wait']:.3f}s; swap -> spec observed p50 "
                f"{w['observed_p50'] * 1000:.0f} ms, max {w['observed_max'] * 1000:.0f} ms; -> exit p50 "
                f"{w['swap_p50'] * 1000:.0f} ms, max {w['swap_max'] * 1000:.0f} ms ({w['swaps']:.0f} swaps)"
            )
            _say(lines[-1])
        print("\n".join(lines))
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    finally:
        delete_namespace(k8s, namespace)
    return 0


def wait_figures(base: list[str], env: dict[str, str], directory: Path, args: argparse.Namespace) -> dict[str, float]:
    """CPU over one long wait, and swap -> exit latencies over short ones (file mode)."""
    directory.mkdir()
    volume = KubeletDir(directory)
    waiting = make_spec([("worker", 8)], status=STATUS_INITIALIZING, present={0, 1})
    argv = [*base, "--config-dir", str(directory), "--timeout", str(args.wait + 60), "--print", "json"]

    def one(wait: float) -> tuple[float, float, float]:
        """(swap -> "spec completed" line on stderr, swap -> exit, CPU-s of the whole run)."""
        volume.publish_spec(waiting)
        proc = subprocess.Popen(
            argv, env=env, cwd=directory.parent, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        assert proc.stderr is not None
        time.sleep(wait)
        swapped = time.monotonic()
        volume.publish_spec(make_spec([("worker", 8)]))
        observed = float("nan")
        for line in proc.stderr:
            if "spec completed" in line:
                observed = time.monotonic() - swapped
                break
        proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        exited = time.monotonic() - swapped
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"the waiting launcher failed (exit {os.waitstatus_to_exitcode(status)})")
        return observed, exited, usage.ru_utime + usage.ru_stime

    _, _, cpu = one(args.wait)
    samples = [one(1.0 + 0.137 * i) for i in range(args.swaps)]
    return {
        "cpu_wait": cpu,
        "observed_p50": statistics.median(s[0] for s in samples),
        "observed_max": max(s[0] for s in samples),
        "swap_p50": statistics.median(s[1] for s in samples),
        "swap_max": max(s[1] for s in samples),
        "swaps": float(len(samples)),
    }


if __name__ == "__main__":
    sys.exit(main())
