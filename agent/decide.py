"""The decision: from a workload, its pods and the last written spec to the next spec.

Pure and synchronous, on plain records, so every rule of the contract is
unit-tested without a cluster:

- Slots come from the workload: tasks in spec order, indices ``0..replicas-1``;
  the rank of a slot is its position. Ranks never depend on arrival order.
  Kinds whose pods have no index (Deployments) are ranked by pod creation
  time, then name: a replacement pod takes the last rank.
- A pod fills a slot only if it belongs to the workload's current incarnation
  (owner uid) and version; pods of older job versions are ignored. A slot
  claimed by two or more live pods (not being deleted, not finished) counts
  none of them until one is gone (``duplicate_index``): which one is the
  member is not for the controller to guess. A live pod of an indexed kind
  that carries no index fills no slot and is reported (``missing_index``).
- A member counts when its pod is Running with an IP (or, in a job opted into
  self-registration, when its launcher registered itself on the pod: see
  :attr:`model.records.PodRecord.registered`), its port and slots are valid and,
  where devices are wanted, it carries a valid device annotation.
- A member that finished keeps its place: in an indexed workload, a slot
  whose pod is ``Succeeded`` and was a member of the completed spec written
  (same pod uid) counts, as it was written there (its pod's IP may be gone).
  The end of a job is no membership change: workers finishing one by one
  leave the spec, its files and its epoch as they are. A finished member
  holds its place in that spec only, unchanged: when anything else in it
  changes (another member lost or replaced), the finished members stop
  counting with it, since a finished pod cannot join a new spec. A ``Failed``
  pod is a lost member, and Deployments (pods without an index, which never
  finish) keep their rule below.
- The spec is ``completed`` only when every slot holds a counting member; it
  then lists all members. Until then it is ``initializing`` and lists none, so
  pods coming up one by one change nothing that is written (one write at
  creation, one at completion).
- Files that would not fit the ConfigMap's 1 MiB as plain keys go into it
  gzip-compressed (:mod:`ranktable.stored`); only a spec too large even then
  is refused (``SpecTooLarge``, with both sizes), and nothing is written.
- ``epoch`` is the previous spec's epoch, plus one when the member list
  differs from it. Equal inputs give byte-equal files, so a restarted
  controller rebuilds the same spec and writes nothing.

Ascend jobs (:mod:`model.ascend` has the rules, :mod:`ranktable.hccl` the formats):

- The rank table version is the flag's, or with ``auto`` the workload's own
  (``WorkloadRecord.ascend.table``). A pod whose devices cannot go into that
  version (a placeholder device IP where the table needs IPs, no
  ``super_device_id`` in 1.2) does not count: ``InvalidDeviceAnnotation``.
- When every NPU member carries Volcano's ``hccl/rankIndex`` and the values
  are unique and dense, the NPU members take the ranks they held in slot
  order, permuted into rank index order (members without devices keep
  theirs), so ``cluster.json`` and ``hccl.json`` still agree. Partial,
  duplicate or gapped rank indices are reported (``InvalidRankIndex``) and
  the slot order stays.
- Table 1.2: each NPU member's super pod is its ``super-pod-rank`` (soft
  strategy), else ascend-operator's logical block of ``sp-block`` chips by
  position, else the device annotation's ``super_pod_id``, numbered densely
  from 0 (all "0" when a member lacks it). Across several super pods every
  device needs an IP.

Rank order (:mod:`model.topology` has the rules): a completed spec's ranks
follow the workload spec unless the job (its annotation) or the controller
(``order.rule``) asks for topology order; then :func:`_topology` re-ranks the
members by their topology path in this one place, before ``hccl/rankIndex``
is applied (where present, it still wins for the NPU members). ``held`` is
the last completed topology-ordered spec, so replaced members keep their
ranks where that costs no crossing.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Literal, get_args

from model.ascend import VERSION_1_2, VERSION_2_0, logical_super_pod, rank_order
from model.keys import (
    CONFIGMAP_DATA_LIMIT,
    DEFAULT_MAX_MEMBERS,
    IP_FAMILY_ANNOTATION,
    MANAGED_LABEL,
    MANAGED_VALUE,
    SCALE_OUT_TYPE_LABEL,
)
from model.network import AddressRule, Reached, distinct_ports, family_of, reach
from model.records import ConfigMapRecord, PodRecord, PodUID, WorkloadRecord
from model.topology import (
    RULE_SPEC,
    RULE_TOPOLOGY,
    Placed,
    RankOrder,
    RankRule,
    held_members,
    member_paths,
    rule_for,
    topology_ranks,
)
from ranktable.clusterspec import (
    CLUSTER_FILE,
    HCCL_FILE,
    STATUS_COMPLETED,
    STATUS_INITIALIZING,
    STATUSES,
    ClusterSpec,
    Member,
    role_for_task,
    spec_to_json,
)
from ranktable.devices import DeviceAnnotation, InvalidDeviceAnnotation, parse_device_annotation
from ranktable.frozen import replace as replace_record
from ranktable.hccl import AUTO, DEFAULT_CHOICE, device_problem, render_hccl
from ranktable.hccl_table20 import check_scale_out
from ranktable.stored import Stored, TooLarge, pack

#: A job's status: the status of the spec that is (or would be) written for
#: it (a :data:`ranktable.clusterspec.Status`), or ``invalid`` when none may
#: be written (an invalid workload, a spec over the size limit, a foreign or
#: taken ConfigMap). The ``status`` label of ``ringcontroller_jobs``; the
#: daemon and ``kubectl ring`` both use these names.
JobStatus = Literal["initializing", "completed", "invalid"]  # Status's values, and "invalid"
STATUS_INVALID: Final[JobStatus] = "invalid"
#: Every :data:`JobStatus`, in a fixed order.
JOB_STATUSES: Final[tuple[JobStatus, ...]] = (*STATUSES, STATUS_INVALID)

#: A member that counts: (rank, task, index, pod, its devices or None).
Counting = tuple[int, str, int, PodRecord, DeviceAnnotation | None]


@dataclass(frozen=True, slots=True)
class Problem:
    """Bad input found while deciding: reported as a Warning Event, a log line
    and a metric. ``reason`` is a short code (the metric label)."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Decision:
    """What the ConfigMap should hold now.

    ``data`` holds the files by name (``cluster.json``, ``hccl.json``) as
    text; None when the spec cannot be written (the workload is invalid or
    the files exceed the ConfigMap limit even compressed); ``problems`` then
    say why. ``stored`` is the form they go into the ConfigMap in (plain keys
    when they fit, else gzip in ``binaryData``, see :mod:`ranktable.stored`),
    set whenever ``data`` is.
    """

    spec: ClusterSpec
    data: dict[str, str] | None
    ready: int
    problems: tuple[Problem, ...] = field(default=())
    stored: Stored | None = None
    #: The pod uids of the members that finished (``Succeeded``) and keep
    #: their places in the completed spec as written (see the module doc).
    finished: frozenset[PodUID] = frozenset()

    @property
    def status(self) -> JobStatus:
        """``invalid`` when nothing may be written, else the spec's status."""
        return STATUS_INVALID if self.data is None else self.spec.status


