"""Ring edges crossing a rack and a spine: spec order against topology order, on kwok.

    python -m tests.bench.topology [--state-dir DIR] [--jobs 16] [--pods 32] [--json OUT]

Registers 64 kwok nodes in 8 racks under 2 spines (4 racks each; the labels
are Kueue's example levels, part of the controller's default
``--topology-keys``), then creates ``--jobs`` Volcano Jobs of ``--pods``
workers whose pods the real kube-scheduler places, spread over hosts (a
``topologySpreadConstraint`` on ``kubernetes.io/hostname``, maxSkew 1), so a
job's pods land on racks in no particular order; with ``--spread rack`` (the
default) also over racks (maxSkew 1 on the rack label), as a job spread for
resilience is, which makes consecutive indices land on different racks. The real controller writes
every job's spec in spec order (no annotation, its default ``--rank-order
spec``); then each workload is annotated ``ring-controller.io/rank-order:
topology`` and the same controller re-ranks the same pods. For every job it
counts the edges of the ring ``rank 0 -> 1 -> ... -> n-1 -> 0`` between
members on different racks and on different spines, in both orders, and the
minimum any ring through those members can have (one crossing per rack, or
spine, the job spans; none when it spans one). Deterministic for a given
placement: the figures are counts, not timings.

Progress goes to stderr, the table to stdout.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from model.keys import RANK_ORDER_ANNOTATION
from ringdevcluster import ensure_up
from tests.support.clients import K8s, devcluster_state_dir
from tests.support.controllerproc import ControllerProcess
from tests.support.factories import pod_template, volcano_job, volcano_pod
from tests.support.kubehelp import create_volcano_job, read_spec
from tests.support.topology import (
    FIXTURE_LABEL,
    RACK,
    SPINE,
    labelled_nodes,
    minimum_edges,
    ring_edges,
    toleration,
)

#: First kwok node index of the benchmark's nodes (the dev cluster's own start at 0).
FIRST_NODE = 160
NODES, RACKS, SPINES = 64, 8, 2


def _say(message: str) -> None:
    print(f"topology: {message}", file=sys.stderr, flush=True)


def layout() -> dict[int, dict[str, str]]:
    """Node index -> labels: 8 consecutive nodes per rack, 4 racks per spine."""
    per_rack = NODES // RACKS
    return {
        FIRST_NODE + i: {SPINE: f"spine-{i // per_rack // (RACKS // SPINES) + 1}", RACK: f"rack-{i // per_rack + 1}"}
        for i in range(NODES)
    }


#: What the pods spread over (``topologySpreadConstraints``, maxSkew 1, DoNotSchedule).
SPREAD = {"host": ("kubernetes.io/hostname",), "rack": (RACK, "kubernetes.io/hostname")}


def _pod(job: dict[str, Any], index: int, spread: str) -> dict[str, Any]:
    body = volcano_pod(job, task="worker", index=index)
    spec = body["spec"]
    spec["tolerations"] = [toleration()]
    spec["nodeSelector"] = {FIXTURE_LABEL: "bench"}
    spec["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"volcano.sh/job-name": job["metadata"]["name"]}},
        }
        for key in SPREAD[spread]
    ]
    return body


def _wait(what: str, check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.5)


def _levels(spec: dict[str, Any], racks: dict[str, tuple[str, str]]) -> list[tuple[str, str]]:
    return [racks[m["node"]] for m in sorted(spec["members"], key=lambda m: m["rank"])]


def run(k8s: K8s, kubeconfig: str, *, jobs: int, pods: int, spread: str, tmp: Path) -> list[dict[str, Any]]:
    namespace = f"bench-topology-{secrets.token_hex(3)}"
    k8s.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    nodes = layout()
    try:
        with labelled_nodes(k8s, nodes, fixture="bench") as names:
            racks = {name: (labels[SPINE], labels[RACK]) for name, labels in zip(names, nodes.values(), strict=True)}
            _say(f"{len(names)} nodes Ready in {RACKS} racks under {SPINES} spines")
            controller = ControllerProcess(kubeconfig=kubeconfig, namespace=namespace, log_path=tmp / "controller.log")
            controller.start()
            try:
                _wait("default ServiceAccount", lambda: _has_account(k8s, namespace), 60)
                created = []
                for j in range(jobs):
                    job = volcano_job(f"job{j:02d}", tasks=[("worker", pods)], template=pod_template(port=4000))
                    job = create_volcano_job(k8s, namespace, job)
                    created.append(job)
                    for i in range(pods):
                        k8s.core.create_namespaced_pod(namespace, _pod(job, i, spread))
                _say(f"{jobs} jobs x {pods} pods created; waiting for the scheduler, kwok and the controller")
                spec_order = {}
                for job in created:
                    name = job["metadata"]["name"]
                    spec_order[name] = _wait(
                        f"spec of {name}", lambda n=name: _completed(k8s, namespace, n, rank_order=None), 600
                    )
                _say("every spec completed in spec order; annotating the workloads with topology order")
                for job in created:
                    k8s.custom.patch_namespaced_custom_object(
                        "batch.volcano.sh",
                        "v1alpha1",
                        namespace,
                        "jobs",
                        job["metadata"]["name"],
                        {"metadata": {"annotations": {RANK_ORDER_ANNOTATION: "topology"}}},
                    )
                rows = []
                for job in created:
                    name = job["metadata"]["name"]
                    topo = _wait(
                        f"topology spec of {name}",
                        lambda n=name: _completed(k8s, namespace, n, rank_order="topology"),
                        300,
                    )
                    before = spec_order[name]
                    assert {m["uid"] for m in before["members"]} == {m["uid"] for m in topo["members"]}, name
                    spec_levels, topo_levels = _levels(before, racks), _levels(topo, racks)
                    rows.append(
                        {
                            "job": name,
                            "racks": len(set(spec_levels)),
                            "spines": len({s for s, _ in spec_levels}),
                            "spec": ring_edges(spec_levels),
                            "topology": ring_edges(topo_levels),
                            "minimum": minimum_edges(spec_levels),
                        }
                    )
            finally:
                controller.stop()
    finally:
        k8s.core.delete_namespace(namespace)
    return rows


def _has_account(k8s: K8s, namespace: str) -> bool:
    try:
        k8s.core.read_namespaced_service_account("default", namespace)
    except client.ApiException:
        return False
    return True


def _completed(k8s: K8s, namespace: str, name: str, *, rank_order: str | None) -> dict[str, Any] | None:
    spec = read_spec(k8s, namespace, f"rings-config-{name}")
    if spec is None or spec["status"] != "completed" or spec.get("rankOrder") != rank_order:
        return None
    return spec


def report(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'job':<6} {'racks':>5} {'spines':>6}   {'rack edges spec/topo/min':>24}   {'spine edges spec/topo/min':>25}"
    ]
    for r in rows:
        lines.append(
            f"{r['job']:<6} {r['racks']:>5} {r['spines']:>6}   "
            f"{r['spec'][0]:>8} {r['topology'][0]:>7} {r['minimum'][0]:>7}   "
            f"{r['spec'][1]:>9} {r['topology'][1]:>7} {r['minimum'][1]:>7}"
        )
    total = {k: [sum(r[k][i] for r in rows) for i in (0, 1)] for k in ("spec", "topology", "minimum")}
    lines.append(
        f"{'total':<6} {'':>5} {'':>6}   {total['spec'][0]:>8} {total['topology'][0]:>7} {total['minimum'][0]:>7}   "
        f"{total['spec'][1]:>9} {total['topology'][1]:>7} {total['minimum'][1]:>7}"
    )
    at_min = sum(1 for r in rows if tuple(r["topology"]) == tuple(r["minimum"]))
    lines.append(f"topology order at the minimum (rack and spine) on {at_min}/{len(rows)} jobs")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, default=devcluster_state_dir(), help="the local cluster's state")
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--pods", type=int, default=32, help="workers per job (at most 64: one per node)")
    parser.add_argument(
        "--spread",
        choices=sorted(SPREAD),
        default="rack",
        help="rack: each job's pods spread over racks, then hosts (default); host: over hosts only",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    cluster = ensure_up(state_dir=args.state_dir, say=_say)
    k8s = K8s.from_kubeconfig(cluster.kubeconfig)
    with tempfile.TemporaryDirectory(prefix="ring-topology-") as scratch:
        rows = run(k8s, str(cluster.kubeconfig), jobs=args.jobs, pods=args.pods, spread=args.spread, tmp=Path(scratch))
    sys.stdout.write(f"spread over {args.spread}s: {args.jobs} jobs x {args.pods} pods on 64 nodes\n" + report(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
