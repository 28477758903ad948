"""Rank table 2.0 as ascend-operator writes it (Atlas 350, Atlas 850, Atlas 950 SuperPoD).

One entry per device, numbers as JSON numbers (not strings, unlike 1.x)::

    {"status": "completed", "version": "2.0", "rank_count": 2,
     "rank_list": [
       {"rank_id": 0, "local_id": 0, "device_id": 0,
        "level_list": [
          {"net_layer": 0, "net_instance_id": "sp-1", "net_type": "TOPO_FILE_DESC", "net_attr": "",
           "rank_addr_list": [{"addr_type": "EID", "addr": "...", "ports": ["0/1"], "plane_id": "1"}]},
          {"net_layer": 3, "net_instance_id": "CLUSTER1", "net_type": "CLOS", "net_attr": "",
           "rank_addr_list": []}]},
       {"rank_id": 1, ...}]}

``local_id`` and ``device_id`` are the device's id; ``rank_id`` counts devices
consecutively in member rank order. ``level_list`` comes from the device
annotation's ``levelList`` by ascend-operator's rules:

* levels 0 and 1: the device's element of that level, if it has one (when a
  level holds several, the first by port type name: ascend-operator takes
  whichever Go's map yields);
* the job's scale-out port type: the job label ``scaleout-type`` (``ROCE``
  picks ``ROCE``; ``UBOE`` picks ``UBOE``, else ``UBG``) or, without the label,
  the first of ``ROCE``, ``UBOE``, ``UBG`` that any device lists on any level;
* level 2 when that type is ``UBOE`` or ``UBG``, level 3 when it is ``ROCE``:
  the device's element of that type on that level, or the default element
  ``{net_layer: L, net_instance_id: "CLUSTER1", net_type: "CLOS",
  net_attr: "", rank_addr_list: []}``.

``level_list`` is left out for a device that ends up with none (ascend-operator's
``omitempty``). Device IPs are not used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ranktable import hccl_common
from ranktable.clusterspec import STATUS_COMPLETED, ClusterSpec, Device, SpecError
from ranktable.levels import NetElement

if TYPE_CHECKING:
    from typing import Any, Final

VERSION_2_0: Final = "2.0"

#: The ``scaleout-type`` label values and the port types each may use, in order.
SCALE_OUT_TYPES: Final = {"ROCE": ("ROCE",), "UBOE": ("UBOE", "UBG")}
#: The port types tried, in order, when the job names no scale-out type.
DEFAULT_PORT_TYPES: Final = ("ROCE", "UBOE", "UBG")
_LEVEL2_TYPES: Final = ("UBOE", "UBG")
_LEVEL3_TYPES: Final = ("ROCE",)
DEFAULT_NET_INSTANCE: Final = "CLUSTER1"
DEFAULT_NET_TYPE: Final = "CLOS"


def check_scale_out(value: str) -> str:
    """The canonical (trimmed, upper-case) ``scaleout-type`` value; ValueError if unknown ("" is none)."""
    canonical = value.strip().upper()
    if canonical and canonical not in SCALE_OUT_TYPES:
        raise ValueError(f"scaleout-type {value!r} is not one of {', '.join(SCALE_OUT_TYPES)}")
    return canonical


def port_type(devices: list[Device], scale_out: str) -> str:
    """The scale-out port type of the job ("" when none fits)."""
    present = {name for d in devices for level in d.levels for name, _ in level.info}
    for candidate in SCALE_OUT_TYPES[scale_out] if scale_out else DEFAULT_PORT_TYPES:
        if candidate in present:
            return candidate
    return ""


def level_list(device: Device, port: str, scale_out: str) -> list[NetElement]:
    """The ``level_list`` elements of ``device`` given the job's port type."""
    by_level = {level.level: level for level in device.levels}
    elements: list[NetElement] = []
    for number in (0, 1):
        level = by_level.get(number)
        if level is not None and level.info:
            elements.append(level.info[0][1])
    effective = port or scale_out
    for number, types in ((2, _LEVEL2_TYPES), (3, _LEVEL3_TYPES)):
        if effective not in types:
            continue
        level = by_level.get(number)
        element = level.element(port) if level is not None else None
        elements.append(
            element
            or NetElement(
                net_layer=number,
                net_instance_id=DEFAULT_NET_INSTANCE,
                net_type=DEFAULT_NET_TYPE,
                net_attr="",
                rank_addrs=(),
            )
        )
    return elements


def render(spec: ClusterSpec, *, scale_out: str = "") -> dict[str, Any]:
    """The 2.0 table object for a validated ``spec``; ``scale_out`` is the job's canonical ``scaleout-type``."""
    members = hccl_common.table_members(spec)
    devices = [d for m in members for d in m.devices]
    port = port_type(devices, scale_out)
    ranks: list[dict[str, Any]] = []
    for rank_id, device in enumerate(devices):
        number = int(device.device_id)
        entry: dict[str, Any] = {"rank_id": rank_id, "local_id": number, "device_id": number}
        levels = level_list(device, port, scale_out)
        if levels:
            entry["level_list"] = [e.to_json() for e in levels]
        ranks.append(entry)
    return {"status": spec.status, "version": VERSION_2_0, "rank_count": len(ranks), "rank_list": ranks}


