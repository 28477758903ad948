"""``build/bench.sh --vs-dns``: ring-controller against DNS probing, the same TrainJobs, one run.

On the dev cluster with the real node and the real Trainer and JobSet
controllers (``ring-devcluster up --with jobset,volcano,trainer,node``), for
each worker count and repeat, one TrainJob per runtime (:mod:`tests.support.nodejobs`):

* ``dns``: the DNS-probing baseline (CoreDNS with ``cache 30``, the JobSet
  controller's headless Service, ``publishNotReadyAddresses``);
* ``ring-file``: ``ring-launch`` on the kubelet-mounted ``rings-config``
  volume, the controller touching the member pods (the default);
* ``ring-api``: ``ring-launch --from-api``.

Per run, seconds from the TrainJob's creation to: the last worker container
started (``last_start_s``), every worker having ``TF_CONFIG``
(``tf_config_s``: train.py's start, which the launcher execs with TF_CONFIG
set) and every worker past its first training step (``first_step_s``), all
read from the containers' own clocks (this machine's). The discovery overhead
is ``tf_config_s - last_start_s``: what each runtime adds on top of starting
pods. Runtimes take turns within a repeat, so drift in the machine's load hits
them alike. ring-controller runs as a process on this machine (its image and
the shipped Deployment are tested elsewhere).

Output: a table (stdout), ``--json OUT`` (keys ``runs``: [{runtime, workers,
repeat, last_start_s, tf_config_s, first_step_s, overhead_s, workers_seen}],
``by``: per runtime and worker count p50/max, ``ratio_overhead_p50``: the DNS
p50 overhead over the best ring-controller p50 over all runs, and
``ratio_overhead_p50_by_workers``), ``--plot OUT.png`` (overhead per runtime and worker count).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from ringdevcluster import ensure_up
from tests.support import nodejobs
from tests.support.clients import workloads_state_dir
from tests.support.controllerproc import ControllerProcess

Json = dict[str, Any]
COMPONENTS = ("jobset", "trainer", "node")


def _say(msg: str) -> None:
    print(f"vs-dns: {msg}", file=sys.stderr, flush=True)


def run_one(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    *,
    namespace: str,
    kind: str,
    runtime_name: str,
    workers: int,
    name: str,
    timeout: float,
) -> Json:
    """One TrainJob from creation to its pods' end; its figures (seconds from creation)."""
    body = nodejobs.trainjob(kind, name, runtime_name=runtime_name, workers=workers)
    created = time.time()
    custom.create_namespaced_custom_object(*nodejobs.TRAINER, namespace, "trainjobs", body)
    try:
        pods = nodejobs.wait_finished(core, namespace, name, workers, timeout=timeout)
        logs = nodejobs.logs(core, namespace, pods)
    finally:
        try:
            custom.delete_namespaced_custom_object(
                *nodejobs.TRAINER, namespace, "trainjobs", name, propagation_policy="Foreground"
            )
        except ApiException as e:
            if e.status != 404:
                raise
    failed = [w for w in logs if w.result is None or w.container_start is None]
    if failed:
        tail = "\n".join(w.text[-1500:] for w in failed[:2])
        raise RuntimeError(f"{name}: {len(failed)} worker(s) without a result:\n{tail}")
    starts = [w.container_start for w in logs if w.container_start is not None]
    configs = [w.result["timestamps"]["start"] for w in logs if w.result]
    steps = [w.result["timestamps"]["first_step"] for w in logs if w.result]
    seen = {len(w.tf_config["cluster"]["worker"]) for w in logs if w.tf_config}
    run = {
        "runtime": kind,
        "workers": workers,
        "last_start_s": round(max(starts) - created, 3),
        "tf_config_s": round(max(configs) - created, 3),
        "first_step_s": round(max(steps) - created, 3),
        "workers_seen": sorted(seen),
    }
    run["overhead_s"] = round(run["tf_config_s"] - run["last_start_s"], 3)
    return run


