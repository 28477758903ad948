"""TensorFlow TrainJobs on the real node, three ways: DNS probing, ring-controller by file, by API.

The runtimes are the shipped examples with what a benchmark needs added and
nothing of their logic changed:

* ``dns``: ``build/examples/baseline/tensorflow-dns-runtime.yaml`` (the
  comparison, not a product feature);
* ``ring-file``: ``build/examples/trainer/tensorflow-runtime.yaml`` with
  ``ring-launch`` reading the kubelet-mounted ``rings-config`` volume (the
  TrainJob adds the volume through ``runtimePatches``, since a shared runtime
  cannot name a per-job ConfigMap);
* ``ring-api``: the same example as shipped, ``ring-launch.pyz --from-api``
  (the pods' ServiceAccount may read ConfigMaps: :func:`configmap_reader`);
* ``ring-registered``: ``ring-api`` with self-registration (issue 24): the
  pods run as ServiceAccount ``ring-launch`` (``build/launcher-rbac.yaml``,
  :func:`launcher_grant`), the launcher announces itself on its own pod
  (:data:`REGISTER_LAUNCH_ARGS`), the TrainJob opts in
  (:data:`REGISTER_JOB_ANNOTATION`) and the controller runs with
  :data:`REGISTER_CONTROLLER_ARGS`; :func:`check_registration` fails clearly
  where the checkout lacks the feature.

All run the trainer image (``ring-trainer:0.1.0``, ``build/image.sh
--trainer``) on the real node, read CIFAR-10 batches from a host directory,
train ``STEPS`` steps and print one ``RESULT {json}`` line (train.py
``--result -``). The container's first command prints
``CONTAINER_START <unix time>`` before anything else, and the command the
launcher (or the DNS prober) execs prints ``TF_CONFIG_EXEC <unix time>``
(:data:`EXEC_MARKER`) before it execs train.py, so the log says when the
container started, when ``TF_CONFIG`` was exported, when train.py started
and when the first step ended (``tests/bench/stages.py`` reads the rest).

The image, server-side apply, data and log markers are
:mod:`ringdevcluster.harness`'s (the demo on the real node uses them too);
they are re-exported here.
"""

from __future__ import annotations

import copy
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from model.keys import SELF_REGISTER_ANNOTATION
from ringdevcluster import node
from ringdevcluster.harness import REPO, TRAINER_IMAGE, WorkerLog, apply, delete, ensure_image, make_data, parse_log

__all__ = [
    "BASELINE",
    "CONFIG_DIR",
    "CONTROLLER_IMAGE",
    "EXEC_MARKER",
    "EXEC_PREFIX",
    "LAUNCH",
    "LAUNCHER_ACCOUNT",
    "REGISTER_CONTROLLER_ARGS",
    "REGISTER_JOB_ANNOTATION",
    "REGISTER_LAUNCH_ARGS",
    "PORT",
    "PROBE",
    "RING_RUNTIME",
    "RUNTIMES",
    "START_MARKER",
    "TRAINER",
    "TRAINERS",
    "TRAINER_IMAGE",
    "WorkerLog",
    "apply",
    "check_registration",
    "configmap_reader",
    "delete",
    "ensure_image",
    "ensure_trainer_images",
    "launcher_grant",
    "logs",
    "make_data",
    "parse_log",
    "pod_spec",
    "pods_of",
    "runtime",
    "trainjob",
    "wait_finished",
]

Json = dict[str, Any]

RUNTIMES = ("dns", "ring-file", "ring-api", "ring-registered")
TRAINER = ("trainer.kubeflow.org", "v1alpha1")
BASELINE = REPO / "build" / "examples" / "baseline" / "tensorflow-dns-runtime.yaml"
RING_RUNTIME = REPO / "build" / "examples" / "trainer" / "tensorflow-runtime.yaml"
CONFIG_DIR = "/etc/ring-config"
#: Prints the container's start before the launcher runs (dash and GNU date are in the image).
START_MARKER = 'echo "CONTAINER_START $(date +%s.%N)"; exec "$@"'
#: Printed by the command the launcher execs, TF_CONFIG in its environment, before train.py.
EXEC_MARKER = "TF_CONFIG_EXEC"
EXEC_PREFIX = ["sh", "-c", f'echo "{EXEC_MARKER} $(date +%s.%N)"; exec "$@"', "sh"]
#: Self-registration (issue 24, part 2), in one place: the launcher's option (what
#: ``ring-launch`` needs to register itself; empty if it does so unasked), the
#: controller's flag, the TrainJob's opt-in annotation, the pods' ServiceAccount.
REGISTER_LAUNCH_ARGS = ["--register"]
REGISTER_CONTROLLER_ARGS = ["--self-registration"]
REGISTER_JOB_ANNOTATION = SELF_REGISTER_ANNOTATION
LAUNCHER_ACCOUNT = "ring-launch"
LAUNCHER_RBAC = REPO / "build" / "launcher-rbac.yaml"
PORT = 12345
#: The controller image: the examples' init container copies ring-launch.pyz from it into trainer pods.
CONTROLLER_IMAGE = "ring-controller:0.1.0"
#: How a trainer container runs the launcher that init container installed (the trainer image has no ring-launch).
LAUNCH = ("python3", "/ring/ring-launch.pyz")


