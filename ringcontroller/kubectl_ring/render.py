"""What ``kubectl ring`` prints: kubectl-like tables, the describe text, JSON and YAML. Pure.

Every function takes :class:`~ringcontroller.kubectl_ring.jobs.JobView`
objects (and raw Events/pods) and returns text or plain data; the CLI only
prints. The advice in :data:`HINTS` is the one piece of knowledge that lives
here: what a user can do about each reason a member does not count (the
reasons themselves are :data:`agent.decide.SlotState`, the controller's).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Final

from agent.decide import FINISHED, SLOT_STATES, STATUS_INVALID, Slot, SlotState
from model.keys import (
    CONFIG_VOLUME_NAMES,
    CONFIGMAP_DATA_LIMIT,
    DEVICE_ANNOTATIONS,
    IP_FAMILY_ANNOTATION,
    MANAGED_LABEL,
    MANAGED_VALUE,
    NETWORK_ANNOTATION,
    NETWORK_STATUS_ANNOTATION,
    PORT_ANNOTATION,
    PORT_ENV,
    PORT_NAMES,
    RANK_ANNOTATION,
    RANK_ORDER_ANNOTATION,
    SLOTS_ANNOTATION,
    SLOTS_ENV,
)
from model.records import ConfigMapRecord
from ranktable.clusterspec import STATUS_COMPLETED
from ringcontroller.kubectl_ring.jobs import JobView, age

Json = dict[str, Any]

#: How each slot state reads in the STATE column.
STATE_WORDS: Final[dict[SlotState, str]] = {
    "counting": "counts",
    "finished": "finished",
    "missing": "no pod",
    "deleting": "terminating",
    "not_running": "not running",
    "no_ip": "no IP",
    "invalid_port": "bad port",
    "invalid_slots": "bad slots",
    "awaiting_devices": "no devices yet",
    "invalid_devices": "bad devices",
    "duplicate": "duplicate index",
    "wrong_family": "no IP of family",
    "no_network": "not on network",
    "invalid_network": "bad network-status",
}

#: What the user can do about slots in each state ({pods}: the pods concerned, {job}: KIND/NAME).
HINTS: Final[dict[SlotState, str]] = {
    "counting": "",
    "finished": "",
    "missing": (
        "Slots without a pod: the workload controller has not created them (yet). "
        "See `kubectl describe {job}` and `kubectl get events -n {namespace}` "
        "(Volcano: the PodGroup, its queue and minAvailable; JobSet/Trainer: the child Jobs), and resource quotas."
    ),
    "deleting": (
        "Terminating pods ({pods}): the workload controller replaces them; one stuck in Terminating "
        "waits for its finalizers or for an unreachable node."
    ),
    "not_running": (
        "Pods not Running ({pods}): `kubectl describe pod` says why "
        "(unschedulable: resources, node selectors, taints, a gang waiting for room; image pulls; init containers)."
    ),
    "no_ip": (
        "Running pods without an IP ({pods}): the node's network plugin has not assigned one; "
        "see `kubectl describe pod` and the CNI on that node."
    ),
    "invalid_port": (
        "Bad ports ({pods}): the port comes from a container port named "
        + " or ".join(PORT_NAMES)
        + f", else the annotation {PORT_ANNOTATION}, else the env {PORT_ENV}: an integer 1-65535. "
        "Fix the pod template (or the annotation) and recreate the pods."
    ),
    "invalid_slots": (
        f"Bad slots ({{pods}}): the annotation {SLOTS_ANNOTATION} (else the env {SLOTS_ENV}) must be a positive integer."
    ),
    "awaiting_devices": (
        "Pods without a device annotation ({pods}): the Ascend device plugin writes "
        + " or ".join(DEVICE_ANNOTATIONS)
        + " once it allocated the NPUs. Is it running on their nodes, and do the pods request huawei.com/Ascend* "
        "or huawei.com/npu?"
    ),
    "invalid_devices": (
        "Bad device annotations ({pods}): written by the device plugin (or Volcano's Ascend plugin); the message "
        "above says what is wrong. Fix the plugin (a device without an IP: its NIC configuration), or choose a rank "
        "table that does not need what is missing (the controller's --ranktable-version)."
    ),
    "duplicate": (
        "Several live pods claim one slot ({pods}): none of them counts until only one is left. "
        "A workload controller replaces a pod after the old one is gone; a pod made by hand with the "
        "workload's labels is the usual cause: delete the one that does not belong."
    ),
    "wrong_family": (
        f"Pods without an address of the family the job asks for ({{pods}}): the workload's {IP_FAMILY_ANNOTATION} "
        "names a family their status.podIPs lack. Use the cluster's family (or remove the annotation), "
        "or run the job where pods get dual-stack addresses."
    ),
    "no_network": (
        f"Pods without an address on the job's network ({{pods}}): the workload's {NETWORK_ANNOTATION} names a "
        f"network attachment that their {NETWORK_STATUS_ANNOTATION} does not list (or lists without an IP). "
        "Check the pod template's k8s.v1.cni.cncf.io/networks annotation, the NetworkAttachmentDefinition "
        "(its IPAM must assign addresses) and that Multus runs on their nodes."
    ),
    "invalid_network": (
        f"Malformed {NETWORK_STATUS_ANNOTATION} ({{pods}}): the message above says what is wrong; it is written "
        "by the CNI meta-plugin (Multus), so the plugin or whatever else wrote it needs fixing."
    ),
}

#: What to do about the controller's problems that are not a slot's (by problem reason).
PROBLEM_HINTS: Final[dict[str, str]] = {
    "invalid_workload": "The workload itself is invalid (see the message): fix its spec; no spec is written until then.",
    "missing_index": (
        "Pods without their member index (the message names the label): a pod made by hand, or a cluster "
        "older than the label (Kubernetes 1.28 for apps.kubernetes.io/pod-index); they fill no slot."
    ),
    "index_out_of_range": (
        f"Pods whose member index is at or beyond the job's member count (a PodGroup's gang.minCount): "
        f"fix their {RANK_ANNOTATION} annotation (0 to the count minus one), or the group's minCount."
    ),
    "too_large": (
        "The spec exceeds the ConfigMap size limit even compressed (the Warning SpecTooLarge names both sizes and "
        "how many members fit): split the job into smaller ones, or use a rank table version with shorter entries."
    ),
    "too_many_members": "The job asks for more members than the controller's --max-members: fewer, or raise the flag.",
    "foreign_configmap": (
        f"The ConfigMap exists without the label {MANAGED_LABEL}={MANAGED_VALUE}, so the controller never touches it: "
        "delete it (the controller recreates it) or mount another one as the "
        + " or ".join(CONFIG_VOLUME_NAMES)
        + " volume."
    ),
    "configmap_taken": "Another job's spec is in that ConfigMap: give this workload its own rings-config volume.",
    "invalid_rank_index": "The hccl/rankIndex annotations are partial, duplicate or gapped: ranks follow the job spec.",
    "invalid_super_pod": "A super-pod-rank annotation is not an integer: fix it on the pod.",
    "mixed_ip_families": (
        f"The members' IPs are of both families: set the workload annotation {IP_FAMILY_ANNOTATION} "
        "to IPv4 or IPv6 so every member is listed with an address of one family."
    ),
    "address_collision": (
        "Two members would listen on one ip:port (hostNetwork pods on one node with a port that cannot move): "
        "give the port by the ring-controller/port annotation or the TF_WORKER_PORT env instead of a container "
        "port (each member then gets its own port on the node), or keep the pods on separate nodes. "
        "No spec is written until then."
    ),
    "invalid_rank_order": (
        f"The workload's {RANK_ORDER_ANNOTATION} annotation is neither spec nor topology: "
        "fix it; until then the controller's --rank-order applies."
    ),
}


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], *, indent: str = "") -> str:
    """Columns padded to their widest cell, three spaces apart, as kubectl prints them."""
    rows = [list(header), *(list(r) for r in rows)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [indent + "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines) + "\n"


def _epoch(view: JobView) -> str:
    return str(view.written.epoch) if view.written is not None else "-"


def _reasons(view: JobView) -> str:
    reasons = sorted({p.reason for p in view.problems})
    return ",".join(reasons) if reasons else "<none>"


def get_table(
    found: Sequence[JobView], *, wide: bool = False, all_namespaces: bool = False, now: datetime | None = None
) -> str:
    """``kubectl ring get``: one line per job."""
    header = ["KIND", "NAME", "STATUS", "EPOCH", "READY", "AGE", "CONFIGMAP"]
    if all_namespaces:
        header.insert(0, "NAMESPACE")
    if wide:
        header += ["VERSION", "RUNTIME", "LIVE", "PROBLEMS"]
    rows = []
    for v in found:
        row = [
            v.kind.short,
            v.workload.job_name,
            v.status,
            _epoch(v),
            f"{v.ready}/{v.workload.expected}",
            age(v.spec_time, now=now) if v.configmap is not None else "-",
            v.workload.configmap,
        ]
        if all_namespaces:
            row.insert(0, v.workload.namespace)
        if wide:
            row += [str(v.workload.version), v.workload.runtime or "-", v.live, _reasons(v)]
        rows.append(row)
    return _table(header, rows)


def job_data(view: JobView) -> Json:
    """One job as plain data (``-o json|yaml``)."""
    decided = view.explanation.decision
    return {
        "kind": view.workload.kind,
        "apiVersion": view.workload.api_version,
        "namespace": view.workload.namespace,
        "name": view.workload.job_name,
        "uid": view.workload.uid,
        "version": view.workload.version,
        "runtime": view.workload.runtime,
        "status": view.status,
        "live": view.live,
        "epoch": view.written.epoch if view.written is not None else None,
        "ready": view.ready,
        "expected": view.workload.expected,
        "configMap": view.workload.configmap,
        "specWritten": view.spec_time or None,
        "rankOrder": view.rank_rule,
        "topologyKeys": list(view.written.topology_keys) if view.written is not None else [],
        "members": [
            {
                "rank": m.rank,
                "task": m.task,
                "index": m.index,
                "pod": m.pod,
                "ip": m.ip,
                "port": m.port,
                "node": m.node,
                **({"topology": list(m.topology)} if view.written is not None and view.written.rank_order else {}),
            }
            for m in (view.written.members if view.written is not None else ())
        ],
        "waiting": [
            {
                "rank": s.rank,
                "task": s.task,
                "index": s.index,
                "pod": s.pod.name if s.pod else None,
                "state": s.state,
                "detail": s.detail,
            }
            for s in view.explanation.waiting
        ]
        if decided.spec.status != STATUS_COMPLETED
        else [],
        "problems": [{"reason": p.reason, "message": p.message} for p in view.problems],
    }


def describe_data(view: JobView, *, events: Sequence[Json] = (), label_key: str) -> Json:
    """``kubectl ring describe -o json|yaml``: :func:`job_data` plus every slot, the pods
    that fill none, the Warning Events and the advice, as the text shows them."""
    return {
        **job_data(view),
        "slots": [
            {
                "rank": s.rank,
                "task": s.task,
                "index": s.index,
                "pod": s.pod.name if s.pod else None,
                "ip": s.pod.ip or None if s.pod else None,
                "port": s.pod.port if s.pod else None,
                "node": s.pod.node or None if s.pod else None,
                "state": s.state,
                "detail": s.detail,
                "why": _why(view, s) if not s.counts else None,
            }
            for s in view.explanation.slots
        ],
        "ignoredPods": [{"pod": i.pod.name, "reason": i.reason} for i in view.explanation.ignored],
        "warningEvents": [{k: e.get(k) for k in ("reason", "message", "count", "lastTimestamp")} for e in events],
        "advice": advice(view, label_key=label_key),
    }


def get_data(found: Sequence[JobView]) -> Json:
    """``kubectl ring get -o json|yaml``: a kubectl-style List."""
    return {"apiVersion": "v1", "kind": "List", "items": [job_data(v) for v in found]}


def dump(data: Any, output: str) -> str:
    """``data`` as ``json`` (indented, like kubectl) or ``yaml``."""
    if output == "json":
        return json.dumps(data, indent=2) + "\n"
    import yaml  # PyYAML comes with the kubernetes client

    return str(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))


def _devices(slot: Slot) -> str:
    """The slot's device ids as :func:`agent.decide.explain` parsed them (``invalid``: malformed)."""
    if slot.pod is None or slot.pod.devices is None:
        return "-"
    if slot.devices is None:
        return "invalid"
    return ",".join(d.device_id for d in slot.devices.devices) or "-"


