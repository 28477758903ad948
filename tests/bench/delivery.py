"""``build/bench.sh --delivery``: how fast a completed spec reaches a container on the real node.

The question only a real kubelet answers: ring-controller writes the spec in
milliseconds, but a training pod reading the mounted ``rings-config`` volume
sees it only when the kubelet refreshes that volume. Measured per mode, with
``--repeats`` replacements each:

* ``file+touch``: file mode, the controller annotating member pods with the
  epoch (``--touch-pods``, the default): the kubelet syncs the pod at once;
* ``file``: file mode with ``--no-touch-pods``: the kubelet's periodic sync
  (``syncFrequency`` 1m plus jitter);
* ``api``: ``ring-launch --from-api`` (a watch on the ConfigMap, no kubelet).

Each mode runs a 2-replica Deployment on the real node (the controller image,
whose command is ``ring-launch``, then a one-line program printing
``TFCONFIG <unix time>``). One repeat deletes a pod; its replacement's
``ring-launch`` waits for the completed spec that lists it, exports
TF_CONFIG and execs. The figure is *spec seen completed* (a ConfigMap watch
in this process) -> *TF_CONFIG exported in the replacement* (its own clock,
the same machine's). ``ring-launch`` polls the file every 0.5 s (its
default), which is part of what users get.

In the file modes the pod that stayed reports too: when the new epoch shows
in its mounted file (the path a supervised trainer restarting in place, or
any reader of the file, depends on).

Each replacement also records the stages of :mod:`tests.bench.stages`
(container start, the kubelet's PLEG event, Running + IP seen, spec
completed, touch seen, ``SPEC_SEEN``, TF_CONFIG exported at exec, the
program's start), in seconds after the replacement's container started.

Output: tables (stdout) and ``--json OUT`` (``kube``: the cluster's release,
``command``, ``date``, ``machine``: cpus and load average at the start and
the end; ``modes``: [{mode, samples,
p50_s, p95_s, max_s, survivor_samples, survivor_p50_s, survivor_max_s,
stages_s: [per replacement], stages: {stage: {p50, p95, max}}}]).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config

from ringdevcluster import ensure_up, node
from tests.bench import stages
from tests.support import nodejobs
from tests.support.clients import workloads_state_dir
from tests.support.controllerproc import ControllerProcess
from tests.support.kubehelp import Watcher

Json = dict[str, Any]
MODES = ("file+touch", "file", "api")
IMAGE = "ring-controller:0.1.0"
#: The container's program: TF_CONFIG's arrival, then every change of the mounted spec it sees (50 ms polls).
PROGRAM = """
import json, time
print("TFCONFIG", time.time(), flush=True)
last = None
while True:
    try:
        with open("/etc/ring-config/cluster.json") as f:
            spec = json.load(f)
    except (OSError, ValueError):
        spec = {}
    seen = (spec.get("status"), spec.get("epoch"))
    if seen != last:
        print("SPEC", seen[0], seen[1], time.time(), flush=True)
        last = seen
    time.sleep(0.05)
"""


def _say(msg: str) -> None:
    print(f"delivery: {msg}", file=sys.stderr, flush=True)


def deployment(name: str, *, mode: str) -> Json:
    """Two ring-launch pods on the real node, the spec in ConfigMap ``rings-config-<name>``."""
    launch = ["ring-launch"] + (["--from-api", "--configmap", f"rings-config-{name}"] if mode == "api" else [])
    script = (
        'echo "CONTAINER_START $(date +%s.%N)"; '
        f'exec {shlex.join([*launch, "--", *nodejobs.EXEC_PREFIX, "python3", "-c"])} "$PROGRAM"'
    )
    labels = {"app": name, "ring-controller.atlas": "tensorflow"}
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "PROGRAM", "value": PROGRAM},
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    **node.pod_placement(),
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "main",
                            "image": IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["sh", "-c", script],
                            "env": env,
                            "ports": [{"name": "tf-port", "containerPort": 2222}],
                            "volumeMounts": [{"name": "rings-config", "mountPath": "/etc/ring-config"}],
                        }
                    ],
                    "volumes": [{"name": "rings-config", "configMap": {"name": f"rings-config-{name}"}}],
                },
            },
        },
    }


class Specs:
    """Receive times of completed epochs of each ConfigMap, from a watch opened before anything is created."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.completed: dict[tuple[str, int], float] = {}
        self._watcher = Watcher(core.list_namespaced_config_map, namespace, self._on_configmap, timeout_seconds=30)

    def _on_configmap(self, cm: Any) -> None:
        now = time.time()
        raw = (cm.data or {}).get("cluster.json")
        if raw:
            spec = json.loads(raw)
            if spec["status"] == "completed":
                self.completed.setdefault((cm.metadata.name, spec["epoch"]), now)

    def wait(self, name: str, epoch_above: int, *, timeout: float) -> tuple[int, float]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [(e, t) for (n, e), t in self.completed.items() if n == name and e > epoch_above]
            if found:
                return min(found)
            time.sleep(0.05)
        raise TimeoutError(f"{name}: no completed spec above epoch {epoch_above} within {timeout:.0f}s")

    def stop(self) -> None:
        self._watcher.stop(timeout=0)  # the thread leaves at its next event or re-open


