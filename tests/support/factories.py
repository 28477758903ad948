"""Raw JSON objects shaped the way the real controllers make them.

Shared by unit tests (fed to the models as plain data) and integration tests
(created on the local control plane). Volcano pods are built the way
Volcano's job controller builds them: name ``<job>-<task>-<index>``, its
labels and annotations, a controller ownerReference to the Job, the task's
pod template.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from model.keys import DEFAULT_LABEL_KEY, DEVICE_ANNOTATION

Json = dict[str, Any]


def pod_template(
    *,
    runtime: str = "tensorflow",
    port: int | None = None,
    port_name: str = "tf-port",
    configmap: str | None = None,
    npus: int = 0,
    command: list[str] | None = None,
    label_key: str = DEFAULT_LABEL_KEY,
) -> Json:
    """A pod template for a training task."""
    container: Json = {
        "name": "main",
        "image": "example.invalid/train:latest",
        "command": command or ["python", "train.py"],
    }
    if port is not None:
        container["ports"] = [{"name": port_name, "containerPort": port}]
    if npus:
        container["resources"] = {
            "limits": {"huawei.com/Ascend910": str(npus)},
            "requests": {"huawei.com/Ascend910": str(npus)},
        }
    spec: Json = {"containers": [container], "restartPolicy": "Never"}
    if configmap:
        spec["volumes"] = [{"name": "rings-config", "configMap": {"name": configmap}}]
        container["volumeMounts"] = [{"name": "rings-config", "mountPath": "/etc/ring-config"}]
    return {"metadata": {"labels": {label_key: runtime}}, "spec": spec}


def volcano_job(
    name: str,
    *,
    namespace: str = "default",
    tasks: list[tuple[str, int]] | None = None,
    runtime: str = "tensorflow",
    template: Json | None = None,
    templates: dict[str, Json] | None = None,
    uid: str = "",
    version: int | None = None,
    label_key: str = DEFAULT_LABEL_KEY,
) -> Json:
    """A Volcano Job with ``tasks`` as (name, replicas), in spec order."""
    tasks = tasks if tasks is not None else [("worker", 2)]
    default = template or pod_template(runtime=runtime, label_key=label_key)
    job: Json = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {label_key: runtime}},
        "spec": {
            "minAvailable": sum(r for _, r in tasks),
            "schedulerName": "default-scheduler",
            "queue": "default",
            "tasks": [
                {"name": t, "replicas": r, "template": copy.deepcopy((templates or {}).get(t, default))}
                for t, r in tasks
            ],
        },
    }
    if uid:
        job["metadata"]["uid"] = uid
    if version is not None:
        job["status"] = {"version": version}
    return job


def volcano_pod(
    job: Json,
    *,
    task: str,
    index: int,
    version: int = 0,
    uid: str = "",
    ip: str = "",
    host_ip: str = "",
    phase: str = "",
    node: str = "",
    devices: Json | str | None = None,
    name_suffix: str = "",
    annotations: dict[str, str] | None = None,
) -> Json:
    """A pod of ``job``'s ``task`` at ``index`` as Volcano's job controller makes it.

    ``ip``/``phase``/``node`` fill status for unit tests; integration tests
    leave them empty and let the cluster set them.
    """
    meta = job["metadata"]
    spec_task = next(t for t in job["spec"]["tasks"] if t["name"] == task)
    template = copy.deepcopy(spec_task["template"])
    job_name = meta["name"]
    labels = dict(template.get("metadata", {}).get("labels") or {})
    labels.update(
        {
            "volcano.sh/job-name": job_name,
            "volcano.sh/job-namespace": meta.get("namespace", "default"),
            "volcano.sh/queue-name": job["spec"].get("queue", "default"),
            "volcano.sh/task-spec": task,
            "volcano.sh/task-index": str(index),
        }
    )
    pod_annotations = {
        **(annotations or {}),
        "volcano.sh/job-name": job_name,
        "volcano.sh/job-version": str(version),
        "volcano.sh/task-spec": task,
        "volcano.sh/task-index": str(index),
        "volcano.sh/template-uid": f"{job_name}-{task}",
        "scheduling.k8s.io/group-name": f"{job_name}-{meta.get('uid', '')}",
    }
    if devices is not None:
        pod_annotations[DEVICE_ANNOTATION] = devices if isinstance(devices, str) else json.dumps(devices)
    pod: Json = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job_name}-{task}-{index}{name_suffix}",
            "namespace": meta.get("namespace", "default"),
            "labels": labels,
            "annotations": pod_annotations,
            "ownerReferences": [
                {
                    "apiVersion": "batch.volcano.sh/v1alpha1",
                    "kind": "Job",
                    "name": job_name,
                    "uid": meta.get("uid", ""),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": template["spec"],
    }
    if uid:
        pod["metadata"]["uid"] = uid
    pod["metadata"]["creationTimestamp"] = "2026-11-29T00:00:00Z"
    if node:
        pod["spec"]["nodeName"] = node
    if phase or ip:
        pod["status"] = {"phase": phase, "podIP": ip, "hostIP": host_ip}
    return pod


def device_annotation(server_id: str, devices: list[tuple[str, str]]) -> Json:
    """An Ascend device-plugin annotation value: ``[(device_id, device_ip), ...]``."""
    return {
        "pod_name": "0",
        "server_id": server_id,
        "devices": [{"device_id": d, "device_ip": ip} for d, ip in devices],
    }


def jobset(
    name: str,
    *,
    namespace: str = "default",
    replicated: list[tuple[str, int, int]] | None = None,
    runtime: str = "tensorflow",
    template: Json | None = None,
    uid: str = "",
    owner: Json | None = None,
    label_key: str = DEFAULT_LABEL_KEY,
) -> Json:
    """A JobSet with ``replicated`` as (name, replicas, parallelism), Indexed Jobs."""
    replicated = replicated if replicated is not None else [("workers", 1, 2)]
    tpl = template or pod_template(runtime=runtime, label_key=label_key)
    js: Json = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace, "labels": {label_key: runtime}},
        "spec": {
            "replicatedJobs": [
                {
                    "name": rname,
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "parallelism": parallelism,
                            "completions": parallelism,
                            "completionMode": "Indexed",
                            "backoffLimit": 0,
                            "template": copy.deepcopy(tpl),
                        }
                    },
                }
                for rname, replicas, parallelism in replicated
            ]
        },
    }
    if uid:
        js["metadata"]["uid"] = uid
    if owner:
        js["metadata"]["ownerReferences"] = [owner]
    return js


def jobset_pod(
    js: Json, *, rjob: str, job_index: int, completion: int, restart: int = 0, ip: str = "", phase: str = ""
) -> Json:
    """A pod of ``js`` as the JobSet and Job controllers make it (labels, name, owner Job)."""
    meta = js["metadata"]
    spec_rjob = next(r for r in js["spec"]["replicatedJobs"] if r["name"] == rjob)
    template = copy.deepcopy(spec_rjob["template"]["spec"]["template"])
    job_name = f"{meta['name']}-{rjob}-{job_index}"
    marks = {
        "jobset.sigs.k8s.io/jobset-name": meta["name"],
        "jobset.sigs.k8s.io/jobset-uid": meta.get("uid", ""),
        "jobset.sigs.k8s.io/replicatedjob-name": rjob,
        "jobset.sigs.k8s.io/job-index": str(job_index),
        "jobset.sigs.k8s.io/restart-attempt": str(restart),
        "batch.kubernetes.io/job-completion-index": str(completion),
        "batch.kubernetes.io/job-name": job_name,
        "job-name": job_name,
    }
    labels = {**(template.get("metadata", {}).get("labels") or {}), **marks}
    pod: Json = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job_name}-{completion}-x{completion}z",
            "namespace": meta.get("namespace", "default"),
            "labels": labels,
            "annotations": dict(marks),
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job_name,
                    "uid": f"job-{job_name}",
                    "controller": True,
                }
            ],
            "creationTimestamp": "2026-11-29T00:00:00Z",
        },
        "spec": template["spec"],
    }
    if phase or ip:
        pod["status"] = {"phase": phase, "podIP": ip, "hostIP": "10.0.0.1"}
    return pod


def jobset_job(js: Json, *, rjob: str, job_index: int, restart: int = 0) -> Json:
    """A child Job of ``js`` as the JobSet controller makes it (the Job controller makes its pods).

    Name ``<jobset>-<rjob>-<index>``, JobSet's labels and annotations on the
    Job and its pod template, a controller ownerReference to the JobSet.
    """
    meta = js["metadata"]
    spec_rjob = next(r for r in js["spec"]["replicatedJobs"] if r["name"] == rjob)
    job_spec = copy.deepcopy(spec_rjob["template"]["spec"])
    marks = {
        "jobset.sigs.k8s.io/jobset-name": meta["name"],
        "jobset.sigs.k8s.io/jobset-uid": meta.get("uid", ""),
        "jobset.sigs.k8s.io/replicatedjob-name": rjob,
        "jobset.sigs.k8s.io/replicatedjob-replicas": str(spec_rjob.get("replicas", 1)),
        "jobset.sigs.k8s.io/job-index": str(job_index),
        "jobset.sigs.k8s.io/restart-attempt": str(restart),
    }
    tmeta = job_spec["template"].setdefault("metadata", {})
    tmeta["labels"] = {**(tmeta.get("labels") or {}), **marks}
    tmeta["annotations"] = {**(tmeta.get("annotations") or {}), **marks}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{meta['name']}-{rjob}-{job_index}",
            "namespace": meta.get("namespace", "default"),
            "labels": dict(marks),
            "annotations": dict(marks),
            "ownerReferences": [
                {
                    "apiVersion": "jobset.x-k8s.io/v1alpha2",
                    "kind": "JobSet",
                    "name": meta["name"],
                    "uid": meta.get("uid", ""),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": job_spec,
    }


def deployment(name: str, replicas: int = 2, *, port: int = 4000) -> Json:
    """A labelled Deployment whose pods name ``port`` (the kind the controller serves by creation order)."""
    tpl = pod_template(port=port)
    tpl["metadata"]["labels"]["app"] = name
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {DEFAULT_LABEL_KEY: "tensorflow"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {**tpl, "spec": {**tpl["spec"], "restartPolicy": "Always"}},
        },
    }


def indexed_job(
    name: str,
    completions: int = 2,
    *,
    parallelism: int | None = None,
    namespace: str = "default",
    runtime: str = "tensorflow",
    template: Json | None = None,
    uid: str = "",
    port: int | None = None,
    label_key: str = DEFAULT_LABEL_KEY,
) -> Json:
    """A labelled batch/v1 Indexed Job of ``completions`` pods (``parallelism`` defaults to the same)."""
    tpl = template or pod_template(runtime=runtime, port=port, label_key=label_key)
    job: Json = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {label_key: runtime}},
        "spec": {
            "completionMode": "Indexed",
            "completions": completions,
            "parallelism": completions if parallelism is None else parallelism,
            "backoffLimit": 0,
            "template": copy.deepcopy(tpl),
        },
    }
    if uid:
        job["metadata"]["uid"] = uid
    return job


def job_pod(
    job: Json,
    *,
    index: int,
    suffix: str = "",
    uid: str = "",
    ip: str = "",
    phase: str = "",
    node: str = "",
    created: str = "2026-11-29T00:00:00Z",
) -> Json:
    """A pod of Indexed Job ``job`` as the Job controller makes it: name ``<job>-<index>-<suffix>``,
    the controller's labels and completion-index annotation, a controller ownerReference."""
    meta = job["metadata"]
    template = copy.deepcopy(job["spec"]["template"])
    job_uid = meta.get("uid", "")
    marks = {
        "batch.kubernetes.io/controller-uid": job_uid,
        "batch.kubernetes.io/job-name": meta["name"],
        "controller-uid": job_uid,
        "job-name": meta["name"],
        "batch.kubernetes.io/job-completion-index": str(index),
    }
    name = f"{meta['name']}-{index}-{suffix or 'x' + str(index) + 'z'}"
    pod: Json = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": meta.get("namespace", "default"),
            "uid": uid or f"uid-{name}",
            "labels": {**(template.get("metadata", {}).get("labels") or {}), **marks},
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": job_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "creationTimestamp": created,
        },
        "spec": {**template["spec"], "hostname": f"{meta['name']}-{index}", **({"nodeName": node} if node else {})},
    }
    if phase or ip:
        pod["status"] = {"phase": phase, "podIP": ip, "hostIP": "10.0.0.1"}
    return pod