def pod_condition(raw: Json | None) -> str:
    """Why a pod is not Running, from its status: the unscheduled condition or a container's waiting reason."""
    status = (raw or {}).get("status") or {}
    for c in status.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return f"{c.get('reason') or 'not scheduled'}: {c.get('message') or ''}".rstrip(": ")
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting:
            return f"container {cs.get('name')}: {waiting.get('reason')}: {waiting.get('message') or ''}".rstrip(": ")
    return ""


def _why(view: JobView, slot: Slot) -> str:
    where = f"rank {slot.rank} ({slot.task} {slot.index})"
    if slot.pod is None:
        return f"{where}: {slot.detail}"
    detail = slot.detail
    if slot.state == "not_running":
        extra = pod_condition(view.raw_pods.get(slot.pod.name))
        detail = f"{detail}; {extra}" if extra else detail
    if slot.detail.startswith(f"pod {slot.pod.name}: "):
        return f"{where}: {detail}"
    return f"{where}: pod {slot.pod.name} {detail}"


def _event_rows(events: Sequence[Json], now: datetime | None) -> list[list[str]]:
    rows = []
    for e in events:
        when = e.get("lastTimestamp") or e.get("eventTime") or (e.get("metadata") or {}).get("creationTimestamp") or ""
        rows.append(
            [
                str(e.get("type", "")),
                str(e.get("reason", "")),
                age(str(when), now=now),
                str(e.get("count") or 1),
                str(e.get("message", "")),
            ]
        )
    return rows


