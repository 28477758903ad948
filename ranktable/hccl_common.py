"""Checks shared by the rank table layouts (:mod:`ranktable.hccl_v1`, :mod:`ranktable.hccl_v2`, the tables 1.0, 1.2, 2.0)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ranktable.clusterspec import (
    PLACEHOLDER_DEVICE_IPS,
    STATUS_COMPLETED,
    ClusterSpec,
    Member,
    SpecError,
    check_device_id,
    check_ip,
    is_ip,
    uint_string,
)

if TYPE_CHECKING:
    from typing import Any


def table_members(spec: ClusterSpec) -> list[Member]:
    """The members that go into the table, in rank order: those with devices.

    Members without devices (a CPU task beside NPU workers, such as a
    scheduler) are not in a rank table. A completed spec must have at least
    one member with devices, and each of those needs a server id.
    """
    members = [m for m in spec.members if m.devices]
    if spec.status != STATUS_COMPLETED:
        return [m for m in members if m.host]
    if not members:
        raise SpecError("rank table: no member has devices")
    for member in members:
        if not member.host:
            raise SpecError(f"rank table: member {member.pod!r} (rank {member.rank}) has no server id (host)")
    return members


def count(value: object, where: str) -> int:
    """The int of a string-typed count such as ``"2"``; :class:`SpecError` otherwise."""
    number = uint_string(value)
    if number is None:
        raise SpecError(f"hccl.json {where}: {value!r} is not a string-typed non-negative integer")
    return number


def obj(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SpecError(f"hccl.json {where}: expected an object")
    return value


def items(parent: dict[str, Any], key: str, where: str) -> list[Any]:
    """``parent[key]`` as a list; a missing key or Go's ``null`` is an empty list."""
    value = parent.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpecError(f"hccl.json {where}{key}: expected a list")
    return value


def string(parent: dict[str, Any], key: str, where: str) -> str:
    value = parent.get(key)
    if not isinstance(value, str):
        raise SpecError(f"hccl.json {where}{key}: expected a string")
    return value


def device_ok(raw: object, *, placeholder_ip: bool = False) -> bool:
    """:func:`device`'s rules as a test that names no path: the fast path of big tables
    (a 16,384-NPU table has 16,384 devices; on False, :func:`device` says what is wrong)."""
    if type(raw) is not dict or uint_string(raw.get("device_id")) is None:
        return False
    ip = raw.get("device_ip")
    if not (placeholder_ip and ip in PLACEHOLDER_DEVICE_IPS) and not is_ip(ip):
        return False
    return "super_device_id" not in raw or uint_string(raw["super_device_id"]) is not None


def device(raw: object, where: str, *, placeholder_ip: bool = False) -> dict[str, Any]:
    """Validate one ``{"device_id", "device_ip", ...}`` entry.

    ``placeholder_ip``: the table may hold a device without a usable IP
    (table 1.2 within one super pod), so a placeholder ``device_ip`` passes.
    """
    entry = obj(raw, where)
    check_device_id(entry.get("device_id"), f"hccl.json {where}.device_id")
    if not (placeholder_ip and entry.get("device_ip") in PLACEHOLDER_DEVICE_IPS):
        check_ip(entry.get("device_ip"), f"hccl.json {where}.device_ip")
    if "super_device_id" in entry:
        check_device_id(entry.get("super_device_id"), f"hccl.json {where}.super_device_id")
    return entry