def statefulset(
    name: str,
    replicas: int = 2,
    *,
    namespace: str = "default",
    runtime: str = "tensorflow",
    uid: str = "",
    port: int | None = None,
    parallel: bool = True,
    start: int | None = None,
    label_key: str = DEFAULT_LABEL_KEY,
) -> Json:
    """A labelled StatefulSet (``Parallel`` pod management unless ``parallel`` is False: ``OrderedReady``)."""
    tpl = pod_template(runtime=runtime, port=port, label_key=label_key)
    tpl["metadata"]["labels"]["app"] = name
    sts: Json = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace, "labels": {label_key: runtime}},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel" if parallel else "OrderedReady",
            "selector": {"matchLabels": {"app": name}},
            "template": {**tpl, "spec": {**tpl["spec"], "restartPolicy": "Always"}},
        },
    }
    if start is not None:
        sts["spec"]["ordinals"] = {"start": start}
    if uid:
        sts["metadata"]["uid"] = uid
    return sts


def statefulset_pod(
    sts: Json, *, ordinal: int, uid: str = "", ip: str = "", phase: str = "", index_label: bool = True
) -> Json:
    """A pod of ``sts`` as the StatefulSet controller makes it: name ``<sts>-<ordinal>``, its labels
    (``apps.kubernetes.io/pod-index`` unless ``index_label`` is False, as before Kubernetes 1.28)."""
    meta = sts["metadata"]
    template = copy.deepcopy(sts["spec"]["template"])
    name = f"{meta['name']}-{ordinal}"
    labels = {
        **(template.get("metadata", {}).get("labels") or {}),
        "statefulset.kubernetes.io/pod-name": name,
        "controller-revision-hash": f"{meta['name']}-5d8f7c9b6",
    }
    if index_label:
        labels["apps.kubernetes.io/pod-index"] = str(ordinal)
    pod: Json = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": meta.get("namespace", "default"),
            "uid": uid or f"uid-{name}",
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "name": meta["name"],
                    "uid": meta.get("uid", ""),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "creationTimestamp": "2026-11-29T00:00:00Z",
        },
        "spec": {**template["spec"], "hostname": name, "subdomain": meta["name"]},
    }
    if phase or ip:
        pod["status"] = {"phase": phase, "podIP": ip, "hostIP": "10.0.0.1"}
    return pod


