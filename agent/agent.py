"""The business agent: routes events to jobs, and syncs one job at a time.

Event handlers (``on_workload``, ``on_pod``, ``on_configmap``) are called by
the informers after their caches changed. They only work out which job the
object concerns and enqueue its key (plus, for pods, note when a member
became ready, for the latency metric); they never call the API.

``sync(key)`` is called by the daemon's queue workers, one key at a time per
key, and returns a :class:`Result`: what the queue does with the key next
(done, or look again after some seconds); it raises for a failure to be
retried with backoff. It reads the job's workload, pods and ConfigMap from the caches (the
lookups passed in at construction) and hands them to the job's
:class:`~agent.worker.JobWorker`, created on first use and dropped when the
workload is gone (its ConfigMap goes with it, through its ownerReference).

Kubernetes Events (``SpecCompleted``, the Warnings) are best effort by the
:class:`~agent.api.KubeAPI` protocol, so the workers' Events are sent in the
background (:class:`BackgroundEvents`): a sync that completes a spec returns
as soon as the ConfigMap write returned, instead of one more API round trip
later, and its queue worker moves on to the next job. Under a burst (200
jobs coming up at once on a busy API server) that round trip was most of the
time other jobs waited in the queue.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import structlog

from agent.api import Json, KubeAPI
from agent.decide import STATUS_INVALID
from agent.events import EventCorrelator
from agent.metrics import AgentMetrics, private
from agent.worker import JobWorker, Offload, WorkerStatus
from model import podgroup
from model.keys import DEFAULT_MAX_MEMBERS, DEFAULT_TOUCH_MAX_MEMBERS
from model.kinds import short_name
from model.pod import job_pods
from model.records import ConfigMapRecord, JobKey, ObjectKey, PodRecord, PodUID, WorkloadRecord, object_key
from model.topology import RankOrder
from ranktable.hccl import DEFAULT_CHOICE

log = structlog.get_logger()

#: How often a job whose spec cannot be written is looked at again.
RECHECK_INVALID_SECONDS = 60.0
#: How long a pod names a PodGroup that nothing serves before it is reported (``PodGroupNotServed``):
#: a group created together with its pods may reach the controller's cache a little after them.
UNSERVED_GRACE_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class Result:
    """What the queue does with a key after :meth:`Agent.sync` returned
    (controller-runtime's ``reconcile.Result``).

    ``requeue_after`` None: done; the queue forgets the key (its retry
    backoff restarts) until an event adds it again. A number of seconds:
    forgotten too, and added again after that delay, whatever happens
    meanwhile. A failure that a retry may fix is not a Result: ``sync``
    raises, and the queue retries the key with per-key backoff.
    """

    requeue_after: float | None = None

    @classmethod
    def after(cls, seconds: float) -> Result:
        """Look at the key again in ``seconds`` (> 0)."""
        if not seconds > 0:
            raise ValueError(f"requeue_after must be positive, got {seconds!r}")
        return cls(requeue_after=seconds)

    @property
    def done(self) -> bool:
        """True when nothing is scheduled for the key."""
        return self.requeue_after is None


#: Nothing more to do until an event queues the key again.
DONE: Final = Result()


class BackgroundEvents:
    """``api`` with ``emit_event`` returning at once; the Event is sent by a task.

    Every Event first passes the ``correlator`` (:mod:`agent.events`):
    duplicates and a flood on one object are dropped and counted, so a
    flapping input cannot make unbounded Event writes. At most ``limit``
    Events are in flight; beyond that ``emit_event`` waits for its own send
    (back-pressure instead of an unbounded backlog). Events still in flight
    when the process stops are lost, which the protocol allows. The
    ConfigMap verbs pass straight through.
    """

    def __init__(
        self,
        api: KubeAPI,
        *,
        limit: int = 64,
        correlator: EventCorrelator | None = None,
        metrics: AgentMetrics | None = None,
    ) -> None:
        self._api = api
        self.metrics = metrics if metrics is not None else private()
        self._limit = limit
        self._correlator = correlator or EventCorrelator()
        self._pending: set[asyncio.Task[None]] = set()

    async def get_configmap(self, namespace: str, name: str) -> Json | None:
        return await self._api.get_configmap(namespace, name)

    async def create_configmap(self, namespace: str, body: Json) -> Json:
        return await self._api.create_configmap(namespace, body)

    async def replace_configmap(self, namespace: str, name: str, body: Json) -> Json:
        return await self._api.replace_configmap(namespace, name, body)

    async def annotate_pod(self, namespace: str, name: str, *, uid: str, annotations: dict[str, str]) -> None:
        await self._api.annotate_pod(namespace, name, uid=uid, annotations=annotations)

    async def emit_event(self, *, involved: Json, event_type: str, reason: str, message: str) -> None:
        verdict = self._correlator.allow(involved=involved, event_type=event_type, reason=reason, message=message)
        if verdict != "send":
            self.metrics.events_dropped.labels(verdict).inc()
            log.debug("event.dropped", cause=verdict, reason=reason, involved=involved.get("name"))
            return
        kind = short_name(api_version=str(involved.get("apiVersion", "")), kind=str(involved.get("kind", "")))
        self.metrics.events.labels(kind, event_type, reason).inc()
        send = self._send(involved=involved, event_type=event_type, reason=reason, message=message)
        if len(self._pending) >= self._limit:
            await send
            return
        task = asyncio.create_task(send, name=f"event-{reason}")
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _send(self, **event: Any) -> None:
        try:
            await self._api.emit_event(**event)
        except Exception as e:  # noqa: BLE001 - best effort, like the API's own handling
            log.warning("event.failed", reason=event.get("reason"), error=str(e))

    async def drain(self) -> None:
        """Wait for the Events in flight (tests; an orderly shutdown may call it)."""
        while self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)


class Agent:
    """Per-job workers behind an enqueue function. See the module doc."""

    def __init__(
        self,
        *,
        api: KubeAPI,
        enqueue: Callable[[JobKey], None],
        workload: Callable[[JobKey], WorkloadRecord | None],
        pods: Callable[[JobKey], list[PodRecord]],
        configmap: Callable[[ObjectKey], ConfigMapRecord | None],
        hccl_version: str = DEFAULT_CHOICE,
        touch_pods: bool = True,
        self_register: bool = False,
        metrics: AgentMetrics | None = None,
        order: RankOrder | None = None,
        pods_on_node: Callable[[str], list[PodRecord]] | None = None,
        max_members: int = DEFAULT_MAX_MEMBERS,
        touch_max_members: int = DEFAULT_TOUCH_MAX_MEMBERS,
        clock: Callable[[], float] = time.monotonic,
        offload: Offload | None = None,
    ) -> None:
        self._api = api
        #: Where the workers decide big jobs (:class:`agent.worker.Offload`; None: on the loop, every job).
        self.offload = offload
        self._max_members = max_members
        self._touch_max_members = touch_max_members
        self._order = order
        self._pods_on_node = pods_on_node
        self._touch_pods = touch_pods
        self._self_register = self_register
        #: Where the agent, its workers and its Events count (default: a private registry).
        self.metrics = metrics if metrics is not None else private()
        self.events = BackgroundEvents(api, metrics=self.metrics)
        self._enqueue = enqueue
        self._workload = workload
        self._pods = pods
        self._configmap = configmap
        self._hccl_version = hccl_version
        self._workers: dict[JobKey, JobWorker] = {}
        self._last_ready: dict[JobKey, float] = {}
        #: By PodGroup job key nothing serves: the pods naming it, when each was first found so, and
        #: whether it was reported (see _report_unserved_group).
        self._unserved: dict[JobKey, dict[PodUID, tuple[float, bool]]] = {}
        self._clock = clock

    # Event handlers: enqueue only. -------------------------------------------

    def on_workload(self, old: WorkloadRecord | None, new: WorkloadRecord | None) -> None:
        """A workload was added, changed or deleted."""
        if old == new:
            return
        # Every job the workload serves, before and after (a group dropped by a scale down is forgotten).
        for key in dict.fromkeys(k for r in (old, new) if r is not None for k in r.job_keys):
            self._enqueue(key)
        if new is None and old is not None:
            for key in old.job_keys:
                self._last_ready.pop(key, None)  # also on a standby, which never syncs

    def on_pod(self, old: PodRecord | None, new: PodRecord | None) -> None:
        """A selected pod was added, changed or deleted."""
        if old == new:
            return
        for key in dict.fromkeys(k for r in (old, new) if r is not None for k in r.job_keys):
            self._enqueue(key)
        if new is not None and _up(new) and not (old and _up(old)):
            for key in new.job_keys:
                self._last_ready[key] = time.monotonic()

    def on_configmap(self, old: ConfigMapRecord | None, new: ConfigMapRecord | None) -> None:
        """A managed ConfigMap was added, changed or deleted (possibly by someone else)."""
        record = new or old
        if record is not None and record.job is not None and old != new:
            self._enqueue(record.job)

    def on_node(self, name: str) -> None:
        """A node's topology path changed (or it appeared or went): its jobs' ranks may follow."""
        if self._pods_on_node is None:
            return
        for job in dict.fromkeys(k for p in self._pods_on_node(name) for k in p.job_keys):
            self._enqueue(job)

    # The sync. ----------------------------------------------------------------

    async def sync(self, key: JobKey) -> Result:
        """Bring job ``key``'s ConfigMap up to date; returns what the queue does next with ``key``.

        :data:`DONE`, or :meth:`Result.after` for a job whose spec cannot be
        written (what blocks it may go away without an event this controller
        watches). Raises for a failure to be retried with backoff.
        """
        workload = self._workload(key)
        if workload is None:
            worker = self._workers.pop(key, None)
            if worker is not None:
                self._count(worker.kind, worker.status, -1)
                log.info("job.forgotten", job=key)
            self._last_ready.pop(key, None)
            if key.startswith(podgroup.SHORT + "/"):
                wait = await self._report_unserved_group(key)
                if wait is not None:
                    return Result.after(wait)
            return DONE
        self._unserved.pop(key, None)
        worker = self._workers.get(key)
        if worker is None:
            worker = self._workers[key] = JobWorker(
                api=self.events,
                hccl_version=self._hccl_version,
                touch_pods=self._touch_pods,
                self_register=self._self_register,
                metrics=self.metrics,
                max_members=self._max_members,
                touch_max_members=self._touch_max_members,
                offload=self.offload,
            )
        before, was = worker.status, worker.kind
        cm = self._configmap(object_key(workload.namespace, workload.configmap))
        try:
            pods = job_pods(key, self._pods(key))
            await worker.sync(workload, pods, cm, last_ready=self._last_ready.get(key), order=self._order)
        finally:
            if (worker.kind, worker.status) != (was, before):
                self._count(was, before, -1)
                self._count(worker.kind, worker.status, +1)
        if worker.status == STATUS_INVALID:
            # What blocks it (a foreign ConfigMap, another job's) may go away
            # without an event this controller watches: look again later.
            return Result.after(RECHECK_INVALID_SECONDS)
        return DONE

    async def _report_unserved_group(self, key: JobKey) -> float | None:
        """Warn on each live pod that names PodGroup ``key`` while nothing serves that pod: the group
        does not exist or is not labelled, and its owner (if any) is no served workload either.

        A pod whose own workload is served (an Indexed Job whose pods name the Job controller's
        unlabelled PodGroup) is fine. A pod is reported once it has been unserved for
        :data:`UNSERVED_GRACE_SECONDS` (a group created with its pods may reach this cache after
        them), then not again while it stays so. Returns the seconds until the next pod is due,
        None when none waits."""
        pods = [
            p
            for p in self._pods(key)
            if p.group == key
            and not p.deleting
            and p.phase not in ("Succeeded", "Failed")
            and (p.job is None or self._workload(p.job) is None)
        ]
        now = self._clock()
        before = self._unserved.get(key, {})
        seen = {p.uid: before.get(p.uid, (now, False)) for p in pods}
        due: list[PodRecord] = []
        wait: float | None = None
        for pod in pods:
            first, reported = seen[pod.uid]
            if reported:
                continue
            left = first + UNSERVED_GRACE_SECONDS - now
            if left <= 0:
                due.append(pod)
                seen[pod.uid] = (first, True)
            else:
                wait = left if wait is None else min(wait, left)
        if seen:
            self._unserved[key] = seen
        else:
            self._unserved.pop(key, None)
        name = key.rpartition("/")[2]
        for pod in due:
            message = (
                f"pod {pod.name} names PodGroup {name} (spec.schedulingGroup), which does not exist or lacks the "
                "controller's selection label; no other served workload owns the pod, so no spec lists it"
            )
            self.metrics.invalid_inputs.labels(podgroup.SHORT, "podgroup_not_served").inc()
            log.warning("input.invalid", job=key, pod=pod.name, reason="podgroup_not_served", message=message)
            await self.events.emit_event(
                involved={
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "namespace": pod.namespace,
                    "name": pod.name,
                    "uid": pod.uid,
                },
                event_type="Warning",
                reason="PodGroupNotServed",
                message=message,
            )
        return wait

    def status(self, key: JobKey) -> WorkerStatus | None:
        """The spec status last settled for ``key`` (for health and tests)."""
        worker = self._workers.get(key)
        return worker.status if worker else None

    def _count(self, kind: str, status: WorkerStatus, delta: int) -> None:
        if status:
            self.metrics.jobs.labels(kind, status).inc(delta)


def _up(pod: PodRecord) -> bool:
    """Running with an IP, or registered by its launcher (for the latency metric, whichever came first)."""
    return pod.ready or pod.registered
