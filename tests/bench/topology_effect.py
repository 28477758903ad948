"""The real effect of topology order: ring all-reduce step time with a slow link between "racks".

    python -m tests.bench.topology_effect [--racks 2|4] [--floats N] [--steps S] [--rate 1gbit]

Registers 8 kwok nodes (one pod each) in ``--racks`` racks, creates one
Volcano Job of 8 workers whose pods the real scheduler spreads over racks,
then hosts (as :mod:`tests.bench.topology` does), and lets the real
controller write the spec in spec order, then (the workload annotated) in
topology order, for the same pods. For each order, 8 worker processes
(:mod:`tests.bench.ringworker`) bind to the 8 pod IPs and run a ring
all-reduce in the spec's rank order.

The network between racks: traffic from a pod of one rack to a pod of
another goes through one ``htb`` class on the loopback device, reached only
by ``u32`` filters on the pods' source and destination /24s, whose ``--rate``
every cross-rack flow shares: an oversubscribed uplink. The root ``htb`` has
no default class, so all other traffic on ``lo`` takes its direct queue,
unshaped. The qdisc is removed at the end (a leftover one from an
interrupted run is refused, not replaced). Needs root. This machine's kernel
has no ``netem`` (nor ``prio``): the link is slow in bandwidth, not in delay.

Prints the median all-reduce time per order and their ratio (spec / topology).
"""

from __future__ import annotations

import argparse
import itertools
import json
import secrets
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from kubernetes import client

from model.keys import RANK_ORDER_ANNOTATION
from ringdevcluster import ensure_up
from ringdevcluster.kwok import node_pod_cidr
from tests.bench.topology import _completed, _has_account, _pod, _wait
from tests.support.clients import K8s, devcluster_state_dir
from tests.support.controllerproc import ControllerProcess
from tests.support.factories import pod_template, volcano_job
from tests.support.kubehelp import create_volcano_job
from tests.support.topology import RACK, SPINE, labelled_nodes, ring_edges

FIRST_NODE = 240
WORKERS = 8
PORT = 4100


def _say(message: str) -> None:
    print(f"topology-effect: {message}", file=sys.stderr, flush=True)


def _tc(*args: str) -> None:
    subprocess.run(["tc", *args], check=True, capture_output=True, text=True)


def shape(racks: dict[int, list[int]], *, rate: str) -> None:
    """The slow link between racks on ``lo`` (see the module doc)."""
    shown = subprocess.run(["tc", "qdisc", "show", "dev", "lo"], check=True, capture_output=True, text=True).stdout
    if "htb" in shown:
        raise RuntimeError(f"lo already has a qdisc of another run: {shown.strip()} (remove it by hand if it is stale)")
    _tc("qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb")  # no default: unclassified goes direct
    _tc("class", "add", "dev", "lo", "parent", "1:", "classid", "1:4", "htb", "rate", rate, "ceil", rate,
        "burst", "256k", "cburst", "256k", "quantum", "200000")  # fmt: skip
    for nodes_a, nodes_b in itertools.permutations(racks.values(), 2):
        for src, dst in itertools.product(nodes_a, nodes_b):
            _tc("filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                "match", "ip", "src", node_pod_cidr(src), "match", "ip", "dst", node_pod_cidr(dst),
                "flowid", "1:4")  # fmt: skip


def unshape() -> None:
    subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], check=False, capture_output=True)


