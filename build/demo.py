"""The ring-controller demo: a real TensorFlow job gets its TF_CONFIG from the controller.

Run by ``build/demo.sh`` (which installs everything first). Steps:

1. bring up the local control plane (``ring-devcluster``: etcd, kube-apiserver,
   controller-manager, scheduler, kwok fake nodes with loopback pod IPs);
2. start ``ring-controller`` as its own process;
3. submit the example Volcano Job ``build/examples/volcano/tf-cifar10.yaml``
   (two workers) and create its pods the way Volcano's job controller does
   (this cluster runs no Volcano controller yet); the scheduler binds them
   and kwok runs them with IPs in 127.1.0.0/16;
4. for each pod run a real TensorFlow worker on this machine as that pod's
   container would: ``ring-launch -- python train.py``, reading the
   kubelet-style projected ``rings-config`` volume; each binds its pod's
   port (the pods share this machine's network, so ports differ);
5. show the ConfigMap, ``TF_CONFIG`` in each worker, training progress, and
   a timeline summary; then clean up (the cluster stays up for reuse).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config, watch

from ringdevcluster import ensure_up
from ringdevcluster.harness import ControllerProcess, free_port
from ringdevcluster.volumes import ConfigMapVolume

REPO = Path(__file__).resolve().parents[1]

JOB_FILE = REPO / "build" / "examples" / "volcano" / "tf-cifar10.yaml"
TRAIN = REPO / "build" / "examples" / "tensorflow" / "train.py"
MAKE_DATA = REPO / "build" / "examples" / "tensorflow" / "make_cifar10.py"
T0 = time.monotonic()
_PRINT = threading.Lock()


def say(msg: str) -> None:
    with _PRINT:
        print(f"[{time.monotonic() - T0:6.2f}s] {msg}", flush=True)


def pump(proc: subprocess.Popen[str], prefix: str, seen: dict[str, float], key: str) -> None:
    """Print a worker's output with a prefix; note when TF_CONFIG and step 1 appear."""
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        if line.startswith("TF_CONFIG="):
            seen.setdefault(f"{key}.tf_config", time.monotonic())
        if line.startswith("step=1 "):
            seen.setdefault(f"{key}.first_step", time.monotonic())
        if line[:5] in ("I0000", "W0000") or "cuInit" in line or "oneDNN" in line:
            continue  # TensorFlow's start-up chatter
        if (
            line.startswith(("TF_CONFIG=", "step=", "strategy ready", "ring-launch", "done", "result"))
            or "rror" in line
        ):
            with _PRINT:
                print(f"    {prefix} | {line}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--state-dir", default=os.environ.get("RING_DEVCLUSTER_STATE", str(REPO / ".state" / "devcluster")))
    p.add_argument("--steps", type=int, default=20, help="training steps per worker")
    p.add_argument("--namespace", default="ring-demo")
    p.add_argument("--keep", action="store_true", help="keep the namespace and controller log")
    args = p.parse_args()
    work = Path(args.state_dir).parent / "demo"
    work.mkdir(parents=True, exist_ok=True)

    say(f"1/5 local control plane (state {args.state_dir}); a cold first run builds it from the Go module proxy")
    cluster = ensure_up(state_dir=Path(args.state_dir), say=lambda m: say(f"    ring-devcluster: {m}"))
    kubeconfig = str(cluster.kubeconfig)
    api = config.new_client_from_config(config_file=kubeconfig)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ns = args.namespace
    _fresh_namespace(core, ns)

    say("2/5 starting ring-controller")
    ctl = ControllerProcess(
        kubeconfig=kubeconfig, namespace=ns, log_path=work / "controller.log", extra=["--log-format", "json"]
    )
    ctl.start()
    say(f"    ready: metrics http://127.0.0.1:{ctl.metrics_port}/metrics, log {ctl.log_path}")

    data = work / "cifar10"
    if not (data / "test_batch").exists():
        subprocess.run([sys.executable, str(MAKE_DATA), "--out", str(data), "--per-batch", "256"], check=True)
    job = yaml.safe_load(JOB_FILE.read_text())
    name = job["metadata"]["name"]
    workers = job["spec"]["tasks"][0]["replicas"]
    ports = [free_port() for _ in range(workers)]
    procs: list[subprocess.Popen[str]] = []
    volumes: list[ConfigMapVolume] = []
    seen: dict[str, float] = {}
    try:
        say(f"3/5 submitting Volcano Job {ns}/{name} ({workers} workers) from {JOB_FILE.relative_to(REPO)}")
        job["metadata"]["namespace"] = ns
        job = custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", ns, "jobs", job)
        seen["submitted"] = time.monotonic()
        configmap = job["spec"]["tasks"][0]["template"]["spec"]["volumes"][0]["configMap"]["name"]
        watcher = threading.Thread(target=_watch_spec, args=(core, ns, configmap, seen), daemon=True)
        watcher.start()

        say("4/5 starting one TensorFlow worker per pod: ring-launch -- python train.py (they wait for the spec)")
        for i in range(workers):
            pod = f"{name}-worker-{i}"
            volume = work / "volumes" / pod
            volumes.append(
                ConfigMapVolume(kubeconfig=kubeconfig, namespace=ns, name=configmap, directory=volume).start()
            )
            cmd = [
                str(Path(sys.executable).with_name("ring-launch")),
                "--config-dir",
                str(volume),
                "--timeout",
                "300",
                "--",
                "sh",
                "-c",
                'echo "TF_CONFIG=$TF_CONFIG"; exec "$@"',
                "sh",
                sys.executable,
                str(TRAIN),
                "--data-dir",
                str(data),
                "--steps",
                str(args.steps),
                "--result",
                str(work / f"result-{i}.json"),
            ]
            env = {
                **os.environ,
                "POD_NAME": pod,
                "PYTHONUNBUFFERED": "1",
                "TF_CPP_MIN_LOG_LEVEL": "2",
                "PYTHONPATH": str(REPO),
            }
            proc = subprocess.Popen(
                cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
            )
            procs.append(proc)
            threading.Thread(target=pump, args=(proc, f"worker-{i}", seen, f"w{i}"), daemon=True).start()

        say("    creating the pods as Volcano's job controller would (name, labels, ownerReference); one port per pod")
        say("    (kwok runs no kubelet: the demo projects each pod's rings-config volume into a directory itself)")
        for i in range(workers):
            core.create_namespaced_pod(ns, _volcano_pod(job, task="worker", index=i, port=ports[i]))
        _wait(lambda: "completed" in seen, 60, "the spec to complete")
        cm = core.read_namespaced_config_map(configmap, ns)
        say(f"    ConfigMap {ns}/{configmap} (labels {cm.metadata.labels}):")
        print(_indent(json.dumps(json.loads(cm.data["cluster.json"]), indent=2)), flush=True)

        say("5/5 training")
        deadline = time.monotonic() + 240
        while any(p.poll() is None for p in procs):
            if any(p.poll() not in (None, 0) for p in procs) or time.monotonic() > deadline:
                say("    a worker failed or the run took too long: stopping the others")
                for proc in procs:
                    if proc.poll() is None:
                        os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(0.2)
        codes = [p.returncode for p in procs]
        if any(codes):
            say(f"    workers exited {codes}")
            return 1
        results = [json.loads((work / f"result-{i}.json").read_text()) for i in range(workers)]
        same = len({r["weights_sha256"] for r in results}) == 1
        say(
            f"    workers exited {codes}; final loss {results[0]['losses'][-1]:.4f}; identical weights on all workers: {same}"
        )
        _summary(seen, workers)
        return 0 if all(c == 0 for c in codes) and same else 1
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # TensorFlow traps SIGTERM
        for v in volumes:
            v.stop()
        ctl.stop()
        if not args.keep:
            core.delete_namespace(ns)
        say(
            f"cleaned up (namespace {ns} {'kept' if args.keep else 'deleted'}); the cluster stays up: "
            f"ring-devcluster down --state-dir {args.state_dir}"
        )


