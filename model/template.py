"""Facts read from a pod spec (a running pod's or a workload's pod template).

Raw JSON in, plain values out; shared by every workload model and by the pod
transform so the contract's rules live in one place.
"""

from __future__ import annotations

from typing import Any

from model.keys import (
    ACCELERATOR_TYPE_SELECTOR,
    ASCEND910_RESOURCE,
    ASCEND_RUNTIMES,
    CONFIG_VOLUME_NAMES,
    DEFAULT_PORT,
    NPU_RESOURCE,
    NPU_RESOURCE_PREFIX,
    PORT_ANNOTATION,
    PORT_ENV,
    PORT_NAMES,
    SLOTS_ANNOTATION,
    SLOTS_ENV,
    SUPER_POD_ACCELERATORS,
)
from model.records import TaskSpec

Json = dict[str, Any]


def task_spec(name: str, replicas: int, pod_spec: Json, *, runtime: str, per_job: int = 1) -> TaskSpec:
    """A task whose pods come from ``pod_spec``: its ConfigMap volume, its
    need for devices (an NPU request, or an Ascend runtime label) and the
    Ascend facts of its template (see :class:`~model.records.TaskSpec`)."""
    selector = pod_spec.get("nodeSelector") or {}
    return TaskSpec(
        name=name,
        replicas=replicas,
        per_job=per_job,
        configmap=configmap_name(pod_spec),
        wants_devices=wants_devices(pod_spec) or runtime in ASCEND_RUNTIMES,
        npu=any(k == NPU_RESOURCE for k, _ in _resources(pod_spec)),
        super_pod_selector=isinstance(selector, dict)
        and selector.get(ACCELERATOR_TYPE_SELECTOR) in SUPER_POD_ACCELERATORS,
        chips=next((_count(v) for k, v in _resources(pod_spec) if k == ASCEND910_RESOURCE), 0),
    )


def _resources(spec: Json) -> list[tuple[str, object]]:
    """(name, quantity) of every container's requests, then limits."""
    found: list[tuple[str, object]] = []
    for container in _containers(spec):
        resources = container.get("resources") or {}
        for section in ("requests", "limits"):
            found.extend((str(k), v) for k, v in (resources.get(section) or {}).items())
    return found


def _count(quantity: object) -> int:
    text = str(quantity).strip()
    return int(text) if text.isascii() and text.isdigit() else 0


def _containers(spec: Json) -> list[Json]:
    return list(spec.get("containers") or [])


def configmap_name(spec: Json) -> str | None:
    """The ConfigMap mounted through a rings-config volume, if any.

    Volumes are looked up by name in the order of ``CONFIG_VOLUME_NAMES``
    (ours first, then HCCL-Controller's).
    """
    by_name = {v.get("name"): v for v in spec.get("volumes") or [] if isinstance(v, dict)}
    for volume_name in CONFIG_VOLUME_NAMES:
        cm = (by_name.get(volume_name) or {}).get("configMap") or {}
        if isinstance(cm, dict) and cm.get("name"):
            return str(cm["name"])
    return None


def wants_devices(spec: Json) -> bool:
    """True when a container requests or limits an Ascend NPU resource
    (``huawei.com/Ascend*`` or ``huawei.com/npu``)."""
    return any(k.startswith(NPU_RESOURCE_PREFIX) or k == NPU_RESOURCE for k, _ in _resources(spec))


def parse_port(value: object) -> int:
    """``value`` as a TCP port, or ValueError saying why it is not one."""
    try:
        port = int(str(value).strip())
    except ValueError:
        raise ValueError(f"port {value!r} is not an integer") from None
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} is outside 1-65535")
    return port


def member_port(spec: Json, annotations: dict[str, str], *, default: int = DEFAULT_PORT) -> tuple[int, str | None]:
    """The member's port by the contract's rule, and an error if a rule was malformed.

    First found wins: a container port named ``tf-port`` (or TFJob's
    ``tfjob-port``); the pod annotation ``ring-controller/port``; a literal
    ``TF_WORKER_PORT`` container env; else ``default`` (the daemon's
    ``--default-port``). A malformed value
    is reported, never skipped over: a member with a port error does not count,
    so a wrong port is never published.
    """
    containers = _containers(spec)
    for port_name in PORT_NAMES:
        for container in containers:
            for port in container.get("ports") or []:
                if port.get("name") == port_name:
                    try:
                        return parse_port(port.get("containerPort")), None
                    except ValueError as e:
                        return default, f"container port {port_name}: {e}"
    if PORT_ANNOTATION in annotations:
        try:
            return parse_port(annotations[PORT_ANNOTATION]), None
        except ValueError as e:
            return default, f"annotation {PORT_ANNOTATION}: {e}"
    for container in containers:
        for env in container.get("env") or []:
            if env.get("name") == PORT_ENV and "value" in env:
                try:
                    return parse_port(env["value"]), None
                except ValueError as e:
                    return default, f"env {PORT_ENV}: {e}"
    return default, None


def member_slots(spec: Json, annotations: dict[str, str]) -> tuple[int, str | None]:
    """The member's slots (processes in the pod), and an error if the rule was malformed.

    First found wins: the pod annotation ``ring-controller/slots``; a literal
    ``RING_SLOTS`` container env; else 1. A malformed value is reported and
    the member does not count, as for ports.
    """
    if SLOTS_ANNOTATION in annotations:
        try:
            return parse_slots(annotations[SLOTS_ANNOTATION]), None
        except ValueError as e:
            return 1, f"annotation {SLOTS_ANNOTATION}: {e}"
    for container in _containers(spec):
        for env in container.get("env") or []:
            if env.get("name") == SLOTS_ENV and "value" in env:
                try:
                    return parse_slots(env["value"]), None
                except ValueError as e:
                    return 1, f"env {SLOTS_ENV}: {e}"
    return 1, None


def parse_slots(value: object) -> int:
    """``value`` as a slot count (1..65535), or ValueError saying why it is not one."""
    try:
        slots = int(str(value).strip())
    except ValueError:
        raise ValueError(f"slots {value!r} is not an integer") from None
    if not 1 <= slots <= 65535:
        raise ValueError(f"slots {slots} is outside 1-65535")
    return slots


def template_label_error(template: Json, label_key: str) -> str | None:
    """Why pods from ``template`` (a workload's pod template) would not be watched, None if they would.

    The controller watches only pods carrying the selection label: a workload
    labelled for the runtime whose pod template lacks the label would wait
    for members it never sees.
    """
    labels = (template.get("metadata") or {}).get("labels") or {}
    if isinstance(labels, dict) and label_key in labels:
        return None
    return (
        f"the pod template has no label {label_key}, so the controller never sees its pods; "
        f"add it to the template's metadata.labels"
    )
