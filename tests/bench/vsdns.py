"""``build/bench.sh --vs-dns``: ring-controller against DNS probing, the same TrainJobs, one run.

On the dev cluster with the real node and the real Trainer and JobSet
controllers (``ring-devcluster up --with jobset,volcano,trainer,node``), for
each worker count and repeat, one TrainJob per runtime (:mod:`tests.support.nodejobs`):

* ``dns``: the DNS-probing baseline (CoreDNS with ``cache 30``, the JobSet
  controller's headless Service, ``publishNotReadyAddresses``);
* ``ring-file``: ``ring-launch`` on the kubelet-mounted ``rings-config``
  volume, the controller touching the member pods (the default);
* ``ring-api``: ``ring-launch --from-api``;
* ``ring-registered``: ``ring-api`` with self-registration (issue 24: the
  launcher announces itself on its own pod; the controller counts it without
  waiting for the kubelet's Running status). It fails at once, saying why,
  where the checkout lacks that feature (:func:`tests.support.nodejobs.check_registration`).

Per run, seconds from the TrainJob's creation to: the last worker container
started (``last_start_s``), TF_CONFIG exported in every worker
(``exported_s``: the command the launcher execs prints it), train.py started
everywhere (``tf_config_s``, the figure before stage timing) and every worker
past its first training step (``first_step_s``, end to end), all read from
the containers' own clocks (this machine's). The discovery overhead is
``exported_s - last_start_s``: what each runtime adds on top of starting
pods. Every run also records the stages of :mod:`tests.bench.stages`
(``stages_s``, and per worker ``worker_stages_s``), the kubelet's PLEG among
them: the bench sets the node's kubelet to ``-v=2`` at run time
(:func:`ringdevcluster.node.set_kubelet_verbosity`, no restart). Runtimes take
turns within a repeat, so drift in the machine's load hits them alike.
ring-controller runs as a process on this machine (its image and the shipped
Deployment are tested elsewhere).

Output: tables (stdout), ``--json OUT`` (keys ``runs``: [{runtime, workers,
repeat, last_start_s, exported_s, tf_config_s, first_step_s, overhead_s,
workers_seen, stages_s, worker_stages_s}], ``by``: per runtime and worker
count p50/p95/max of each figure and ``stages`` (:func:`tests.bench.stages.summarise_stages`),
``ratio_overhead_p50``: the DNS p50 overhead over the best ring-controller
p50 over all runs, and ``ratio_overhead_p50_by_workers``), ``--plot OUT.png``
(the discovery stages stacked, and end to end, per runtime and worker count).

``--network NAME`` (a cluster made with ``ring-devcluster up --with node
--second-network``, whose pods all have ``eth1`` on the network
``default/ring-fast``): every ring-controller runtime also runs, in the same
turn, with its TrainJob annotated ``ring-controller.io/network: NAME``; those
runs carry ``"network": NAME`` and their rows are labelled ``RUNTIME on
NAME``. A run on the network whose ``TF_CONFIG`` lists an address outside the
second network's ranges fails. Each run records the machine's 1-minute load
(``load1``, ``/proc/loadavg``) at its start.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from model.keys import NETWORK_ANNOTATION
from ringdevcluster import ensure_up, node
from tests.bench import stages
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
    watch: stages.StageWatch,
    kubelet: stages.KubeletLog,
    network: str | None = None,
) -> Json:
    """One TrainJob from creation to its pods' end; its figures (seconds from creation).

    ``network``: the TrainJob is annotated to be listed on that network (``--network``)."""
    body = nodejobs.trainjob(kind, name, runtime_name=runtime_name, workers=workers)
    if network is not None:
        body["metadata"].setdefault("annotations", {})[NETWORK_ANNOTATION] = network
    load1 = float(Path("/proc/loadavg").read_text().split()[0])
    kubelet.mark()
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
    steps = [w.result["timestamps"].get("first_step") for w in logs if w.result]
    seen = {len(w.tf_config["cluster"]["worker"]) for w in logs if w.tf_config}
    if network is not None:
        _check_on_network(name, [w.tf_config for w in logs if w.tf_config])
    per_worker = worker_stages(pods, logs, watch=watch, pleg=kubelet.pleg(), configmap=f"rings-config-{name}")
    at = stages.run_stages(per_worker, created=created)
    run = {
        "runtime": kind,
        **({"network": network} if network is not None else {}),
        "load1": load1,
        "workers": workers,
        "created": round(created, 3),
        "last_start_s": round(max(starts) - created, 3),
        "exported_s": at["exec"],
        "tf_config_s": round(max(configs) - created, 3),
        "first_step_s": round(max(steps) - created, 3) if steps and None not in steps else None,
        "workers_seen": sorted(seen),
        "stages_s": at,
        "worker_stages_s": [
            {k: (round(v - created, 3) if v is not None else None) for k, v in w.items()} for w in per_worker
        ],
    }
    exported = run["exported_s"] if run["exported_s"] is not None else run["tf_config_s"]
    run["overhead_s"] = round(exported - run["last_start_s"], 3)
    return run


def _check_on_network(name: str, configs: list[Json]) -> None:
    """Every address in the workers' TF_CONFIG is on the second pod network; RuntimeError otherwise."""
    for tf_config in configs:
        for address in tf_config["cluster"]["worker"]:
            ip = ipaddress.ip_address(address.rpartition(":")[0].strip("[]"))
            if not any(ip in c for c in (node.POD_CIDR2, node.POD_CIDR2_6)):
                raise RuntimeError(f"{name}: TF_CONFIG lists {address}, not on the second pod network")


