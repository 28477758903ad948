"""Rank table v2 (the table's own ``"version": "1.0"``), HCCL-Controller's default.

Layout, every number a string::

    {"status": "completed", "version": "1.0", "server_count": "2",
     "server_list": [
       {"server_id": "192.168.0.10",
        "device": [{"device_id": "0", "device_ip": "192.168.100.100", "rank_id": "0"},
                   {"device_id": "1", "device_ip": "192.168.101.100", "rank_id": "1"}]},
       {"server_id": "192.168.0.11",
        "device": [{"device_id": "0", "device_ip": "192.168.100.101", "rank_id": "2"},
                   {"device_id": "1", "device_ip": "192.168.101.101", "rank_id": "3"}]}]}

One ``server_list`` entry per member pod, in member rank order (two pods on one
node give two entries with the same ``server_id``, as HCCL-Controller writes
them). ``rank_id`` counts devices consecutively across the list: pod rank r's
first device follows the last device of rank r-1. HCCL-Controller computes
``pod index * devices per pod + position``, which is the same number whenever
pods hold equal device counts; counting also stays dense when they do not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ranktable import hccl_common
from ranktable.clusterspec import STATUS_COMPLETED, ClusterSpec, SpecError, check_ip, check_server_id, uint_string

if TYPE_CHECKING:
    from typing import Any, Final

#: The value of the table's ``version`` key for this layout.
TABLE_VERSION: Final = "1.0"


def render(spec: ClusterSpec) -> dict[str, Any]:
    """The v2 table object for a validated ``spec`` (see :func:`ranktable.hccl.render_hccl`)."""
    servers: list[dict[str, Any]] = []
    rank_id = 0
    for member in hccl_common.table_members(spec):
        devices = []
        for device in member.devices:
            devices.append({"device_id": device.device_id, "device_ip": device.device_ip, "rank_id": str(rank_id)})
            rank_id += 1
        servers.append({"server_id": member.host, "device": devices})
    return {
        "status": spec.status,
        "version": TABLE_VERSION,
        "server_count": str(len(servers)),
        "server_list": servers,
    }


def validate(table: dict[str, Any], *, placeholder_ip: bool = False) -> None:
    """Raise :class:`SpecError` unless ``table`` is a well-formed ``server_list`` table.

    That is this layout and ascend-operator's 1.0 and 1.2 (:mod:`ranktable.hccl_table10`):
    their extra server fields (``host_ip``, ``container_ip``,
    ``hardware_type``) and ``super_device_id`` are checked when present.
    ``server_count`` may be absent from a table that lists no server (as
    ascend-operator writes an initializing table). ``placeholder_ip``: see
    :func:`ranktable.hccl_common.device`.
    """
    version = table.get("version")
    if not isinstance(version, str) or not version:
        raise SpecError('hccl.json version: expected a non-empty string such as "1.0"')
    servers = hccl_common.items(table, "server_list", "")
    if "server_count" not in table and not servers:
        return
    declared = hccl_common.count(table.get("server_count"), "server_count")
    if declared != len(servers):
        raise SpecError(f"hccl.json server_count: {declared} but server_list holds {len(servers)}")
    completed = table.get("status") == STATUS_COMPLETED
    rank_ids: list[int] = []
    for s, raw in enumerate(servers):
        where = f"server_list[{s}]"
        server = hccl_common.obj(raw, where)
        check_server_id(hccl_common.string(server, "server_id", where + "."), f"hccl.json {where}.server_id")
        for key in ("host_ip", "container_ip"):
            if server.get(key):
                check_ip(server[key], f"hccl.json {where}.{key}")
            elif key in server:
                hccl_common.string(server, key, where + ".")
        if "hardware_type" in server:
            hccl_common.string(server, "hardware_type", where + ".")
        devices = hccl_common.items(server, "device", where + ".")
        if completed and not devices:
            raise SpecError(f"hccl.json {where}.device: empty in a completed table")
        for d, device in enumerate(devices):
            ok = hccl_common.device_ok(device, placeholder_ip=placeholder_ip)
            rank = uint_string(device.get("rank_id")) if ok else None
            if rank is None:  # name what is wrong
                entry = hccl_common.device(device, f"{where}.device[{d}]", placeholder_ip=placeholder_ip)
                rank = hccl_common.count(entry.get("rank_id"), f"{where}.device[{d}].rank_id")
            rank_ids.append(rank)
    if len(set(rank_ids)) != len(rank_ids):
        raise SpecError("hccl.json: a rank_id appears twice")
    if completed:
        if not servers:
            raise SpecError("hccl.json: a completed table has an empty server_list")
        if sorted(rank_ids) != list(range(len(rank_ids))):
            raise SpecError(f"hccl.json: rank_ids of a completed table must be 0..{len(rank_ids) - 1}")
