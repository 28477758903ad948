"""The cluster spec: ``cluster.json``, the one document everything derives from.

The daemon builds a :class:`ClusterSpec` from its member cache and writes
:func:`spec_to_json` into the job's ConfigMap; the launcher reads it back with
:func:`spec_from_json` and derives ``TF_CONFIG``, the PyTorch variables and the
rank table from it. Both sides share this module, so the writer can never emit
a document the reader rejects: :func:`spec_to_json` runs the same validation
as :func:`spec_from_json` before it renders.

Design points:

* **Canonical text.** Equal specs render to equal bytes (sorted keys, compact
  separators, members by rank, no timestamps). The daemon compares the text it
  would write with what the ConfigMap holds and skips no-op writes, and a
  controller restart that rebuilds the same spec produces the same text.
* **Ranks are positions, not arrival order.** Members are ordered by unique,
  strictly increasing ranks in ``0..expected-1``. A ``completed`` spec holds
  exactly ``expected`` members, so its ranks are exactly ``0..n-1``. An
  ``initializing`` spec lists the members known so far and may have gaps
  (rank 2 known, rank 1 not yet): ranks are decided by the workload spec, not
  by which pod came first.
* **Strict on read, lenient on growth.** Unknown keys are ignored (the
  contract allows more keys later); every known key is type-checked, and a
  violation raises :class:`SpecError` whose message names the offending path
  (``members[2].port``), because a silently wrong spec is worse than none.
"""

from __future__ import annotations

import gc
import ipaddress
import json
import re
from typing import TYPE_CHECKING

from ranktable.frozen import field as record_field
from ranktable.frozen import record
from ranktable.levels import DeviceLevel
from ranktable.registration import REGISTERED_ANNOTATION as REGISTERED_ANNOTATION

if TYPE_CHECKING:
    from typing import Any, Final, Literal

    #: A spec's (and a rank table's) ``status``: members still missing, or all there.
    Status = Literal["initializing", "completed"]
    #: The TensorFlow roles, in the order ``TF_CONFIG`` lists its jobs.
    Role = Literal["chief", "worker", "ps", "evaluator"]
else:  # the names exist at run time for importers; only a type checker needs the Literals
    Status = Role = str

CLUSTER_FILE: Final = "cluster.json"
HCCL_FILE: Final = "hccl.json"
#: Name of a job's spec ConfigMap when its pod template names none:
#: ``rings-config-<job>`` (the controller writes it, the launcher reads it).
CONFIGMAP_PREFIX: Final = "rings-config-"
# REGISTERED_ANNOTATION (imported above) is defined in ranktable.registration,
# which the one-file launcher's early registration loads without this module.

#: A spec's (and a rank table's) ``status``: members still missing, or all there (:data:`Status`).
STATUS_INITIALIZING: Final[Status] = "initializing"
STATUS_COMPLETED: Final[Status] = "completed"
STATUSES: Final[tuple[Status, ...]] = (STATUS_INITIALIZING, STATUS_COMPLETED)

#: The TensorFlow roles, in the order ``TF_CONFIG`` lists its jobs. A task
#: named after one keeps its name as its role; any other task is a ``worker``.
KNOWN_ROLES: Final[tuple[Role, ...]] = ("chief", "worker", "ps", "evaluator")
DEFAULT_ROLE: Final[Role] = "worker"
#: Roles TensorFlow allows at most one task of.
SINGLETON_ROLES: Final[tuple[Role, ...]] = ("chief", "evaluator")
#: A member's ``slots`` when the spec does not say: one process per pod. Not
#: written when it is the value, so specs without slots keep their text.
DEFAULT_SLOTS: Final = 1

_CANONICAL_UINT = re.compile(r"0|[1-9][0-9]*")
#: A Linux interface name (at most 15 bytes, IFNAMSIZ - 1) without the
#: characters the interface variables give meaning to (``,`` ``=`` ``^``) or
#: that Linux refuses (``/``, ``:`` for aliases, whitespace).
_INTERFACE = re.compile(r"[!-~]{1,15}")
_INTERFACE_BAD = frozenset("/:,=^")
_SERVER_ID = re.compile(r"[\x21-\x7e]{1,253}")
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
#: Dotted-quad IPv4 exactly as ``ipaddress`` accepts it (no leading zeros): a
#: fast path for the 18,000 addresses of a 16,384-NPU spec; anything else
#: goes to ``ipaddress``.
_IPV4 = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")