def ensure_trainer_images() -> None:
    """This checkout's trainer image (TensorFlow, no product) and controller image (the launcher's init container)."""
    ensure_image(TRAINER_IMAGE, "--trainer")
    ensure_image(CONTROLLER_IMAGE, "--controller")


def pod_spec(runtime: Json) -> Json:
    spec: Json = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return spec


#: What a worker runs after TF_CONFIG in ``runtime(..., trainer="probe")``: no TensorFlow, one
#: ``RESULT`` line as train.py's (its TF_CONFIG and start time; no first step), then exit.
PROBE = (
    "import json, os, time; start = time.time(); "
    'print("RESULT " + json.dumps({"tf_config": json.loads(os.environ["TF_CONFIG"]), '
    '"timestamps": {"start": start, "first_step": None}}), flush=True)'
)
TRAINERS = ("tensorflow", "probe")


def runtime(
    kind: str,
    name: str,
    *,
    data_dir: Path,
    steps: int = 3,
    delay_index: int | None = None,
    trainer: str = "tensorflow",
) -> Json:
    """The ClusterTrainingRuntime ``name`` of ``kind`` (see the module doc), on the real node.

    ``delay_index``: that worker's pod runs an init container sleeping 20 s
    first (its container starts 20 s after the others'). ``trainer``:
    ``tensorflow`` runs train.py for ``steps`` steps; ``probe`` only reports
    the TF_CONFIG it was given (:data:`PROBE`): discovery without training,
    for benchmarks that need many runs of the discovery stages.
    """
    if trainer not in TRAINERS:
        raise ValueError(f"unknown trainer {trainer!r}; choose from {TRAINERS}")
    if kind not in RUNTIMES:
        raise ValueError(f"unknown runtime {kind!r}; choose from {RUNTIMES}")
    doc: Json = yaml.safe_load((BASELINE if kind == "dns" else RING_RUNTIME).read_text())
    doc["metadata"]["name"] = name
    spec = pod_spec(doc)
    spec.update(copy.deepcopy(node.pod_placement()))
    spec["terminationGracePeriodSeconds"] = 5
    spec["restartPolicy"] = "Never"
    (container,) = spec["containers"]
    container["image"] = TRAINER_IMAGE
    container["imagePullPolicy"] = "IfNotPresent"
    launch = ["python", "/app/dns_probe.py", "--"] if kind == "dns" else list(LAUNCH)
    if kind in ("ring-api", "ring-registered"):
        launch.append("--from-api")
    if kind == "ring-registered":
        launch += REGISTER_LAUNCH_ARGS
        spec["serviceAccountName"] = LAUNCHER_ACCOUNT
        container.setdefault("env", []).append(
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
        )
    if kind != "dns":
        launch.append("--")
    container["command"] = ["sh", "-c", START_MARKER, "sh", *launch, *EXEC_PREFIX]
    container["args"] = (
        ["python", "/app/train.py", "--result", "-"] if trainer == "tensorflow" else ["python", "-c", PROBE]
    )
    env = [e for e in container.get("env", []) if e["name"] not in ("EPOCHS", "NCCL_DEBUG", "TF_WORKER_PORT")]
    env += [
        {"name": "TF_WORKER_PORT", "value": str(PORT)},
        {"name": "EPOCHS", "value": "1"},
        {"name": "STEPS", "value": str(steps)},
        {"name": "BATCH_SIZE", "value": "16"},
        {"name": "RING_TIMEOUT", "value": "300"},
        {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"},
    ]
    if kind == "ring-file":
        env = [e for e in env if e["name"] != "RING_JOB_NAME"]
        env.append({"name": "RING_CONFIG_DIR", "value": CONFIG_DIR})
        container.setdefault("volumeMounts", []).append({"name": "rings-config", "mountPath": CONFIG_DIR})
    container["env"] = env
    for volume in spec["volumes"]:
        if volume["name"] == "cifar-data":
            volume["hostPath"]["path"] = str(data_dir)
    if delay_index is not None:
        spec["initContainers"] = [
            *spec.get("initContainers", []),
            {
                "name": "late",
                "image": TRAINER_IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", f'[ "$JOB_COMPLETION_INDEX" != "{delay_index}" ] || sleep 20'],
            },
        ]
    if kind != "dns":  # the ring runtimes: labelled for the controller (the example's template labels)
        doc["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {})["ring-controller.atlas"] = (
            "tensorflow"
        )
    return doc


def trainjob(kind: str, name: str, *, runtime_name: str, workers: int) -> Json:
    """A TrainJob ``name`` with ``workers`` nodes on runtime ``runtime_name``."""
    doc: Json = {
        "apiVersion": "/".join(TRAINER),
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"apiGroup": TRAINER[0], "kind": "ClusterTrainingRuntime", "name": runtime_name},
            "trainer": {"numNodes": workers},
        },
    }
    if kind != "dns":
        doc["metadata"]["labels"] = {"ring-controller.atlas": "tensorflow"}
    if kind == "ring-registered":
        doc["metadata"]["annotations"] = {REGISTER_JOB_ANNOTATION: "true"}
    if kind == "ring-file":
        volume = {"name": "rings-config", "configMap": {"name": f"rings-config-{name}"}}
        doc["spec"]["runtimePatches"] = [
            {
                "manager": "ring-controller.io/example",
                "trainingRuntimeSpec": {
                    "template": {
                        "spec": {
                            "replicatedJobs": [
                                {"name": "node", "template": {"spec": {"template": {"spec": {"volumes": [volume]}}}}}
                            ]
                        }
                    }
                },
            }
        ]
    return doc