def _not_current(workload: WorkloadRecord, pod: PodRecord) -> str | None:
    """Why ``pod`` is not of the workload's current incarnation (owner uid) and
    job version, None if it is: the one rule :func:`_slots` places pods by and
    :func:`explain` reports ignored pods with."""
    if workload.owns_pods and pod.owner_uid and workload.uid and pod.owner_uid != workload.uid:
        return f"owned by an earlier workload of this name (uid {pod.owner_uid}, the workload is {workload.uid})"
    if pod.version is not None and pod.version != workload.version:
        return f"job version {pod.version}; the workload is at version {workload.version}"
    return None


def _current(workload: WorkloadRecord, pod: PodRecord) -> bool:
    return _not_current(workload, pod) is None


def _preference(pod: PodRecord) -> tuple[bool, str, str]:
    # A replacement can overlap its predecessor (one terminating): prefer the
    # ready one, then the newest, then a stable name order.
    return (pod.ready, pod.created, pod.name)


def _live(pod: PodRecord) -> bool:
    """Not being deleted and not finished: a pod that may still run as a member."""
    return not pod.deleting and pod.phase not in ("Failed", "Succeeded")


@dataclass(frozen=True, slots=True)
class _Placement:
    """The pods placed in a job's slots (:func:`_slots`).

    ``slots``: (task, index, pod or None) for every expected member, in rank
    order. ``rivals``: by slot position, the live pods of the current
    incarnation that claim the same slot, where there are two or more (none
    of them counts: which one is the member is not for the controller to
    guess). ``unindexed``: live pods of the current incarnation of an
    indexed workload that carry no index.
    """

    slots: list[tuple[str, int, PodRecord | None]]
    rivals: dict[int, tuple[PodRecord, ...]]
    unindexed: tuple[PodRecord, ...]
    #: Live pods of the current incarnation whose index is outside their task, where the
    #: workload counts that as bad input (:attr:`~model.records.WorkloadRecord.strict_range`).
    out_of_range: tuple[PodRecord, ...] = ()


def _slots(workload: WorkloadRecord, pods: Iterable[PodRecord]) -> _Placement:
    """Where each pod goes: see :class:`_Placement`."""
    if not workload.indexed:
        # No index on the pods: rank live pods by creation, then name.
        # Evicted or finished pods linger until pod GC: they hold no rank.
        live = sorted((p for p in pods if _current(workload, p) and _live(p)), key=lambda p: (p.created, p.name))
        name = workload.tasks[0].name if workload.tasks else ""
        return _Placement([(name, i, live[i] if i < len(live) else None) for i in range(workload.expected)], {}, ())
    tasks = {t.name: t for t in workload.tasks}
    best: dict[tuple[str, int], PodRecord] = {}
    live_in: dict[tuple[str, int], PodRecord] = {}  # the first live pod seen in each slot
    contested: dict[tuple[str, int], list[PodRecord]] = {}  # every live pod of a slot with two or more
    unindexed: list[PodRecord] = []
    out_of_range: list[PodRecord] = []
    for pod in pods:
        task = tasks.get(pod.task)
        if task is None or not _current(workload, pod):
            continue
        if pod.index is None:
            if _live(pod):
                unindexed.append(pod)
            continue
        key = (pod.task, pod.job_index * task.per_job + pod.index - task.first_index)
        if workload.strict_range and not 0 <= key[1] < task.replicas:
            if _live(pod):
                out_of_range.append(pod)
            continue
        if _live(pod):
            first = live_in.setdefault(key, pod)
            if first is not pod:
                contested.setdefault(key, [first]).append(pod)
        other = best.get(key)
        if other is None or _preference(pod) > _preference(other):
            best[key] = pod
    slots: list[tuple[str, int, PodRecord | None]] = []
    rivals: dict[int, tuple[PodRecord, ...]] = {}
    for task in workload.tasks:
        for index in range(task.replicas):
            key = (task.name, index)
            if key in contested:
                rivals[len(slots)] = tuple(sorted(contested[key], key=lambda p: p.name))
            slots.append((task.name, index, best.get(key)))
    return _Placement(
        slots,
        rivals,
        tuple(sorted(unindexed, key=lambda p: p.name)),
        tuple(sorted(out_of_range, key=lambda p: p.name)),
    )


