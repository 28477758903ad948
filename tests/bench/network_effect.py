"""Which network the all-reduce takes: the same ring over the pod network and over the second one, each shaped in turn.

    python -m tests.bench.network_effect [--workers 4] [--floats N] [--steps S] [--rate 200mbit] [--json OUT]

On the dev cluster's real node with the opt-in second pod network
(``ring-devcluster up --with node --second-network``: every pod has ``eth0``
on bridge ``ringbr0`` and ``eth1`` on ``ringbr1``). One Indexed Job of
``--workers`` pods per run, written from ``build/examples/job/tf-indexed-job.yaml``:
the real Job controller makes the pods, ring-controller (a process here)
writes their spec, ring-launch exports ``TF_CONFIG``, and each pod runs the
numpy ring all-reduce of :mod:`tests.bench.ringworker` (mounted from this
checkout) at the addresses ``TF_CONFIG`` gives it, bound to its own. Two jobs
per shaping: one on the pod network (no annotation), one annotated
``ring-controller.io/network: default/ring-fast`` (the second network).

Shaping (``--shape``, default ``primary,second``): once a run's pods are
Running, every port of one bridge (the host end of each pod's veth on it)
gets an ``htb`` root whose default class has ``--rate``: everything that
bridge delivers to a pod is limited, one link per pod, as a slower network
would be; the other bridge stays unshaped. Then the pods are let go (a file
in a ``hostPath`` they wait for), and the qdiscs are removed when the run
ends (a port already carrying an ``htb`` of another run is refused). ``none``
shapes nothing: the control. Needs root; this kernel has no ``netem``, so the
slow network is slow in bandwidth, not in delay.

Per run: the median all-reduce time (per step, the slowest rank), and the
bytes each pod sent on ``eth0`` and on ``eth1`` while the ring ran, from
the pod's own ``/sys/class/net`` counters. The data went where the spec
says when the job on the shaped network is the slow one and its bytes are
on that network's interface, in both directions. ``--json`` writes the runs,
the command, the date and the machine's load (``/proc/loadavg``) before and
after; docs/performance.md renders ``tests/bench/figures/network-effect.json``.
"""

from __future__ import annotations

import argparse
import copy
import ipaddress
import json
import os
import secrets
import shlex
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from model.keys import NETWORK_ANNOTATION
from ringdevcluster import ensure_up, node
from tests.bench.vsdns import without_state_dir
from tests.support import nodejobs
from tests.support.clients import K8s, workloads_state_dir
from tests.support.controllerproc import ControllerProcess
from tests.support.kubehelp import wait_for, wait_spec

Json = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "build" / "examples" / "job" / "tf-indexed-job.yaml"
PORT = 4100
#: ``--shape`` values: which bridge is slowed.
BRIDGES = {"primary": node.BRIDGE, "second": node.BRIDGE2}
#: The interface each network is on in a pod.
INTERFACES = ("eth0", "eth1")
#: Prints ``COUNTERS {"eth0": {"rx": ..., "tx": ...}, "eth1": {...}}`` (bytes, the pod's own interfaces).
COUNT = (
    "import json; print('COUNTERS ' + json.dumps({i: {d: int(open(f'/sys/class/net/{i}/statistics/{d}_bytes').read()) "
    f"for d in ('rx', 'tx')}} for i in {INTERFACES!r}}}), flush=True)"
)
#: After ring-launch: wait for the go file, counters, the ring, counters; the ring's exit status.
SCRIPT = (
    "while [ ! -e /go/go ]; do sleep 0.05; done; "
    f'python3 -c {shlex.quote(COUNT)} && "$@"; code=$?; python3 -c {shlex.quote(COUNT)}; exit $code'
)


def _say(message: str) -> None:
    print(f"network-effect: {message}", file=sys.stderr, flush=True)


def _loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def ring_job(name: str, *, workers: int, network: str | None, go_dir: Path, floats: int, steps: int) -> Json:
    """The example Indexed Job, renamed, on the real node, running the ring (see the module doc)."""
    job: Json = yaml.safe_load(EXAMPLE.read_text())
    job["metadata"]["name"] = name
    if network is not None:
        job["metadata"]["annotations"] = {NETWORK_ANNOTATION: network}
    spec = job["spec"]
    spec["completions"] = spec["parallelism"] = workers
    spec["backoffLimitPerIndex"] = 0
    pod = spec["template"]["spec"]
    pod.update(copy.deepcopy(node.pod_placement()))
    pod["terminationGracePeriodSeconds"] = 2
    (container,) = pod["containers"]
    container["command"] = [*nodejobs.LAUNCH, "--timeout", "300", "--", "sh", "-c", SCRIPT, "sh"]
    container["args"] = [
        "python3",
        "/bench/ringworker.py",
        "--tf-config",
        "--floats",
        str(floats),
        "--steps",
        str(steps),
    ]
    container["env"] = [e for e in container["env"] if e["name"] in ("POD_NAME", "POD_UID", "POD_IP")]
    container["ports"] = [{"name": "tf-port", "containerPort": PORT}]
    container["resources"] = {"requests": {"cpu": "100m", "memory": "128Mi"}}
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != "cifar-data"] + [
        {"name": "bench", "mountPath": "/bench", "readOnly": True},
        {"name": "go", "mountPath": "/go"},
    ]
    pod["volumes"] = [v for v in pod["volumes"] if v["name"] != "cifar-data"] + [
        {"name": "bench", "hostPath": {"path": str(REPO / "tests" / "bench"), "type": "Directory"}},
        {"name": "go", "hostPath": {"path": str(go_dir), "type": "Directory"}},
    ]
    for volume in pod["volumes"]:
        if volume["name"] == "rings-config":
            volume["configMap"]["name"] = f"rings-config-{name}"
    return job