#: ``device_ip`` values a device plugin writes when it could not read the
#: device's IP (``-1`` is the Ascend device plugin's own error value; the
#: dotted dashes and the empty string were seen in users' reports). Such a
#: device has no usable IP: tables that need one refuse it.
PLACEHOLDER_DEVICE_IPS: Final = frozenset({"", "-1", "-.-.-.-"})


class SpecError(ValueError):
    """A spec (or rank table) text or value that is malformed.

    The message says exactly what is wrong and where (a JSON path such as
    ``members[1].ip``), so it can be shown to a user unchanged.
    """


class PodNotInSpec(SpecError):
    """The pod asked about is not a member of the spec.

    ``pods`` lists the member pod names the spec does hold, in rank order;
    ``waited`` is set when a wait for the pod to appear timed out.
    """

    def __init__(self, pod: str, pods: tuple[str, ...], *, epoch: int, waited: float | None = None) -> None:
        listed = ", ".join(pods) if pods else "no pods"
        message = f"pod {pod!r} is not in the cluster spec (epoch {epoch}), which lists: {listed}"
        if waited is not None:
            message += f" (waited {waited:.0f}s for it to appear)"
        super().__init__(message)
        self.pod = pod
        self.pods = pods
        self.epoch = epoch


@record
class Device:
    """One accelerator bound to a pod: its id on the host and its NIC IP.

    ``device_ip`` may be one of :data:`PLACEHOLDER_DEVICE_IPS` (the plugin
    had none; see :attr:`has_ip`). Rank-table-only fields, see
    :class:`Member`: ``super_device_id`` the device's id within an A3 super
    pod ("" unknown); ``levels`` its network levels (rank table 2.0).
    """

    device_id: str
    device_ip: str
    super_device_id: str = record_field(default="", compare=False)
    levels: tuple[DeviceLevel, ...] = record_field(default=(), compare=False)

    @property
    def has_ip(self) -> bool:
        """False when ``device_ip`` is a placeholder."""
        return self.device_ip not in PLACEHOLDER_DEVICE_IPS


@record
class Member:
    """One pod of the job at its rank.

    ``host`` is the server id the HCCL rank table uses for the pod: the device
    annotation's ``server_id`` when present (an IP from older device plugins,
    the pod's uid from newer ones), else the pod's hostIP; empty for jobs
    without devices. ``slots`` is how many processes the pod runs (MPI
    hostfile slots, torchrun's processes per node), at least 1.

    Rank-table-only fields (empty when unknown): ``host_ip`` the node's IP
    (the annotation's ``host_ip``, else the pod's hostIP); ``super_pod`` the
    (logical) super pod of the server in rank table 1.2; ``hardware`` the
    product model (``mind-cluster/hardware-type``); and the devices'
    ``super_device_id`` and ``levels``. They go into ``hccl.json`` only, not
    into ``cluster.json``, and take no part in comparisons (so a spec read
    back from ``cluster.json`` equals the one written, and the epoch follows
    membership and addresses as before). Both files share one ConfigMap of
    1 MiB: written twice, these fields would cut the largest job that fits
    (a 2.0 table's level lists alone are larger than the rest of the spec),
    and NPU jobs' ``cluster.json`` keeps the bytes it had before they existed.
    """

    rank: int
    task: str
    role: str
    index: int
    pod: str
    uid: str
    ip: str
    port: int
    node: str
    host: str = ""
    devices: tuple[Device, ...] = ()
    slots: int = 1
    host_ip: str = record_field(default="", compare=False)
    super_pod: str = record_field(default="", compare=False)
    hardware: str = record_field(default="", compare=False)
    #: The member's topology path (one value per level of the spec's
    #: ``topology_keys``) when the spec is topology-ordered, else empty.
    #: Written into ``cluster.json`` to explain the order; like the fields
    #: above it takes no part in comparisons (the epoch follows membership
    #: and addresses, not node labels).
    topology: tuple[str, ...] = record_field(default=(), compare=False)
    #: The member's network interface when its ``ip`` is on a secondary
    #: network the job chose (``ring-controller.io/network``: the Multus
    #: attachment's interface in the pod, such as ``net1``), "" on the pod
    #: network. ``ring-launch`` exports it to the libraries that pick their
    #: interface by name (NCCL, gloo, TensorPipe, HCCL, MPI). Part of the
    #: member's address: a change is a new epoch.
    interface: str = ""

    @property
    def address(self) -> str:
        """``ip:port``, with brackets around an IPv6 address."""
        if ":" in self.ip:
            return f"[{self.ip}]:{self.port}"
        return f"{self.ip}:{self.port}"


