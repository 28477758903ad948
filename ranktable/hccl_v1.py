"""Rank table v1: groups of pod instances, HCCL-Controller's ``--json-version v1``.

Layout, every number a string::

    {"status": "completed", "group_count": "1",
     "group_list": [
       {"group_name": "worker", "device_count": "4", "instance_count": "2",
        "instance_list": [
          {"pod_name": "job-worker-0", "server_id": "192.168.0.10",
           "devices": [{"device_id": "0", "device_ip": "192.168.100.100"},
                       {"device_id": "1", "device_ip": "192.168.101.100"}]},
          {"pod_name": "job-worker-1", "server_id": "192.168.0.11",
           "devices": [...]}]}]}

No rank ids: HCCL numbers devices in list order. One group per task, named
after it (as HCCL-Controller names its groups), groups in order of their first
member's rank, instances in rank order. ``device_count`` and
``instance_count`` count what the group lists; in a completed table that is
the task's replicas and their devices. (HCCL-Controller declares one group per
task but appends every pod to the first group; for the usual one-task NPU job
both give the same table, for several tasks ours is the consistent one.)
``pod_name`` is the pod's name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ranktable import hccl_common
from ranktable.clusterspec import STATUS_COMPLETED, ClusterSpec, SpecError, check_server_id

if TYPE_CHECKING:
    from typing import Any


def render(spec: ClusterSpec) -> dict[str, Any]:
    """The v1 table object for a validated ``spec`` (see :func:`ranktable.hccl.render_hccl`)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for member in hccl_common.table_members(spec):
        groups.setdefault(member.task, []).append(
            {
                "pod_name": member.pod,
                "server_id": member.host,
                "devices": [{"device_id": d.device_id, "device_ip": d.device_ip} for d in member.devices],
            }
        )
    group_list = [
        {
            "group_name": task,
            "device_count": str(sum(len(i["devices"]) for i in instances)),
            "instance_count": str(len(instances)),
            "instance_list": instances,
        }
        for task, instances in groups.items()
    ]
    return {"status": spec.status, "group_count": str(len(group_list)), "group_list": group_list}


def validate(table: dict[str, Any]) -> None:
    """Raise :class:`SpecError` unless ``table`` is a well-formed v1 table."""
    groups = hccl_common.items(table, "group_list", "")
    declared = hccl_common.count(table.get("group_count"), "group_count")
    if declared != len(groups):
        raise SpecError(f"hccl.json group_count: {declared} but group_list holds {len(groups)}")
    completed = table.get("status") == STATUS_COMPLETED
    if completed and not groups:
        raise SpecError("hccl.json: a completed table has an empty group_list")
    for g, raw in enumerate(groups):
        where = f"group_list[{g}]"
        group = hccl_common.obj(raw, where)
        hccl_common.string(group, "group_name", where + ".")
        device_count = hccl_common.count(group.get("device_count"), where + ".device_count")
        instance_count = hccl_common.count(group.get("instance_count"), where + ".instance_count")
        instances = hccl_common.items(group, "instance_list", where + ".")
        devices = 0
        for i, raw_instance in enumerate(instances):
            iwhere = f"{where}.instance_list[{i}]"
            instance = hccl_common.obj(raw_instance, iwhere)
            hccl_common.string(instance, "pod_name", iwhere + ".")
            check_server_id(hccl_common.string(instance, "server_id", iwhere + "."), f"hccl.json {iwhere}.server_id")
            listed = hccl_common.items(instance, "devices", iwhere + ".")
            if completed and not listed:
                raise SpecError(f"hccl.json {iwhere}.devices: empty in a completed table")
            for d, device in enumerate(listed):
                hccl_common.device(device, f"{iwhere}.devices[{d}]")
            devices += len(listed)
        if completed and instance_count != len(instances):
            raise SpecError(
                f"hccl.json {where}.instance_count: {instance_count} but instance_list holds {len(instances)}"
            )
        if completed and device_count != devices:
            raise SpecError(f"hccl.json {where}.device_count: {device_count} but its instances hold {devices} devices")