def configmap_reader(rbac: client.RbacAuthorizationV1Api, namespace: str) -> None:
    """Let the namespace's default ServiceAccount read ConfigMaps (what ``ring-launch --from-api`` needs)."""
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "configmap-reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "configmap-reader"},  # not ring-launch: launcher_grant's binding has that name
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmap-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}],
        },
    )


def check_registration() -> None:
    """Raise RuntimeError unless this checkout's launcher and controller have self-registration.

    Looks for :data:`REGISTER_LAUNCH_ARGS` in ``ring-launch --help`` and
    :data:`REGISTER_CONTROLLER_ARGS` in ``ring-controller --help`` (the
    trainer image's launcher is built from the same checkout).
    """
    bin_dir = Path(sys.executable).parent
    wanted = (("ring-launch", REGISTER_LAUNCH_ARGS or ["regist"]), ("ring-controller", REGISTER_CONTROLLER_ARGS))
    for program, flags in wanted:
        text = subprocess.run(
            [str(bin_dir / program), "--help"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
        missing = [f for f in flags if f not in text]
        if missing:
            raise RuntimeError(
                f"runtime ring-registered needs self-registration (issue 24, part 2): {program} --help "
                f"mentions no {' '.join(missing)}; leave ring-registered out of --runtimes, or build that first "
                "(tests/support/nodejobs.py names what the bench passes: REGISTER_LAUNCH_ARGS, REGISTER_CONTROLLER_ARGS)"
            )


def launcher_grant(api: client.ApiClient, namespace: str) -> None:
    """Apply ``build/launcher-rbac.yaml``: its ServiceAccount, Role and binding in ``namespace``, the policy cluster-wide."""
    docs = [d for d in yaml.safe_load_all(LAUNCHER_RBAC.read_text()) if d]
    for doc in docs:
        if doc["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
            doc["metadata"]["namespace"] = namespace
    apply(api, docs)


def pods_of(core: client.CoreV1Api, namespace: str, trainjob: str) -> list[Any]:
    """The live pods of ``trainjob`` (its JobSet), by name."""
    pods = core.list_namespaced_pod(namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={trainjob}").items
    return sorted((p for p in pods if p.metadata.deletion_timestamp is None), key=lambda p: p.metadata.name)


def wait_finished(core: client.CoreV1Api, namespace: str, trainjob: str, workers: int, *, timeout: float) -> list[Any]:
    """Wait until ``workers`` pods of ``trainjob`` have ended; return them. Fails on timeout with their phases."""
    deadline = time.monotonic() + timeout
    pods: list[Any] = []
    while time.monotonic() < deadline:
        pods = pods_of(core, namespace, trainjob)
        if len(pods) == workers and all(p.status.phase in ("Succeeded", "Failed") for p in pods):
            return pods
        time.sleep(0.5)
    phases = {p.metadata.name: p.status.phase for p in pods}
    raise AssertionError(f"{trainjob}: pods not finished after {timeout:.0f}s: {phases}")


def logs(core: client.CoreV1Api, namespace: str, pods: list[Any]) -> list[WorkerLog]:
    """Each pod's log of its main container, parsed."""
    out = []
    for p in pods:
        try:
            text = core.read_namespaced_pod_log(p.metadata.name, namespace, container="node")
        except ApiException as e:
            text = f"<no log: {e.status} {e.reason}>"
        out.append(parse_log(p.metadata.name, text))
    return out