def run_ring(spec: dict[str, Any], *, floats: int, steps: int) -> tuple[list[float], bool]:
    members = sorted(spec["members"], key=lambda m: m["rank"])
    ring = ",".join(f"{m['ip']}:{PORT}" for m in members)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.bench.ringworker",
                "--rank",
                str(r),
                "--ring",
                ring,
                "--floats",
                str(floats),
                "--steps",
                str(steps),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for r in range(len(members))
    ]
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=900)
        results.append(json.loads(out.strip().splitlines()[-1]))
    # an all-reduce ends when its slowest rank ends: per step, the maximum over ranks
    per_step = [max(r["seconds"][i] for r in results) for i in range(steps)]
    return per_step, all(r["correct"] for r in results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, default=devcluster_state_dir())
    parser.add_argument("--racks", type=int, choices=(2, 4), default=2)
    parser.add_argument("--floats", type=int, default=4_000_000, help="float32 values all-reduced (default 16 MB)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2, help="spec/topology runs, alternating")
    parser.add_argument(
        "--rate", default="1gbit", help="bandwidth of the link between racks, shared ('none': no shaping, the control)"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    cluster = ensure_up(state_dir=args.state_dir, say=_say)
    k8s = K8s.from_kubeconfig(cluster.kubeconfig)
    per_rack = WORKERS // args.racks
    layout = {FIRST_NODE + i: {SPINE: "spine-1", RACK: f"rack-{i // per_rack + 1}"} for i in range(WORKERS)}
    racks: dict[int, list[int]] = {}
    for i in range(WORKERS):
        racks.setdefault(i // per_rack, []).append(FIRST_NODE + i)
    namespace = f"bench-topoeffect-{secrets.token_hex(3)}"
    k8s.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    rows: dict[str, Any] = {}
    try:
        with labelled_nodes(k8s, layout, fixture="bench") as names, tempfile.TemporaryDirectory() as tmp:
            where = {name: labels[RACK] for name, labels in zip(names, layout.values(), strict=True)}
            controller = ControllerProcess(
                kubeconfig=str(cluster.kubeconfig), namespace=namespace, log_path=Path(tmp) / "controller.log"
            )
            controller.start()
            try:
                _wait("default ServiceAccount", lambda: _has_account(k8s, namespace), 60)
                job = create_volcano_job(
                    k8s, namespace, volcano_job("ring", tasks=[("worker", WORKERS)], template=pod_template(port=PORT))
                )
                for i in range(WORKERS):
                    k8s.core.create_namespaced_pod(namespace, _pod(job, i, "rack"))
                specs = {"spec": _wait("spec order", lambda: _completed(k8s, namespace, "ring", rank_order=None), 300)}
                k8s.custom.patch_namespaced_custom_object(
                    "batch.volcano.sh", "v1alpha1", namespace, "jobs", "ring",
                    {"metadata": {"annotations": {RANK_ORDER_ANNOTATION: "topology"}}},
                )  # fmt: skip
                specs["topology"] = _wait(
                    "topology order", lambda: _completed(k8s, namespace, "ring", rank_order="topology"), 300
                )
            finally:
                controller.stop()
            for order, spec in specs.items():
                chain = [where[m["node"]] for m in sorted(spec["members"], key=lambda m: m["rank"])]
                rows[order] = {"racks": chain, "rack_edges": ring_edges([("s", r) for r in chain])[0], "steps": []}
                _say(f"{order} order: racks by rank {chain}")
            if args.rate != "none":
                shape(racks, rate=args.rate)
            try:
                for n in range(args.rounds):
                    for order in ("spec", "topology") if n % 2 == 0 else ("topology", "spec"):
                        steps, ok = run_ring(specs[order], floats=args.floats, steps=args.steps)
                        if not ok:
                            raise AssertionError(f"{order}: wrong all-reduce result")
                        rows[order]["steps"] += steps
                        _say(f"round {n + 1} {order}: median {statistics.median(steps):.3f}s")
            finally:
                if args.rate != "none":
                    unshape()
    finally:
        k8s.core.delete_namespace(namespace)
    spec_s, topo_s = (statistics.median(rows[o]["steps"]) for o in ("spec", "topology"))
    print(
        f"{WORKERS} ranks in {args.racks} racks, {args.floats * 4 / 1e6:.0f} MB all-reduce, "
        f"cross-rack link {args.rate} shared\n"
        f"spec order:     {rows['spec']['rack_edges']} rack-crossing ring edges, median all-reduce {spec_s:.3f} s\n"
        f"topology order: {rows['topology']['rack_edges']} rack-crossing ring edges, "
        f"median all-reduce {topo_s:.3f} s\n"
        f"ratio spec / topology: {spec_s / topo_s:.2f}"
    )
    if args.json is not None:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, **rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