def leader_worker_set(
    name: str,
    *,
    replicas: int = 2,
    size: int = 3,
    namespace: str = "default",
    runtime: str = "tensorflow",
    uid: str = "",
    label_key: str = DEFAULT_LABEL_KEY,
) -> Json:
    """A labelled LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): ``replicas`` groups of ``size`` pods,
    one template for leader and workers (the LWS default), reading its group's spec through the API."""
    tpl = pod_template(runtime=runtime, label_key=label_key)
    lws: Json = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": namespace, "labels": {label_key: runtime}},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": size,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "workerTemplate": {**tpl, "spec": {**tpl["spec"], "restartPolicy": "Always"}},
            },
            "startupPolicy": "LeaderCreated",
        },
    }
    if uid:
        lws["metadata"]["uid"] = uid
    return lws


def lws_pod(lws: Json, *, group: int, worker: int, uid: str = "", ip: str = "", phase: str = "") -> Json:
    """A pod of ``lws`` as the LWS controller makes it: the leader ``<lws>-<group>`` (worker 0) owned by
    the leader StatefulSet, a worker ``<lws>-<group>-<worker>`` owned by its group's StatefulSet, and
    the LWS labels (name, group-index, worker-index, group-key)."""
    meta = lws["metadata"]
    lwt = lws["spec"]["leaderWorkerTemplate"]
    template = copy.deepcopy(
        lwt.get("leaderTemplate") if worker == 0 and lwt.get("leaderTemplate") else lwt["workerTemplate"]
    )
    leader = f"{meta['name']}-{group}"
    name = leader if worker == 0 else f"{leader}-{worker}"
    owner = meta["name"] if worker == 0 else leader
    labels = {
        **(template.get("metadata", {}).get("labels") or {}),
        "leaderworkerset.sigs.k8s.io/name": meta["name"],
        "leaderworkerset.sigs.k8s.io/group-index": str(group),
        "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
        "leaderworkerset.sigs.k8s.io/group-key": f"{group:040x}",
        "apps.kubernetes.io/pod-index": str(group if worker == 0 else worker),
        "statefulset.kubernetes.io/pod-name": name,
    }
    pod: Json = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": meta.get("namespace", "default"),
            "uid": uid or f"uid-{name}",
            "labels": labels,
            "annotations": {"leaderworkerset.sigs.k8s.io/size": str(lwt.get("size", 1))},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "name": owner,
                    "uid": f"sts-{owner}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "creationTimestamp": "2026-11-29T00:00:00Z",
        },
        "spec": template["spec"],
    }
    if phase or ip:
        pod["status"] = {"phase": phase, "podIP": ip, "hostIP": "10.0.0.1"}
    return pod