def _stored_note(cm: ConfigMapRecord | None) -> str:
    """``, gzip-compressed: S of L bytes (P plain)`` for a spec stored compressed (ranktable.stored), else ""."""
    if cm is None or not cm.binary_data:
        return ""
    stored = sum(len(b) for b in cm.binary_data.values()) + sum(len(t.encode()) for t in cm.data.values())
    plain = sum(len(t.encode()) for t in cm.files.values())
    return f", gzip-compressed: {stored:,} of {CONFIGMAP_DATA_LIMIT:,} bytes ({plain:,} plain)"


def describe_text(view: JobView, *, events: Sequence[Json] = (), label_key: str, now: datetime | None = None) -> str:
    """``kubectl ring describe``: the members in rank order and, while the spec is not completed, why."""
    w = view.workload
    out: list[str] = []
    ref = f"{view.kind.short}/{w.job_name}"
    field = [
        ("Name", w.name if w.group is None else f"{w.job_name} (group {w.group} of {w.kind} {w.name})"),
        ("Namespace", w.namespace),
        ("Kind", f"{w.kind} ({w.api_version}), {ref}"),
        ("Runtime", f"{w.runtime or '-'} (label {label_key})"),
        ("Job version", str(w.version)),
        ("ConfigMap", w.configmap + ("" if view.configmap is not None else " (not created yet)")),
    ]
    if view.written is not None:
        field.append(
            (
                "Spec",
                f"{view.written.status}, epoch {view.written.epoch}, written {age(view.spec_time, now=now)} ago"
                + _stored_note(view.configmap),
            )
        )
    elif view.written_error:
        field.append(("Spec", f"unreadable: {view.written_error}"))
    field.append(("Members", f"{view.ready}/{w.expected} count"))
    field.append(("Rank order", rank_order_text(view)))
    width = max(len(k) for k, _ in field) + 2
    out += [f"{k + ':':<{width}}{v}" for k, v in field]

    complete = view.written is not None and view.written.completed and not view.behind and view.live == STATUS_COMPLETED
    out.append("")
    if complete and view.written is not None:
        out.append("Members (rank order):")
        topology = bool(view.written.rank_order)
        rows = [
            [
                str(m.rank),
                m.task,
                str(m.index),
                m.pod,
                m.address + (f" on {m.interface}" if m.interface else ""),
                m.node or "-",
                ",".join(d.device_id for d in m.devices) or "-",
                *(["/".join(v or "-" for v in m.topology) or "-"] if topology else []),
            ]
            for m in view.written.members
        ]
        header = ["RANK", "TASK", "INDEX", "POD", "ADDRESS", "NODE", "DEVICES", *(["TOPOLOGY"] if topology else [])]
        out.append(_table(header, rows, indent="  ").rstrip("\n"))
        finished = [s.pod.name for s in view.explanation.slots if s.state == FINISHED and s.pod is not None]
        if finished:
            out.append("")
            out.append(f"Finished (Succeeded), keeping their places (the spec does not change): {', '.join(finished)}")
    else:
        if view.rank_rule == "topology":
            out.append("Members (spec order, as the controller sees them now; topology ranks come once all count):")
        else:
            out.append("Members (rank order, as the controller sees them now):")
        rows = [
            [
                str(s.rank),
                s.task,
                str(s.index),
                s.pod.name if s.pod else "<none>",
                _pod_address(s.pod.ip, s.pod.port) if s.pod and s.pod.ip else "-",
                (s.pod.node if s.pod else "") or "-",
                _devices(s),
                STATE_WORDS[s.state],
            ]
            for s in view.explanation.slots
        ]
        out.append(
            _table(["RANK", "TASK", "INDEX", "POD", "ADDRESS", "NODE", "DEVICES", "STATE"], rows, indent="  ").rstrip(
                "\n"
            )
        )
        waiting = view.explanation.waiting
        out.append("")
        out.append("Why it waits:")
        # The job's own problems first (an invalid workload explains every slot), then each slot's.
        lines = [f"  {w.waiting}"] if w.waiting else []
        lines += [f"  {p.message}" for p in view.problems if not any(p.message == s.detail for s in waiting)]
        lines += [f"  {_why(view, s)}" for s in waiting]
        if view.live == STATUS_COMPLETED and view.behind:
            lines.append(
                "  every member counts, but the ConfigMap does not hold the completed spec yet: "
                "the controller has not written it"
            )
        if w.expected == 0:
            lines.append("  the workload expects no members")
        out += lines or ["  nothing found: the controller should complete the spec at its next sync"]
    if view.explanation.ignored:
        out.append("")
        out.append("Pods of this job that fill no slot:")
        out += [f"  {i.pod.name}: {i.reason}" for i in view.explanation.ignored]
    out.append("")
    out.append("Warning Events:")
    rows = _event_rows(events, now)
    out.append(
        _table(["TYPE", "REASON", "AGE", "COUNT", "MESSAGE"], rows, indent="  ").rstrip("\n") if rows else "  <none>"
    )
    out.append("")
    out.append("What you can do:")
    out += [f"  - {h}" for h in advice(view, label_key=label_key)]
    return "\n".join(out) + "\n"


