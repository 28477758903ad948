"""Failure cases, DNS probing against ring-controller, on the real node (issue: head to head).

Both runtimes run the same TrainJobs (:mod:`tests.support.nodejobs`): the
DNS-probing baseline (``build/examples/baseline``, the comparison) and
ring-controller's runtime. The tests assert ring-controller's outcome (a
complete, correct spec; no worker starts with a wrong cluster) and print
what the baseline did as FIGURE lines, since its behaviour is the finding,
not a rule of this product.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.support import nodejobs
from tests.support.controllerproc import ControllerProcess
from tests.support.kubehelp import read_spec, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cifar(workloads: Any) -> Path:
    nodejobs.ensure_trainer_images()
    return nodejobs.make_data(Path(workloads.state_dir) / "test-cifar10")


def _run(
    k8s: Any, namespace: str, kind: str, name: str, runtime: dict[str, Any], workers: int
) -> list[tuple[Any, nodejobs.WorkerLog]]:
    k8s.custom.create_cluster_custom_object(*nodejobs.TRAINER, "clustertrainingruntimes", runtime)
    try:
        k8s.custom.create_namespaced_custom_object(
            *nodejobs.TRAINER, namespace, "trainjobs",
            nodejobs.trainjob(kind, name, runtime_name=runtime["metadata"]["name"], workers=workers),
        )  # fmt: skip
        pods = nodejobs.wait_finished(k8s.core, namespace, name, workers, timeout=420)
        return list(zip(pods, nodejobs.logs(k8s.core, namespace, pods), strict=True))
    finally:
        k8s.custom.delete_cluster_custom_object(
            *nodejobs.TRAINER, "clustertrainingruntimes", runtime["metadata"]["name"]
        )


def test_one_worker_20s_late_ring_waits_for_all_and_trains_dns_reported(
    k8s: Any, namespace: str, controller: ControllerProcess, cifar: Path
) -> None:
    workers = 3
    outcome: dict[str, Any] = {}
    for kind in ("ring-file", "dns"):
        runtime = nodejobs.runtime(kind, f"{namespace}-{kind}-late", data_dir=cifar, steps=3, delay_index=workers - 1)
        started = time.time()
        runs = _run(k8s, namespace, kind, f"late-{kind.replace('ring-', 'r')}", runtime, workers)
        phases = [p.status.phase for p, _ in runs]
        seen = sorted({len(w.tf_config["cluster"]["worker"]) for _, w in runs if w.tf_config})
        digests = {w.result["weights_sha256"] for _, w in runs if w.result}
        last = (
            max(w.result["timestamps"]["first_step"] for _, w in runs if w.result)
            if all(w.result for _, w in runs)
            else None
        )
        outcome[kind] = {"phases": phases, "workers_seen": seen, "weights": len(digests),
                         "first_step_s": round(last - started, 1) if last else None}  # fmt: skip
        if kind == "ring-file":
            assert phases == ["Succeeded"] * workers, [w.text[-1500:] for _, w in runs]
            assert seen == [workers] and len(digests) == 1  # everyone waited for the late worker
            ips = sorted(f"{p.status.pod_ip}:{nodejobs.PORT}" for p, _ in runs)
            assert all(sorted(w.tf_config["cluster"]["worker"]) == ips for _, w in runs)
    print(f"\nFIGURE one worker 20 s late, {workers} workers: {json.dumps(outcome)}")


PROBE = """
import json, os, socket, time
config = json.loads(os.environ["TF_CONFIG"])
resolved = {}
for address in config["cluster"]["worker"]:
    host = address.rsplit(":", 1)[0]
    try:
        resolved[host] = socket.gethostbyname(host)
    except OSError as e:
        resolved[host] = f"unresolved: {e}"
print("SEEN", json.dumps({"epoch": os.environ.get("RING_EPOCH"), "workers": config["cluster"]["worker"],
      "resolved": resolved, "ip": os.environ.get("POD_IP") or socket.gethostbyname(socket.gethostname())}), flush=True)
time.sleep(600)
"""


def _seen(k8s: Any, namespace: str, pod: str) -> dict[str, Any] | None:
    try:
        text = k8s.core.read_namespaced_pod_log(pod, namespace, container="node") or ""
    except ApiException:  # the container has not started yet
        return None
    match = re.search(r"^SEEN (.*)$", text, flags=re.MULTILINE)
    return json.loads(match.group(1)) if match else None


def test_a_worker_replaced_mid_run_what_each_runtime_sees(
    k8s: Any, namespace: str, controller: ControllerProcess, cifar: Path
) -> None:
    workers = 2
    report: dict[str, Any] = {}
    for kind in ("ring-file", "dns"):
        runtime = nodejobs.runtime(kind, f"{namespace}-{kind}-rep", data_dir=cifar)
        (container,) = nodejobs.pod_spec(runtime)["containers"]
        container["args"] = ["python", "-c", PROBE]
        name = f"rep-{kind.replace('ring-', 'r')}"
        k8s.custom.create_cluster_custom_object(*nodejobs.TRAINER, "clustertrainingruntimes", runtime)
        try:
            k8s.custom.create_namespaced_custom_object(
                *nodejobs.TRAINER, namespace, "trainjobs",
                nodejobs.trainjob(kind, name, runtime_name=runtime["metadata"]["name"], workers=workers),
            )  # fmt: skip
            pods = wait_for(
                lambda name=name: (lambda ps: ps if len(ps) == workers and all(_seen(k8s, namespace, p.metadata.name) for p in ps) else None)(
                    nodejobs.pods_of(k8s.core, namespace, name)
                ),
                timeout=240, interval=1.0, what=f"{kind}: every worker configured",
            )  # fmt: skip
            victim = pods[-1]
            k8s.core.delete_namespaced_pod(victim.metadata.name, namespace, grace_period_seconds=0)
            deleted = time.time()

            def fresh(name: str = name, victim: Any = victim, survivors: list[Any] = pods[:-1]) -> Any:
                for p in nodejobs.pods_of(k8s.core, namespace, name):
                    if p.metadata.uid != victim.metadata.uid and p.metadata.name not in {
                        q.metadata.name for q in survivors
                    }:
                        if _seen(k8s, namespace, p.metadata.name):
                            return p
                return None

            new = wait_for(fresh, timeout=240, interval=1.0, what=f"{kind}: the replacement configured")
            seen = _seen(k8s, namespace, new.metadata.name)
            assert seen is not None
            ip = new.status.pod_ip
            entry = {
                "after_s": round(time.time() - deleted, 1),
                "replacement_ip": ip,
                "old_ip": victim.status.pod_ip,
                "workers": seen["workers"],
                "resolved": seen["resolved"],
                "epoch": seen["epoch"],
            }
            report[kind] = entry
            if kind == "ring-file":
                spec = read_spec(k8s, namespace, f"rings-config-{name}")
                assert f"{ip}:{nodejobs.PORT}" in seen["workers"]  # its own, new address
                assert victim.status.pod_ip == ip or f"{victim.status.pod_ip}:{nodejobs.PORT}" not in seen["workers"]
                assert int(seen["epoch"]) == spec["epoch"] and spec["status"] == "completed"
        finally:
            k8s.custom.delete_namespaced_custom_object(*nodejobs.TRAINER, namespace, "trainjobs", name)
            k8s.custom.delete_cluster_custom_object(
                *nodejobs.TRAINER, "clustertrainingruntimes", runtime["metadata"]["name"]
            )
    print(f"\nFIGURE a worker replaced mid-run: {json.dumps(report)}")