def wait_gone(core: client.CoreV1Api, namespace: str, *, timeout: float = 120.0) -> None:
    """Wait until the namespace has no pods left (runs must not overlap on the node)."""
    deadline = time.monotonic() + timeout
    while core.list_namespaced_pod(namespace).items:
        if time.monotonic() > deadline:
            raise RuntimeError("pods of the previous run are still there")
        time.sleep(0.5)


def summarise(runs: list[Json]) -> Json:
    """p50/max per runtime and worker count, and the overhead ratios."""
    out: Json = {"by": [], "ratio_overhead_p50": None, "ratio_overhead_p50_by_workers": {}}
    groups: dict[tuple[str, int], list[Json]] = {}
    for r in runs:
        groups.setdefault((r["runtime"], r["workers"]), []).append(r)
    for (kind, workers), rs in sorted(groups.items()):
        row: Json = {"runtime": kind, "workers": workers, "runs": len(rs)}
        for key in ("last_start_s", "tf_config_s", "first_step_s", "overhead_s"):
            values = [r[key] for r in rs]
            row[key] = {"p50": round(statistics.median(values), 3), "max": round(max(values), 3)}
        out["by"].append(row)

    def ratio(rows: list[Json]) -> float | None:
        dns = [r["overhead_s"]["p50"] for r in rows if r["runtime"] == "dns"]
        ring = [r["overhead_s"]["p50"] for r in rows if r["runtime"] != "dns"]
        if not dns or not ring or min(ring) <= 0:
            return None
        return round(dns[0] / min(ring), 1)

    for workers in sorted({r["workers"] for r in runs}):
        out["ratio_overhead_p50_by_workers"][str(workers)] = ratio([r for r in out["by"] if r["workers"] == workers])
    overall: list[Json] = []
    for kind in sorted({r["runtime"] for r in runs}):
        values = [r["overhead_s"] for r in runs if r["runtime"] == kind]
        overall.append({"runtime": kind, "overhead_s": {"p50": statistics.median(values)}})
    out["ratio_overhead_p50"] = ratio(overall)
    return out