@record
class JobRef:
    """The workload a spec belongs to; ``version`` is its member generation."""

    kind: str
    api_version: str
    namespace: str
    name: str
    uid: str
    version: int


@record
class ClusterSpec:
    """The whole membership of one job at one epoch.

    ``members`` is ordered by rank. ``epoch`` increases whenever membership or
    any address changes; ``expected`` is the number of members the workload
    asks for. ``rank_order`` is ``"topology"`` when the ranks follow the
    members' topology paths (``topology_keys`` then names the levels of each
    member's ``topology``), ``""`` when they follow the workload spec (the
    default, written as nothing, so such specs keep their text).
    """

    status: Status
    job: JobRef
    epoch: int
    expected: int
    members: tuple[Member, ...]
    rank_order: str = ""
    topology_keys: tuple[str, ...] = ()

    @property
    def completed(self) -> bool:
        return self.status == STATUS_COMPLETED

    @property
    def has_devices(self) -> bool:
        """True when any member carries devices (an NPU job)."""
        return any(m.devices for m in self.members)


def role_for_task(task: str) -> str:
    """The TensorFlow role of a task: its own name if known, else ``worker``."""
    return task if task in KNOWN_ROLES else DEFAULT_ROLE


def require_completed(spec: ClusterSpec, what: str) -> None:
    """Raise :class:`SpecError` unless ``spec`` is completed: ``what`` (a framework's environment, a
    hostfile) is derived only from a completed spec."""
    if not spec.completed:
        raise SpecError(f"the spec is {spec.status}, not completed: no {what} can be derived yet")


def member_for_pod(spec: ClusterSpec, pod: str) -> Member:
    """The member whose pod is named ``pod``; :class:`PodNotInSpec` if none."""
    for member in spec.members:
        if member.pod == pod:
            return member
    raise PodNotInSpec(pod, tuple(m.pod for m in spec.members), epoch=spec.epoch)


# Validation -------------------------------------------------------------------


def validate_spec(spec: ClusterSpec) -> None:
    """Raise :class:`SpecError` unless ``spec`` obeys every rule of the format.

    The rules: a known status; a job with non-empty kind, name, namespace and
    a non-negative version; non-negative epoch and expected; members with
    strictly increasing ranks in ``0..expected-1``, unique pods and unique
    ``(task, index)``; valid IPs of one family, ports in 1..65535, interface
    names (when given), canonical device ids,
    unique devices per member; a topology path of one value per level for
    each member of a topology-ordered spec (none otherwise); and
    ``completed`` only with all ``expected`` members present.
    """
    if spec.status not in STATUSES:
        raise SpecError(f"status: {spec.status!r} is not one of {', '.join(STATUSES)}")
    job = spec.job
    for field in ("kind", "namespace", "name"):
        if not getattr(job, field):
            raise SpecError(f"job.{field}: must not be empty")
    _check_uint(job.version, "job.version")
    _check_uint(spec.epoch, "epoch")
    _check_uint(spec.expected, "expected")
    previous = -1
    pods: set[str] = set()
    slots: set[tuple[str, int]] = set()
    for position, member in enumerate(spec.members):
        where = f"members[{position}]"
        _check_member(member, where)
        if member.rank <= previous:
            raise SpecError(
                f"{where}.rank: {member.rank} after rank {previous}; members must be ordered by unique ranks"
            )
        if member.rank >= spec.expected:
            raise SpecError(f"{where}.rank: {member.rank} is not below expected ({spec.expected})")
        previous = member.rank
        if member.pod in pods:
            raise SpecError(f"{where}.pod: {member.pod!r} appears twice")
        pods.add(member.pod)
        if (member.task, member.index) in slots:
            raise SpecError(f"{where}: task {member.task!r} index {member.index} appears twice")
        slots.add((member.task, member.index))
    if spec.members:
        ipv6 = ":" in spec.members[0].ip
        for position, member in enumerate(spec.members):
            if (":" in member.ip) != ipv6:
                raise SpecError(
                    f"members[{position}].ip: {member.ip!r} is of another IP family than members[0]'s "
                    f"{spec.members[0].ip!r}; the members of one spec share one family"
                )
    if spec.rank_order not in ("", "topology"):
        raise SpecError(f"rankOrder: {spec.rank_order!r} is not topology (or absent)")
    for position, member in enumerate(spec.members):
        if len(member.topology) != (len(spec.topology_keys) if spec.rank_order else 0):
            raise SpecError(
                f"members[{position}].topology: {len(member.topology)} values for {len(spec.topology_keys)} topologyKeys"
            )
    if spec.status == STATUS_COMPLETED and len(spec.members) != spec.expected:
        raise SpecError(f"status is completed but members holds {len(spec.members)} of {spec.expected} expected")


