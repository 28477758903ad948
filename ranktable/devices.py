"""The Ascend device annotation, parsed and validated.

Once the Ascend device plugin has bound NPUs to a pod it writes the annotation
``ascend.kubectl.kubernetes.io/ascend-910-configuration`` (the key itself lives
in :mod:`model.keys`; this module only reads its value)::

    {"pod_name": "0", "server_id": "192.168.0.10",
     "devices": [{"device_id": "0", "device_ip": "192.168.100.100"},
                 {"device_id": "1", "device_ip": "192.168.101.100"}]}

The value is written by another component and ends up, field for field, in
the rank table HCCL uses to build its rings, so it is checked strictly here,
once, where it enters the product: the rest of the code can trust a
:class:`DeviceAnnotation`. Numbers are strings in this format (as in the rank
table); a JSON number where a string belongs is a schema error, exactly as it
is for HCCL-Controller's Go decoder. Unknown keys are ignored, so newer device
plugins that add fields keep working.

A rejected annotation raises :class:`InvalidDeviceAnnotation` whose ``reason``
is a short fixed code, fit for a metric label, and whose message is meant for
a Warning Event on the workload.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from ranktable.clusterspec import Device, SpecError, check_device_id, check_ip

#: Every ``reason`` :class:`InvalidDeviceAnnotation` may carry.
REASONS: Final = ("json", "schema", "device_id", "device_ip", "duplicate", "server_id", "empty")


class InvalidDeviceAnnotation(ValueError):
    """A device annotation that must not be used.

    ``reason`` is one of :data:`REASONS`; ``str(err)`` explains it for humans.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class DeviceAnnotation:
    """The validated annotation: ``server_id`` ("" when absent) and devices in annotation order."""

    server_id: str
    devices: tuple[Device, ...]


def parse_device_annotation(text: str) -> DeviceAnnotation:
    """Parse and validate one annotation value.

    Checks: valid JSON object; ``devices`` a non-empty list of objects with
    string ``device_id`` (canonical non-negative integer, e.g. ``"0"``) and
    string ``device_ip`` (an IP address); no device id or device IP twice;
    ``server_id``, when present, an IP address; ``pod_name``, when present, a
    string. Raises :class:`InvalidDeviceAnnotation` on the first violation.
    """
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError, TypeError) as err:  # ValueError: also a number over the digit limit
        raise InvalidDeviceAnnotation("json", f"device annotation is not valid JSON: {err}") from None
    if not isinstance(raw, dict):
        raise InvalidDeviceAnnotation("schema", "device annotation must be a JSON object")
    pod_name = raw.get("pod_name", "")
    if not isinstance(pod_name, str):
        raise InvalidDeviceAnnotation("schema", "device annotation: pod_name must be a string")
    server_id = raw.get("server_id", "")
    if not isinstance(server_id, str):
        raise InvalidDeviceAnnotation("schema", "device annotation: server_id must be a string")
    if server_id:
        try:
            check_ip(server_id, "server_id")
        except SpecError as err:
            raise InvalidDeviceAnnotation("server_id", f"device annotation: {err}") from None
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
        try:
            check_ip(device_ip, f"{where}.device_ip")
        except SpecError as err:
            raise InvalidDeviceAnnotation("device_ip", f"device annotation: {err}") from None
        if device_id in ids:
            raise InvalidDeviceAnnotation("duplicate", f"device annotation: device_id {device_id!r} appears twice")
        if device_ip in ips:
            raise InvalidDeviceAnnotation("duplicate", f"device annotation: device_ip {device_ip!r} appears twice")
        ids.add(device_id)
        ips.add(device_ip)
        devices.append(Device(device_id=device_id, device_ip=device_ip))
    return DeviceAnnotation(server_id=server_id, devices=tuple(devices))