def _placement_problems(workload: WorkloadRecord, placement: _Placement) -> list[Problem]:
    """The Problems of a placement: slots claimed by several live pods, live pods without an index."""
    found = [
        Problem("duplicate_index", _rival_message(placement.slots[position], rivals))
        for position, rivals in placement.rivals.items()
    ]
    if placement.unindexed:
        names = [p.name for p in placement.unindexed]
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        source = f" ({workload.index_source})" if workload.index_source else ""
        found.append(
            Problem(
                "missing_index",
                f"{workload.kind} {workload.name}: pods carry no member index{source}, so they fill no slot: {shown}",
            )
        )
    if placement.out_of_range:
        shown = ", ".join(f"{p.name} (index {p.index})" for p in placement.out_of_range[:5])
        more = len(placement.out_of_range) - 5
        found.append(
            Problem(
                "index_out_of_range",
                f"{workload.kind} {workload.name} has {workload.expected} members (indexes 0 to "
                f"{workload.expected - 1}); pods with an index beyond fill no slot: {shown}"
                + (f" and {more} more" if more > 0 else ""),
            )
        )
    return found


def _rival_message(slot: tuple[str, int, PodRecord | None], rivals: tuple[PodRecord, ...]) -> str:
    task, index, _ = slot
    return (
        f"pods {', '.join(p.name for p in rivals)} all claim {task} index {index}: "
        "none of them counts while more than one runs"
    )


#: Parsed device annotations by their text (an error as ``(reason, message)``).
#: Parsing is pure, and the same text comes back on every sync of a job until
#: the pod changes, so a 1,024-member NPU job would otherwise re-parse and
#: re-validate 1,024 annotations per pod event while it initializes. Bounded:
#: cleared when full (the texts are also held by the pod records, so the keys
#: cost nothing extra).
_PARSED: dict[str, DeviceAnnotation | tuple[str, str]] = {}
_PARSED_MAX = 16384


def _parse_devices(text: str) -> DeviceAnnotation | tuple[str, str]:
    found = _PARSED.get(text)
    if found is None:
        try:
            found = parse_device_annotation(text)
        except InvalidDeviceAnnotation as e:
            found = (e.reason, str(e))  # not the exception: its traceback would pin frames
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[text] = found
    return found


#: Why a slot does or does not count (see :func:`explain`), in the order the
#: checks run: a slot has no pod; its pod is being deleted, not Running, or
#: Running without an IP; its port or slots rule is malformed; it wants
#: devices and the device plugin has not annotated it yet, or the annotation
#: is malformed or unfit for the job's rank table version; several live pods
#: claim it (``duplicate``: none of them counts); or it counts, running or
#: (``finished``) as a member that finished and keeps its place.
SlotState = Literal[
    "missing",
    "deleting",
    "not_running",
    "no_ip",
    "invalid_port",
    "invalid_slots",
    "awaiting_devices",
    "invalid_devices",
    "duplicate",
    "wrong_family",
    "no_network",
    "invalid_network",
    "counting",
    "finished",
]
COUNTING: Final = "counting"
FINISHED: Final[SlotState] = "finished"
SLOT_STATES: Final[tuple[SlotState, ...]] = get_args(SlotState)
#: The states of a slot that counts towards completion.
COUNTS: Final[frozenset[SlotState]] = frozenset({COUNTING, FINISHED})


@dataclass(frozen=True, slots=True)
class Slot:
    """One expected member as :func:`decide` sees it: position ``rank`` in the
    job spec's order (``task``, ``index``), the pod filling it (None: no pod),
    its ``state`` and a one-line ``detail`` for people (the Problem's message
    where the state is a problem). ``devices`` is the pod's device annotation
    as parsed (None: the pod has none, or it is malformed), whatever the state."""

    rank: int
    task: str
    index: int
    pod: PodRecord | None
    state: SlotState
    detail: str
    devices: DeviceAnnotation | None = None

    @property
    def counts(self) -> bool:
        """True when the member counts towards completion (running, or finished in its place)."""
        return self.state in COUNTS