def _volcano_pod(job: dict[str, Any], *, task: str, index: int, port: int) -> dict[str, Any]:
    """Pod ``index`` of ``task`` as Volcano's job controller writes it (names, labels, annotations,
    owner), on the default scheduler (no Volcano here) and with its own TensorFlow port."""
    meta = job["metadata"]
    name = meta["name"]
    template = next(t for t in job["spec"]["tasks"] if t["name"] == task)["template"]
    ids = {"volcano.sh/job-name": name, "volcano.sh/task-spec": task, "volcano.sh/task-index": str(index)}
    spec = json.loads(json.dumps(template["spec"]))
    spec["schedulerName"] = "default-scheduler"
    for c in spec["containers"]:
        c["ports"] = [{"name": "tf-port", "containerPort": port}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-{task}-{index}",
            "namespace": meta["namespace"],
            "labels": {
                **(template.get("metadata", {}).get("labels") or {}),
                **ids,
                "volcano.sh/job-namespace": meta["namespace"],
                "volcano.sh/queue-name": job["spec"].get("queue", "default"),
            },
            "annotations": {
                **ids,
                "ring-controller/port": str(port),
                "volcano.sh/job-version": "0",
                "volcano.sh/template-uid": f"{name}-{task}",
                "scheduling.k8s.io/group-name": f"{name}-{meta['uid']}",
            },
            "ownerReferences": [
                {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": name, "uid": meta["uid"],
                 "controller": True, "blockOwnerDeletion": True}
            ],
        },
        "spec": spec,
    }  # fmt: skip