def _check_member(member: Member, where: str) -> None:
    _check_uint(member.rank, f"{where}.rank")
    _check_uint(member.index, f"{where}.index")
    for field in ("task", "role", "pod"):
        if not getattr(member, field):
            raise SpecError(f"{where}.{field}: must not be empty")
    check_ip(member.ip, f"{where}.ip")
    if member.host:
        check_server_id(member.host, f"{where}.host")
    if member.host_ip:
        check_ip(member.host_ip, f"{where}.host_ip")
    if member.interface and (
        not isinstance(member.interface, str)
        or not _INTERFACE.fullmatch(member.interface)
        or _INTERFACE_BAD.intersection(member.interface)
    ):
        raise SpecError(f"{where}.interface: {member.interface!r} is not a network interface name")
    if member.super_pod and uint_string(member.super_pod) is None:
        raise SpecError(f"{where}.super_pod: {member.super_pod!r} is not a non-negative integer string")
    if not isinstance(member.hardware, str):
        raise SpecError(f"{where}.hardware: expected a string")
    if isinstance(member.port, bool) or not isinstance(member.port, int) or not 1 <= member.port <= 65535:
        raise SpecError(f"{where}.port: {member.port!r} is not a port number (1..65535)")
    if isinstance(member.slots, bool) or not isinstance(member.slots, int) or member.slots < 1:
        raise SpecError(f"{where}.slots: {member.slots!r} is not a positive integer")
    ids: set[str] = set()
    ips: set[str] = set()
    for d, device in enumerate(member.devices):
        # Paths are named only for a value that is wrong: a 16,384-NPU spec has 16,384 devices.
        dwhere = _Path(where, d)
        if uint_string(device.device_id) is None:
            check_device_id(device.device_id, f"{dwhere}.id")
        if device.has_ip:
            if not is_ip(device.device_ip):
                check_ip(device.device_ip, f"{dwhere}.ip")
            if device.device_ip in ips:
                raise SpecError(f"{dwhere}.ip: {device.device_ip!r} appears twice")
            ips.add(device.device_ip)
        elif not isinstance(device.device_ip, str):
            raise SpecError(f"{dwhere}.ip: {device.device_ip!r} is not a string")
        if device.super_device_id:
            check_device_id(device.super_device_id, f"{dwhere}.super_device_id")
        if device.device_id in ids:
            raise SpecError(f"{dwhere}.id: {device.device_id!r} appears twice")
        ids.add(device.device_id)