def label(run: Json) -> str:
    """A run's row: its runtime, and the network it was listed on (``--network``) if any."""
    return f"{run['runtime']} on {run['network']}" if run.get("network") else str(run["runtime"])


def worker_stages(
    pods: list[Any],
    logs: list[nodejobs.WorkerLog],
    *,
    watch: stages.StageWatch,
    pleg: dict[str, float],
    configmap: str,
) -> list[dict[str, float | None]]:
    """Each worker's stage times (wall clock) from its log, the watches and the kubelet's PLEG lines."""
    out = []
    for pod, log in zip(pods, logs, strict=True):
        marks = stages.parse_markers(log.text)
        seen = watch.pods.get(pod.metadata.uid) or stages.PodTimes(name=pod.metadata.name)
        cid = next(
            (c.container_id.split("://", 1)[-1] for c in pod.status.container_statuses or [] if c.container_id),
            seen.container_id,
        )
        timestamps = (log.result or {}).get("timestamps") or {}
        out.append(
            {
                "container_start": marks.get("container_start"),
                "pleg": pleg.get(cid) if cid else None,
                "running_seen": seen.running_seen,
                "registered_seen": seen.registered_seen,
                "spec_completed": watch.completed.get(configmap),
                "touch_seen": seen.touch_seen,
                "spec_seen": marks.get("spec_seen"),
                "exec": marks.get("exec"),
                "trainer_start": timestamps.get("start"),
                "first_step": timestamps.get("first_step"),
            }
        )
    return out


def wait_gone(core: client.CoreV1Api, namespace: str, *, timeout: float = 120.0) -> None:
    """Wait until the namespace has no pods left (runs must not overlap on the node)."""
    deadline = time.monotonic() + timeout
    while core.list_namespaced_pod(namespace).items:
        if time.monotonic() > deadline:
            raise RuntimeError("pods of the previous run are still there")
        time.sleep(0.5)


FIGURES = ("last_start_s", "exported_s", "tf_config_s", "first_step_s", "overhead_s")
#: Stage columns of the stage table, after the last container start.
STAGE_LABELS = {
    "pleg": "PLEG",
    "running_seen": "Running+IP seen",
    "registered_seen": "registered seen",
    "spec_completed": "spec completed",
    "touch_seen": "touch seen",
    "spec_seen": "SPEC_SEEN",
    "exec": "TF_CONFIG exported",
    "trainer_start": "train.py start",
}