@dataclass(frozen=True, slots=True)
class Ignored:
    """A pod of the job that fills no slot, and why (an older job version, a
    predecessor workload's pod, an index the spec has no room for, ...)."""

    pod: PodRecord
    reason: str


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a job's spec is (not) complete: :func:`explain`'s answer.

    ``decision`` is exactly what :func:`decide` returns for the same input
    (so status, epoch, ready count and problems are the controller's own);
    ``slots`` every expected member in slot order; ``ignored`` the job's pods
    that fill no slot.
    """

    decision: Decision
    slots: tuple[Slot, ...]
    ignored: tuple[Ignored, ...]

    @property
    def waiting(self) -> tuple[Slot, ...]:
        """The slots that do not count (empty once every member counts)."""
        return tuple(s for s in self.slots if not s.counts)


def blocked(workload: WorkloadRecord, cm: ConfigMapRecord | None) -> Problem | None:
    """Why ``cm``, the ConfigMap ``workload`` names, must not be written, None if it may (or is absent).

    A ConfigMap without the controller's label is foreign and never
    modified; one whose job annotation names another job stays that job's
    (two workloads naming the same ConfigMap would overwrite each other's
    spec and move its ownerReference; the first one keeps it).
    """
    if cm is None:
        return None
    job = cm.job
    if not cm.managed:
        return Problem(
            "foreign_configmap",
            f"ConfigMap {workload.configmap} exists without label {MANAGED_LABEL}={MANAGED_VALUE}; it is left untouched",
        )
    if job is not None and job != workload.key:
        return Problem(
            "configmap_taken",
            f"ConfigMap {workload.configmap} holds the spec of {job}; give this workload its own rings-config volume",
        )
    return None


def table_version(workload: WorkloadRecord, hccl_version: str = DEFAULT_CHOICE) -> str:
    """The rank table version the job's devices must fit: the flag's, or with ``auto`` the workload's."""
    return workload.ascend.table if hccl_version == AUTO else hccl_version


def _check(pod: PodRecord, *, devices: bool, version: str) -> tuple[SlotState, Problem | None, DeviceAnnotation | None]:
    """Whether a ready pod counts: its state, the Problem to report (if any), its parsed devices.

    ``devices``: its task wants devices (the pod may want them on its own too).
    One rule for :func:`decide` and :func:`explain`, so the reasons a user is
    shown are the reasons the controller acts on.
    """
    if pod.port_error:
        return "invalid_port", Problem("invalid_port", f"pod {pod.name}: {pod.port_error}"), None
    if pod.slots_error:
        return "invalid_slots", Problem("invalid_slots", f"pod {pod.name}: {pod.slots_error}"), None
    if not (devices or pod.wants_devices):
        return COUNTING, None, None
    if pod.devices is None:
        return "awaiting_devices", None, None  # the device plugin has not annotated it yet
    parsed = _parse_devices(pod.devices)
    if isinstance(parsed, tuple):
        reason, message = parsed
        return "invalid_devices", _device_problem(pod, reason, message), None
    unfit = device_problem(version, parsed.devices)
    if unfit is not None:
        reason, message = unfit
        return "invalid_devices", _device_problem(pod, reason, message), None
    return COUNTING, None, parsed


def _device_problem(pod: PodRecord, reason: str, message: str) -> Problem:
    """The Problem for a pod's device annotation; ``reason`` is a :data:`ranktable.devices.REASONS` code.

    Its code is ``device_`` and the reason, without saying "device" twice:
    ``device_json``, ``device_ip`` (reason ``device_ip``), ``device_id``,
    ``device_super_device_id``.
    """
    return Problem(f"device_{reason.removeprefix('device_')}", f"pod {pod.name}: invalid device annotation: {message}")


def registering(workload: WorkloadRecord, flag: bool) -> bool:
    """Whether registered members count for ``workload``: its own annotation, else the controller's flag."""
    return flag if workload.self_register is None else workload.self_register


def _up(pod: PodRecord, registered: bool) -> bool:
    """The member is up: Running with an IP or, where the job counts them, registered by its launcher."""
    return pod.ready or (registered and pod.registered)


def _written(workload: WorkloadRecord, previous: ClusterSpec | None) -> dict[tuple[str, int], Member]:
    """The members of ``previous`` by slot (task, index) where a finished pod may keep its place, else nothing.

    Only a completed spec of this workload's incarnation and version holds
    places, and only in an indexed workload (pods without an index hold no
    slot of their own: Deployments rank their live pods).
    """
    if not workload.indexed or previous is None or not previous.completed or previous.job != workload.ref():
        return {}
    return {(m.task, m.index): m for m in previous.members}


def _finished(pod: PodRecord, written: Member | None) -> bool:
    """The pod finished (``Succeeded``) as the member ``written`` in the completed spec (same pod uid)."""
    return written is not None and pod.phase == "Succeeded" and pod.uid == written.uid


#: What :func:`explain` shows for a finished pod, kept or not.
FINISHED_DETAIL: Final = "finished (Succeeded): keeps its place in the completed spec, as written"
FINISHED_OUT_DETAIL: Final = (
    "finished (Succeeded): a finished pod keeps only its place in the unchanged completed spec "
    "it was a member of, and joins no new one"
)


def _as_written(listed: tuple[Member, ...], finished: frozenset[PodUID], previous: ClusterSpec) -> tuple[Member, ...]:
    """``listed`` with each finished member replaced by the member as written in ``previous``.

    The written member keeps everything ``cluster.json`` holds (the pod's IP
    may be gone from its status); the fields that only go into
    ``hccl.json``, which a spec read back from ``cluster.json`` lacks, come
    from the pod as before.
    """
    written = {m.uid: m for m in previous.members}
    return tuple(
        replace_record(
            written[m.uid],
            host_ip=m.host_ip or written[m.uid].host_ip,
            super_pod=m.super_pod,
            hardware=m.hardware,
            topology=m.topology,
        )
        if m.uid in finished
        else m
        for m in listed
    )


def _unready(pod: PodRecord) -> tuple[SlotState, str]:
    """Why a pod is not :attr:`~model.records.PodRecord.ready`, as a state and a detail."""
    if pod.deleting:
        return "deleting", "being deleted"
    if pod.phase == "Succeeded":
        return "not_running", FINISHED_OUT_DETAIL
    if pod.phase != "Running":
        return "not_running", f"phase {pod.phase or 'unknown'}"
    return "no_ip", "Running but has no pod IP yet"


def explain(
    workload: WorkloadRecord,
    pods: Iterable[PodRecord],
    *,
    previous: ClusterSpec | None,
    hccl_version: str = DEFAULT_CHOICE,
    self_register: bool = False,
    order: RankOrder | None = None,
    held: ClusterSpec | None = None,
) -> Explanation:
    """:func:`decide`'s decision with its reasons per slot, for people (``kubectl ring describe``).

    Same input, same rules (:func:`_slots` places the pods, :func:`_check`
    judges them, and the finished members shown are the decision's own), so
    a slot shown as counting is one the controller counts.
    Not for the controller's hot path: it builds a record per slot.
    """
    pods = list(pods)
    decision = decide(
        workload,
        pods,
        previous=previous,
        hccl_version=hccl_version,
        self_register=self_register,
        order=order,
        held=held,
    )
    version = table_version(workload, hccl_version)
    task_devices = {t.name: t.wants_devices for t in workload.tasks}
    registered = registering(workload, self_register)
    slots: list[Slot] = []
    placed: set[int] = set()
    placement = _slots(workload, pods)
    for rank, (task, index, pod) in enumerate(placement.slots):
        if pod is None:
            slots.append(Slot(rank, task, index, None, "missing", "no pod for this slot"))
            continue
        placed.add(id(pod))
        rivals = placement.rivals.get(rank)
        state: SlotState
        if rivals is not None:
            state, detail = "duplicate", _rival_message((task, index, pod), rivals)
        elif pod.uid in decision.finished:
            state, detail = FINISHED, FINISHED_DETAIL
        elif not _up(pod, registered):
            state, detail = _unready(pod)
        else:
            state, problem, _ = _check(pod, devices=task_devices.get(task, False), version=version)
            if state == COUNTING:
                state, problem, _ = _reach(pod, workload.address)
            detail = problem.message if problem is not None else _detail(state)
        parsed = _parse_devices(pod.devices) if pod.devices is not None else None
        devices = parsed if isinstance(parsed, DeviceAnnotation) else None
        slots.append(Slot(rank, task, index, pod, state, detail, devices))
    contested = {id(p) for rivals in placement.rivals.values() for p in rivals}
    ignored = tuple(
        Ignored(p, _why_ignored(workload, p, contested=id(p) in contested)) for p in pods if id(p) not in placed
    )
    return Explanation(decision=decision, slots=tuple(slots), ignored=ignored)


def _detail(state: SlotState) -> str:
    if state == "awaiting_devices":
        return "wants devices; the device plugin has not annotated the pod yet"
    return "counts"


def _why_ignored(workload: WorkloadRecord, pod: PodRecord, *, contested: bool = False) -> str:
    """Why ``pod`` fills no slot of ``workload`` (the negation of :func:`_slots`' rules);
    ``contested``: it is one of several live pods claiming one slot."""
    stale = _not_current(workload, pod)
    if stale is not None:
        return stale
    if not workload.indexed:
        if pod.deleting or pod.phase in ("Failed", "Succeeded"):
            return f"finished ({pod.phase})" if not pod.deleting else "being deleted"
        return f"more pods than the {workload.expected} replicas"
    tasks = {t.name: t for t in workload.tasks}
    if pod.task not in tasks:
        return f"task {pod.task!r} is not in the workload's spec"
    if pod.index is None:
        source = f" ({workload.index_source})" if workload.index_source else ""
        return f"carries no member index{source}"
    task = tasks[pod.task]
    position = pod.job_index * task.per_job + pod.index
    if not task.first_index <= position < task.first_index + task.replicas:
        first = f" from {task.first_index}" if task.first_index else ""
        return f"index {position} is beyond task {pod.task}'s {task.replicas} replicas{first}"
    if contested:
        return "another live pod claims the same slot: none of them counts while more than one runs"
    return "another pod fills the same slot (ready, then newer, wins)"


def decide(
    workload: WorkloadRecord,
    pods: Iterable[PodRecord],
    *,
    previous: ClusterSpec | None,
    hccl_version: str = DEFAULT_CHOICE,
    size_limit: int = CONFIGMAP_DATA_LIMIT,
    self_register: bool = False,
    order: RankOrder | None = None,
    held: ClusterSpec | None = None,
    max_members: int = DEFAULT_MAX_MEMBERS,
) -> Decision:
    """The spec and files for ``workload`` given its pods and the last written spec.

    ``previous`` is the spec currently in the ConfigMap (None if there is
    none); it feeds the epoch and, when completed, holds the places of the
    members that finished (see the module doc). The caller writes ``data``
    if it differs from what the ConfigMap holds. ``hccl_version`` is ``--ranktable-version``
    (one of :data:`ranktable.hccl.CHOICES`). ``self_register`` is
    ``--self-registration``: registered members count (a job's own annotation
    overrides it, see :func:`registering`).
    ``order``: the controller's rank
    order (None: spec order); ``held``: the last completed spec the caller
    knows of (``previous`` when that is completed), for topology order.
    ``max_members`` is ``--max-members``: a workload asking for more is
    invalid (``too_many_members``) before any pod is looked at.

    Cost: one pass over the pods and one over the slots; members are built
    (and the files rendered with them) only when the spec completes, and
    device annotations are parsed once per text, so the many syncs of a big
    job that is still coming up stay cheap.
    """
    if workload.expected > max_members:
        return _too_many(workload, previous, max_members)
    problems: list[Problem] = []
    wants_devices = workload.wants_devices
    task_devices = {t.name: t.wants_devices for t in workload.tasks}  # a CPU task may sit beside NPU ones
    version = table_version(workload, hccl_version)
    invalid = workload.error or workload.address_error
    scale_out = ""
    if version == VERSION_2_0 and wants_devices:
        try:
            scale_out = check_scale_out(workload.ascend.scale_out)
        except ValueError as e:
            invalid = invalid or f"label {SCALE_OUT_TYPE_LABEL}: {e}"
    if invalid:
        problems.append(Problem("invalid_workload", f"{workload.kind} {workload.name}: {invalid}"))
    registered = registering(workload, self_register)
    written = _written(workload, previous)
    counting: list[Counting] = []
    finished: set[PodUID] = set()
    reached: dict[str, Reached | None] = {}
    placement = _slots(workload, pods)
    problems += _placement_problems(workload, placement)
    for rank, (task, index, pod) in enumerate(placement.slots):
        if pod is None or rank in placement.rivals:
            continue
        if registered and pod.registration_error is not None and not pod.ready:
            problems.append(Problem("invalid_registration", f"pod {pod.name}: {pod.registration_error}"))
        done = _finished(pod, written.get((task, index)))
        if not (done or _up(pod, registered)):
            continue
        state, problem, annotation = _check(pod, devices=task_devices.get(task, False), version=version)
        if state == COUNTING and not done:
            state, problem, reached[pod.name] = _reach(pod, workload.address)
        elif done:  # its address as written: its pod's IP may be gone
            member = written[(task, index)]
            reached[pod.name] = Reached(member.ip, member.interface)
        if problem is not None:
            problems.append(problem)
        if state == COUNTING:
            counting.append((rank, task, index, pod, annotation))
            if done:
                finished.add(pod.uid)
    expected = workload.expected
    complete = expected > 0 and len(counting) == expected and not invalid
    super_pods: dict[str, str] = {}
    rule = _rule(workload, order, problems)
    levels: tuple[str, ...] = ()
    paths: dict[str, tuple[str, ...]] = {}
    if complete:
        if rule == RULE_TOPOLOGY and order is not None:
            counting, levels, paths = _topology(counting, order, previous if previous and previous.completed else held)
        counting = _by_rank_index(counting, problems)
        if version == VERSION_1_2:
            super_pods, unfit_pods = _super_pods(workload, counting, problems)
            complete = not unfit_pods
    listed = (
        tuple(
            _member(
                *c,
                super_pod=super_pods.get(c[3].name, ""),
                topology=paths.get(c[3].uid, ()),
                reached=reached.get(c[3].name),
            )
            for c in counting
        )
        if complete
        else ()
    )
    if listed:
        listed, collision = _addressed(workload.address, listed, counting, problems)
        if collision is not None or not listed:
            complete = False
            invalid = invalid or collision
    if finished and previous is not None:
        listed = _as_written(listed, frozenset(finished), previous) if complete else ()
        if listed != previous.members:
            # The spec the finished members hold their places in is changing: they join no new one.
            counting = [c for c in counting if c[3].uid not in finished]
            finished.clear()
            complete, listed, levels, paths = False, (), (), {}
    epoch = previous.epoch if previous is not None else 0
    if listed != (previous.members if previous is not None else ()):
        epoch += 1
    spec = ClusterSpec(
        status=STATUS_COMPLETED if complete else STATUS_INITIALIZING,
        job=workload.ref(),
        epoch=epoch,
        expected=expected,
        members=listed,
        rank_order=RULE_TOPOLOGY if paths else "",
        topology_keys=levels,
    )
    table = wants_devices or any(a is not None and a.devices for *_, a in counting)
    try:
        data, stored = _files(spec, table=table, version=version, scale_out=scale_out, size_limit=size_limit)
    except TooLarge as e:
        problems.append(Problem("too_large", too_large_message(e, members=expected, table=table)))
        return Decision(spec=spec, data=None, ready=len(counting), problems=tuple(problems))
    if invalid:
        return Decision(spec=spec, data=None, ready=len(counting), problems=tuple(problems))
    return Decision(
        spec=spec,
        data=data,
        ready=len(counting),
        problems=tuple(problems),
        stored=stored,
        finished=frozenset(finished),
    )


_DEFAULT_RULE: Final = AddressRule()


def _reach(pod: PodRecord, rule: AddressRule) -> tuple[SlotState, Problem | None, Reached | None]:
    """Where a counting pod is reached under the job's address rule (:func:`model.network.reach`),
    or the state and Problem that keep it from counting. One rule for :func:`decide` and :func:`explain`.
    Under the default rule (primary IP, pod network) nothing is looked up: None, the pod's own address."""
    if rule == _DEFAULT_RULE:
        return COUNTING, None, None
    found = reach(
        pod=pod.name,
        ips=pod.ips,
        network_status=pod.network_status,
        rule=rule,
        claims=pod.claims,
        claim_networks=pod.claim_networks,
    )
    if isinstance(found, Reached):
        return COUNTING, None, found
    return found.state, Problem(found.reason, found.message), None


def _addressed(
    rule: AddressRule, listed: tuple[Member, ...], counting: list[Counting], problems: list[Problem]
) -> tuple[tuple[Member, ...], str | None]:
    """``listed`` with hostNetwork members' ports made distinct (:func:`model.network.distinct_ports`),
    and why the job is invalid (two members on one ``ip:port``); empty when
    the members' IPs mix families and the job chose none (it waits)."""
    if rule.family is None:
        families: dict[str, list[str]] = {}
        for m in listed:
            families.setdefault(family_of(m.ip), []).append(m.pod)
        if len(families) > 1:
            held = "; ".join(f"{family}: {', '.join(pods)}" for family, pods in sorted(families.items()))
            problems.append(
                Problem(
                    "mixed_ip_families",
                    f"the members' IPs are of both families ({held}); "
                    f"set the workload annotation {IP_FAMILY_ANNOTATION} to IPv4 or IPv6",
                )
            )
            return (), None
    pods = {c[3].name: c[3] for c in counting}
    movable = [(p is not None and p.host_network and not p.host_port) for p in (pods.get(m.pod) for m in listed)]
    ports, collision = distinct_ports([(m.pod, m.ip, m.port, mv) for m, mv in zip(listed, movable, strict=True)])
    if collision is not None:
        problems.append(Problem("address_collision", collision))
        return listed, collision
    moved = tuple(m if port == m.port else replace_record(m, port=port) for m, port in zip(listed, ports, strict=True))
    return moved, None


def too_large_message(error: TooLarge, *, members: int, table: bool) -> str:
    """The ``too_large`` problem's message: the sizes and the limit (``error``'s), that nothing is
    written, and what the user can do: how many members of this job would fit (the compressed size
    grows about linearly with the members), and with a rank table a version with shorter entries."""
    fit = members * error.limit // error.stored if error.stored else 0
    shorter = (
        "; or, where the hardware allows, a rank table version with shorter entries "
        "(the controller's --ranktable-version; 1.0 has the shortest)"
        if table
        else ""
    )
    return (
        f"spec of {members} members is {error}; no spec is written (what the ConfigMap held stays). "
        f"About {fit:,} members of this job fit one ConfigMap: split it into jobs of at most that many{shorter}"
    )


def _too_many(workload: WorkloadRecord, previous: ClusterSpec | None, max_members: int) -> Decision:
    """The decision for a workload over ``--max-members``: invalid, nothing written, the limit in the problem."""
    message = (
        f"{workload.kind} {workload.name} asks for {workload.expected:,} members, over this controller's limit "
        f"of {max_members:,} (--max-members); no spec is written"
    )
    spec = ClusterSpec(
        status=STATUS_INITIALIZING,
        job=workload.ref(),
        epoch=previous.epoch if previous is not None else 0,
        expected=workload.expected,
        members=(),
    )
    return Decision(spec=spec, data=None, ready=0, problems=(Problem("too_many_members", message),))


def _rule(workload: WorkloadRecord, order: RankOrder | None, problems: list[Problem]) -> RankRule:
    """The job's rank rule: its annotation's, else the controller's (a bad annotation is a Problem)."""
    rule, error = rule_for(workload.rank_order, order.rule if order is not None else RULE_SPEC)
    if error is not None:
        problems.append(Problem("invalid_rank_order", f"{workload.kind} {workload.name}: {error}"))
    return rule


def _topology(
    counting: list[Counting], order: RankOrder, held: ClusterSpec | None
) -> tuple[list[Counting], tuple[str, ...], dict[str, tuple[str, ...]]]:
    """``counting`` (in spec order) re-ranked by topology (:func:`model.topology.topology_ranks`);
    the levels of the paths and each member's path by pod uid."""
    levels, placed_paths = member_paths(
        order.keys,
        [(c[3].node, order.node_path(c[3].node)) for c in counting],
        [str(c[4].super_pod_id) if c[4] is not None and c[4].super_pod_id is not None else None for c in counting],
        [order.hypernodes(c[3].node) for c in counting],
    )
    placed = [Placed((c[1], c[2]), c[3].uid, path) for c, path in zip(counting, placed_paths, strict=True)]
    before: tuple[Member, ...] = ()
    if held is not None and held.completed and held.rank_order == RULE_TOPOLOGY:
        before = held.members
    chief = next((i for i, c in enumerate(counting) if role_for_task(c[1]) == "chief"), None)
    ranks, paths = topology_ranks(
        placed,
        held_members([((m.task, m.index), m.uid, m.rank, m.topology) for m in before], held.topology_keys, levels)
        if held is not None and before
        else (),
        first=chief,
    )
    moved = [(rank, *c[1:]) for c, rank in zip(counting, ranks, strict=True)]
    return (
        sorted(moved, key=lambda c: c[0]),
        levels,
        {c[3].uid: path for c, path in zip(counting, paths, strict=True)},
    )


def _files(
    spec: ClusterSpec, *, table: bool, version: str, scale_out: str, size_limit: int
) -> tuple[dict[str, str], Stored]:
    """The files of ``spec`` (``hccl.json`` too when ``table``) and their stored form; raises TooLarge.

    The garbage collector waits meanwhile: rendering a 16,384-NPU table makes
    some 10^5 short-lived containers, none of them cyclic, and every
    collection they trigger walks all the objects the controller holds
    (what that cost: docs/performance.md#profile-and-what-it-changed).
    """
    paused = gc.isenabled()
    gc.disable()
    try:
        data = {CLUSTER_FILE: spec_to_json(spec)}
        if table:  # spec_to_json validated the spec
            data[HCCL_FILE] = render_hccl(spec, version=version, scale_out=scale_out, validated=True)
        return data, pack(data, limit=size_limit)
    finally:
        if paused:
            gc.enable()


def _by_rank_index(counting: list[Counting], problems: list[Problem]) -> list[Counting]:
    """``counting`` with the NPU members' ranks permuted into ``hccl/rankIndex`` order, when usable."""
    npu = [i for i, c in enumerate(counting) if c[4] is not None]
    order = rank_order([counting[i][3].rank_index for i in npu])
    if isinstance(order, str):
        problems.append(Problem("invalid_rank_index", f"{order}; NPU ranks follow the job spec instead"))
    if not isinstance(order, list):
        return counting
    positions = [counting[i][0] for i in npu]
    moved = list(counting)
    for i, rank_index in zip(npu, order, strict=True):
        _, task, index, pod, annotation = counting[i]
        moved[i] = (positions[rank_index], task, index, pod, annotation)
    return sorted(moved, key=lambda c: c[0])


def _super_pods(
    workload: WorkloadRecord, counting: list[Counting], problems: list[Problem]
) -> tuple[dict[str, str], set[str]]:
    """The super pod of each NPU member (by pod name) for table 1.2, and the pods that cannot go into it."""
    npu = [(c[3], c[4]) for c in counting if c[4] is not None]
    found: dict[str, str] = {}
    unfit: set[str] = set()
    ascend = workload.ascend
    physical = all(a is not None and a.super_pod_id is not None for _, a in npu)
    # Physical super pods numbered densely from 0 (by id): a job within one super pod gets "0",
    # as from ascend-operator (which writes "0" for every server without sp-block).
    ids = sorted({a.super_pod_id for _, a in npu if a is not None and a.super_pod_id is not None})
    dense = {p: str(i) for i, p in enumerate(ids)}
    for position, (pod, annotation) in enumerate(npu):
        if ascend.soft:
            value = (pod.super_pod_rank or "").strip()
            if not (value.isascii() and value.isdigit()):
                problems.append(
                    Problem(
                        "invalid_super_pod", f"pod {pod.name}: super-pod-rank {pod.super_pod_rank!r} is not an integer"
                    )
                )
                unfit.add(pod.name)
                continue
            found[pod.name] = str(int(value))
        elif ascend.sp_block > 0:
            chips = len(npu[0][1].devices) if npu[0][1] is not None else 0
            found[pod.name] = str(logical_super_pod(position, block=ascend.sp_block, chips=chips))
        else:
            physical_id = annotation.super_pod_id if physical and annotation is not None else None
            found[pod.name] = dense[physical_id] if physical_id is not None else "0"
    if len(set(found.values())) > 1:
        for pod, annotation in npu:
            if annotation is not None and not all(d.has_ip for d in annotation.devices):
                problems.append(
                    _device_problem(
                        pod,
                        "device_ip",
                        "a device has no IP, and rank table 1.2 "
                        f"needs every device's IP when the job spans {len(set(found.values()))} super pods",
                    )
                )
                unfit.add(pod.name)
    return found, unfit


def _member(
    rank: int,
    task: str,
    index: int,
    pod: PodRecord,
    annotation: DeviceAnnotation | None,
    *,
    super_pod: str = "",
    topology: tuple[str, ...] = (),
    reached: Reached | None = None,
) -> Member:
    return Member(
        rank=rank,
        task=task,
        role=role_for_task(task),
        index=index,
        pod=pod.name,
        uid=pod.uid,
        ip=reached.ip if reached is not None else pod.address,
        port=pod.port,
        node=pod.node,
        host=(annotation.server_id or pod.host_ip) if annotation is not None else pod.host_ip,
        devices=annotation.devices if annotation is not None else (),
        slots=pod.slots,
        host_ip=(annotation.host_ip or pod.host_ip) if annotation is not None else "",
        super_pod=super_pod,
        hardware=(pod.hardware or "") if annotation is not None else "",
        topology=topology,
        interface=reached.interface if reached is not None else "",
    )
