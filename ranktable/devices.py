"""The Ascend device annotation, parsed and validated.

Once devices are bound to a pod, the Ascend device plugin (or Volcano's Ascend
scheduler plugin) writes the annotation
``ascend.kubectl.kubernetes.io/ascend-910-configuration`` or, for the
``huawei.com/npu`` resource, ``...ascend-npu-configuration`` (the keys live in
:mod:`model.keys`; this module only reads the value)::

    {"pod_name": "job-worker-0", "server_id": "5c1e...-pod-uid", "host_ip": "192.168.0.10",
     "super_pod_id": 0, "rack_id": 0, "server_index": "0", "server_ip": "192.168.0.10",
     "devices": [{"device_id": "0", "device_ip": "192.168.100.100", "super_device_id": "37748736"},
                 {"device_id": "1", "device_ip": "192.168.101.100", "super_device_id": "37748737",
                  "levelList": [...]}]}

HCCL-Controller's generation wrote only ``pod_name``, ``server_id`` (then the
node's IP) and ``devices[{device_id, device_ip}]``; both shapes are read.

The value is written by another component and ends up, field for field, in
the rank table HCCL uses to build its rings, so it is checked strictly here,
once, where it enters the product: the rest of the code can trust a
:class:`DeviceAnnotation`. Numbers are strings in this format (as in the rank
table) except ``super_pod_id``, which the plugins write as a JSON number; a
JSON number where a string belongs is a schema error, exactly as it is for
their Go decoders. Unknown keys (``rack_id``, ``server_index``, ...) are
ignored, so newer device plugins that add fields keep working.

What a rank table version needs is checked later, once the version is known
(:func:`ranktable.hccl.device_problem`): a device whose IP is a placeholder
(:data:`~ranktable.clusterspec.PLACEHOLDER_DEVICE_IPS`, what the device plugin
writes when it cannot read the IP) is valid here, because tables 2.0 and 1.2
within one super pod do not use the IP, and refused for the other tables. A
``super_device_id`` that is not a non-negative integer (the plugin writes
``"-2"`` when it does not know it) is kept as unknown ("").

A rejected annotation raises :class:`InvalidDeviceAnnotation` whose ``reason``
is a short fixed code, fit for a metric label, and whose message is meant for
a Warning Event on the workload.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from ranktable.clusterspec import (
    PLACEHOLDER_DEVICE_IPS,
    Device,
    SpecError,
    check_device_id,
    check_ip,
    check_server_id,
    uint_string,
)
from ranktable.frozen import record
from ranktable.levels import LevelError, parse_levels

if TYPE_CHECKING:
    from typing import Any, Final

#: Every ``reason`` :class:`InvalidDeviceAnnotation` may carry (the last two
#: come from :func:`ranktable.hccl.device_problem`, for a table version).
REASONS: Final = (
    "json",
    "schema",
    "device_id",
    "device_ip",
    "duplicate",
    "server_id",
    "host_ip",
    "level_list",
    "empty",
    "super_device_id",
)


class InvalidDeviceAnnotation(ValueError):
    """A device annotation that must not be used.

    ``reason`` is one of :data:`REASONS`; ``str(err)`` explains it for humans.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@record
class DeviceAnnotation:
    """The validated annotation: ``server_id`` and ``host_ip`` ("" when absent),
    ``super_pod_id`` (None when absent or negative) and devices in annotation order."""

    server_id: str
    devices: tuple[Device, ...]
    host_ip: str = ""
    super_pod_id: int | None = None


def _optional_string(raw: dict[str, Any], key: str, check: Callable[[object, str], None] | None = None) -> str:
    """``raw[key]``, "" when absent: reason ``schema`` when not a string, reason ``key`` when ``check`` refuses it."""
    value = raw.get(key, "")
    if not isinstance(value, str):
        raise InvalidDeviceAnnotation("schema", f"device annotation: {key} must be a string")
    if value and check is not None:
        try:
            check(value, key)
        except SpecError as err:
            raise InvalidDeviceAnnotation(key, f"device annotation: {err}") from None
    return value


