"""Leader election on a ``coordination.k8s.io/v1`` Lease, client-go's protocol.

Replicas of the daemon race for one Lease; the holder leads (runs the
workers, writes ConfigMaps), the others stand by with warm caches. The
record and the rules are client-go's ``leaderelection`` package, so the
Lease reads the same in ``kubectl`` as any Go controller's:

- ``spec.holderIdentity`` names the leader (empty: free),
  ``leaseDurationSeconds`` how long the holder's claim lasts without renewal,
  ``acquireTime``/``renewTime`` are UTC ``MicroTime`` (RFC 3339, six fraction
  digits, ``Z``), ``leaseTransitions`` counts changes of holder.
- A candidate never compares the Lease's timestamps with its own clock:
  clocks of different machines disagree. It notes, on its own monotonic
  clock, when it *observed* the record change, and deems the claim expired
  once the holder's own ``leaseDurationSeconds`` passed since then without a
  further change. Expiry is judged on the holder's duration, not the
  candidate's flag, so replicas with different flags stay safe.
- Writes are conditional (``resourceVersion``): of two candidates racing for
  an expired Lease exactly one wins, the other gets 409 and stays standby.
- The leader renews every retry period, counted from the start of its last
  successful renewal (a slow renewal does not push the next one back). It
  gives up leading once ``renew_deadline`` passed since the start of its last
  successful renewal (each request is cut off at that deadline, so a hung
  connection cannot keep it leading), or at once when it sees another
  holder. As ``renew_deadline < lease_duration``, it has stopped before any
  standby can take over, even if its requests reached the server unseen.
- A renewal is one request: an update of the Lease as the leader last wrote
  it, conditional on that ``resourceVersion`` (client-go's optimistic
  renewal). Only when that update is refused (someone else changed the
  Lease, 409, or deleted it, 404) does it read the Lease and judge it, as a
  candidate does. Under a saturated API server each request can take
  seconds; one request instead of a read and a write halves what a renewal
  spends of the deadline.
- On graceful stop the leader releases the Lease (client-go's
  ``ReleaseOnCancel``): empty holder, ``leaseDurationSeconds: 1``. A standby
  takes a free Lease at its next attempt, i.e. within one retry period.

Why not ``kubernetes_asyncio.leaderelection`` (checked at 36.1): it measures
the observation time and the renew deadline with the wall clock
(``time.time()``), writes local time with a ``Z`` suffix (wrong outside UTC
hosts), judges expiry on the candidate's own duration instead of the
holder's, cannot release on shutdown, does not bound a renewal request by
the deadline, does not count ``leaseTransitions``, and lets a transport
error escape from the election loop. Fixing that is most of the code, so
the protocol is implemented here, on raw JSON like the rest of the daemon.

Retry attempts are spread by up to 10 % jitter (client-go uses 120 %, which
with two replicas only delays take-over after a release).

The daemon runs the elector apart from the workers (:class:`ElectionThread`):
a thread with its own event loop and its own API client, so a renewal never
waits behind the workers' coroutines, and a worker that holds the daemon's
loop (CPU-bound decisions on a big job, a large page decoded in one go, a
slow sync call) cannot make the leader miss its renew deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import math
import random
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import structlog
from prometheus_client import CollectorRegistry

from agent.api import Conflict, NotFound
from ranktable.podenv import pod_name, pod_namespace
from ringcontroller.metrics import leader_metrics
from ringcontroller.resource import LEASES

__all__ = [
    "JITTER",
    "ElectionThread",
    "LeaderElector",
    "LeaseRecord",
    "Observation",
    "RequestFunc",
    "default_identity",
    "default_namespace",
    "micro_time",
    "next_record",
    "released_record",
]

log = structlog.get_logger()

Json = dict[str, Any]
T = TypeVar("T")

JITTER = 0.1
"""Extra random fraction (0..10 %) added to each retry period."""


class RequestFunc(Protocol):
    """One JSON request to the API server (``ringcontroller.kube.RestKubeAPI.request`` fits).

    Returns the decoded body; raises ``agent.api.NotFound`` for 404,
    ``agent.api.Conflict`` for 409, ``agent.api.ApiError`` otherwise. Any
    other exception means no answer (transport failure).
    """

    async def __call__(self, method: str, path: str, *, body: Json | None = None) -> Json: ...


def micro_time(when: dt.datetime) -> str:
    """A UTC instant as Kubernetes ``MicroTime`` (``2025-01-02T03:04:05.123456Z``)."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The election fields of a Lease's ``spec``; compare by value to detect change.

    ``holder`` is ``""`` for a free (released or never held) Lease. Times
    are kept as the server's strings: they are only written and compared,
    never used to judge expiry.
    """

    holder: str
    duration: int
    acquire_time: str
    renew_time: str
    transitions: int

    @classmethod
    def from_spec(cls, spec: Json | None) -> LeaseRecord:
        """Read a Lease ``spec`` (missing fields become empty/zero)."""
        spec = spec or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=str(spec.get("acquireTime") or ""),
            renew_time=str(spec.get("renewTime") or ""),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> Json:
        """The Lease ``spec`` fields this record owns."""
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }


def next_record(current: LeaseRecord | None, *, identity: str, duration: int, now: dt.datetime) -> LeaseRecord:
    """The record ``identity`` writes to take or renew the Lease at ``now``.

    Renewing keeps ``acquireTime`` and ``leaseTransitions``; taking it from
    anyone else (or from nobody) starts a new term and counts a transition.
    The caller must first have checked that the Lease is not validly held by
    another (:meth:`Observation.held_by_other`).
    """
    stamp = micro_time(now)
    if current is None:
        return LeaseRecord(identity, duration, stamp, stamp, 0)
    if current.holder == identity:
        return LeaseRecord(identity, duration, current.acquire_time or stamp, stamp, current.transitions)
    return LeaseRecord(identity, duration, stamp, stamp, current.transitions + 1)


def released_record(current: LeaseRecord, *, now: dt.datetime) -> LeaseRecord:
    """The record a leader writes to give the Lease up (client-go's release)."""
    stamp = micro_time(now)
    return LeaseRecord("", 1, stamp, stamp, current.transitions)


class Observation:
    """When this process last saw the Lease record change, on its monotonic clock.

    Protocol: call :meth:`observe` with every record read or written, with
    the monotonic time it was read; ask :meth:`held_by_other` before taking
    the Lease.
    """

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.at = 0.0

    def observe(self, record: LeaseRecord, now: float) -> bool:
        """Note ``record`` as seen at ``now``; True if it differs from the last one."""
        if record == self.record:
            return False
        self.record, self.at = record, now
        return True

    def held_by_other(self, identity: str, now: float) -> bool:
        """True while someone else's claim is live: a holder other than
        ``identity`` whose ``leaseDurationSeconds`` has not passed since we
        observed its last change."""
        record = self.record
        if record is None or not record.holder or record.holder == identity:
            return False
        return now < self.at + record.duration


def default_identity() -> str:
    """This pod's name (:func:`ranktable.podenv.pod_name`) plus a random suffix: unique per process."""
    return f"{pod_name()}_{uuid.uuid4()}"


def default_namespace() -> str:
    """This pod's namespace (:func:`ranktable.podenv.pod_namespace`), else ``default``."""
    return pod_namespace() or "default"


class LeaderElector:
    """Campaigns for, holds and releases one Lease. See the module doc.

    Protocol (one task at a time drives it)::

        await elector.acquire()        # returns once this process leads
        holding = asyncio.create_task(elector.hold())
        ...                            # lead; `holding` ends when the lease is lost
        holding.cancel()               # graceful stop: finish work first
        await elector.release()        # then let a standby take over at once

    When ``hold`` returns, leadership is already over: stop writing
    immediately. ``release`` only writes if this process still holds the
    Lease and nobody changed it since its last renewal.
    ``leader_election_master_status{name}`` follows ``is_leader``.
    """

    def __init__(
        self,
        *,
        request: RequestFunc,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float,
        renew_deadline: float,
        retry_period: float,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], dt.datetime] = _utcnow,
        rand: Callable[[], float] = random.random,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError("leader election needs 0 < retry period < renew deadline < lease duration")
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._duration_seconds = max(1, math.ceil(lease_duration))
        self._request = request
        self._clock = clock
        self._wall = wall
        self._rand = rand
        self._sleep = sleep
        self._path = LEASES.path(namespace, name)
        self._observation = Observation()
        self._lease: Json | None = None  # the Lease as we last wrote it
        self._renewed_at = 0.0  # monotonic start of the last successful write
        self._leading = False
        metrics = leader_metrics(registry)
        self._gauge = metrics.master_status.labels(name)
        self._renewal = metrics.renewal.labels(name)
        self._gauge.set(0)
        self._log = log.bind(lease=f"{namespace}/{name}", identity=identity)

    @property
    def is_leader(self) -> bool:
        """True between a successful ``acquire`` and the end of ``hold`` (or ``release``)."""
        return self._leading

    def may_write(self) -> bool:
        """True while this process leads AND its last successful renewal started
        less than ``renew_deadline`` ago, on the monotonic clock.

        The write fence, checked right before every ConfigMap write and pod
        patch. :attr:`is_leader` alone is not enough: a process that was
        frozen (SIGSTOP, a paused VM, a long GC or swap stall) past the
        lease's duration resumes with ``is_leader`` still True, and its
        workers can run before :meth:`hold` notices the missed deadline,
        while a standby already holds the Lease. The monotonic clock moved
        during the freeze, so this check refuses those writes.
        """
        return self._leading and self._clock() - self._renewed_at < self.renew_deadline

    @property
    def holder(self) -> str:
        """The holder last observed (``""``: free or not yet read)."""
        record = self._observation.record
        return record.holder if record else ""

    async def acquire(self) -> None:
        """Try every retry period (plus jitter) until this process holds the Lease.

        Errors are logged and retried; cancel to give up.
        """
        reported = None
        while True:
            try:
                async with asyncio.timeout(self.renew_deadline):
                    taken = await self._try()
            except Exception as e:  # noqa: BLE001 - API errors and timeouts: retry
                self._log.warning("leader.attempt_failed", error=f"{type(e).__name__}: {e}")
                taken = False
            if taken:
                self._start_leading()
                return
            if self.holder and self.holder != reported:
                reported = self.holder
                self._log.info("leader.standby", holder=self.holder)
            await self._sleep(self.retry_period * (1 + JITTER * self._rand()))

    async def hold(self) -> None:
        """Renew every retry period; return once leadership is lost.

        Lost means: no renewal succeeded within ``renew_deadline`` of the
        last successful one, or another holder was seen. The caller must stop
        writing at once when this returns. Cancel it to stop renewing (then
        ``release``).
        """
        while True:
            # Due one retry period after the last renewal *began*: however long
            # that one took, the next has renew_deadline - retry_period left.
            due = max(self._renewed_at + self.retry_period, self._clock())
            await self._sleep(due - self._clock())
            # How late this thread woke: time it waited for a core or the GIL.
            late = max(0.0, self._clock() - due)
            deadline = self._renewed_at + self.renew_deadline
            while True:
                began = self._clock()
                remaining = deadline - began
                if remaining <= 0:
                    self._stop_leading("renew deadline exceeded")
                    return
                try:
                    async with asyncio.timeout(remaining):
                        renewed = await self._renew()
                except Exception as e:  # noqa: BLE001 - retried until the deadline
                    self._log.warning(
                        "leader.renew_failed",
                        error=f"{type(e).__name__}: {e}",
                        seconds=round(self._clock() - began, 3),
                        left=round(deadline - self._clock(), 3),
                        woke_late=round(late, 3),
                    )
                    renewed = False
                if renewed:
                    self._renewed(began, deadline, late=late)
                    break
                if self._observation.held_by_other(self.identity, self._clock()):
                    self._stop_leading(f"lease taken by {self.holder}")
                    return
                await self._sleep(min(self.retry_period, max(0.0, deadline - self._clock())))

    def _renewed(self, began: float, deadline: float, *, late: float) -> None:
        """Count a successful renewal; a warning when it took longer than a retry period
        (``late``: how late the renewal loop woke before it, waiting for a core or the GIL)."""
        took = self._clock() - began
        self._renewal.observe(took)
        if took > self.retry_period:
            self._log.warning(
                "leader.renew_slow",
                seconds=round(took, 3),
                left=round(deadline - self._clock(), 3),
                woke_late=round(late, 3),
                renew_deadline=self.renew_deadline,
            )

    async def release(self, *, timeout: float = 5.0) -> bool:
        """Give the Lease up if this process still holds it; True if released.

        Writes against the resourceVersion of our last renewal, so a Lease
        someone else changed meanwhile is left alone. Never raises.
        """
        if not self._leading or self._lease is None:
            return False
        self._stop_leading(None)
        current = LeaseRecord.from_spec(self._lease.get("spec"))
        body = _with_record(self._lease, released_record(current, now=self._wall()))
        try:
            async with asyncio.timeout(timeout):
                await self._request("PUT", self._path, body=body)
        except Exception as e:  # noqa: BLE001 - best effort: the lease then expires
            self._log.warning("leader.release_failed", error=f"{type(e).__name__}: {e}")
            return False
        self._log.info("leader.released")
        return True

    # -- one attempt ----------------------------------------------------------

    async def _renew(self) -> bool:
        """One renewal by the leader; True on success.

        An update of the Lease as this process last wrote it, conditional on
        its ``resourceVersion``: one request. Refused (409: changed by someone
        else; 404: deleted), it reads the Lease and judges it (:meth:`_try`).
        """
        started = self._clock()
        lease = self._lease
        if lease is not None:
            current = LeaseRecord.from_spec(lease.get("spec"))
            record = next_record(current, identity=self.identity, duration=self._duration_seconds, now=self._wall())
            try:
                written = await self._request("PUT", self._path, body=_with_record(lease, record))
            except (Conflict, NotFound):
                pass  # changed or gone since our last write: read it
            else:
                self._wrote(written, started)
                return True
        return await self._try()

    async def _try(self) -> bool:
        """Read the Lease and take or renew it if allowed; True on success."""
        started = self._clock()
        try:
            lease: Json | None = await self._request("GET", self._path)
        except NotFound:
            lease = None
        if lease is None:
            record = next_record(None, identity=self.identity, duration=self._duration_seconds, now=self._wall())
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": record.to_spec(),
            }
            try:
                written = await self._request("POST", LEASES.path(self.namespace), body=body)
            except Conflict:
                return False  # created by another candidate just now
            self._wrote(written, started)
            return True
        current = LeaseRecord.from_spec(lease.get("spec"))
        self._observation.observe(current, self._clock())
        if self._observation.held_by_other(self.identity, self._clock()):
            return False
        record = next_record(current, identity=self.identity, duration=self._duration_seconds, now=self._wall())
        try:
            written = await self._request("PUT", self._path, body=_with_record(lease, record))
        except Conflict:
            return False  # changed since our read: someone else was faster
        self._wrote(written, started)
        return True

    def _wrote(self, lease: Json, started: float) -> None:
        self._lease = lease
        self._renewed_at = started
        self._observation.observe(LeaseRecord.from_spec(lease.get("spec")), self._clock())

    def _start_leading(self) -> None:
        self._leading = True
        self._gauge.set(1)
        record = self._observation.record
        self._log.info("leader.acquired", transitions=record.transitions if record else 0)

    def _stop_leading(self, reason: str | None) -> None:
        self._leading = False
        self._gauge.set(0)
        if reason is not None:
            self._log.error("leader.lost", reason=reason)


