"""The ring-controller demo on the real node: the shipped controller and a real TensorFlow job.

Run by ``build/demo.sh`` when this machine can run the dev cluster's real
node (root, cgroups); otherwise demo.sh runs ``build/demo.py`` on kwok. Steps:

1. bring up the local cluster with the real node and the real Volcano, JobSet
   and Trainer controllers (``ring-devcluster up --with
   jobset,volcano,trainer,node``; state: the tests' workloads cluster, so one
   real node serves both);
2. build (cached) and import the images ``ring-controller:0.1.0`` and
   ``ring-trainer:0.1.0`` into the node's containerd (``build/image.sh``);
3. deploy the controller as users do: ``build/rbac.yaml`` and
   ``build/ring-controller.yaml``, unchanged, by server-side apply; the
   namespaces carry the cluster admin's placement (select the real node,
   tolerate its taint: PodNodeSelector/PodTolerationRestriction), not the files;
4. submit ``build/examples/volcano/tf-cifar10.yaml`` with what a 2-core dev
   node needs changed (data path, smaller requests, steps): the real Volcano
   controller makes the pods, the kubelet runs them, ``rings-config`` is
   mounted by the kubelet, ``ring-launch`` execs the trainer with TF_CONFIG;
5. print the spec, each worker's TF_CONFIG, losses and weights; remove the
   job and the controller (the cluster stays up for reuse).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from ringdevcluster import ensure_up, harness, node

REPO = Path(__file__).resolve().parents[1]

JOB_FILE = REPO / "build" / "examples" / "volcano" / "tf-cifar10.yaml"
VOLCANO = ("batch.volcano.sh", "v1alpha1")
Json = dict[str, Any]
T0 = time.monotonic()


def say(msg: str) -> None:
    print(f"[demo {time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def fresh_namespace(core: client.CoreV1Api, name: str, labels: dict[str, str] | None = None) -> None:
    try:
        core.delete_namespace(name)
        say(f"removing the previous namespace {name}")
        while True:
            core.read_namespace(name)
            time.sleep(0.5)
    except ApiException as e:
        if e.status != 404:
            raise
    core.create_namespace(
        {"metadata": {"name": name, "annotations": node.namespace_placement(), "labels": labels or {}}}
    )


def wait(what: str, fn: Any, timeout: float = 300.0, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(interval)
    raise SystemExit(f"demo: timed out after {timeout:.0f}s waiting for {what}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # The tests' workloads cluster (build/test.sh's), so one real node serves both.
    state = os.environ.get("RING_DEVCLUSTER_STATE") or REPO / ".state" / "devcluster"
    p.add_argument(
        "--state-dir", type=Path, default=os.environ.get("RING_DEVCLUSTER_WORKLOADS_STATE") or f"{state}-workloads"
    )
    p.add_argument("--steps", type=int, default=20, help="training steps")
    p.add_argument("--namespace", default="ring-demo")
    p.add_argument("--keep", action="store_true", help="leave the job and the deployed controller running")
    args = p.parse_args()

    say(f"local cluster with the real node (state {args.state_dir}; the first run builds for a while)")
    cluster = ensure_up(state_dir=args.state_dir, addons=("jobset", "volcano", "trainer", "node"), say=say)
    say("images ring-controller:0.1.0 and ring-trainer:0.1.0 (build/image.sh, cached after the first build)")
    harness.ensure_image("ring-controller:0.1.0", "--controller")
    harness.ensure_image(harness.TRAINER_IMAGE, "--trainer")
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)

    docs = [
        d
        for f in ("rbac.yaml", "ring-controller.yaml")
        for d in yaml.safe_load_all((REPO / "build" / f).read_text())
        if d
    ]
    ns_doc = next(d for d in docs if d["kind"] == "Namespace")
    fresh_namespace(core, "ring-controller", ns_doc["metadata"].get("labels"))
    say("kubectl apply --server-side -f build/rbac.yaml -f build/ring-controller.yaml (unchanged)")
    harness.apply(api, docs)

    def ready() -> list[Any] | None:
        pods = core.list_namespaced_pod(
            "ring-controller", label_selector="app.kubernetes.io/name=ring-controller"
        ).items
        ok = [p for p in pods if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]
        return ok if len(ok) == 2 else None

    pods = wait("2 controller replicas Ready", ready, timeout=240)
    lease = wait(
        "a leader",
        lambda: (
            client.CoordinationV1Api(api)
            .read_namespaced_lease("ring-controller", "ring-controller")
            .spec.holder_identity
        ),
    )
    say(f"controller: {', '.join(p.metadata.name + ' ' + p.status.pod_ip for p in pods)}; leader {lease}")

    fresh_namespace(core, args.namespace)
    data = harness.make_data(Path(args.state_dir) / "demo-cifar10")
    job: Json = yaml.safe_load(JOB_FILE.read_text())
    (task,) = job["spec"]["tasks"]
    spec = task["template"]["spec"]
    (container,) = spec["containers"]
    container["resources"] = {"requests": {"cpu": "200m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}
    container["args"] = ["python", "/app/train.py", "--steps", str(args.steps), "--result", "-"]
    container["env"] = [e for e in container["env"] if e["name"] != "EPOCHS"] + [
        {"name": "EPOCHS", "value": "100"},  # --steps ends it
        {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"},
    ]
    for volume in spec["volumes"]:
        if volume["name"] == "cifar-data":
            volume["hostPath"]["path"] = str(data)
    say(
        f"submitting {JOB_FILE.relative_to(REPO)} (changed for a 2-core node: requests, data path, --steps {args.steps})"
    )
    submitted = time.time()
    custom.create_namespaced_custom_object(*VOLCANO, args.namespace, "jobs", job)
    name = job["metadata"]["name"]

    def spec_completed() -> Json | None:
        try:
            cm = core.read_namespaced_config_map(f"rings-config-{name}", args.namespace)
        except ApiException:
            return None
        s = json.loads((cm.data or {}).get("cluster.json", "{}"))
        return s if s.get("status") == "completed" else None

    cluster_spec = wait("the completed spec", spec_completed, timeout=300, interval=0.2)
    completed = time.time()
    say(f"spec completed {completed - submitted:.1f}s after submission, epoch {cluster_spec['epoch']}:")
    for m in cluster_spec["members"]:
        print(f"    rank {m['rank']}: {m['pod']}  {m['ip']}:{m['port']}  on {m['node']}")

    def finished() -> list[Any] | None:
        ps = core.list_namespaced_pod(args.namespace, label_selector=f"volcano.sh/job-name={name}").items
        failed = next((x for x in ps if x.status.phase == "Failed"), None)
        if failed is not None:
            log = core.read_namespaced_pod_log(failed.metadata.name, args.namespace)[-2000:]
            raise SystemExit(f"demo: worker {failed.metadata.name} failed: {log}")
        return ps if ps and all(x.status.phase == "Succeeded" for x in ps) else None

    workers = wait("training to finish", finished, timeout=600, interval=1.0)
    digests = set()
    for w in sorted(workers, key=lambda x: x.metadata.name):
        log = harness.parse_log(w.metadata.name, core.read_namespaced_pod_log(w.metadata.name, args.namespace))
        r = log.result or {}
        digests.add(r.get("weights_sha256"))
        ts = r.get("timestamps", {})
        print(f"    {w.metadata.name}: TF_CONFIG {json.dumps(r.get('tf_config'))}")
        print(
            f"      TF_CONFIG in the container {ts.get('start', 0) - completed:+.2f}s after the spec completed; "
            f"{r.get('steps')} steps, loss {r.get('losses', [0])[0]:.4f} -> {r.get('losses', [0])[-1]:.4f}, "
            f"weights {r.get('weights_sha256', '?')[:16]}"
        )
    say(
        "both workers trained in sync (same weights)" if len(digests) == 1 and None not in digests else "WEIGHTS DIFFER"
    )
    if not args.keep:
        core.delete_namespace(args.namespace)
        core.delete_namespace("ring-controller")
        for d in docs:
            if d["kind"] not in ("Namespace", "ServiceAccount", "Deployment", "Role", "RoleBinding"):
                harness.delete(api, d)
    say(
        f"done in {time.monotonic() - T0:.0f}s; the cluster stays up (ring-devcluster down --state-dir {args.state_dir})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