def parse_device_annotation(text: str) -> DeviceAnnotation:
    """Parse and validate one annotation value.

    Checks: valid JSON object; ``devices`` a non-empty list of objects with
    string ``device_id`` (canonical non-negative integer, e.g. ``"0"``) and
    string ``device_ip`` (an IP address or a placeholder); optional string
    ``super_device_id`` and well-formed ``levelList``; no device id or device
    IP twice; ``server_id``, when present, a server id (an IP or a uid);
    ``host_ip``, when present, an IP address; ``super_pod_id``, when present,
    an integer; ``pod_name``, when present, a string. Raises
    :class:`InvalidDeviceAnnotation` on the first violation.
    """
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError, TypeError) as err:  # ValueError: also a number over the digit limit
        raise InvalidDeviceAnnotation("json", f"device annotation is not valid JSON: {err}") from None
    if not isinstance(raw, dict):
        raise InvalidDeviceAnnotation("schema", "device annotation must be a JSON object")
    _optional_string(raw, "pod_name")
    server_id = _optional_string(raw, "server_id", check_server_id)
    host_ip = _optional_string(raw, "host_ip", check_ip)
    super_pod_id = raw.get("super_pod_id")
    if super_pod_id is not None and (isinstance(super_pod_id, bool) or not isinstance(super_pod_id, int)):
        raise InvalidDeviceAnnotation("schema", "device annotation: super_pod_id must be an integer")
    devices_raw = raw.get("devices")
    if devices_raw is None:
        raise InvalidDeviceAnnotation("schema", "device annotation: devices is missing")
    if not isinstance(devices_raw, list):
        raise InvalidDeviceAnnotation("schema", "device annotation: devices must be a list")
    if not devices_raw:
        raise InvalidDeviceAnnotation("empty", "device annotation: devices is empty")
    devices: list[Device] = []
    ids: set[str] = set()
    ips: set[str] = set()
    for i, item in enumerate(devices_raw):
        where = f"devices[{i}]"
        if not isinstance(item, dict):
            raise InvalidDeviceAnnotation("schema", f"device annotation: {where} must be an object")
        device_id = item.get("device_id")
        device_ip = item.get("device_ip")
        if not isinstance(device_id, str) or not isinstance(device_ip, str):
            raise InvalidDeviceAnnotation(
                "schema", f"device annotation: {where} needs string device_id and device_ip, got {item!r}"
            )
        try:
            check_device_id(device_id, f"{where}.device_id")
        except SpecError as err:
            raise InvalidDeviceAnnotation("device_id", f"device annotation: {err}") from None
        if device_ip not in PLACEHOLDER_DEVICE_IPS:
            try:
                check_ip(device_ip, f"{where}.device_ip")
            except SpecError as err:
                raise InvalidDeviceAnnotation("device_ip", f"device annotation: {err}") from None
            if device_ip in ips:
                raise InvalidDeviceAnnotation("duplicate", f"device annotation: device_ip {device_ip!r} appears twice")
            ips.add(device_ip)
        if device_id in ids:
            raise InvalidDeviceAnnotation("duplicate", f"device annotation: device_id {device_id!r} appears twice")
        ids.add(device_id)
        super_device_id = item.get("super_device_id", "")
        if not isinstance(super_device_id, str):
            raise InvalidDeviceAnnotation("schema", f"device annotation: {where}.super_device_id must be a string")
        try:
            levels = parse_levels(item.get("levelList"), f"{where}.levelList")
        except LevelError as err:
            raise InvalidDeviceAnnotation("level_list", f"device annotation: {err}") from None
        devices.append(
            Device(
                device_id=device_id,
                device_ip=device_ip,
                super_device_id=super_device_id if uint_string(super_device_id) is not None else "",
                levels=levels,
            )
        )
    return DeviceAnnotation(
        server_id=server_id,
        devices=tuple(devices),
        host_ip=host_ip,
        super_pod_id=super_pod_id if super_pod_id is not None and super_pod_id >= 0 else None,
    )