def _uint(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(f"hccl.json {where}: {value!r} is not a non-negative integer")
    return value


def validate(table: dict[str, Any]) -> None:
    """Raise :class:`SpecError` unless ``table`` is a well-formed 2.0 table.

    ``rank_count`` (absent means 0, ascend-operator's ``omitempty``) counts
    ``rank_list``; rank ids are unique and, when completed, exactly
    ``0..N-1``; each level element has the five keys with the right types.
    """
    ranks = hccl_common.items(table, "rank_list", "")
    declared = _uint(table.get("rank_count", 0), "rank_count")
    if declared != len(ranks):
        raise SpecError(f"hccl.json rank_count: {declared} but rank_list holds {len(ranks)}")
    if not _well_formed(ranks):
        _check_ranks(ranks)  # says where
        raise SpecError("hccl.json rank_list: malformed")  # not reached: both check the same rules
    ids = [rank["rank_id"] for rank in ranks]
    if len(set(ids)) != len(ids):
        raise SpecError("hccl.json: a rank_id appears twice")
    if table.get("status") == STATUS_COMPLETED:
        if not ranks:
            raise SpecError("hccl.json: a completed table has an empty rank_list")
        if sorted(ids) != list(range(len(ids))):
            raise SpecError(f"hccl.json: rank_ids of a completed table must be 0..{len(ids) - 1}")


def _well_formed(ranks: list[Any]) -> bool:
    """The rules of :func:`_check_ranks` without building a message per element.

    A 16,384-device table has some 200,000 values to check; naming the JSON
    path of each before knowing it is wrong made validation most of the
    launcher's decode time. Equivalent on JSON values (``type(v) is int``
    excludes booleans, as :func:`_uint` does); written out, because generator
    expressions cost more than the checks.
    """
    for rank in ranks:
        if type(rank) is not dict:
            return False
        a, b, c = rank.get("rank_id"), rank.get("local_id"), rank.get("device_id")
        if type(a) is not int or type(b) is not int or type(c) is not int or a < 0 or b < 0 or c < 0:
            return False
        levels = _list_or_none(rank, "level_list")
        if levels is None:
            return False
        for element in levels:
            if type(element) is not dict:
                return False
            layer = element.get("net_layer")
            if type(layer) is not int or layer < 0:
                return False
            if (
                type(element.get("net_instance_id")) is not str
                or type(element.get("net_type")) is not str
                or type(element.get("net_attr")) is not str
            ):
                return False
            addrs = _list_or_none(element, "rank_addr_list")
            if addrs is None:
                return False
            for addr in addrs:
                if (
                    type(addr) is not dict
                    or type(addr.get("addr_type")) is not str
                    or type(addr.get("addr")) is not str
                    or type(addr.get("plane_id")) is not str
                ):
                    return False
                ports = _list_or_none(addr, "ports")
                if ports is None:
                    return False
                for port in ports:
                    if type(port) is not str:
                        return False
    return True


def _list_or_none(parent: dict[str, Any], key: str) -> list[Any] | None:
    """:func:`hccl_common.items` as a test: ``parent[key]``, [] when absent (or ``null``), None when not a list."""
    value = parent.get(key)
    if value is None:
        return []
    return value if type(value) is list else None


def _check_ranks(ranks: list[Any]) -> None:
    """Raise :class:`SpecError` naming the first element of ``rank_list`` that breaks a rule."""
    for r, raw in enumerate(ranks):
        where = f"rank_list[{r}]"
        rank = hccl_common.obj(raw, where)
        _uint(rank.get("rank_id"), where + ".rank_id")
        _uint(rank.get("local_id"), where + ".local_id")
        _uint(rank.get("device_id"), where + ".device_id")
        for e, element in enumerate(hccl_common.items(rank, "level_list", where + ".")):
            ewhere = f"{where}.level_list[{e}]"
            obj = hccl_common.obj(element, ewhere)
            _uint(obj.get("net_layer"), ewhere + ".net_layer")
            for key in ("net_instance_id", "net_type", "net_attr"):
                hccl_common.string(obj, key, ewhere + ".")
            for a, addr in enumerate(hccl_common.items(obj, "rank_addr_list", ewhere + ".")):
                awhere = f"{ewhere}.rank_addr_list[{a}]"
                item = hccl_common.obj(addr, awhere)
                for key in ("addr_type", "addr", "plane_id"):
                    hccl_common.string(item, key, awhere + ".")
                ports = hccl_common.items(item, "ports", awhere + ".")
                if not all(isinstance(p, str) for p in ports):
                    raise SpecError(f"hccl.json {awhere}.ports: expected a list of strings")
