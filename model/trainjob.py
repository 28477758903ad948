"""Kubeflow Trainer v2 TrainJob ``trainer.kubeflow.org/v1alpha1``.

Trainer turns a TrainJob into a JobSet of the same name (owned by the
TrainJob) from its runtime's template. Training nodes are the pods of the
replicated job ``node`` (the one labelled
``trainer.kubeflow.org/trainjob-ancestor-step: trainer``; Trainer's runtimes
name it ``node``); ``numNodes`` of them (``spec.trainer.numNodes``, else the
ClusterTrainingRuntime's ``spec.mlPolicy.numNodes``). Trainer v2.0 to v2.3
run them as one Job (``replicas`` forced to 1) with ``parallelism =
completions = numNodes``: pods ``<name>-node-0-<completion index>``. A
runtime may also lay them out as ``numNodes`` Jobs of one pod
(``<name>-node-<job index>-0``). In both, the node's rank is ``job_index +
completion_index`` (one of them is always 0), so the TrainJob is served under
its JobSet's job key with one task ``node`` and ``per_job`` 1. Initializer
jobs (dataset, model) are not members. Trainer v2.3 replaced the TrainJob's
``labels``, ``annotations`` and ``podSpecOverrides`` by ``runtimePatches``
and made ``numProcPerNode`` an integer; none of them is read here.
"""

from __future__ import annotations

from typing import Any

from model import jobset
from model.keys import ASCEND_RUNTIMES, TRAINER_GROUP, TRAINER_NODE_JOB, TRAINER_VERSION
from model.records import TaskSpec, WorkloadRecord, runtime_of, workload

Json = dict[str, Any]

SHORT = "trainjob"
KIND = "TrainJob"
GROUP = TRAINER_GROUP
VERSION = TRAINER_VERSION
API_VERSION = f"{GROUP}/{VERSION}"
PLURAL = "trainjobs"
RUNTIME_PLURAL = "clustertrainingruntimes"


def workload_record(raw: Json, *, label_key: str) -> WorkloadRecord:
    """Reduce a TrainJob; ``runtime_ref`` is set when numNodes must come from its runtime."""
    spec = raw.get("spec") or {}
    runtime = runtime_of(raw, label_key)
    num_nodes = (spec.get("trainer") or {}).get("numNodes")
    ref = spec.get("runtimeRef") or {}
    error: str | None = None
    runtime_ref: str | None = None
    if num_nodes is None:
        if ref.get("kind", "ClusterTrainingRuntime") == "ClusterTrainingRuntime" and ref.get("name"):
            runtime_ref = str(ref["name"])
        else:
            error = "spec.trainer.numNodes is not set and the runtime is not a ClusterTrainingRuntime"
        num_nodes = 0
    elif not isinstance(num_nodes, int) or isinstance(num_nodes, bool) or num_nodes < 1:
        error = f"spec.trainer.numNodes {num_nodes!r} is not a positive integer"
        num_nodes = 0
    return workload(
        raw,
        short=jobset.SHORT,  # served under its JobSet's job key
        kind=KIND,
        api_version=API_VERSION,
        version=0,
        runtime=runtime,
        tasks=(TaskSpec(name=TRAINER_NODE_JOB, replicas=num_nodes, wants_devices=runtime in ASCEND_RUNTIMES),),
        error=error,
        runtime_ref=runtime_ref,
        owns_pods=False,
    )


def runtime_nodes(raw: Json) -> int | None:
    """``spec.mlPolicy.numNodes`` of a ClusterTrainingRuntime (None if absent or invalid)."""
    value = ((raw.get("spec") or {}).get("mlPolicy") or {}).get("numNodes")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