def rank_order_text(view: JobView) -> str:
    """The rule the job's ranks follow, as ``describe`` shows it (with the topology levels once written)."""
    annotated = view.workload.rank_order is not None
    source = f"annotation {RANK_ORDER_ANNOTATION}" if annotated else "the controller's --rank-order"
    if view.rank_rule != "topology":
        return f"spec (task order, then index; {source})"
    written = view.written
    levels = " / ".join(written.topology_keys) if written is not None and written.rank_order else ""
    where = f"; TOPOLOGY column: {levels}" if levels else ""
    return f"topology (the nodes' topology path, then spec order; {source}{where})"


def _pod_address(ip: str, port: int) -> str:
    """A pod's primary ``ip:port`` (IPv6 bracketed) before the spec is written: the spec's
    own address may differ (another family, a secondary network, a hostNetwork port)."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def advice(view: JobView, *, label_key: str) -> list[str]:
    """The hints for ``view``: one per kind of trouble found, in slot-state order."""
    w = view.workload
    job = f"{view.kind.short}/{w.job_name} -n {w.namespace}"
    hints: list[str] = []
    waiting = view.explanation.waiting if view.live != STATUS_COMPLETED else ()
    for state in SLOT_STATES:
        pods = [s.pod.name for s in waiting if s.state == state and s.pod is not None]
        if HINTS[state] and any(s.state == state for s in waiting):
            hints.append(HINTS[state].format(pods=", ".join(pods) or "-", job=job, namespace=w.namespace))
    for reason in sorted({p.reason for p in view.problems}):
        if reason in PROBLEM_HINTS:
            hints.append(PROBLEM_HINTS[reason])
    if view.live != STATUS_INVALID and (view.configmap is None or (view.live == STATUS_COMPLETED and view.behind)):
        hints.append(
            "The controller has not written this job's spec: is ring-controller running, watching namespace "
            f"{w.namespace} (--namespace) with --label-key {label_key}? See its logs (sync.failed, input.invalid)."
        )
    if not hints and view.status == STATUS_COMPLETED:
        hints.append(
            "Nothing: the spec is complete. `kubectl ring env POD` shows what ring-launch exports in each member."
        )
    return hints