def render(summary: Json) -> str:
    lines = [
        "| runtime | workers | runs | last container started (s) | TF_CONFIG everywhere (s) | first step (s) "
        "| discovery overhead (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in summary["by"]:

        def cell(key: str, r: Json = r) -> str:
            return f"{r[key]['p50']:.2f} / {r[key]['max']:.2f}"

        lines.append(
            f"| {r['runtime']} | {r['workers']} | {r['runs']} | {cell('last_start_s')} | {cell('tf_config_s')} "
            f"| {cell('first_step_s')} | {cell('overhead_s')} |"
        )
    lines.append("")
    lines.append("p50 / max. Discovery overhead = TF_CONFIG everywhere - last container started.")
    ratios = ", ".join(f"{k} workers: {v}x" for k, v in summary["ratio_overhead_p50_by_workers"].items())
    lines.append(
        f"DNS overhead p50 / best ring-controller overhead p50: {ratios}; all runs: {summary['ratio_overhead_p50']}x"
    )
    return "\n".join(lines)


def plot(runs: list[Json], path: Path) -> None:
    """Bars: discovery overhead p50 (with max as a whisker) per runtime and worker count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [k for k in nodejobs.RUNTIMES if any(r["runtime"] == k for r in runs)]
    sizes = sorted({r["workers"] for r in runs})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / max(1, len(kinds))
    colors = {"dns": "#c0392b", "ring-file": "#2471a3", "ring-api": "#27ae60"}
    for i, kind in enumerate(kinds):
        for ax, key in ((ax1, "overhead_s"), (ax2, "first_step_s")):
            p50, top = [], []
            for n in sizes:
                values = [r[key] for r in runs if r["runtime"] == kind and r["workers"] == n]
                p50.append(statistics.median(values) if values else 0.0)
                top.append((max(values) if values else 0.0) - (statistics.median(values) if values else 0.0))
            xs = [j + (i - (len(kinds) - 1) / 2) * width for j in range(len(sizes))]
            ax.bar(xs, p50, width, yerr=[[0] * len(top), top], capsize=3, label=kind, color=colors.get(kind))
    ax1.set_title("discovery overhead: TF_CONFIG everywhere - last container started")
    ax2.set_title("TrainJob created -> every worker past step 1")
    for ax in (ax1, ax2):
        ax.set_xticks(range(len(sizes)), [f"{n} workers" for n in sizes])
        ax.set_ylabel("seconds (bar p50, whisker max)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="build/bench.sh --vs-dns",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--vs-dns", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--workers", default="2,4,8", help="worker counts, comma-separated (default 2,4,8)")
    p.add_argument("--repeats", type=int, default=5, help="runs per runtime and worker count (default 5)")
    p.add_argument("--runtimes", default=",".join(nodejobs.RUNTIMES), help="default dns,ring-file,ring-api")
    p.add_argument("--steps", type=int, default=3, help="training steps per run (default 3)")
    p.add_argument("--json", type=Path, metavar="OUT", help="write the figures here")
    p.add_argument("--plot", type=Path, metavar="OUT.png", help="draw the figures (needs matplotlib)")
    p.add_argument("--state-dir", type=Path, default=None, help="the cluster (default: the tests' workloads cluster)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one run may take")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    sizes = [int(x) for x in args.workers.split(",") if x]
    kinds = [k for k in args.runtimes.split(",") if k]
    state = args.state_dir or workloads_state_dir()
    cluster = ensure_up(state_dir=state, addons=COMPONENTS, say=_say)
    nodejobs.ensure_trainer_images()
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    core, custom, rbac = client.CoreV1Api(api), client.CustomObjectsApi(api), client.RbacAuthorizationV1Api(api)
    namespace = f"vsdns-{os.getpid()}"
    core.create_namespace({"metadata": {"name": namespace}})
    nodejobs.configmap_reader(rbac, namespace)
    data = nodejobs.make_data(Path(state) / "bench-cifar10")
    log_dir = Path(state) / "logs"
    controller = ControllerProcess(
        kubeconfig=str(cluster.kubeconfig),
        namespace=namespace,
        log_path=log_dir / f"vsdns-controller-{os.getpid()}.log",
    )
    controller.start()
    runtimes = {k: f"{namespace}-{k}" for k in kinds}
    runs: list[Json] = []
    try:
        for kind, name in runtimes.items():
            custom.create_cluster_custom_object(
                *nodejobs.TRAINER,
                "clustertrainingruntimes",
                nodejobs.runtime(kind, name, data_dir=data, steps=args.steps),
            )
        for repeat in range(args.repeats):
            for workers in sizes:
                for kind in kinds:
                    wait_gone(core, namespace)
                    name = f"{kind.replace('ring-', 'r')}-{workers}w-{repeat}"
                    run = run_one(
                        core, custom, namespace=namespace, kind=kind, runtime_name=runtimes[kind],
                        workers=workers, name=name, timeout=args.timeout,
                    )  # fmt: skip
                    run["repeat"] = repeat
                    runs.append(run)
                    _say(
                        f"{kind:9s} {workers} workers #{repeat}: last start {run['last_start_s']:.2f}s, "
                        f"TF_CONFIG {run['tf_config_s']:.2f}s (+{run['overhead_s']:.2f}s), "
                        f"first step {run['first_step_s']:.2f}s, workers seen {run['workers_seen']}"
                    )
    finally:
        controller.stop()
        for name in runtimes.values():
            try:
                custom.delete_cluster_custom_object(*nodejobs.TRAINER, "clustertrainingruntimes", name)
            except ApiException:
                pass
        core.delete_namespace(namespace, propagation_policy="Background")
    summary = summarise(runs)
    print(render(summary))
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, **summary}, indent=2) + "\n")
    if args.plot:
        plot(runs, args.plot)
        _say(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