def _check_uint(value: object, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(f"{where}: {value!r} is not a non-negative integer")


class _Path:
    """``members[i].devices[d]``, formatted only when a message needs it."""

    __slots__ = ("member", "index")

    def __init__(self, member: str, index: int) -> None:
        self.member = member
        self.index = index

    def __str__(self) -> str:
        return f"{self.member}.devices[{self.index}]"


def is_ip(value: object) -> bool:
    """True when ``value`` is an IPv4/IPv6 address string (:func:`check_ip` without the message)."""
    if not isinstance(value, str):
        return False
    if _IPV4.fullmatch(value):
        return True
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def check_ip(value: object, where: str) -> None:
    """Raise :class:`SpecError` unless ``value`` is an IPv4/IPv6 address string."""
    if not isinstance(value, str):
        raise SpecError(f"{where}: {value!r} is not a string")
    if _IPV4.fullmatch(value):
        return
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise SpecError(f"{where}: {value!r} is not an IP address") from None


def check_server_id(value: object, where: str) -> None:
    """Raise :class:`SpecError` unless ``value`` is a server id: 1-253 printable ASCII characters, no spaces.

    An IP address (older device plugins, HCCL-Controller) or the pod's uid
    (newer device plugins, Volcano's Ascend plugin): both are opaque ids to HCCL.
    """
    if not isinstance(value, str) or not _SERVER_ID.fullmatch(value):
        raise SpecError(f"{where}: {value!r} is not a server id (1-253 printable characters, no spaces)")


def uint_string(value: object) -> int | None:
    """The int of a canonical non-negative integer string (``"0"``, ``"12"``), else None.

    Leading zeros, signs and spaces are refused so that one number has one
    spelling and duplicate checks on strings are sound.
    """
    if isinstance(value, str) and _CANONICAL_UINT.fullmatch(value):
        return int(value)
    return None


def check_device_id(value: object, where: str) -> None:
    """Raise :class:`SpecError` unless ``value`` is a canonical non-negative integer string."""
    if uint_string(value) is None:
        raise SpecError(f'{where}: {value!r} is not a non-negative integer string such as "0"')


# Rendering ----------------------------------------------------------------------


def spec_to_dict(spec: ClusterSpec) -> dict[str, Any]:
    """The JSON object of ``spec`` (after validation), as :func:`spec_to_json` writes it."""
    validate_spec(spec)
    return {**_head(spec), "members": [_member_dict(m, topology=bool(spec.rank_order)) for m in spec.members]}


def _head(spec: ClusterSpec) -> dict[str, Any]:
    """The JSON object of ``spec`` but its members."""
    job = spec.job
    return {
        "status": spec.status,
        "job": {
            "kind": job.kind,
            "apiVersion": job.api_version,
            "namespace": job.namespace,
            "name": job.name,
            "uid": job.uid,
            "version": job.version,
        },
        "epoch": spec.epoch,
        "expected": spec.expected,
        **({"rankOrder": spec.rank_order, "topologyKeys": list(spec.topology_keys)} if spec.rank_order else {}),
    }


def _member_dict(m: Member, *, topology: bool) -> dict[str, Any]:
    return {
        "rank": m.rank,
        "task": m.task,
        "role": m.role,
        "index": m.index,
        "pod": m.pod,
        "uid": m.uid,
        "ip": m.ip,
        "port": m.port,
        "node": m.node,
        "host": m.host,
        "devices": [{"id": d.device_id, "ip": d.device_ip} for d in m.devices],
        **({"slots": m.slots} if m.slots != DEFAULT_SLOTS else {}),
        **({"topology": list(m.topology)} if topology else {}),
        **({"interface": m.interface} if m.interface else {}),
    }


#: Members encoded at once by :func:`spec_to_json`: the JSON objects of a 20,000-member spec held
#: all at once took some 20 MB of the controller's peak, a chunk's take a few hundred KB.
_CHUNK = 500
#: Stands for the members in the encoded head; no string of a valid spec holds a NUL.
_MEMBERS = "\0members\0"


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, check_circular=False)


def spec_to_json(spec: ClusterSpec) -> str:
    """The canonical ``cluster.json`` text of ``spec``.

    Deterministic: equal specs give equal text, so callers may compare texts
    to skip no-op writes. Raises :class:`SpecError` if ``spec`` is invalid
    (the writer must never publish what the reader would reject). The text
    is ``json.dumps(spec_to_dict(spec), sort_keys=True, separators=(",",
    ":"), ensure_ascii=False)``, encoded a chunk of members at a time (a
    tree: no cycle to find).
    """
    validate_spec(spec)
    topology = bool(spec.rank_order)
    members = spec.members
    chunks = (
        _dumps([_member_dict(m, topology=topology) for m in members[at : at + _CHUNK]])[1:-1]
        for at in range(0, len(members), _CHUNK)
    )
    head = _dumps({**_head(spec), "members": _MEMBERS})
    before, marker, after = head.partition(_dumps(_MEMBERS))
    if not marker:
        raise AssertionError("the members' marker is missing from the encoded head")
    return before + "[" + ",".join(chunks) + "]" + after


# Parsing -------------------------------------------------------------------------


def load_json(text: str) -> Any:
    """``json.loads`` with the garbage collector paused (then restored as it was).

    Parsing the 2-6 MB files of a 16,384-NPU job makes some 10^5-10^6
    containers, none of them cyclic; the collections they trigger on the way
    cost as much as the parse itself (docs/performance.md#profile-and-what-it-changed).
    Raises what ``json.loads`` raises.
    """
    paused = gc.isenabled()
    gc.disable()
    try:
        return json.loads(text)
    finally:
        if paused:
            gc.enable()