def _running(core: client.CoreV1Api, namespace: str, name: str) -> list[Any]:
    pods = core.list_namespaced_pod(namespace, label_selector=f"app={name}").items
    return [p for p in pods if p.metadata.deletion_timestamp is None and p.status.phase == "Running"]


def _printed(core: client.CoreV1Api, namespace: str, pod: str, *, timeout: float, epoch: int | None = None) -> float:
    """When ``pod`` printed TFCONFIG (``epoch`` None) or saw the completed ``epoch`` in its mounted file."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            text = core.read_namespaced_pod_log(pod, namespace, container="main")
        except client.exceptions.ApiException:
            text = ""
        for line in text.splitlines():
            words = line.split()
            if epoch is None and words[:1] == ["TFCONFIG"]:
                return float(words[1])
            if epoch is not None and words[:3] == ["SPEC", "completed", str(epoch)]:
                return float(words[3])
        time.sleep(0.1)
    raise TimeoutError(f"{pod} printed no {'TFCONFIG' if epoch is None else f'epoch {epoch}'} within {timeout:.0f}s")


def measure(
    core: client.CoreV1Api,
    apps: client.AppsV1Api,
    specs: Specs,
    *,
    namespace: str,
    mode: str,
    repeats: int,
    timeout: float,
    watch: stages.StageWatch,
    kubelet: stages.KubeletLog,
) -> tuple[list[float], list[float], list[dict[str, float | None]]]:
    """(replacement samples, survivor samples, replacement stages): spec completed -> TF_CONFIG in the
    new pod, -> the new epoch in the file of the pod that stayed (file modes only), and each replacement's
    stages in seconds after its container started."""
    name = f"deliv-{mode.replace('+', '-')}"
    apps.create_namespaced_deployment(namespace, deployment(name, mode=mode))
    samples: list[float] = []
    survivors: list[float] = []
    staged: list[dict[str, float | None]] = []
    try:
        epoch, _ = specs.wait(f"rings-config-{name}", 0, timeout=timeout)
        for pod in _running(core, namespace, name):
            _printed(core, namespace, pod.metadata.name, timeout=timeout)
        for i in range(repeats):
            pods = sorted(_running(core, namespace, name), key=lambda p: p.metadata.creation_timestamp)
            victim = pods[-1].metadata.name
            kubelet.mark()
            core.delete_namespaced_pod(victim, namespace, grace_period_seconds=0)
            epoch, completed = specs.wait(f"rings-config-{name}", epoch, timeout=timeout)
            while True:  # the replacement: a Running pod not there before
                fresh = [
                    p for p in _running(core, namespace, name) if p.metadata.name not in {q.metadata.name for q in pods}
                ]
                if fresh:
                    break
                time.sleep(0.1)
            seen = _printed(core, namespace, fresh[0].metadata.name, timeout=timeout)
            samples.append(seen - completed)
            staged.append(_stages(core, namespace, fresh[0], watch=watch, kubelet=kubelet, completed=completed))
            line = f"{mode:10s} #{i}: spec completed (epoch {epoch}) -> TF_CONFIG in {fresh[0].metadata.name}: {seen - completed:.3f}s"
            if mode != "api":
                stayed = _printed(core, namespace, pods[0].metadata.name, timeout=timeout, epoch=epoch)
                survivors.append(stayed - completed)
                line += f"; -> in the file of {pods[0].metadata.name}, which stayed: {stayed - completed:.3f}s"
            _say(line)
    finally:
        apps.delete_namespaced_deployment(name, namespace, propagation_policy="Foreground")
    return samples, survivors, staged


#: The stages a replacement passes, in order (``trainer_start``: the program's TFCONFIG line).
DELIVERY_STAGES = (
    "pleg",
    "running_seen",
    "spec_completed",
    "touch_seen",
    "spec_seen",
    "exec",
    "trainer_start",
)


def _stages(
    core: client.CoreV1Api,
    namespace: str,
    pod: Any,
    *,
    watch: stages.StageWatch,
    kubelet: stages.KubeletLog,
    completed: float,
) -> dict[str, float | None]:
    """The replacement ``pod``'s stages, seconds after its container started (None where not seen)."""
    current = core.read_namespaced_pod(pod.metadata.name, namespace)
    text = core.read_namespaced_pod_log(pod.metadata.name, namespace, container="main")
    marks = stages.parse_markers(text)
    program = next((float(w[1]) for w in (line.split() for line in text.splitlines()) if w[:1] == ["TFCONFIG"]), None)
    seen = watch.pods.get(pod.metadata.uid) or stages.PodTimes(name=pod.metadata.name)
    cid = next(
        (c.container_id.split("://", 1)[-1] for c in current.status.container_statuses or [] if c.container_id), None
    )
    at: dict[str, float | None] = {
        "pleg": kubelet.pleg().get(cid) if cid else None,
        "running_seen": seen.running_seen,
        "spec_completed": completed,
        "touch_seen": seen.touch_seen,
        "spec_seen": marks.get("spec_seen"),
        "exec": marks.get("exec"),
        "trainer_start": program,
    }
    start = marks.get("container_start")
    if start is None:
        return dict.fromkeys(DELIVERY_STAGES)
    return {k: (round(v - start, 3) if v is not None else None) for k, v in at.items()}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="build/bench.sh --delivery", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    p.add_argument("--delivery", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--modes", default=",".join(MODES), help="default file+touch,file,api")
    p.add_argument("--repeats", type=int, default=20, help="replacements per mode (default 20)")
    p.add_argument("--json", type=Path, metavar="OUT", help="write the figures here")
    p.add_argument("--state-dir", type=Path, default=None, help="the cluster (default: the tests' workloads cluster)")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds one step may take")
    p.add_argument(
        "--kube",
        default=None,
        metavar="VERSION",
        help="the Kubernetes release of the cluster (1.32, v1.32.13; default $RING_DEVCLUSTER_KUBE, else the "
        "running cluster's or the pinned one); a running cluster of another release is an error",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    modes = [m for m in args.modes.split(",") if m]
    state = args.state_dir or workloads_state_dir()
    load_start = os.getloadavg()
    started = time.time()
    cluster = ensure_up(state_dir=state, addons=("node",), kube=args.kube, say=_say)
    _say(f"kubelet -v={node.KUBELET_VERBOSITY}: {node.set_kubelet_verbosity(cluster.api)}")
    nodejobs.ensure_image(IMAGE, "--controller")
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    core, apps, rbac = client.CoreV1Api(api), client.AppsV1Api(api), client.RbacAuthorizationV1Api(api)
    namespace = f"delivery-{os.getpid()}"
    core.create_namespace({"metadata": {"name": namespace}})
    nodejobs.configmap_reader(rbac, namespace)
    specs = Specs(core, namespace)
    watch = stages.StageWatch(core, namespace)
    watch.start()
    kubelet = stages.KubeletLog(cluster.log_path("kubelet"))
    results: list[Json] = []
    try:
        for mode in modes:
            extra = ["--no-touch-pods"] if mode == "file" else []
            controller = ControllerProcess(
                kubeconfig=str(cluster.kubeconfig),
                namespace=namespace,
                extra=extra,
                log_path=Path(state) / "logs" / f"delivery-{mode}-{os.getpid()}.log",
            )
            controller.start()
            try:
                samples, survivors, staged = measure(
                    core, apps, specs, namespace=namespace, mode=mode, repeats=args.repeats, timeout=args.timeout,
                    watch=watch, kubelet=kubelet,
                )  # fmt: skip
            finally:
                controller.stop()
            results.append(
                {
                    "mode": mode,
                    "samples": [round(s, 3) for s in samples],
                    "p50_s": round(statistics.median(samples), 3),
                    "p95_s": (stages.quantiles(samples) or {}).get("p95"),
                    "max_s": round(max(samples), 3),
                    "survivor_samples": [round(s, 3) for s in survivors],
                    "survivor_p50_s": round(statistics.median(survivors), 3) if survivors else None,
                    "survivor_max_s": round(max(survivors), 3) if survivors else None,
                    "stages_s": staged,
                    "stages": {
                        k: stages.quantiles(v for r in staged if (v := r.get(k)) is not None) for k in DELIVERY_STAGES
                    },
                }
            )
    finally:
        specs.stop()
        watch.stop()
        core.delete_namespace(namespace, propagation_policy="Background")
    print(
        "| mode | repeats | -> TF_CONFIG in the new pod, p50 / p95 / max (s) "
        "| -> new epoch in the file of a pod that stayed, p50 / max (s) |"
    )
    print("|---|---|---|---|")
    for r in results:
        stayed = f"{r['survivor_p50_s']:.3f} / {r['survivor_max_s']:.3f}" if r["survivor_samples"] else "-"
        print(
            f"| {r['mode']} | {len(r['samples'])} | {r['p50_s']:.3f} / {r['p95_s']:.3f} / {r['max_s']:.3f} | {stayed} |"
        )
    print()
    print("Replacement stages, seconds after its container started (p50 / p95 / max):")
    print()
    print("| mode | " + " | ".join(DELIVERY_STAGES) + " |")
    print("|---|" + "---|" * len(DELIVERY_STAGES))
    for r in results:
        cells = [
            f"{q['p50']:.3f} / {q['p95']:.3f} / {q['max']:.3f}" if (q := r["stages"].get(k)) else "-"
            for k in DELIVERY_STAGES
        ]
        print(f"| {r['mode']} | " + " | ".join(cells) + " |")
    if args.json:
        document = {
            "kube": cluster.versions.get("kube"),
            "command": shlex.join(["build/bench.sh", *(sys.argv[1:] if argv is None else argv)]),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
            "machine": {
                "cpus": os.cpu_count(),
                "load_avg_start": [round(x, 2) for x in load_start],
                "load_avg_end": [round(x, 2) for x in os.getloadavg()],
            },
            "modes": results,
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