def pod_group(
    name: str,
    min_count: int | None = 2,
    *,
    namespace: str = "default",
    runtime: str = "tensorflow",
    uid: str = "",
    label_key: str = DEFAULT_LABEL_KEY,
    basic: bool = False,
) -> Json:
    """A labelled PodGroup (scheduling.k8s.io/v1beta1): gang scheduling of ``min_count`` pods
    (``basic``: the basic policy, which has no count)."""
    policy: Json = {"basic": {}} if basic else {"gang": {"minCount": min_count}}
    group: Json = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "labels": {label_key: runtime}},
        "spec": {"schedulingPolicy": policy},
    }
    if uid:
        group["metadata"]["uid"] = uid
    return group


def group_pod(
    group: str,
    name: str,
    *,
    rank: int | str | None = None,
    namespace: str = "default",
    runtime: str = "tensorflow",
    uid: str = "",
    ip: str = "",
    phase: str = "",
    node: str = "",
    label_key: str = DEFAULT_LABEL_KEY,
) -> Json:
    """A pod made by hand that names PodGroup ``group`` (``spec.schedulingGroup``), with its rank
    in the annotation ``ring-controller.io/rank`` (None: without one)."""
    tpl = pod_template(runtime=runtime, label_key=label_key)
    pod: Json = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}",
            "labels": dict(tpl["metadata"]["labels"]),
            "annotations": {} if rank is None else {"ring-controller.io/rank": str(rank)},
            "creationTimestamp": "2026-11-29T00:00:00Z",
        },
        "spec": {
            **tpl["spec"],
            "schedulingGroup": {"podGroupName": group},
            **({"nodeName": node} if node else {}),
        },
    }
    if phase or ip:
        pod["status"] = {"phase": phase, "podIP": ip, "hostIP": "10.0.0.1"}
    return pod
