"""A rate-limited work queue for asyncio with client-go's semantics.

Event handlers put *keys* (``namespace/name`` of a job, say) on the queue and
workers take them off and reconcile; the queue decides nothing else. Its
guarantees are what make a controller's ``sync(key)`` simple:

* Fair: keys are handed out in the order they were first added (FIFO).
* Stingy: a key added many times before a worker takes it is handed out once;
  a key is never handed to two workers at once; a key added again while a
  worker holds it is handed out again after that worker calls ``done``. So a
  worker always reads the latest state, and never races another worker on the
  same key.
* Retries back off per key: ``add_rate_limited`` re-adds a key after an
  exponentially growing delay (5 ms doubling up to 1000 s, client-go's
  ``ItemExponentialFailureRateLimiter``), combined with an overall token
  bucket (10 per second, burst 100) as in client-go's default controller rate
  limiter. ``forget`` resets the key's backoff after a successful sync.
* Clean shutdown: ``shutdown()`` stops accepting keys; workers still receive
  the keys already queued and then ``ShutDown``. ``shutdown_with_drain()``
  additionally waits until every key handed out has been ``done``.

Everything runs on one event loop and no method may be called from another
thread (the Prometheus scrape only reads a snapshot). Time comes from an
injectable ``Clock``, monotonic by default, so tests can drive delays and
duration metrics without sleeping.

Metrics carry controller-runtime's names and labels (see
``ringcontroller.metrics.WorkqueueMetrics``). Like client-go, ``depth``
counts keys waiting to be handed out, including those re-added while being
processed; ``adds_total`` counts adds that were not collapsed into a waiting
key; ``retries_total`` counts every delayed add (``add_after`` and
``add_rate_limited``). The unfinished-work gauges are computed when scraped
instead of on client-go's 500 ms tick.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

from prometheus_client import CollectorRegistry

from ringcontroller.metrics import workqueue_metrics

__all__ = [
    "BucketRateLimiter",
    "Clock",
    "ItemExponentialRateLimiter",
    "MaxOfRateLimiter",
    "MonotonicClock",
    "RateLimiter",
    "ShutDown",
    "TimerHandle",
    "WorkQueue",
    "default_rate_limiter",
]

K = TypeVar("K", bound=Hashable)


class ShutDown(Exception):
    """Raised by ``WorkQueue.get`` once the queue is shut down and empty.

    A worker loop ends when it sees this exception; it is not an error.
    """


class TimerHandle(Protocol):
    """A scheduled callback that can be cancelled before it runs."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """Where the queue reads time and schedules delayed adds.

    ``now`` is in seconds on a monotonic scale; ``call_later`` runs
    ``callback`` on the event loop after ``delay`` seconds of that scale.
    """

    def now(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle: ...


class MonotonicClock:
    """The real clock: ``time.monotonic`` and the running loop's timers.

    ``call_later`` must be called from a coroutine or callback running on the
    event loop that owns the queue.
    """

    def now(self) -> float:
        return time.monotonic()

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(delay, callback)


class RateLimiter(Protocol):
    """Decides how long a key waits before it is retried.

    ``when(key)`` records one more failure of ``key`` and returns the delay in
    seconds; ``forget(key)`` clears the key's history (call it once the key
    synced successfully); ``num_requeues(key)`` is the number of failures
    recorded since the last ``forget``.
    """

    def when(self, key: Hashable) -> float: ...

    def forget(self, key: Hashable) -> None: ...

    def num_requeues(self, key: Hashable) -> int: ...


class ItemExponentialRateLimiter:
    """Per-key exponential backoff: ``base * 2**failures``, capped at ``max_delay``.

    The first retry of a key waits ``base`` (default 5 ms), the next twice
    that, up to ``max_delay`` (default 1000 s): client-go's defaults.
    """

    def __init__(self, *, base: float = 0.005, max_delay: float = 1000.0) -> None:
        self._base = base
        self._max = max_delay
        self._failures: dict[Hashable, int] = {}

    def when(self, key: Hashable) -> float:
        exp = self._failures.get(key, 0)
        self._failures[key] = exp + 1
        # Capping the exponent keeps 2.0**exp a finite float for any count.
        return min(self._base * 2.0 ** min(exp, 1000), self._max)

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)

    def num_requeues(self, key: Hashable) -> int:
        return self._failures.get(key, 0)


class BucketRateLimiter:
    """An overall token bucket: ``qps`` retries per second, bursts of ``burst``.

    Each ``when`` takes a token; when the bucket is empty the returned delay
    is how long until a token is free (reservations, as Go's ``rate.Limiter``
    makes). It keeps no per-key state.
    """

    def __init__(self, *, qps: float = 10.0, burst: int = 100, clock: Callable[[], float] = time.monotonic) -> None:
        self._qps = qps
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def when(self, key: Hashable) -> float:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self._qps

    def forget(self, key: Hashable) -> None:
        pass

    def num_requeues(self, key: Hashable) -> int:
        return 0


class MaxOfRateLimiter:
    """Combines limiters: the delay is the longest any of them asks for."""

    def __init__(self, *limiters: RateLimiter) -> None:
        self._limiters = limiters

    def when(self, key: Hashable) -> float:
        # Every limiter must record the failure, so no short-circuit.
        return max([limiter.when(key) for limiter in self._limiters], default=0.0)

    def forget(self, key: Hashable) -> None:
        for limiter in self._limiters:
            limiter.forget(key)

    def num_requeues(self, key: Hashable) -> int:
        return max((limiter.num_requeues(key) for limiter in self._limiters), default=0)


def default_rate_limiter() -> RateLimiter:
    """client-go's default controller rate limiter.

    Per-key exponential backoff (5 ms .. 1000 s) combined with an overall
    bucket of 10 retries per second, burst 100.
    """
    return MaxOfRateLimiter(ItemExponentialRateLimiter(), BucketRateLimiter())


class WorkQueue(Generic[K]):
    """A fair, stingy, rate-limited queue of keys (see the module docstring).

    The protocol a worker must follow::

        while True:
            try:
                key = await queue.get()
            except ShutDown:
                return
            try:
                await sync(key)
            except Exception:
                queue.add_rate_limited(key)   # retry later, with backoff
            else:
                queue.forget(key)             # reset the key's backoff
            finally:
                queue.done(key)               # ALWAYS, or the key is stuck

    ``done`` must be called exactly once for every key returned by ``get``,
    even when the sync fails or the queue is shutting down; until then the
    key is never handed out again and ``shutdown_with_drain`` waits for it.
    Producers (event handlers) only call ``add``; they never block.

    ``name`` labels the metrics and must be unique among the queues sharing a
    registry (a second queue with the same name takes over the unfinished-work
    gauges). Keys must be hashable and should be immutable (strings, tuples).
    """

    def __init__(
        self,
        name: str,
        *,
        rate_limiter: RateLimiter | None = None,
        clock: Clock | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.name = name
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._limiter: RateLimiter = rate_limiter if rate_limiter is not None else default_rate_limiter()
        self._queue: deque[K] = deque()  # ready keys, in order
        self._dirty: set[K] = set()  # keys that need processing (queued or re-added while processing)
        self._processing: dict[K, float] = {}  # key -> time it was handed out
        self._added_at: dict[K, float] = {}  # dirty key -> time of the add that made it dirty
        self._waiting: dict[K, tuple[float, TimerHandle]] = {}  # delayed key -> (ready time, timer)
        self._getters: deque[asyncio.Future[None]] = deque()
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._shutting_down = False
        self._drain = False

        metrics = workqueue_metrics(registry)
        self._m_depth = metrics.depth.labels(name, name, "")
        self._m_adds = metrics.adds.labels(name, name)
        self._m_queue_duration = metrics.queue_duration.labels(name, name)
        self._m_work_duration = metrics.work_duration.labels(name, name)
        self._m_retries = metrics.retries.labels(name, name)
        metrics.unfinished_work.labels(name, name).set_function(self._unfinished_seconds)
        metrics.longest_running_processor.labels(name, name).set_function(self._longest_running_seconds)

    # -- producers -------------------------------------------------------

    def add(self, key: K) -> None:
        """Mark ``key`` as needing processing. Never blocks.

        Collapses with a waiting add of the same key; if a worker holds the
        key, it is handed out again after that worker's ``done``. Ignored
        once the queue is shutting down.
        """
        if self._shutting_down or key in self._dirty:
            return
        self._m_adds.inc()
        self._m_depth.inc()
        self._added_at.setdefault(key, self._clock.now())
        self._dirty.add(key)
        if key in self._processing:
            return
        self._queue.append(key)
        self._wake_one_getter()

    def add_after(self, key: K, delay: float) -> None:
        """``add(key)`` after ``delay`` seconds (now if ``delay <= 0``).

        If the key is already waiting, the earlier of the two ready times
        wins. Delayed keys are dropped at shutdown.
        """
        if self._shutting_down:
            return
        self._m_retries.inc()
        if delay <= 0:
            self.add(key)
            return
        ready_at = self._clock.now() + delay
        waiting = self._waiting.get(key)
        if waiting is not None:
            if waiting[0] <= ready_at:
                return
            waiting[1].cancel()
        timer = self._clock.call_later(delay, lambda: self._fire(key))
        self._waiting[key] = (ready_at, timer)

    def add_rate_limited(self, key: K) -> None:
        """Re-add ``key`` after the rate limiter's delay (one more failure)."""
        self.add_after(key, self._limiter.when(key))

    def forget(self, key: K) -> None:
        """Reset ``key``'s backoff: call after it synced successfully.

        It does not remove the key from the queue.
        """
        self._limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        """How many rate-limited re-adds ``key`` has had since its last ``forget``."""
        return self._limiter.num_requeues(key)

    # -- workers ---------------------------------------------------------

    async def get(self) -> K:
        """Wait for the next key and hand it to the caller, who must ``done`` it.

        Raises ``ShutDown`` when the queue is shutting down and no key is
        ready; keys queued before the shutdown are still handed out first.
        Cancelling a waiting ``get`` loses no key.
        """
        loop = asyncio.get_running_loop()
        while True:
            if self._queue:
                return self._take()
            if self._shutting_down:
                raise ShutDown()
            waiter: asyncio.Future[None] = loop.create_future()
            self._getters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    # We were woken for a key we will not take: pass it on.
                    self._wake_one_getter()
                else:
                    try:
                        self._getters.remove(waiter)
                    except ValueError:
                        pass
                raise

    def done(self, key: K) -> None:
        """Tell the queue the worker has finished with ``key``.

        If the key was re-added meanwhile it goes back on the queue. Calling
        ``done`` for a key that is not being processed does nothing.
        """
        started = self._processing.pop(key, None)
        if started is None:
            return
        self._m_work_duration.observe(self._clock.now() - started)
        if key in self._dirty:
            self._queue.append(key)
            self._wake_one_getter()
        if not self._processing:
            self._release_drain_waiters()

    # -- shutdown --------------------------------------------------------

    @property
    def shutting_down(self) -> bool:
        """True once ``shutdown`` or ``shutdown_with_drain`` was called."""
        return self._shutting_down

    def shutdown(self) -> None:
        """Stop accepting keys and wake every waiting ``get``.

        Workers still receive keys already queued, then ``ShutDown``. Also
        ends a pending ``shutdown_with_drain`` at once (a second SIGTERM).
        """
        self._drain = False
        self._begin_shutdown()
        self._release_drain_waiters()

    async def shutdown_with_drain(self) -> None:
        """``shutdown``, then wait until every handed-out key is ``done``.

        Blocks forever if a worker never calls ``done``; ``shutdown`` from
        another task ends the wait.
        """
        self._drain = True
        self._begin_shutdown()
        loop = asyncio.get_running_loop()
        while self._processing and self._drain:
            waiter: asyncio.Future[None] = loop.create_future()
            self._drain_waiters.append(waiter)
            await waiter

    def __len__(self) -> int:
        """Keys ready to be handed out (not those being processed or delayed)."""
        return len(self._queue)

    # -- internals -------------------------------------------------------

    def _take(self) -> K:
        key = self._queue.popleft()
        now = self._clock.now()
        self._m_depth.dec()
        self._processing[key] = now
        self._dirty.discard(key)
        added = self._added_at.pop(key, None)
        if added is not None:
            self._m_queue_duration.observe(now - added)
        return key

    def _fire(self, key: K) -> None:
        self._waiting.pop(key, None)
        self.add(key)

    def _wake_one_getter(self) -> None:
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _begin_shutdown(self) -> None:
        self._shutting_down = True
        for _, timer in self._waiting.values():
            timer.cancel()
        self._waiting.clear()
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def _release_drain_waiters(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _unfinished_seconds(self) -> float:
        # Called from the scrape, possibly on another thread: work on a copy.
        starts = list(self._processing.values())
        now = self._clock.now()
        return sum(now - start for start in starts)

    def _longest_running_seconds(self) -> float:
        starts = list(self._processing.values())
        if not starts:
            return 0.0
        return self._clock.now() - min(starts)
