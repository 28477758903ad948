"""The Volcano-gang TensorFlow runtime example, through the real Trainer, JobSet and Volcano.

``build/examples/trainer/tensorflow-volcano-runtime.yaml`` is applied as
shipped (namespaced objects in the test's namespace, the Queue and the
ClusterTrainingRuntime renamed per test: other tests share the cluster).
Trainer turns the TrainJob into a JobSet and, for ``podGroupPolicy.volcano``,
a PodGroup; the Job controller creates the pods; Volcano's scheduler
(``schedulerName: volcano``, gang plugin) decides when they may bind; kwok
runs them; ``ring-controller`` publishes the spec.

The gang: the queue's capability is first set between one member's request
and the whole job's, so a scheduler placing pods one by one would start one
worker. Volcano must start none, and the spec must stay ``initializing`` with
no members, over an observation window; once the capability is back at the
file's value, both members run and the spec completes, ranked by completion
index, with the TrainJob's TF_WORKER_PORT. ``ring-launch --print json``, run
as each pod's container would run it, shows the TF_CONFIG each worker gets.

Then for real, on the real node: the same file, with requests small enough
for its 2 cores, the data directory where the test wrote it and a step cap in
the TrainJob's env; the namespace's placement annotations put the pods there.
The trainer image runs the ConfigMap's script under ``ring-launch
--from-api`` with the file's Role; both workers must train in sync.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes.utils import parse_quantity

from ringdevcluster import Cluster, node
from tests.support import nodejobs
from tests.support.controllerproc import ControllerProcess
from tests.support.kubehelp import read_spec, wait_for, wait_spec
from tests.support.workloads import (
    QUEUE_ANNOTATION,
    SCHEDULING,
    TRAINER,
    Json,
    Timeline,
    jobset_pods,
    podgroups,
    volcano_example,
)

RING_LAUNCH = str(Path(sys.executable).with_name("ring-launch"))
#: How long no member may run while the queue is too small (Volcano schedules every 200 ms here).
WINDOW = 10.0


def _one(docs: list[Json], kind: str) -> Json:
    (doc,) = (d for d in docs if d["kind"] == kind)
    return doc


def _index(pod: Any) -> int:
    return int(pod.metadata.labels["batch.kubernetes.io/job-completion-index"])


def _env(container: Any) -> dict[str, str]:
    return {e.name: e.value for e in container.env or [] if e.value is not None}


def _tf_config(kubeconfig: Path, pod: Any) -> Json:
    """TF_CONFIG as ``ring-launch --from-api`` computes it for ``pod`` (the runtime's command, printing)."""
    env = {
        "PATH": str(Path(sys.executable).parent),
        "POD_NAME": pod.metadata.name,
        "POD_UID": pod.metadata.uid,
        "POD_NAMESPACE": pod.metadata.namespace,
        "RING_JOB_NAME": pod.metadata.labels["jobset.sigs.k8s.io/jobset-name"],
        "RING_TIMEOUT": "30",
    }
    done = subprocess.run(
        [RING_LAUNCH, "--from-api", "--kubeconfig", str(kubeconfig), "--print", "json"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    config: Json = json.loads(json.loads(done.stdout)["TF_CONFIG"])
    return config


@pytest.mark.integration
def test_volcano_gang_runtime_starts_all_members_or_none_and_ranks_them_by_index(
    k8s: Any, namespace: str, kubeconfig: Path, controller: ControllerProcess
) -> None:
    docs = volcano_example(namespace)
    queue, runtime, tj = _one(docs, "Queue"), _one(docs, "ClusterTrainingRuntime"), _one(docs, "TrainJob")
    name, nodes = tj["metadata"]["name"], tj["spec"]["trainer"]["numNodes"]
    configmap = f"rings-config-{name}"
    # What the example must say, read from the file itself.
    pod_spec = nodejobs.pod_spec(runtime)
    (container,) = pod_spec["containers"]
    assert runtime["spec"]["podGroupPolicy"] == {"volcano": {}} and pod_spec["schedulerName"] == "volcano"
    assert container["command"][:2] == ["python3", "/ring/ring-launch.pyz"], container["command"]
    assert [c["command"][-2:] for c in pod_spec["initContainers"]] == [["--install", "/ring"]]
    assert "network" not in runtime["spec"]["template"]["spec"]
    per_pod = parse_quantity(container["resources"]["requests"]["cpu"])
    full = copy.deepcopy(queue["spec"]["capability"])
    assert parse_quantity(full["cpu"]) >= per_pod * nodes, "the file's queue must fit the file's TrainJob"
    # Room for one member, not for the gang.
    short = per_pod * nodes - 1
    assert per_pod <= short < per_pod * nodes
    queue["spec"]["capability"]["cpu"] = str(short)

    timeline = Timeline(k8s, namespace)
    try:
        nodejobs.apply(k8s.api, docs)
        pods = wait_for(
            lambda: (lambda ps: ps if len(ps) == nodes else None)(jobset_pods(k8s, namespace, name)),
            timeout=60, what=f"the TrainJob's {nodes} pods",
        )  # fmt: skip
        pods.sort(key=_index)
        # Trainer made the PodGroup, owned by the TrainJob, sized for the whole job.
        (group,) = wait_for(lambda: podgroups(k8s, namespace), timeout=30, what="the TrainJob's PodGroup")
        owner = group["metadata"]["ownerReferences"][0]
        created = k8s.custom.get_namespaced_custom_object(*TRAINER, namespace, "trainjobs", name)
        assert (owner["kind"], owner["name"], owner["uid"]) == ("TrainJob", name, created["metadata"]["uid"])
        assert group["metadata"]["name"] == name and group["spec"]["minMember"] == nodes
        assert group["spec"]["queue"] == runtime["spec"]["template"]["metadata"]["annotations"][QUEUE_ANNOTATION]
        assert parse_quantity(group["spec"]["minResources"]["cpu"]) == per_pod * nodes
        for pod in pods:
            assert pod.spec.scheduler_name == "volcano"
            assert pod.metadata.annotations["scheduling.k8s.io/group-name"] == name

        def no_member_placed() -> None:
            now = jobset_pods(k8s, namespace, name)
            assert len(now) == nodes
            bound = [(p.metadata.name, p.spec.node_name, p.status.phase) for p in now if p.spec.node_name]
            assert not bound, f"a member was placed while the gang did not fit: {bound}"

        # Volcano has looked at the group and refused it: Pending, Unschedulable.
        def refused() -> Json | None:
            no_member_placed()
            g = k8s.custom.get_namespaced_custom_object(*SCHEDULING, namespace, "podgroups", name)
            status = g.get("status") or {}
            kinds = {c.get("type") for c in status.get("conditions") or []}
            return g if status.get("phase") == "Pending" and "Unschedulable" in kinds else None

        wait_for(refused, timeout=30, what="Volcano to mark the PodGroup Pending/Unschedulable")
        end = time.monotonic() + WINDOW
        while time.monotonic() < end:
            no_member_placed()
            spec = read_spec(k8s, namespace, configmap)
            assert spec is not None and spec["status"] == "initializing", spec
            assert spec["members"] == [] and spec["expected"] == nodes
            time.sleep(0.25)
        assert not timeline.running, timeline.running
        assert not [s for _, cm, s in timeline.specs if cm == configmap and s["status"] != "initializing"]

        # Room for the gang: every member starts, the spec completes.
        k8s.custom.patch_cluster_custom_object(
            *SCHEDULING, "queues", queue["metadata"]["name"], {"spec": {"capability": full}}
        )
        spec = wait_spec(k8s, namespace, configmap, timeout=60)
        group = wait_for(
            lambda: (lambda g: g if (g.get("status") or {}).get("phase") == "Running" else None)(
                k8s.custom.get_namespaced_custom_object(*SCHEDULING, namespace, "podgroups", name)
            ),
            timeout=30, what="the PodGroup Running",
        )  # fmt: skip
        live = {p.metadata.name: p for p in jobset_pods(k8s, namespace, name)}
    finally:
        timeline.stop()
        for doc in (runtime, queue):
            nodejobs.delete(k8s.api, doc)

    assert sorted(live) == sorted(p.metadata.name for p in pods), "the members are the pods that waited"
    assert group["status"].get("running") == nodes
    # Ranked by completion index, the TrainJob's TF_WORKER_PORT (23456, not the runtime's 12345).
    assert [(m["rank"], m["task"], m["index"]) for m in spec["members"]] == [(i, "node", i) for i in range(nodes)]
    assert [m["pod"] for m in spec["members"]] == [p.metadata.name for p in pods]
    for m in spec["members"]:
        pod = live[m["pod"]]
        assert m["pod"].startswith(f"{name}-node-0-{m['index']}-") and pod.spec.node_name.startswith("kwok-")
        assert m["uid"] == pod.metadata.uid and m["ip"] == pod.status.pod_ip and m["port"] == 23456
    # The env overrides reached the containers through Trainer; the runtime's NCCL_* where not overridden.
    env = _env(live[spec["members"][0]["pod"]].spec.containers[0])
    assert {k: env[k] for k in ("TF_WORKER_PORT", "EPOCHS", "NCCL_DEBUG", "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME")} == {
        "TF_WORKER_PORT": "23456", "EPOCHS": "50", "NCCL_DEBUG": "WARN", "NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "net",
    }  # fmt: skip
    # Each worker's TF_CONFIG: every member by IP in completion-index order, its own index as the task.
    workers = [f"{m['ip']}:{m['port']}" for m in spec["members"]]
    for i, pod in enumerate(pods):
        assert _tf_config(kubeconfig, live[pod.metadata.name]) == {
            "cluster": {"worker": workers},
            "task": {"type": "worker", "index": i},
        }


def _script_output(text: str) -> tuple[Json | None, list[str]]:
    """The TF_CONFIG the example script printed, and its own lines (TensorFlow's logging left out)."""
    config = None
    lines = []
    for line in text.splitlines():
        if line.startswith("TF_CONFIG="):
            config = json.loads(line[len("TF_CONFIG=") :])
        elif line.startswith(("strategy ready ", "epoch=", "done ")):
            lines.append(line)
    return config, lines


def _why_waiting(k8s: Any, namespace: str, name: str) -> str:
    """What holds the pods back: their containers' waiting reasons, the PodGroup's phase, the real node's taints."""
    waiting = {
        p.metadata.name: [(c.state.waiting.reason, c.state.waiting.message) for c in p.status.container_statuses or []
                          if c.state and c.state.waiting]
        for p in jobset_pods(k8s, namespace, name)
    }  # fmt: skip
    phases = [(g["metadata"]["name"], (g.get("status") or {}).get("phase")) for g in podgroups(k8s, namespace)]
    taints = [t.key for t in k8s.core.read_node(node.NODE_NAME).spec.taints or []]
    return f"containers waiting: {waiting}; PodGroups: {phases}; real-node taints: {taints}"


@pytest.mark.e2e
def test_volcano_gang_example_script_trains_in_sync_on_the_real_node(
    k8s: Any, namespace: str, controller: ControllerProcess, workloads: Cluster
) -> None:
    nodejobs.ensure_trainer_images()
    data = nodejobs.make_data(Path(workloads.state_dir) / "test-cifar10")
    k8s.core.patch_namespace(namespace, {"metadata": {"annotations": node.namespace_placement()}})
    docs = volcano_example(namespace)
    queue, runtime, tj = _one(docs, "Queue"), _one(docs, "ClusterTrainingRuntime"), _one(docs, "TrainJob")
    name, nodes = tj["metadata"]["name"], tj["spec"]["trainer"]["numNodes"]
    pod_spec = nodejobs.pod_spec(runtime)
    (container,) = pod_spec["containers"]
    container["resources"] = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}}
    (cifar,) = (v for v in pod_spec["volumes"] if v["name"] == "cifar-data")
    cifar["hostPath"]["path"] = str(data)
    tj["spec"]["trainer"]["env"] += [
        {"name": "STEPS", "value": "4"},
        {"name": "BATCH_SIZE", "value": "16"},
        {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"},
        {"name": "RING_TIMEOUT", "value": "300"},
    ]
    timeline = Timeline(k8s, namespace)  # the completed spec is gone once the workers have ended
    try:
        nodejobs.apply(k8s.api, docs)
        try:
            pods = nodejobs.wait_finished(k8s.core, namespace, name, nodes, timeout=400)
        except AssertionError as err:
            raise AssertionError(f"{err}; {_why_waiting(k8s, namespace, name)}") from None
        texts = {w.pod: w.text for w in nodejobs.logs(k8s.core, namespace, pods)}
    finally:
        timeline.stop()
        for doc in (runtime, queue):
            nodejobs.delete(k8s.api, doc)
    completed = [s for _, cm, s in timeline.specs if cm == f"rings-config-{name}" and s["status"] == "completed"]
    assert all(p.status.phase == "Succeeded" for p in pods), {n: t[-1500:] for n, t in texts.items()}
    pods.sort(key=_index)
    assert all(p.spec.node_name == node.NODE_NAME and p.spec.scheduler_name == "volcano" for p in pods)
    assert completed, "the controller never published a completed spec"
    workers = [f"{p.status.pod_ip}:23456" for p in pods]
    assert [f"{m['ip']}:{m['port']}" for m in completed[-1]["members"]] == workers
    outputs = [_script_output(texts[p.metadata.name]) for p in pods]
    for i, (config, lines) in enumerate(outputs):
        assert config == {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}, texts
        assert lines[0] == f"strategy ready workers={nodes} task=worker:{i}", lines
        assert lines[-1].startswith("done steps=4 weights_sha256="), lines
    # In sync: the same all-reduced losses and the same final weights on every worker.
    assert len({tuple(lines[1:]) for _, lines in outputs}) == 1, [lines for _, lines in outputs]