def bridge_ports(bridge: str) -> list[str]:
    """The interfaces enslaved to ``bridge`` (the host ends of the pods' veths)."""
    out = subprocess.run(
        ["ip", "-o", "link", "show", "master", bridge], check=True, capture_output=True, text=True
    ).stdout
    return [line.split(": ", 2)[1].split("@", 1)[0] for line in out.splitlines() if ": " in line]


def shape(ports: list[str], *, rate: str) -> None:
    """An ``htb`` root on each port whose default class carries ``rate`` (see the module doc)."""
    for dev in ports:
        shown = subprocess.run(["tc", "qdisc", "show", "dev", dev], check=True, capture_output=True, text=True).stdout
        if "htb" in shown:
            raise RuntimeError(f"{dev} already has an htb qdisc of another run: {shown.strip()}")
    for dev in ports:
        subprocess.run(["tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10"], check=True)
        subprocess.run(
            ["tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", rate, "ceil", rate,
             "burst", "256k", "cburst", "256k", "quantum", "200000"],
            check=True,
        )  # fmt: skip


def unshape(ports: list[str]) -> None:
    """Remove the roots :func:`shape` added (a port whose pod is gone has none left to remove)."""
    for dev in ports:
        subprocess.run(["tc", "qdisc", "del", "dev", dev, "root"], check=False, capture_output=True)


def _pods(k8s: K8s, namespace: str, job: str) -> list[Any]:
    pods = k8s.core.list_namespaced_pod(namespace, label_selector=f"batch.kubernetes.io/job-name={job}").items
    return sorted(pods, key=lambda p: int(p.metadata.labels["batch.kubernetes.io/job-completion-index"]))


def _all(k8s: K8s, namespace: str, job: str, workers: int, phases: tuple[str, ...]) -> list[Any] | None:
    pods = _pods(k8s, namespace, job)
    failed = [p.metadata.name for p in pods if p.status.phase == "Failed"]
    if failed:
        logs = {n: k8s.core.read_namespaced_pod_log(n, namespace)[-1500:] for n in failed}
        raise RuntimeError(f"{job}: pod(s) failed: {logs}")
    return pods if len(pods) == workers and all(p.status.phase in phases for p in pods) else None


def _wait_gone(k8s: K8s, namespace: str, job: str) -> None:
    wait_for(lambda: not _pods(k8s, namespace, job), timeout=120, what=f"{job}'s pods gone")


def _lines(text: str, prefix: str) -> list[Json]:
    return [json.loads(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix)]


def run_one(
    k8s: K8s, namespace: str, *, name: str, shaped: str, network: str | None, args: argparse.Namespace, go_root: Path
) -> Json:
    """One job from creation to its pods' end, shaped as ``shaped``; its figures."""
    go_dir = go_root / name
    go_dir.mkdir()
    job = ring_job(name, workers=args.workers, network=network, go_dir=go_dir, floats=args.floats, steps=args.steps)
    k8s.batch.create_namespaced_job(namespace, job)
    ports: list[str] = []
    try:
        wait_for(lambda: _all(k8s, namespace, name, args.workers, ("Running",)), timeout=180, what=f"{name} Running")
        spec = wait_spec(k8s, namespace, f"rings-config-{name}", timeout=60)
        if shaped != "none":
            ports = bridge_ports(BRIDGES[shaped])
            shape(ports, rate=args.rate)
        (go_dir / "go").write_text("")
        pods = wait_for(
            lambda: _all(k8s, namespace, name, args.workers, ("Succeeded",)),
            timeout=600,
            interval=0.5,
            what=f"{name} Succeeded",
        )
    finally:
        unshape(ports)
    members = sorted(spec["members"], key=lambda m: m["rank"])
    want = node.addresses(args.ip_family)
    cidrs = want.second_cidrs if network else want.pod_cidrs
    for m in members:  # the spec's addresses are on the network the job asked for
        if not any(ipaddress.ip_address(m["ip"]) in c for c in cidrs):
            raise AssertionError(f"{name}: member {m['pod']} at {m['ip']}, outside {[str(c) for c in cidrs]}")
    results, sent, received = [], {}, {}
    for pod in pods:
        text = k8s.core.read_namespaced_pod_log(pod.metadata.name, namespace)
        (result,) = [json.loads(line) for line in text.splitlines() if line.startswith('{"rank"')]
        before, after = _lines(text, "COUNTERS ")
        results.append(result)
        sent[pod.metadata.name] = {i: after[i]["tx"] - before[i]["tx"] for i in INTERFACES}
        received[pod.metadata.name] = {i: after[i]["rx"] - before[i]["rx"] for i in INTERFACES}
    if not all(r["correct"] for r in results):
        raise AssertionError(f"{name}: wrong all-reduce result")
    per_step = [max(r["seconds"][i] for r in results) for i in range(args.steps)]
    k8s.batch.delete_namespaced_job(name, namespace, propagation_policy="Foreground")
    return {
        "job": name,
        "shaped": shaped,
        "network": network,
        "interface": members[0].get("interface", "eth0"),
        "ips": [m["ip"] for m in members],
        "steps_s": [round(s, 4) for s in per_step],
        "median_s": round(statistics.median(per_step), 4),
        "tx_bytes": sent,
        "rx_bytes": received,
    }