def summarise(runs: list[Json]) -> Json:
    """p50/p95/max per runtime and worker count (figures and stages), and the overhead ratios."""
    out: Json = {"by": [], "ratio_overhead_p50": None, "ratio_overhead_p50_by_workers": {}}
    groups: dict[tuple[str, int], list[Json]] = {}
    for r in runs:
        groups.setdefault((label(r), r["workers"]), []).append(r)
    order = {k: i for i, k in enumerate(nodejobs.RUNTIMES)}
    for (name, workers), rs in sorted(
        groups.items(), key=lambda kv: (kv[0][1], order.get(kv[1][0]["runtime"], 99), kv[0][0])
    ):
        kind = rs[0]["runtime"]
        row: Json = {"runtime": name, "workers": workers, "runs": len(rs)}
        for key in FIGURES:
            row[key] = stages.quantiles(r[key] for r in rs if r.get(key) is not None)
        row["runs_e2e"] = sum(1 for r in rs if r.get("first_step_s") is not None)
        trained = [r["overhead_s"] for r in rs if r.get("first_step_s") is not None]
        probed = [r["overhead_s"] for r in rs if r.get("first_step_s") is None]
        if trained and probed:  # the two kinds of run apart: does training after discovery shift it?
            row["overhead_s_by_trainer"] = {"tensorflow": stages.quantiles(trained), "probe": stages.quantiles(probed)}
        if all("stages_s" in r for r in rs):
            row["stages"] = stages.summarise_stages(rs, order=stages.CHAINS[kind])
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
    for kind in sorted({label(r) for r in runs}):
        values = [r["overhead_s"] for r in runs if label(r) == kind]
        overall.append({"runtime": kind, "overhead_s": {"p50": statistics.median(values)}})
    out["ratio_overhead_p50"] = ratio(overall)
    return out


def _cell(q: Json | None) -> str:
    return "-" if not q else f"{q['p50']:.2f} / {q['p95']:.2f} / {q['max']:.2f}"


