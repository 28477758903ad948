"""Network levels of an NPU (``levelList``), the input of rank table 2.0.

Devices of the newest generation (the ``huawei.com/npu`` resource: Atlas 350,
850, 950 SuperPoD) reach each other over several network levels. The device
plugin (or Volcano's Ascend plugin) writes them, per device, into the device
annotation::

    "levelList": [
      {"level": 0, "info": {"UB": {"net_layer": 0, "net_instance_id": "sp-1",
                                   "net_type": "TOPO_FILE_DESC", "net_attr": "",
                                   "rank_addr_list": [{"addr_type": "EID", "addr": "...",
                                                       "ports": ["0/1"], "plane_id": "1"}]}}},
      {"level": 2, "info": {"UBOE": {...}, "UBG": {...}}},
      {"level": 3, "info": {"ROCE": {...}}}]

``info`` maps a port address type (``UB``, ``UBOE``, ``UBG``, ``ROCE``, ...)
to one element; the table's ``level_list`` holds one element per level, so a
choice is made for the levels with several (see :mod:`ranktable.hccl_v20`).

The records here are frozen and hashable; :func:`parse_levels` validates the
annotation's JSON strictly (a JSON number where a string belongs is an error)
but lets absent keys take their zero value, as the device plugin's Go
decoder does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ranktable.frozen import record

if TYPE_CHECKING:
    from typing import Any


class LevelError(ValueError):
    """A ``levelList`` that is not well formed; the message names the path."""


@record
class RankAddr:
    """One address of a device on a network level (``rank_addr_list`` entry)."""

    addr_type: str
    addr: str
    ports: tuple[str, ...]
    plane_id: str


@record
class NetElement:
    """A device's place on one network level: the table's ``level_list`` entry."""

    net_layer: int
    net_instance_id: str
    net_type: str
    net_attr: str
    rank_addrs: tuple[RankAddr, ...]

    def to_json(self) -> dict[str, Any]:
        """The table's object for this element (keys in ascend-operator's order)."""
        return {
            "net_layer": self.net_layer,
            "net_instance_id": self.net_instance_id,
            "net_type": self.net_type,
            "net_attr": self.net_attr,
            "rank_addr_list": [
                {"addr_type": a.addr_type, "addr": a.addr, "ports": list(a.ports), "plane_id": a.plane_id}
                for a in self.rank_addrs
            ],
        }


@record
class DeviceLevel:
    """One ``levelList`` entry: the level and its elements by port address type (sorted by type)."""

    level: int
    info: tuple[tuple[str, NetElement], ...]

    def element(self, port_type: str) -> NetElement | None:
        """The element for ``port_type``, None if this level has none."""
        for name, element in self.info:
            if name == port_type:
                return element
        return None


def _int(raw: dict[str, Any], key: str, where: str) -> int:
    value = raw.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LevelError(f"{where}.{key}: {value!r} is not a non-negative integer")
    return value


def _str(raw: dict[str, Any], key: str, where: str) -> str:
    value = raw.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise LevelError(f"{where}.{key}: {value!r} is not a string")
    return value


def _list(raw: dict[str, Any], key: str, where: str) -> list[Any]:
    value = raw.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise LevelError(f"{where}.{key}: expected a list")
    return value


def _obj(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise LevelError(f"{where}: expected an object")
    return value


def _element(raw: object, where: str) -> NetElement:
    obj = _obj(raw, where)
    addrs = []
    for i, item in enumerate(_list(obj, "rank_addr_list", where)):
        awhere = f"{where}.rank_addr_list[{i}]"
        addr = _obj(item, awhere)
        ports = _list(addr, "ports", awhere)
        if not all(isinstance(p, str) for p in ports):
            raise LevelError(f"{awhere}.ports: expected a list of strings")
        addrs.append(
            RankAddr(
                addr_type=_str(addr, "addr_type", awhere),
                addr=_str(addr, "addr", awhere),
                ports=tuple(ports),
                plane_id=_str(addr, "plane_id", awhere),
            )
        )
    return NetElement(
        net_layer=_int(obj, "net_layer", where),
        net_instance_id=_str(obj, "net_instance_id", where),
        net_type=_str(obj, "net_type", where),
        net_attr=_str(obj, "net_attr", where),
        rank_addrs=tuple(addrs),
    )


def parse_levels(raw: object, where: str = "levelList") -> tuple[DeviceLevel, ...]:
    """The validated ``levelList`` of one device (None or absent: no levels).

    Raises :class:`LevelError` for a wrong type anywhere, or a level given twice.
    """
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise LevelError(f"{where}: expected a list")
    levels: list[DeviceLevel] = []
    seen: set[int] = set()
    for i, item in enumerate(raw):
        lwhere = f"{where}[{i}]"
        obj = _obj(item, lwhere)
        level = _int(obj, "level", lwhere)
        if level in seen:
            raise LevelError(f"{lwhere}.level: {level} appears twice")
        seen.add(level)
        info = obj.get("info") or {}
        info_obj = _obj(info, f"{lwhere}.info")
        elements = tuple(
            (str(name), _element(value, f"{lwhere}.info.{name}")) for name, value in sorted(info_obj.items())
        )
        levels.append(DeviceLevel(level=level, info=elements))
    return tuple(levels)