def command(argv: list[str]) -> str:
    """The command line as recorded: without ``--state-dir`` (a path of this machine)."""
    return " ".join(["python -m tests.bench.network_effect", *without_state_dir(argv)])


def render(doc: Json) -> str:
    """The runs as a Markdown table (docs/performance.md's ``network-effect`` block renders the same)."""
    lines = [
        "| shaped | job's network | interface in the spec | median all-reduce (s) | sent on eth0 (MB, all pods) | sent on eth1 (MB, all pods) |",
        "|---|---|---|---|---|---|",
    ]
    for r in doc["runs"]:
        eth0, eth1 = (sum(b[i] for b in r["tx_bytes"].values()) / 1e6 for i in INTERFACES)
        lines.append(
            f"| {r['shaped']} | {r['network'] or 'pod network'} | {r['interface']} | {r['median_s']:.3f} "
            f"| {eth0:.2f} | {eth1:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, default=None, help="the cluster (default: the tests' workloads one)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--floats", type=int, default=4_000_000, help="float32 values all-reduced (default 16 MB)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rate", default="200mbit", help="bandwidth of each port of the shaped bridge")
    parser.add_argument("--shape", default="primary,second", help="which bridge to slow, in turn (and 'none')")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    shapes = [s for s in args.shape.split(",") if s]
    unknown = [s for s in shapes if s not in (*BRIDGES, "none")]
    if unknown:
        parser.error(f"unknown --shape {unknown}: choose from {[*BRIDGES, 'none']}")
    state = args.state_dir or workloads_state_dir()
    cluster = ensure_up(state_dir=state, addons=("node",), second_network=True, say=_say)
    if not cluster.second_network:
        raise RuntimeError(f"the cluster in {state} has no second pod network: bring it down, then up --second-network")
    args.ip_family = cluster.ip_family
    nodejobs.ensure_trainer_images()
    k8s = K8s.from_kubeconfig(cluster.kubeconfig)
    namespace = f"bench-neteffect-{secrets.token_hex(3)}"
    k8s.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    load_before = _loadavg()
    started = datetime.now(UTC)
    runs: list[Json] = []
    try:
        with tempfile.TemporaryDirectory(prefix="neteffect-", dir=state) as tmp:
            os.chmod(tmp, 0o755)
            controller = ControllerProcess(
                kubeconfig=str(cluster.kubeconfig), namespace=namespace, log_path=Path(tmp) / "controller.log"
            )
            controller.start()
            try:
                wait_for(
                    lambda: k8s.core.list_namespaced_service_account(namespace).items or None,
                    timeout=60,
                    what="default ServiceAccount",
                )
                n = 0
                for i, shaped in enumerate(shapes):
                    nets: list[str | None] = [None, node.SECOND_NETWORK]
                    for network in nets if i % 2 == 0 else nets[::-1]:
                        n += 1
                        name = f"ring-{n}"
                        run = run_one(
                            k8s, namespace, name=name, shaped=shaped, network=network, args=args, go_root=Path(tmp)
                        )
                        runs.append(run)
                        totals = {i: sum(b[i] for b in run["tx_bytes"].values()) for i in INTERFACES}
                        _say(
                            f"shaped {shaped}, network {network or 'pod network'} ({run['interface']}): "
                            f"median {run['median_s']:.3f}s, sent {totals}"
                        )
                        _wait_gone(k8s, namespace, name)
            finally:
                controller.stop()
    finally:
        k8s.core.delete_namespace(namespace)
    doc = {
        "command": command(argv if argv is not None else sys.argv[1:]),
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "load": {"before": load_before, "after": _loadavg()},
        "ip_family": cluster.ip_family,
        "workers": args.workers,
        "mbytes": args.floats * 4 / 1e6,
        "steps": args.steps,
        "rate": args.rate,
        "runs": runs,
    }
    print(render(doc))
    if args.json is not None:
        args.json.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
