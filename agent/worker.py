"""One job's worker: owns what was last written for the job and writes the next spec.

Protocol: the caller (the agent) guarantees that ``sync`` of one worker never
runs twice at once (the work queue processes a key on one worker at a time),
and passes the current records read from the informers' caches. ``sync``
raises to ask for a retry with backoff; it never leaves the worker believing
something was written that was not: ``written`` is only set from a write's
response, or from the informer's copy of a ConfigMap that already holds the
wanted data.

Writes are conflict-safe: a replace carries the resourceVersion it was
computed against; on 409 the worker reads the ConfigMap again and recomputes
(the epoch follows what is really there). A ConfigMap without the
controller's label is foreign and never modified.

Delivery (``touch_pods``): once a completed spec is on the server, every
member pod that mounts the spec's ConfigMap and whose
:data:`~model.keys.EPOCH_ANNOTATION` differs from the spec's epoch is
annotated with it (a pod reading the spec through the API, ``ring-launch
--from-api``, gains nothing from a kubelet sync: touching it would only cost
a write). The kubelet syncs a pod at once when the pod
object changes, and that sync refreshes its ConfigMap volumes, so the mounted
``cluster.json`` arrives in well under a second instead of at the next
periodic sync (about a minute). It is level-triggered like the write: the
annotation is compared on every sync (the informer's pod copies carry it), so
a touch lost to a crash or an error is made by a later sync, and pods that
already show the epoch cost nothing. A pod gone or replaced meanwhile is
skipped (its own events resync the job); a 403 (the cluster forbids pod
writes) is logged and counted once per epoch and not retried: the kubelet's
periodic sync still delivers the file. Other failures raise, for a retry.

The touch costs one pod write per member per epoch, so it has a ceiling
(``touch_max_members``, ``--touch-max-members``): the members of a larger
job are not touched. That is said once per epoch (a ``TouchSkipped`` Event,
a log line, ``ringcontroller_pod_touches_total{result="skipped"}`` counting
the pods left); their mounted file arrives with the kubelet's periodic sync,
and API mode (``ring-launch --from-api``) delivers at any size without pod
writes.

Big jobs are decided off the event loop (:class:`Offload`): deciding,
rendering, validating and compressing the spec of a 20,000-member job, or
parsing the one a new leader finds in its cache, costs seconds of CPU on a
loaded machine, and on the loop every other job's sync, the informers and
the Lease renewal's answers would wait that long.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from dataclasses import replace as dc_replace
from functools import partial
from typing import Final, Literal, TypeVar

import structlog

from agent.api import ApiError, Conflict, KubeAPI, NotFound
from agent.decide import STATUS_INVALID, Decision, JobStatus, Problem, blocked, decide
from agent.metrics import AgentMetrics, private
from model.configmap import configmap_body, configmap_record
from model.keys import DEFAULT_MAX_MEMBERS, DEFAULT_TOUCH_MAX_MEMBERS, EPOCH_ANNOTATION
from model.kinds import OTHER_KIND, short_name
from model.records import ConfigMapRecord, PodRecord, WorkloadRecord
from model.topology import RankOrder
from ranktable.clusterspec import CLUSTER_FILE, STATUS_COMPLETED, ClusterSpec, SpecError, spec_from_json
from ranktable.hccl import DEFAULT_CHOICE

log = structlog.get_logger()

#: Attempts at one sync's write when the ConfigMap keeps changing under it.
MAX_CONFLICTS = 3
#: Pod annotations sent at once by one worker. A 1,024-member job's touches took
#: 8.9-9.6 s at 16, 5.1-6.4 s at 64 and 9.1 s at 128 on the 2-core dev cluster
#: (load 7-17), where the API server's CPU is the bound (docs/performance.md,
#: "The touch at scale").
TOUCH_CONCURRENCY = 64

#: A job with at least this many pods (or expecting as many members) is decided
#: on :class:`Offload`'s thread. Below it a decision takes milliseconds and the
#: hop to the thread would cost more than it spares the loop.
OFFLOAD_MIN_PODS = 1_000
#: A ConfigMap whose stored files are at least this many characters is parsed
#: on :class:`Offload`'s thread (a 20,000-member spec is 0.3-1 MB stored).
OFFLOAD_MIN_STORED = 100_000

_T = TypeVar("_T")


class Offload:
    """Where the big jobs' decisions run: one thread beside the event loop.

    ``await run(fn)`` calls ``fn()`` on the thread and returns its result
    (or raises what it raised); ``fn`` must read only values no other thread
    changes while it runs (records are frozen; lists passed in are the
    caller's own copies; lookups into live caches are resolved on the loop
    first, see :func:`snapshot_order`). One thread, so one big decision at a
    time: two 20,000-member renders at once would double the controller's
    peak memory, and the GIL lets only one of them run anyway. The loop
    keeps running meanwhile: the thread yields the GIL every switch interval
    (5 ms), and compression releases it. ``wants(pods=, expected=,
    stored=)`` says whether a job of that size goes to the thread. ``close``
    lets the thread end once its current call returns (the daemon's stop).
    ``release``, when given, is called on the thread after each call: the
    daemon returns the memory the big texts freed to the system there
    (:func:`ringcontroller.memory.release`), off the loop.
    """

    def __init__(
        self,
        *,
        min_pods: int = OFFLOAD_MIN_PODS,
        min_stored: int = OFFLOAD_MIN_STORED,
        release: Callable[[], None] | None = None,
    ) -> None:
        self.min_pods = min_pods
        self.min_stored = min_stored
        self._release = release
        self._executor: ThreadPoolExecutor | None = None

    def wants(self, *, pods: int = 0, expected: int = 0, stored: int = 0) -> bool:
        """True when a job of ``pods`` pods, ``expected`` members or ``stored`` stored characters goes to the thread."""
        return pods >= self.min_pods or expected >= self.min_pods or stored >= self.min_stored

    async def run(self, fn: Callable[[], _T]) -> _T:
        """``fn()`` on the thread (see the class doc)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ring-decide")
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._call, fn)

    def _call(self, fn: Callable[[], _T]) -> _T:
        try:
            return fn()
        finally:
            if self._release is not None:
                self._release()

    def close(self) -> None:
        """Stop taking work; the thread ends after its current call."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


def snapshot_order(order: RankOrder | None, pods: list[PodRecord]) -> RankOrder | None:
    """``order`` with its node lookups (which read the controller's live caches) resolved now, on the
    loop, for the nodes of ``pods``: what a decision on :class:`Offload`'s thread may read."""
    if order is None:
        return None
    nodes = {p.node for p in pods}
    paths = {n: order.node_path(n) for n in nodes}
    chains = {n: order.hypernodes(n) for n in nodes}
    return dc_replace(
        order,
        node_path=lambda name: paths[name] if name in paths else None,
        hypernodes=lambda name: chains.get(name, {}),
    )


#: A job's status as its worker last settled it: a :data:`agent.decide.JobStatus`
#: (the status of the spec written, or ``invalid``), ``""`` before the first
#: sync settled.
WorkerStatus = Literal[JobStatus, ""]
STATUS_UNSETTLED: Final[WorkerStatus] = ""


@dataclass(frozen=True, slots=True)
class Written:
    """A ConfigMap state known to be on the server (``replaced``: the
    resourceVersion our write of it replaced, None if read or created);
    ``data`` its spec files by name, whichever form holds them."""

    uid: str
    resource_version: str
    data: dict[str, str]
    spec: ClusterSpec | None
    replaced: str | None = None


def _written(cm: ConfigMapRecord) -> Written:
    spec: ClusterSpec | None
    try:
        files = cm.files  # either form (ranktable.stored)
        spec = spec_from_json(files[CLUSTER_FILE]) if CLUSTER_FILE in files else None
    except SpecError:
        files, spec = {}, None  # unreadable: rewritten from scratch, epoch restarts
    return Written(uid=cm.uid, resource_version=cm.resource_version, data=files, spec=spec)


def _kind(workload: WorkloadRecord) -> str:
    """The ``kind`` label of ``workload``'s metrics (:func:`model.kinds.short_name`)."""
    return short_name(api_version=workload.api_version, kind=workload.kind)


class Untouchable(Exception):
    """The spec's ConfigMap must not be written: it is foreign (no controller
    label) or names another job. ``reason`` is the problem code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _check_owner(workload: WorkloadRecord, cm: ConfigMapRecord | None) -> None:
    """Raise Untouchable when ``cm`` is foreign or another job's (:func:`agent.decide.blocked`)."""
    problem = blocked(workload, cm)
    if problem is not None:
        raise Untouchable(problem.reason, problem.message)


class JobWorker:
    """The per-job state and the write path. See the module doc for the protocol."""

    def __init__(
        self,
        *,
        api: KubeAPI,
        hccl_version: str = DEFAULT_CHOICE,
        touch_pods: bool = True,
        self_register: bool = False,
        metrics: AgentMetrics | None = None,
        max_members: int = DEFAULT_MAX_MEMBERS,
        touch_max_members: int = DEFAULT_TOUCH_MAX_MEMBERS,
        offload: Offload | None = None,
    ) -> None:
        self._api = api
        self._offload = offload
        self._self_register = self_register
        self._max_members = max_members
        self._touch_max_members = touch_max_members
        self._touch_skipped: int | None = None  # epoch whose touches were skipped (over the ceiling)
        #: Where this worker counts (default: a private registry).
        self.metrics = metrics if metrics is not None else private()
        self._hccl_version = hccl_version
        self._touch_pods = touch_pods
        self._touch_forbidden: int | None = None  # epoch whose touches got 403
        # pod uid -> (epoch we wrote, the value the pod showed then): an informer copy
        # still showing that old value is an event from before our patch, not a reason
        # to patch again; any other value (someone changed it) is.
        self._touched: dict[str, tuple[str, str]] = {}
        self.written: Written | None = None
        self.status: WorkerStatus = STATUS_UNSETTLED
        #: The ``kind`` label of the job's metrics, from the workload of the last ``sync``.
        self.kind: str = OTHER_KIND
        self._reported: set[tuple[str, str]] = set()
        self._completed_epoch: int | None = None
        # The last completed spec settled: while a replaced member comes up the
        # ConfigMap holds an initializing spec, and topology order needs the
        # ranks held before (model.topology).
        self._held: ClusterSpec | None = None

    async def sync(
        self,
        workload: WorkloadRecord,
        pods: list[PodRecord],
        cm: ConfigMapRecord | None,
        *,
        last_ready: float | None = None,
        order: RankOrder | None = None,
    ) -> Decision:
        """Bring the ConfigMap of ``workload`` up to date; returns the decision made.

        ``cm`` is the informer's copy of the managed ConfigMap (None if it
        has none); ``last_ready`` the monotonic time the last member was seen
        ready, for the latency metric; ``order`` the controller's rank order.
        """
        bound = log.bind(job=workload.key, configmap=workload.configmap)
        self.kind = _kind(workload)
        try:
            base = await self._base(workload, cm)
            for _ in range(MAX_CONFLICTS):
                decision = await self._decide(
                    workload, pods, previous=base.spec if base else None, order=order, held=self._held
                )
                await self._report(workload, decision.problems, bound.bind(epoch=decision.spec.epoch))
                if decision.data is None:
                    self.status = decision.status
                    return decision
                if base is not None and base.data == decision.data:
                    self.written = base
                    await self._settled(workload, decision, bound, last_ready=last_ready, wrote=False)
                    await self._touch(workload, decision.spec, pods, bound)
                    return decision
                try:
                    self.written = await self._write(workload, decision, base)
                except Conflict:
                    self.metrics.configmap_writes.labels(
                        _kind(workload), "update" if base else "create", "conflict"
                    ).inc()
                    base = await self._fetch(workload)
                    continue
                bound.info(
                    "configmap.written",
                    status=decision.spec.status,
                    epoch=decision.spec.epoch,
                    ready=decision.ready,
                    expected=decision.spec.expected,
                )
                await self._settled(workload, decision, bound, last_ready=last_ready, wrote=True)
                await self._touch(workload, decision.spec, pods, bound)
                return decision
        except Untouchable as e:
            self.status = STATUS_INVALID
            self.written = None
            await self._report(workload, (Problem(e.reason, str(e)),), bound)
            return await self._decide(workload, pods, previous=None, order=None, held=None)
        raise RuntimeError(f"ConfigMap {workload.configmap}: still conflicting after {MAX_CONFLICTS} attempts")

    async def _base(self, workload: WorkloadRecord, cm: ConfigMapRecord | None) -> Written | None:
        """What the ConfigMap holds now, as cheaply as it can be known for sure.

        Our last write when the informer shows it, or shows the version that
        write replaced (the informer lags our own writes); the informer's copy
        when it shows anything else (changed by someone, recreated); a GET when
        the informer shows nothing although we wrote one (deleted, or not yet
        seen). Raises Untouchable for a ConfigMap of another job.
        """
        if cm is None:
            return None if self.written is None else await self._fetch(workload)
        _check_owner(workload, cm)
        w = self.written
        if w is not None and w.uid == cm.uid and cm.resource_version in (w.resource_version, w.replaced):
            return w
        return await self._parse(cm)

    async def _decide(
        self,
        workload: WorkloadRecord,
        pods: list[PodRecord],
        *,
        previous: ClusterSpec | None,
        order: RankOrder | None,
        held: ClusterSpec | None,
    ) -> Decision:
        """:func:`agent.decide.decide` with this worker's settings; a big job's on :class:`Offload`'s thread."""
        offload = self._offload is not None and self._offload.wants(pods=len(pods), expected=workload.expected)
        if offload:
            order = snapshot_order(order, pods)
        call = partial(
            decide,
            workload,
            pods,
            previous=previous,
            hccl_version=self._hccl_version,
            self_register=self._self_register,
            order=order,
            held=held,
            max_members=self._max_members,
        )
        if offload and self._offload is not None:
            return await self._offload.run(call)
        return call()

    async def _parse(self, cm: ConfigMapRecord) -> Written:
        """:func:`_written` of ``cm``; a big spec's on :class:`Offload`'s thread."""
        stored = sum(map(len, cm.data.values())) + sum(map(len, cm.binary_data.values()))
        if self._offload is not None and self._offload.wants(stored=stored):
            return await self._offload.run(partial(_written, cm))
        return _written(cm)

    async def _fetch(self, workload: WorkloadRecord) -> Written | None:
        """The ConfigMap as the server has it (None if absent); raises Untouchable."""
        raw = await self._api.get_configmap(workload.namespace, workload.configmap)
        if raw is None:
            return None
        cm = configmap_record(raw)
        _check_owner(workload, cm)
        return await self._parse(cm)

    async def _write(self, workload: WorkloadRecord, decision: Decision, base: Written | None) -> Written:
        assert decision.data is not None and decision.stored is not None
        body = configmap_body(
            namespace=workload.namespace,
            name=workload.configmap,
            job=workload.key,
            owner=workload.owner_reference(),
            data=decision.stored.data,
            binary_data=decision.stored.binary_data,
            resource_version=base.resource_version if base else None,
        )
        if base is not None:
            try:
                raw = await self._api.replace_configmap(workload.namespace, workload.configmap, body)
                self.metrics.configmap_writes.labels(_kind(workload), "update", "ok").inc()
            except NotFound:
                self.metrics.configmap_writes.labels(_kind(workload), "update", "not_found").inc()
                del body["metadata"]["resourceVersion"]
                raw = await self._create(workload, body)
        else:
            raw = await self._create(workload, body)
        meta = raw.get("metadata") or {}
        return Written(
            uid=str(meta.get("uid", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            data=decision.data,
            spec=decision.spec,
            replaced=base.resource_version if base else None,
        )

    async def _create(self, workload: WorkloadRecord, body: dict[str, object]) -> dict[str, object]:
        raw = await self._api.create_configmap(workload.namespace, body)  # Conflict: name taken
        self.metrics.configmap_writes.labels(_kind(workload), "create", "ok").inc()
        return raw

    async def _settled(
        self,
        workload: WorkloadRecord,
        decision: Decision,
        bound: structlog.typing.FilteringBoundLogger,
        *,
        last_ready: float | None,
        wrote: bool,
    ) -> None:
        """Record the spec now on the server; announce a newly completed epoch."""
        spec = decision.spec
        self.status = spec.status
        if spec.status == STATUS_COMPLETED:
            self._held = spec
        if not decision.problems:
            self._reported.clear()  # a problem that comes back is reported again
        if spec.status != STATUS_COMPLETED or self._completed_epoch == spec.epoch:
            return
        self._completed_epoch = spec.epoch
        if not wrote:
            return  # found completed (e.g. after a restart): already announced
        if last_ready is not None:
            self.metrics.spec_latency.labels(_kind(workload)).observe(max(0.0, time.monotonic() - last_ready))
        bound.info("ranktable.completed", epoch=spec.epoch, members=len(spec.members))
        await self._event(
            workload,
            "Normal",
            "SpecCompleted",
            f"cluster spec completed in ConfigMap {workload.configmap}: "
            f"{len(spec.members)} members, epoch {spec.epoch}",
        )

    async def _touch(
        self,
        workload: WorkloadRecord,
        spec: ClusterSpec,
        pods: list[PodRecord],
        bound: structlog.typing.FilteringBoundLogger,
    ) -> None:
        """Annotate the members of a completed ``spec`` that do not show its epoch yet (see the module doc)."""
        if not self._touch_pods or spec.status != STATUS_COMPLETED or self._touch_forbidden == spec.epoch:
            return
        epoch = str(spec.epoch)
        members = {m.uid for m in spec.members}
        stale = [
            p
            for p in pods
            if p.uid in members
            and workload.configmap in p.mounts
            and p.epoch_seen != epoch
            and self._touched.get(p.uid) != (epoch, p.epoch_seen)
        ]
        self._touched = {uid: seen for uid, seen in self._touched.items() if uid in members}
        if not stale:
            return
        if len(spec.members) > self._touch_max_members:
            await self._skip_touch(workload, spec, len(stale), bound)
            return
        gate = asyncio.Semaphore(TOUCH_CONCURRENCY)

        async def touch(pod: PodRecord) -> str:
            async with gate:
                try:
                    await self._api.annotate_pod(
                        pod.namespace, pod.name, uid=pod.uid, annotations={EPOCH_ANNOTATION: epoch}
                    )
                except (NotFound, Conflict):
                    return "gone"
                except ApiError as e:
                    if e.status == 403:
                        return "forbidden"
                    raise
                self._touched[pod.uid] = (epoch, pod.epoch_seen)
                return "ok"

        results = await asyncio.gather(*(touch(p) for p in stale), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        for result in results:
            self.metrics.pod_touches.labels(_kind(workload), result if isinstance(result, str) else "error").inc()
        if "forbidden" in results:
            self._touch_forbidden = spec.epoch
            bound.warning(
                "pods.touch_forbidden",
                epoch=spec.epoch,
                message="patching pods is forbidden: mounted specs arrive with the kubelet's periodic sync "
                "(grant pods/patch as build/rbac.yaml does, or run with --no-touch-pods)",
            )
        if failed:
            raise failed[0]
        bound.debug("pods.touched", epoch=spec.epoch, pods=len(stale))

    async def _skip_touch(
        self,
        workload: WorkloadRecord,
        spec: ClusterSpec,
        pods: int,
        bound: structlog.typing.FilteringBoundLogger,
    ) -> None:
        """Say once per epoch that a job over ``--touch-max-members`` is not touched (see the module doc)."""
        if self._touch_skipped == spec.epoch:
            return
        self._touch_skipped = spec.epoch
        self.metrics.pod_touches.labels(_kind(workload), "skipped").inc(pods)
        message = (
            f"{len(spec.members):,} members is over --touch-max-members {self._touch_max_members:,}: "
            f"{pods:,} pods mounting the spec are not touched (one pod write each); their file arrives with the "
            "kubelet's periodic sync (about a minute). ring-launch --from-api reads the spec in milliseconds "
            "at any size"
        )
        bound.info("pods.touch_skipped", epoch=spec.epoch, pods=pods, limit=self._touch_max_members)
        await self._event(workload, "Normal", "TouchSkipped", message)

    async def _report(
        self, workload: WorkloadRecord, problems: tuple[Problem, ...], bound: structlog.typing.FilteringBoundLogger
    ) -> None:
        for problem in problems:
            key = (problem.reason, problem.message)
            if key in self._reported:
                continue
            self._reported.add(key)
            self.metrics.invalid_inputs.labels(_kind(workload), problem.reason).inc()
            bound.warning("input.invalid", reason=problem.reason, message=problem.message)
            await self._event(workload, "Warning", _event_reason(problem.reason), problem.message)

    async def _event(self, workload: WorkloadRecord, event_type: str, reason: str, message: str) -> None:
        await self._api.emit_event(
            involved={
                "apiVersion": workload.api_version,
                "kind": workload.kind,
                "namespace": workload.namespace,
                "name": workload.name,
                "uid": workload.uid,
            },
            event_type=event_type,
            reason=reason,
            message=message,
        )


def _event_reason(reason: str) -> str:
    """CamelCase Event reason for a problem code (``device_json`` -> ``InvalidDeviceAnnotation``)."""
    if reason.startswith("device_"):
        return "InvalidDeviceAnnotation"
    return {
        "invalid_port": "InvalidPort",
        "invalid_slots": "InvalidSlots",
        "invalid_rank_index": "InvalidRankIndex",
        "invalid_super_pod": "InvalidSuperPod",
        "invalid_rank_order": "InvalidRankOrder",
        "invalid_workload": "InvalidWorkload",
        "duplicate_index": "DuplicateIndex",
        "missing_index": "MissingIndex",
        "index_out_of_range": "IndexOutOfRange",
        "ip_family": "NoAddressOfFamily",
        "mixed_ip_families": "MixedIPFamilies",
        "network_missing": "NetworkNotAttached",
        "invalid_network_status": "InvalidNetworkStatus",
        "address_collision": "AddressCollision",
        "too_large": "SpecTooLarge",
        "too_many_members": "TooManyMembers",
        "foreign_configmap": "ForeignConfigMap",
        "configmap_taken": "ConfigMapTaken",
    }.get(reason, "InvalidInput")
