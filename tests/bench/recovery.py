"""Recovery time: restart in place (``ring-launch --supervise``) against a whole-job restart.

    python -m tests.bench.recovery [--state-dir DIR] [--rounds N] [--json OUT]

Each round runs the 3-worker TensorFlow job of :mod:`tests.support.recovery`
twice on the local control plane, with the real controller: once a pod is
replaced mid-training and the survivors restart in place, once the whole job
is restarted (every pod recreated at a new job version). Both resume from the
last checkpoint. For each run it prints, from the first pod deletion (all on
this machine's clock):

* ``trainers``: until the last trainer process of the new ring started,
* ``ring``: until the last worker's strategy was ready (TF imported, the new
  ring formed),
* ``training``: until the last worker finished its first step again (the
  recovery time).

The order of the two ways alternates between rounds. Progress goes to
stderr, the table to stdout.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from ringdevcluster import ensure_up
from tests.support import tfharness
from tests.support.clients import K8s, devcluster_state_dir
from tests.support.controllerproc import ControllerProcess
from tests.support.recovery import FAIL_AT, TrainingJob

KINDS = ("in-place", "whole-job")


def _say(message: str) -> None:
    print(f"recovery: {message}", file=sys.stderr, flush=True)


def _run(kind: str, *, k8s: K8s, namespace: str, kubeconfig: str, tmp: Path, cifar: Path, n: int) -> dict[str, Any]:
    job = TrainingJob(
        k8s=k8s,
        namespace=namespace,
        kubeconfig=kubeconfig,
        name=f"{'inplace' if kind == 'in-place' else 'whole'}{n}",
        tmp=tmp,
        cifar=cifar,
        supervise=kind == "in-place",
    )
    try:
        job.start()
        job.wait_for_step(FAIL_AT)
        t0 = job.replace_one(1) if kind == "in-place" else job.restart_whole_job()
        results = job.finish()
    finally:
        job.stop()
    if len({r["weights_sha256"] for r in results.values()}) != 1:
        raise AssertionError(f"{kind}: workers finished with different weights")
    last = {k: max(float(r["timestamps"][k]) for r in results.values()) - t0 for k in ("start", "strategy_ready")}
    return {
        "kind": kind,
        "trainers_s": round(last["start"], 2),
        "ring_s": round(last["strategy_ready"], 2),
        "training_s": round(max(float(r["timestamps"]["first_step"]) for r in results.values()) - t0, 2),
        "tf_import_s": round(
            max(
                float(r["timestamps"]["tensorflow_imported"]) - float(r["timestamps"]["start"])
                for r in results.values()
            ),
            2,
        ),
        "resumed_from_step": results[0]["resumed_from_step"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, default=devcluster_state_dir(), help="the local cluster's state")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each kind (default 1)")
    parser.add_argument("--json", type=Path, default=None, help="also write the runs here")
    args = parser.parse_args(argv)
    cluster = ensure_up(state_dir=args.state_dir, say=_say)
    k8s = K8s.from_kubeconfig(cluster.kubeconfig)
    namespace = f"bench-recovery-{secrets.token_hex(3)}"
    k8s.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ring-recovery-") as scratch:
        tmp = Path(scratch)
        controller = ControllerProcess(
            kubeconfig=str(cluster.kubeconfig), namespace=namespace, log_path=tmp / "controller.log"
        ).start()
        try:
            deadline = time.monotonic() + 30
            while True:  # pods need the namespace's default ServiceAccount
                try:
                    k8s.core.read_namespaced_service_account("default", namespace)
                    break
                except client.ApiException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            cifar = tfharness.make_cifar10(tmp / "cifar10", per_batch=64, seed=5)
            for n in range(args.rounds):
                for kind in KINDS if n % 2 == 0 else tuple(reversed(KINDS)):
                    _say(f"round {n + 1}/{args.rounds}: {kind}")
                    run = _run(kind, k8s=k8s, namespace=namespace, kubeconfig=str(cluster.kubeconfig), tmp=tmp,
                               cifar=cifar, n=n)  # fmt: skip
                    _say(json.dumps(run))
                    runs.append(run)
        finally:
            controller.stop()
            k8s.core.delete_namespace(namespace, propagation_policy="Background")
    print(f"{'kind':<10} {'runs':>4} {'trainers s':>11} {'ring s':>8} {'training s':>11} {'TF import s':>12}")
    for kind in KINDS:
        mine = [r for r in runs if r["kind"] == kind]
        med = {
            key: statistics.median(r[key] for r in mine)
            for key in ("trainers_s", "ring_s", "training_s", "tf_import_s")
        }
        print(
            f"{kind:<10} {len(mine):>4} {med['trainers_s']:>11.2f} {med['ring_s']:>8.2f} "
            f"{med['training_s']:>11.2f} {med['tf_import_s']:>12.2f}"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(runs, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