def render(summary: Json) -> str:
    lines = [
        "| runtime | workers | runs (trained) | last container started (s) | TF_CONFIG exported everywhere (s) "
        "| every worker past step 1 (s) | discovery overhead (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in summary["by"]:
        lines.append(
            f"| {r['runtime']} | {r['workers']} | {r['runs']} ({r['runs_e2e']}) | {_cell(r['last_start_s'])} "
            f"| {_cell(r['exported_s'])} "
            f"| {_cell(r['first_step_s'])} | {_cell(r['overhead_s'])} |"
        )
    lines.append("")
    lines.append(
        "p50 / p95 / max, seconds from the TrainJob's creation. "
        "Discovery overhead = TF_CONFIG exported everywhere - last container started. "
        "Runs (trained): all runs, and in brackets those that trained to step 1 (the others ran the probe, "
        "--e2e-repeats); end to end is from the trained runs only."
    )
    split = [r for r in summary["by"] if r.get("overhead_s_by_trainer")]
    if split:
        lines.append("")
        lines.append("Discovery overhead of trained runs against probe runs (p50 / p95 / max):")
        for r in split:
            both = r["overhead_s_by_trainer"]
            lines.append(
                f"- {r['runtime']} {r['workers']} workers: trained {_cell(both['tensorflow'])}, "
                f"probe {_cell(both['probe'])}"
            )
    ratios = ", ".join(f"{k} workers: {v}x" for k, v in summary["ratio_overhead_p50_by_workers"].items())
    lines.append(
        f"DNS overhead p50 / best ring-controller overhead p50: {ratios}; all runs: {summary['ratio_overhead_p50']}x"
    )
    lines.append("")
    lines.append(
        "Stages, seconds after the last container started until every worker had passed each (p50 / p95 / max):"
    )
    lines.append("")
    lines.append("| runtime | workers | " + " | ".join(STAGE_LABELS.values()) + " |")
    lines.append("|---|---|" + "---|" * len(STAGE_LABELS))
    for r in summary["by"]:
        after = (r.get("stages") or {}).get("after_start") or {}
        lines.append(
            f"| {r['runtime']} | {r['workers']} | " + " | ".join(_cell(after.get(k)) for k in STAGE_LABELS) + " |"
        )
    return "\n".join(lines)


#: Colours of the stacked stages (increments ending at each stage) and of end to end.
STAGE_COLORS = {
    "pleg": "#7f8c8d",
    "running_seen": "#c0392b",
    "registered_seen": "#8e44ad",
    "spec_completed": "#f39c12",
    "touch_seen": "#16a085",
    "spec_seen": "#2471a3",
    "exec": "#27ae60",
}


def plot(summary: Json, path: Path) -> None:
    """Left: the discovery overhead's stages stacked (p50 of each increment; a tick marks the overhead's own
    p50, a whisker its p95) per runtime and worker count. Right: end to end, stacked (p50s)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = summary["by"]
    kinds = [k for k in nodejobs.RUNTIMES if any(r["runtime"] == k for r in rows)]
    sizes = sorted({r["workers"] for r in rows})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.6))
    width = 0.8 / max(1, len(kinds))
    labelled: set[str] = set()
    ring = [r["overhead_s"] for r in rows if r["runtime"] != "dns"] or [r["overhead_s"] for r in rows]
    top = max(q["p95"] for q in ring) * 1.35
    ax1.set_ylim(0, top)
    highest = 0.0
    for i, kind in enumerate(kinds):
        for j, n in enumerate(sizes):
            row = next((r for r in rows if r["runtime"] == kind and r["workers"] == n), None)
            if row is None:
                continue
            x = j + (i - (len(kinds) - 1) / 2) * width
            cuts = (row.get("stages") or {}).get("segments") or {}
            bottom = 0.0
            for stage, color in STAGE_COLORS.items():
                q = cuts.get(stage)
                if not q or q["p50"] <= 0:
                    continue
                labelled.add(stage)
                ax1.bar(x, q["p50"], width * 0.9, bottom=bottom, color=color)
                bottom += q["p50"]
            over = row["overhead_s"]
            ax1.errorbar(x, over["p50"], yerr=[[0], [over["p95"] - over["p50"]]], fmt="k_", capsize=3, ms=12)
            if kind == "dns":  # off the scale of the others: its height as a label
                ax1.text(x, top * 0.97, f"dns {over['p50']:.1f}s", ha="center", va="top", fontsize=7, rotation=90)
            else:
                ax1.text(x, max(bottom, over["p95"]) + top * 0.01, kind.replace("ring-", ""), ha="center",
                         va="bottom", fontsize=7, rotation=90)  # fmt: skip
            created_start = row["last_start_s"]["p50"]
            exported = row["exported_s"]["p50"] if row["exported_s"] else created_start
            first = row["first_step_s"]["p50"] if row["first_step_s"] else exported
            parts = [
                ("created -> last container start", created_start, "#bdc3c7"),
                ("-> TF_CONFIG exported", exported - created_start, "#27ae60"),
                ("-> every worker past step 1", first - exported, "#34495e"),
            ]
            bottom = 0.0
            for label, value, color in parts:
                ax2.bar(x, value, width * 0.9, bottom=bottom, color=color, label=label if (i, j) == (0, 0) else None)
                bottom += value
            highest = max(highest, bottom)
            ax2.text(x, bottom + 0.2, kind.replace("ring-", ""), ha="center", va="bottom", fontsize=7, rotation=90)
    ax1.set_title("discovery overhead by stage (last container started -> TF_CONFIG exported)")
    ax2.set_title("end to end: TrainJob created -> every worker past step 1")
    ax2.set_ylim(0, highest * 1.3)
    for ax in (ax1, ax2):
        ax.set_xticks(range(len(sizes)), [f"{n} workers" for n in sizes])
        ax.set_ylabel("seconds (p50; overhead: tick p50, whisker p95)" if ax is ax1 else "seconds (p50)")
    handles = [Patch(color=c, label=STAGE_LABELS[k]) for k, c in STAGE_COLORS.items() if k in labelled]
    below = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.09), "fontsize": 7}
    ax1.legend(handles=handles, ncol=4, title="increment ending at", title_fontsize=7, **below)
    ax2.legend(ncol=3, **below)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


#: A runtime that failed this many runs is left out of the rest of the measurement.
MAX_FAILURES = 3


def _schedule(args: argparse.Namespace, sizes: list[int], kinds: list[str]) -> list[tuple[int, int, str, str | None]]:
    """(repeat, workers, runtime, network) in run order: runtimes (and, with ``--network``, each ring
    runtime on the pod network and on that network) take turns within a repeat."""
    return [
        (repeat, workers, kind, network)
        for repeat in range(args.repeats)
        for workers in sizes
        for kind in kinds
        if not (kind == "dns" and args.dns_repeats is not None and repeat >= args.dns_repeats)
        for network in ((None,) if kind == "dns" or args.network is None else (None, args.network))
    ]


def _runtime_name(name: str, trainer: str) -> str:
    """The ClusterTrainingRuntime of runtime ``name`` with ``trainer`` (train.py keeps the plain name)."""
    return name if trainer == "tensorflow" else f"{name}-{trainer}"


def _trainer(args: argparse.Namespace, repeat: int) -> str:
    """What repeat ``repeat`` runs after TF_CONFIG: train.py for the first ``--e2e-repeats``, then the probe."""
    return "tensorflow" if args.e2e_repeats is None or repeat < args.e2e_repeats else "probe"


def without_state_dir(argv: list[str]) -> list[str]:
    """``argv`` without ``--state-dir`` and its value (a path of this machine), as a command is recorded."""
    kept, skip = [], False
    for arg in argv:
        if skip or arg.startswith("--state-dir"):
            skip = arg == "--state-dir" and not skip
            continue
        kept.append(arg)
    return kept


def _write(path: Path | None, runs: list[Json], failures: list[Json], *, command: str | None = None) -> None:
    """The JSON so far (after every run, so a long measurement cut short keeps what it measured);
    ``command``: the command line that measured it, recorded as ``command``."""
    if path is not None:
        head = {"command": command} if command else {}
        path.write_text(json.dumps({**head, "runs": runs, **summarise(runs), "failures": failures}, indent=2) + "\n")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="build/bench.sh --vs-dns",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--vs-dns", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--workers", default="2,4,8", help="worker counts, comma-separated (default 2,4,8)")
    p.add_argument("--repeats", type=int, default=20, help="runs per runtime and worker count (default 20)")
    p.add_argument(
        "--dns-repeats",
        type=int,
        default=None,
        help="runs of the dns runtime per worker count (default: --repeats; its overhead is two 5 s probe rounds)",
    )
    p.add_argument(
        "--runtimes",
        default=",".join(nodejobs.RUNTIMES),
        help=f"default {','.join(nodejobs.RUNTIMES)} (ring-registered needs self-registration, issue 24)",
    )
    p.add_argument("--steps", type=int, default=3, help="training steps per run (default 3)")
    p.add_argument(
        "--e2e-repeats",
        type=int,
        default=None,
        metavar="K",
        help="train only in the first K repeats (end to end from those); later repeats run a probe that "
        "reports TF_CONFIG and exits, without TensorFlow (default: every repeat trains). Eight TensorFlow "
        "imports take about 20 s on two cores; the discovery stages end before the trainer starts",
    )
    p.add_argument("--json", type=Path, metavar="OUT", help="write the figures here (rewritten after every run)")
    p.add_argument(
        "--deadline", type=float, default=None, metavar="SECONDS", help="start no run after this many seconds"
    )
    p.add_argument("--plot", type=Path, metavar="OUT.png", help="draw the figures (needs matplotlib)")
    p.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        metavar="IN.json",
        help="run nothing: summarise the runs of earlier --json files together (e.g. runtimes measured in "
        "turns) into --json and --plot, and print the tables",
    )
    p.add_argument(
        "--network",
        default=None,
        metavar="NAMESPACE/NAME",
        help="also run every ring runtime with ring-controller.io/network set to this (a cluster made with "
        "ring-devcluster up --second-network: default/ring-fast)",
    )
    p.add_argument("--state-dir", type=Path, default=None, help="the cluster (default: the tests' workloads cluster)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one run may take")
    return p.parse_args(argv)


def merge(paths: list[Path], *, json_out: Path | None, plot_out: Path | None) -> int:
    """``--merge``: the runs and failures of earlier ``--json`` files, summarised together."""
    runs: list[Json] = []
    failures: list[Json] = []
    for path in paths:
        doc = json.loads(path.read_text())
        runs += doc["runs"]
        failures += doc.get("failures", [])
    summary = summarise(runs)
    print(render(summary))
    _write(json_out, runs, failures)
    if plot_out and runs:
        plot(summary, plot_out)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.merge:
        return merge(args.merge, json_out=args.json, plot_out=args.plot)
    command = " ".join(["build/bench.sh", *without_state_dir(sys.argv[1:] if argv is None else argv)])
    sizes = [int(x) for x in args.workers.split(",") if x]
    kinds = [k for k in args.runtimes.split(",") if k]
    state = args.state_dir or workloads_state_dir()
    if "ring-registered" in kinds:
        nodejobs.check_registration()
    cluster = ensure_up(state_dir=state, addons=COMPONENTS, say=_say)
    if args.network is not None and not cluster.second_network:
        raise SystemExit(f"--network: the cluster in {state} has no second pod network (up --second-network)")
    _say(f"kubelet -v={node.KUBELET_VERBOSITY}: {node.set_kubelet_verbosity(cluster.api)}")
    nodejobs.ensure_trainer_images()
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    core, custom, rbac = client.CoreV1Api(api), client.CustomObjectsApi(api), client.RbacAuthorizationV1Api(api)
    namespace = f"vsdns-{os.getpid()}"
    core.create_namespace({"metadata": {"name": namespace}})
    nodejobs.configmap_reader(rbac, namespace)
    if "ring-registered" in kinds:
        nodejobs.launcher_grant(api, namespace)
    data = nodejobs.make_data(Path(state) / "bench-cifar10")
    log_dir = Path(state) / "logs"
    controller = ControllerProcess(
        kubeconfig=str(cluster.kubeconfig),
        namespace=namespace,
        log_path=log_dir / f"vsdns-controller-{os.getpid()}.log",
        extra=nodejobs.REGISTER_CONTROLLER_ARGS if "ring-registered" in kinds else [],
    )
    watch = stages.StageWatch(core, namespace)
    watch.start()
    kubelet = stages.KubeletLog(cluster.log_path("kubelet"))
    controller.start()
    runtimes = {k: f"{namespace}-{k}" for k in kinds}
    runs: list[Json] = []
    failures: list[Json] = []
    failed: dict[str, int] = {}
    try:
        trainers = sorted({_trainer(args, repeat) for repeat in range(args.repeats)})
        for kind, name in runtimes.items():
            for trainer in trainers:
                custom.create_cluster_custom_object(
                    *nodejobs.TRAINER,
                    "clustertrainingruntimes",
                    nodejobs.runtime(
                        kind, _runtime_name(name, trainer), data_dir=data, steps=args.steps, trainer=trainer
                    ),
                )
        started = time.monotonic()
        for repeat, workers, kind, network in _schedule(args, sizes, kinds):
            if args.deadline is not None and time.monotonic() - started > args.deadline:
                _say(f"--deadline {args.deadline:g}s passed: no more runs (at repeat {repeat})")
                break
            if failed.get(kind, 0) >= MAX_FAILURES:
                continue
            wait_gone(core, namespace)
            name = f"{kind.replace('ring-', 'r')}{'-net' if network else ''}-{workers}w-{repeat}"
            trainer = _trainer(args, repeat)
            try:
                run = run_one(
                    core, custom, namespace=namespace, kind=kind, runtime_name=_runtime_name(runtimes[kind], trainer),
                    workers=workers, name=name, timeout=args.timeout, watch=watch, kubelet=kubelet, network=network,
                )  # fmt: skip
            except (RuntimeError, AssertionError, ApiException) as err:
                failed[kind] = failed.get(kind, 0) + 1
                failures.append(
                    {
                        "runtime": kind,
                        "network": network,
                        "workers": workers,
                        "repeat": repeat,
                        "error": str(err)[:2000],
                    }
                )
                _say(f"{kind} {workers} workers #{repeat} FAILED ({failed[kind]}/{MAX_FAILURES}): {str(err)[:300]}")
                _write(args.json, runs, failures, command=command)
                continue
            run["repeat"] = repeat
            run["trainer"] = trainer
            runs.append(run)
            _write(args.json, runs, failures, command=command)
            after = {
                k: f"{v - run['last_start_s']:+.2f}"
                for k, v in run["stages_s"].items()
                if v is not None and k in STAGE_LABELS
            }
            _say(
                f"{label(run):15s} {workers} workers #{repeat}: last start {run['last_start_s']:.2f}s, "
                f"TF_CONFIG +{run['overhead_s']:.2f}s, first step {run['first_step_s'] or '-'}s ({trainer}), "
                f"workers seen {run['workers_seen']}; stages {after}"
            )
    finally:
        controller.stop()
        watch.stop()
        for name in runtimes.values():
            for trainer in nodejobs.TRAINERS:
                try:
                    custom.delete_cluster_custom_object(
                        *nodejobs.TRAINER, "clustertrainingruntimes", _runtime_name(name, trainer)
                    )
                except ApiException:
                    pass
        core.delete_namespace(namespace, propagation_policy="Background")
    summary = summarise(runs)
    print(render(summary))
    for f in failures:
        print(f"FAILED: {f['runtime']} {f['workers']} workers #{f['repeat']}: {f['error'][:200]}")
    _write(args.json, runs, failures, command=command)
    if args.plot and runs:
        plot(summary, args.plot)
        _say(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