def _fresh_namespace(core: client.CoreV1Api, ns: str) -> None:
    try:
        core.delete_namespace(ns)
        _wait(lambda: ns not in {n.metadata.name for n in core.list_namespace().items}, 60, f"old namespace {ns} to go")
    except client.ApiException as e:
        if e.status != 404:
            raise
    core.create_namespace({"metadata": {"name": ns}})
    _wait(
        lambda: any(sa.metadata.name == "default" for sa in core.list_namespaced_service_account(ns).items),
        30,
        "the default ServiceAccount",
    )


def _watch_spec(core: client.CoreV1Api, ns: str, name: str, seen: dict[str, float]) -> None:
    last = None
    w = watch.Watch()
    for ev in w.stream(
        core.list_namespaced_config_map, ns, field_selector=f"metadata.name={name}", timeout_seconds=600
    ):
        data = ev["object"].data or {}
        if "cluster.json" not in data:
            continue
        spec = json.loads(data["cluster.json"])
        state = (spec["status"], spec["epoch"])
        if state != last:
            last = state
            say(
                f"    ConfigMap {name}: status={spec['status']} epoch={spec['epoch']} members={len(spec['members'])}/{spec['expected']}"
            )
            if spec["status"] == "completed":
                seen.setdefault("completed", time.monotonic())


def _wait(fn: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not fn():
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def _indent(text: str) -> str:
    return "\n".join("      " + line for line in text.splitlines())


def _summary(seen: dict[str, float], workers: int) -> None:
    t = seen["submitted"]
    print("\nSummary (seconds after the job was submitted):", flush=True)
    print(f"  spec completed in the ConfigMap    {seen['completed'] - t:7.2f}", flush=True)
    for i in range(workers):
        tf = seen.get(f"w{i}.tf_config")
        step = seen.get(f"w{i}.first_step")
        print(
            f"  worker-{i}: TF_CONFIG set {tf - t if tf else float('nan'):7.2f}   first step {step - t if step else float('nan'):7.2f}",
            flush=True,
        )
    print(f"  total demo time                    {time.monotonic() - T0:7.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