class ElectionThread:
    """A :class:`LeaderElector` on a thread of its own: its own event loop and API client.

    The workers share the daemon's event loop; a renewal scheduled there waits
    behind whatever holds it, and a leader whose loop is busy past the renew
    deadline gives up leading although the API server is fine. Here the
    elector's coroutines run on a separate thread and loop, so the OS, not the
    workers, schedules them (CPU-bound Python on the daemon's thread hands the
    GIL over every switch interval, 5 ms by default; blocking calls release
    it). aiohttp sessions belong to the loop that opened them, so ``opened``
    builds the elector with its own client, on this thread's loop.

    The same protocol as :class:`LeaderElector`, awaited from the daemon's
    loop::

        election = ElectionThread(opened)    # opened(): async context yielding the elector
        await election.start()
        await election.acquire()
        holding = asyncio.create_task(election.hold())
        ...
        holding.cancel()
        await election.release()             # waits for the renewal to have stopped
        await election.close()               # closes the client, ends the thread

    :meth:`may_write` is the elector's fence, read from the daemon's thread:
    two attributes the elector's thread writes, each read atomically. Cancelling
    an awaited call cancels its task on the election thread.
    """

    def __init__(
        self, opened: Callable[[], AbstractAsyncContextManager[LeaderElector]], *, name: str = "lease-renewal"
    ) -> None:
        self._opened = opened
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._stack = contextlib.AsyncExitStack()
        self._holding: asyncio.Task[None] | None = None  # on the election thread's loop
        self._elector: LeaderElector | None = None

    @property
    def elector(self) -> LeaderElector:
        """The elector (after :meth:`start`)."""
        if self._elector is None:
            raise RuntimeError("ElectionThread.start() was not awaited")
        return self._elector

    @property
    def namespace(self) -> str:
        return self.elector.namespace

    @property
    def name(self) -> str:
        return self.elector.name

    @property
    def identity(self) -> str:
        return self.elector.identity

    @property
    def is_leader(self) -> bool:
        return self.elector.is_leader

    def may_write(self) -> bool:
        """:meth:`LeaderElector.may_write`, callable from any thread."""
        return self._elector is not None and self._elector.may_write()

    async def _on_thread(self, coro: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def start(self) -> None:
        """Start the thread and open the elector (and its client) on it."""
        self._thread.start()
        self._elector = await self._on_thread(self._stack.enter_async_context(self._opened()))

    async def acquire(self) -> None:
        """:meth:`LeaderElector.acquire` on the election thread."""
        await self._on_thread(self.elector.acquire())

    async def hold(self) -> None:
        """:meth:`LeaderElector.hold` on the election thread; returns once leadership is lost."""
        await self._on_thread(self._hold())

    async def _hold(self) -> None:
        self._holding = asyncio.current_task()
        await self.elector.hold()

    async def release(self, *, timeout: float = 5.0) -> bool:
        """Stop renewing (if :meth:`hold` still runs), then :meth:`LeaderElector.release`."""
        return await self._on_thread(self._release(timeout))

    async def _release(self, timeout: float) -> bool:
        holding = self._holding
        if holding is not None and not holding.done():
            holding.cancel()
            await asyncio.wait({holding})
        return await self.elector.release(timeout=timeout)

    async def close(self) -> None:
        """Cancel what still runs on the thread, close the elector's client, end the thread."""
        if self._thread.is_alive():
            await self._on_thread(self._close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            await asyncio.to_thread(self._thread.join)
        if not self._loop.is_closed():
            self._loop.close()

    async def _close(self) -> None:
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        if others:
            await asyncio.wait(others)
        await self._stack.aclose()


def _with_record(lease: Json, record: LeaseRecord) -> Json:
    """``lease`` (with its metadata and resourceVersion) carrying ``record``."""
    return {**lease, "spec": {**(lease.get("spec") or {}), **record.to_spec()}}
