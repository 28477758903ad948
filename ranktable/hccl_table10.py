"""Rank tables 1.0 and 1.2 as ascend-operator (Ascend/mind-cluster) writes them.

Table 1.0 (Atlas training series, A2 training, 800I A2, A200I A2), every
number a string, keys in ascend-operator's order::

    {"status": "completed",
     "server_list": [
       {"device": [{"device_id": "0", "device_ip": "192.168.100.100", "rank_id": "0"},
                   {"device_id": "1", "device_ip": "192.168.101.100", "rank_id": "1"}],
        "hardware_type": "800I-A2-32G",          # only where known
        "server_id": "5c1e6a0e-...", "host_ip": "192.168.0.10", "container_ip": "10.244.1.7"}],
     "server_count": "1", "version": "1.0"}

Table 1.2 (A3 super pods) adds ``super_device_id`` to every device and the
servers of each super pod::

    {"status": "completed",
     "server_list": [{"device": [{"device_id": "0", "device_ip": "192.168.100.100",
                                  "super_device_id": "37748736", "rank_id": "0"}, ...],
                      "server_id": "...", "host_ip": "...", "container_ip": "..."}],
     "server_count": "1", "version": "1.2",
     "super_pod_list": [{"super_pod_id": "0", "server_list": [{"server_id": "..."}]}]}

Differences from HCCL-Controller's layout (:mod:`ranktable.hccl_v2`, whose
table also says ``"version": "1.0"``): ``host_ip`` (the node),
``container_ip`` (the pod IP) and, where the pod carries
``mind-cluster/hardware-type``, ``hardware_type`` per server; ``server_id`` is
whatever the device annotation says (the pod's uid from current device
plugins, the node's IP from HCCL-Controller's generation), except that when
every member has a node of its own, ``server_id`` is the node's IP
(``host_ip``), as ascend-operator's ``onePodOneNode`` rule has it
(:func:`server_ids`). HCCL reads both.

Where ring-controller differs from ascend-operator (deliberately):

* ``rank_id`` counts devices consecutively in member rank order (ascend-operator
  computes ``rank index * devices of this pod + position``: the same numbers
  when pods hold equal device counts, dense also when they do not).
* Each super pod's ``super_pod_id`` comes from the member
  (:attr:`~ranktable.clusterspec.Member.super_pod`, decided by the agent:
  ascend-operator's logical blocks when the job has ``sp-block``, else the
  device annotation's physical ``super_pod_id``, numbered densely from 0 in
  rank order); ascend-operator puts every server into super pod ``"0"`` when
  the job has no ``sp-block``, which is the same for a job within one super
  pod and would join servers of different super pods into one otherwise.
* Super pods are listed by id (ascend-operator, for some jobs, in Go's map order).
* An initializing table lists the members known so far with their devices
  (ascend-operator writes no ``server_list`` until it is complete); the
  status says which it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ranktable import hccl_common, hccl_v2
from ranktable.clusterspec import STATUS_COMPLETED, ClusterSpec, Member, SpecError, uint_string

if TYPE_CHECKING:
    from typing import Any, Final

VERSION_1_0: Final = "1.0"
VERSION_1_2: Final = "1.2"


def server_ids(members: list[Member]) -> list[str]:
    """Each table member's ``server_id``: ascend-operator's ``onePodOneNode`` rule.

    When every member sits on a node of its own (the usual training job: one
    pod takes all NPUs of its server), ascend-operator names each server by
    its node's IP (the annotation's ``host_ip``), which MindIE's expert
    parallelism relies on; else by the annotation's ``server_id`` (the pod's
    uid from current device plugins), since several pods share a node's IP.
    A member whose node is unknown keeps its ``server_id``.
    """
    nodes = [m.node for m in members]
    if all(nodes) and len(set(nodes)) == len(nodes):
        return [m.host_ip or m.host for m in members]
    return [m.host for m in members]


def _server(member: Member, rank_id: int, *, super_devices: bool, server_id: str) -> tuple[dict[str, Any], int]:
    devices = []
    for device in member.devices:
        entry = {"device_id": device.device_id, "device_ip": device.device_ip}
        if super_devices:
            entry["super_device_id"] = device.super_device_id
        entry["rank_id"] = str(rank_id)
        devices.append(entry)
        rank_id += 1
    server: dict[str, Any] = {"device": devices}
    if member.hardware:
        server["hardware_type"] = member.hardware
    server["server_id"] = server_id
    server["host_ip"] = member.host_ip
    server["container_ip"] = member.ip
    return server, rank_id


def render(spec: ClusterSpec, *, version: str = VERSION_1_0) -> dict[str, Any]:
    """The 1.0 or 1.2 table object for a validated ``spec``.

    Raises :class:`SpecError` when a completed 1.2 table would be wrong: a
    device without ``super_device_id``, a member without a super pod, or,
    across several super pods, a device without an IP.
    """
    super_pods = version == VERSION_1_2
    members = hccl_common.table_members(spec)
    servers: list[dict[str, Any]] = []
    rank_id = 0
    ids = server_ids(members)
    for member, server_id in zip(members, ids, strict=True):
        server, rank_id = _server(member, rank_id, super_devices=super_pods, server_id=server_id)
        servers.append(server)
    table: dict[str, Any] = {
        "status": spec.status,
        "server_list": servers,
        "server_count": str(len(servers)),
        "version": version,
    }
    if super_pods:
        table["super_pod_list"] = _super_pod_list(spec, members, ids)
    return table


def _super_pod_list(spec: ClusterSpec, members: list[Member], ids: list[str]) -> list[dict[str, Any]]:
    by_pod: dict[str, list[dict[str, str]]] = {}
    for member, server_id in zip(members, ids, strict=True):
        if spec.status == STATUS_COMPLETED:
            if not member.super_pod:
                raise SpecError(f"rank table 1.2: member {member.pod!r} (rank {member.rank}) has no super pod")
            missing = [d.device_id for d in member.devices if not d.super_device_id]
            if missing:
                raise SpecError(f"rank table 1.2: member {member.pod!r} devices {missing} have no super_device_id")
        if member.super_pod:
            by_pod.setdefault(member.super_pod, []).append({"server_id": server_id})
    if spec.status == STATUS_COMPLETED and len(by_pod) > 1:
        for member in members:
            if not all(d.has_ip for d in member.devices):
                raise SpecError(
                    f"rank table 1.2: member {member.pod!r} has a device without an IP, "
                    f"and the job spans {len(by_pod)} super pods"
                )
    return [
        {"super_pod_id": pod, "server_list": servers}
        for pod, servers in sorted(by_pod.items(), key=lambda item: int(item[0]))
    ]


def validate(table: dict[str, Any]) -> None:
    """Raise :class:`SpecError` unless ``table`` is a well-formed 1.0 or 1.2 table.

    For 1.2: every device has a ``super_device_id``; ``super_pod_list`` names
    each listed server exactly once (when completed) and no other, with
    unique, integer-string ``super_pod_id``s; device IPs may be placeholders
    only when there is one super pod.
    """
    if table.get("version") != VERSION_1_2:
        hccl_v2.validate(table)
        return
    pods = hccl_common.items(table, "super_pod_list", "")
    hccl_v2.validate(table, placeholder_ip=len(pods) <= 1)
    completed = table.get("status") == STATUS_COMPLETED
    listed: list[str] = []
    for s, raw in enumerate(hccl_common.items(table, "server_list", "")):
        for d, device in enumerate(hccl_common.items(raw, "device", "")):
            if "super_device_id" not in device:
                raise SpecError(f"hccl.json server_list[{s}].device[{d}].super_device_id: missing in a 1.2 table")
        listed.append(raw["server_id"])
    named: list[str] = []
    ids: set[str] = set()
    for p, raw in enumerate(pods):
        where = f"super_pod_list[{p}]"
        pod = hccl_common.obj(raw, where)
        pod_id = hccl_common.string(pod, "super_pod_id", where + ".")
        if uint_string(pod_id) is None:
            raise SpecError(f"hccl.json {where}.super_pod_id: {pod_id!r} is not a non-negative integer string")
        if pod_id in ids:
            raise SpecError(f"hccl.json {where}.super_pod_id: {pod_id!r} appears twice")
        ids.add(pod_id)
        for s, server in enumerate(hccl_common.items(pod, "server_list", where + ".")):
            swhere = f"{where}.server_list[{s}]"
            named.append(hccl_common.string(hccl_common.obj(server, swhere), "server_id", swhere + "."))
    unknown = sorted(set(named) - set(listed))
    if unknown:
        raise SpecError(f"hccl.json super_pod_list: servers {unknown} are not in server_list")
    if completed and sorted(named) != sorted(listed):
        raise SpecError("hccl.json super_pod_list: must name every server of server_list exactly once")