def spec_from_json(text: str) -> ClusterSpec:
    """Parse and validate ``cluster.json`` text.

    Raises :class:`SpecError` (never ``KeyError``/``TypeError``) for text that
    is not JSON, not an object, misses a required key, has a wrongly typed
    value, or breaks a rule of :func:`validate_spec`. Unknown keys are
    ignored.
    """
    try:
        raw = load_json(text)
    except (ValueError, RecursionError) as err:  # also numbers over the digit limit, nesting too deep
        raise SpecError(f"not valid JSON: {err}") from None
    obj = _object(raw, "the spec")
    job_raw = _object(_get(obj, "job", ""), "job")
    job = JobRef(
        kind=_str(job_raw, "kind", "job."),
        api_version=_str(job_raw, "apiVersion", "job."),
        namespace=_str(job_raw, "namespace", "job."),
        name=_str(job_raw, "name", "job."),
        uid=_str(job_raw, "uid", "job."),
        version=_int(job_raw, "version", "job."),
    )
    members_raw = _get(obj, "members", "")
    if not isinstance(members_raw, list):
        raise SpecError(f"members: expected a list, got {_kind(members_raw)}")
    members = tuple(_member(item, f"members[{i}]") for i, item in enumerate(members_raw))
    rank_order = obj.get("rankOrder", "")
    if not isinstance(rank_order, str):
        raise SpecError(f"rankOrder: expected a string, got {_kind(rank_order)}")
    spec = ClusterSpec(
        status=_str(obj, "status", ""),  # type: ignore[arg-type]  # any text: validate_spec checks it
        job=job,
        epoch=_int(obj, "epoch", ""),
        expected=_int(obj, "expected", ""),
        members=members,
        rank_order=rank_order,
        topology_keys=_strings(obj, "topologyKeys", "") if rank_order else (),
    )
    validate_spec(spec)
    return spec


def _member(raw: object, where: str) -> Member:
    obj = _object(raw, where)
    prefix = where + "."
    devices_raw = obj.get("devices", [])
    if devices_raw is None:
        devices_raw = []
    if not isinstance(devices_raw, list):
        raise SpecError(f"{prefix}devices: expected a list, got {_kind(devices_raw)}")
    devices = []
    for d, item in enumerate(devices_raw):
        if type(item) is dict and type(item.get("id")) is str and type(item.get("ip")) is str:
            devices.append(Device(device_id=item["id"], device_ip=item["ip"]))  # the common case, no path built
            continue
        dobj = _object(item, f"{prefix}devices[{d}]")
        dprefix = f"{prefix}devices[{d}]."
        devices.append(Device(device_id=_str(dobj, "id", dprefix), device_ip=_str(dobj, "ip", dprefix)))
    host = obj.get("host", "")
    if not isinstance(host, str):
        raise SpecError(f"{prefix}host: expected a string, got {_kind(host)}")
    topology = _strings(obj, "topology", prefix)
    interface = obj.get("interface", "")
    if not isinstance(interface, str):
        raise SpecError(f"{prefix}interface: expected a string, got {_kind(interface)}")
    slots = obj.get("slots", DEFAULT_SLOTS)
    if isinstance(slots, bool) or not isinstance(slots, int):
        raise SpecError(f"{prefix}slots: expected an integer, got {_kind(slots)}")
    return Member(
        rank=_int(obj, "rank", prefix),
        task=_str(obj, "task", prefix),
        role=_str(obj, "role", prefix),
        index=_int(obj, "index", prefix),
        pod=_str(obj, "pod", prefix),
        uid=_str(obj, "uid", prefix),
        ip=_str(obj, "ip", prefix),
        port=_int(obj, "port", prefix),
        node=_str(obj, "node", prefix),
        host=host,
        devices=tuple(devices),
        slots=slots,
        topology=topology,
        interface=interface,
    )


def _strings(obj: dict[str, Any], key: str, prefix: str) -> tuple[str, ...]:
    """An optional list of strings (absent: empty)."""
    value = obj.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"{prefix}{key}: expected a list of strings")
    return tuple(value)


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
    }.get(type(value), type(value).__name__)


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SpecError(f"{where}: expected a JSON object, got {_kind(value)}")
    return value


def _get(obj: dict[str, Any], key: str, prefix: str) -> Any:
    if key not in obj:
        raise SpecError(f"{prefix}{key}: missing")
    return obj[key]


def _str(obj: dict[str, Any], key: str, prefix: str) -> str:
    value = _get(obj, key, prefix)
    if not isinstance(value, str):
        raise SpecError(f"{prefix}{key}: expected a string, got {_kind(value)}")
    return value


def _int(obj: dict[str, Any], key: str, prefix: str) -> int:
    value = _get(obj, key, prefix)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{prefix}{key}: expected an integer, got {_kind(value)}")
    return value
