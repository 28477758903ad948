"""Tests of ringcontroller.workqueue, ported from client-go's workqueue tests.

The scenarios follow client-go's queue, delaying-queue and rate-limiting
tests (basic producers/consumers, add while processing, collapse, shutdown
with and without drain, backoff growth, delayed ordering, metrics); the code
is written for asyncio. Timing runs on a fake clock stepped by the test, so
nothing here sleeps.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from ringcontroller.workqueue import (
    BucketRateLimiter,
    ItemExponentialRateLimiter,
    MaxOfRateLimiter,
    ShutDown,
    WorkQueue,
    default_rate_limiter,
)


class FakeTimer:
    def __init__(self, deadline: float, callback: Callable[[], None]) -> None:
        self.deadline = deadline
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A Clock whose time only moves on ``step``; due timers fire in deadline order."""

    def __init__(self, start: float = 1000.0) -> None:
        self.time = start
        self.timers: list[FakeTimer] = []

    def now(self) -> float:
        return self.time

    def call_later(self, delay: float, callback: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(self.time + delay, callback)
        self.timers.append(timer)
        return timer

    def step(self, seconds: float) -> None:
        self.time += seconds
        due = sorted((t for t in self.timers if t.deadline <= self.time), key=lambda t: t.deadline)
        self.timers = [t for t in self.timers if t.deadline > self.time]
        for timer in due:
            if not timer.cancelled:
                timer.callback()


def new_queue(
    *, clock: FakeClock | None = None, registry: CollectorRegistry | None = None, **kwargs: object
) -> WorkQueue[str]:
    return WorkQueue(
        "test",
        clock=clock if clock is not None else FakeClock(),
        registry=registry if registry is not None else CollectorRegistry(),
        **kwargs,  # type: ignore[arg-type]
    )


async def settle(rounds: int = 10) -> None:
    """Let every runnable task run a few steps."""
    for _ in range(rounds):
        await asyncio.sleep(0)


SHUTDOWNS = pytest.mark.parametrize("drain", [False, True], ids=["shutdown", "shutdown_with_drain"])


async def shut(queue: WorkQueue[str], drain: bool) -> None:
    if drain:
        await queue.shutdown_with_drain()
    else:
        queue.shutdown()


# -- basic queue semantics -----------------------------------------------


@SHUTDOWNS
async def test_many_producers_and_consumers(drain: bool) -> None:
    queue = new_queue()
    seq = itertools.count()
    last_add: dict[str, int] = {}
    last_start: dict[str, int] = {}
    in_flight: set[str] = set()
    overlaps: list[str] = []
    received: list[str] = []

    async def producer(i: int) -> None:
        for _ in range(50):
            key = f"k{i}"
            last_add[key] = next(seq)
            queue.add(key)
            await asyncio.sleep(0)

    async def consumer() -> None:
        while True:
            try:
                key = await queue.get()
            except ShutDown:
                return
            received.append(key)
            if key in in_flight:
                overlaps.append(key)
            in_flight.add(key)
            last_start[key] = next(seq)
            for _ in range(3):  # "work", yielding so others interleave
                await asyncio.sleep(0)
            in_flight.discard(key)
            queue.done(key)

    consumers = [asyncio.create_task(consumer()) for _ in range(10)]
    await asyncio.gather(*(producer(i) for i in range(50)))
    await shut(queue, drain)
    queue.add("added after shutdown")
    await asyncio.wait_for(asyncio.gather(*consumers), 5)

    assert "added after shutdown" not in received
    assert overlaps == []
    assert len(queue) == 0
    # Every key's last add was followed by a processing of that key.
    assert set(last_start) == set(last_add)
    assert all(last_start[k] > last_add[k] for k in last_add)
    # Stingy: 50 adds per key were collapsed into far fewer processings.
    assert len(received) < 50 * 50


@SHUTDOWNS
async def test_add_while_processing_is_processed_again(drain: bool) -> None:
    queue = new_queue()
    processed: Counter[str] = Counter()
    in_flight: set[str] = set()
    overlaps: list[str] = []

    async def consumer() -> None:
        while True:
            try:
                key = await queue.get()
            except ShutDown:
                return
            if key in in_flight:
                overlaps.append(key)
            in_flight.add(key)
            processed[key] += 1
            if processed[key] < 2:
                queue.add(key)  # re-added while this worker holds it
            await asyncio.sleep(0)
            in_flight.discard(key)
            queue.done(key)

    consumers = [asyncio.create_task(consumer()) for _ in range(10)]
    for i in range(50):
        queue.add(f"k{i}")
    await settle(50)
    await shut(queue, drain)
    await asyncio.wait_for(asyncio.gather(*consumers), 5)

    assert overlaps == []
    assert processed == Counter({f"k{i}": 2 for i in range(50)})
    assert len(queue) == 0


async def test_fifo_order() -> None:
    queue = new_queue()
    for key in ["c", "a", "b", "a"]:
        queue.add(key)
    got = [await queue.get() for _ in range(3)]
    assert got == ["c", "a", "b"]


async def test_collapse_duplicate_adds() -> None:
    queue = new_queue()
    queue.add("foo")
    assert len(queue) == 1
    queue.add("bar")
    assert len(queue) == 2
    queue.add("foo")
    assert len(queue) == 2


async def test_collapse_while_processing() -> None:
    queue = new_queue()
    queue.add("foo")
    assert await queue.get() == "foo"

    waiter = asyncio.create_task(queue.get())
    for _ in range(3):
        queue.add("foo")
    await settle()
    # Held by a worker: not handed out again, not queued yet.
    assert not waiter.done()
    assert len(queue) == 0

    queue.done("foo")
    assert await asyncio.wait_for(waiter, 1) == "foo"
    queue.done("foo")
    assert len(queue) == 0
    # The three re-adds collapsed into that single extra processing.
    nothing = asyncio.create_task(queue.get())
    await settle()
    assert not nothing.done()
    nothing.cancel()


async def test_done_of_unknown_key_is_ignored() -> None:
    queue = new_queue()
    queue.add("foo")
    queue.done("foo")  # never handed out
    assert len(queue) == 1
    assert await queue.get() == "foo"


async def test_cancelled_getter_loses_no_key() -> None:
    queue = new_queue()
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await settle()
    queue.add("x")  # wakes `first`...
    first.cancel()  # ...which is cancelled before it can take the key
    assert await asyncio.wait_for(second, 1) == "x"
    assert first.cancelled()


# -- shutdown ------------------------------------------------------------


async def test_shutdown_with_drain_waits_for_in_flight_keys() -> None:
    queue = new_queue()
    queue.add("foo")
    queue.add("bar")
    first, second = await queue.get(), await queue.get()

    drain = asyncio.create_task(queue.shutdown_with_drain())
    await settle()
    assert queue.shutting_down
    with pytest.raises(ShutDown):  # noqa: PT011 - ShutDown carries no message: its type is the contract
        await queue.get()
    assert not drain.done()

    queue.done(first)
    await settle()
    assert not drain.done()
    queue.done(second)
    await asyncio.wait_for(drain, 1)


async def test_shutdown_without_drain_returns_at_once() -> None:
    queue = new_queue()
    queue.add("foo")
    queue.add("bar")
    await queue.get()
    await queue.get()
    queue.shutdown()  # items still in flight: does not wait
    with pytest.raises(ShutDown):  # noqa: PT011 - ShutDown carries no message: its type is the contract
        await queue.get()
    queue.add("late")
    assert len(queue) == 0


async def test_shutdown_wakes_blocked_getters() -> None:
    queue = new_queue()
    getters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await settle()
    queue.shutdown()
    results = await asyncio.wait_for(asyncio.gather(*getters, return_exceptions=True), 1)
    assert all(isinstance(r, ShutDown) for r in results)


async def test_keys_queued_before_shutdown_are_still_handed_out() -> None:
    queue = new_queue()
    queue.add("a")
    queue.add("b")
    queue.shutdown()
    assert [await queue.get(), await queue.get()] == ["a", "b"]
    with pytest.raises(ShutDown):  # noqa: PT011 - ShutDown carries no message: its type is the contract
        await queue.get()


async def test_shutdown_forces_a_pending_drain_to_end() -> None:
    queue = new_queue()
    queue.add("foo")
    await queue.get()
    drain = asyncio.create_task(queue.shutdown_with_drain())
    await settle()
    assert not drain.done()
    queue.shutdown()  # e.g. a second SIGTERM
    await asyncio.wait_for(drain, 1)


async def test_drain_with_dirty_item_hands_it_out_once_more() -> None:
    queue = new_queue()
    queue.add("foo")
    gotten = await queue.get()
    queue.add("foo")  # dirty while processing

    drain = asyncio.create_task(queue.shutdown_with_drain())
    await settle()
    with pytest.raises(ShutDown):  # noqa: PT011 - ShutDown carries no message: its type is the contract
        await queue.get()  # nothing ready yet: foo is still held

    queue.done(gotten)  # foo goes back on the queue
    again = await queue.get()
    assert again == "foo"
    queue.done(again)
    with pytest.raises(ShutDown):  # noqa: PT011 - ShutDown carries no message: its type is the contract
        await queue.get()
    await asyncio.wait_for(drain, 1)


async def test_drain_without_in_flight_keys_returns_at_once() -> None:
    queue = new_queue()
    await asyncio.wait_for(queue.shutdown_with_drain(), 1)


# -- rate limiters ---------------------------------------------------------


def test_item_exponential_backoff_grows_and_forget_resets() -> None:
    limiter = ItemExponentialRateLimiter(base=0.001, max_delay=1.0)
    delays = [limiter.when("one") for _ in range(12)]
    assert delays[:4] == [0.001, 0.002, 0.004, 0.008]
    assert delays[-2:] == [1.0, 1.0]  # capped
    assert limiter.num_requeues("one") == 12
    assert limiter.when("two") == 0.001  # per key
    limiter.forget("one")
    assert limiter.num_requeues("one") == 0
    assert limiter.when("one") == 0.001


def test_item_exponential_backoff_survives_huge_failure_counts() -> None:
    limiter = ItemExponentialRateLimiter()
    for _ in range(5000):
        delay = limiter.when("k")
    assert delay == 1000.0


def test_bucket_limiter_delays_beyond_burst() -> None:
    now = [0.0]
    bucket = BucketRateLimiter(qps=2.0, burst=2, clock=lambda: now[0])
    assert [bucket.when(k) for k in "abcd"] == [0.0, 0.0, 0.5, 1.0]
    now[0] = 10.0  # refills, but never above the burst
    assert [bucket.when(k) for k in "abc"] == [0.0, 0.0, 0.5]


def test_max_of_limiters_takes_longest_and_forgets_all() -> None:
    now = [0.0]
    limiter = MaxOfRateLimiter(
        ItemExponentialRateLimiter(base=0.01, max_delay=100.0),
        BucketRateLimiter(qps=1.0, burst=1, clock=lambda: now[0]),
    )
    assert limiter.when("k") == 0.01  # bucket has a token
    assert limiter.when("k") == 1.0  # bucket empty: 1 s > 0.02 s
    assert limiter.num_requeues("k") == 2
    limiter.forget("k")
    assert limiter.num_requeues("k") == 0


def test_default_rate_limiter_is_client_go_default() -> None:
    limiter = default_rate_limiter()
    assert [limiter.when("k") for _ in range(3)] == [0.005, 0.01, 0.02]


async def test_add_rate_limited_backs_off_per_key() -> None:
    clock = FakeClock()
    queue = new_queue(clock=clock, rate_limiter=ItemExponentialRateLimiter(base=0.005, max_delay=1000.0))

    queue.add_rate_limited("one")
    assert len(queue) == 0
    clock.step(0.004)
    assert len(queue) == 0
    clock.step(0.001)
    assert len(queue) == 1
    queue.done(await queue.get())

    queue.add_rate_limited("one")  # second failure: 10 ms
    clock.step(0.009)
    assert len(queue) == 0
    clock.step(0.001)
    assert len(queue) == 1
    assert queue.num_requeues("one") == 2
    queue.done(await queue.get())

    queue.forget("one")
    assert queue.num_requeues("one") == 0
    queue.add_rate_limited("one")  # back to 5 ms
    clock.step(0.005)
    assert len(queue) == 1


# -- delayed adds ------------------------------------------------------------


async def test_add_after_orders_by_ready_time() -> None:
    clock = FakeClock()
    queue = new_queue(clock=clock)
    queue.add_after("a", 3.0)
    queue.add_after("b", 1.0)
    queue.add_after("c", 2.0)
    queue.add_after("now", 0)
    assert len(queue) == 1
    assert await queue.get() == "now"
    clock.step(1.5)
    assert len(queue) == 1
    clock.step(5.0)
    assert [await queue.get() for _ in range(3)] == ["b", "c", "a"]


async def test_add_after_same_key_earlier_time_wins() -> None:
    clock = FakeClock()
    queue = new_queue(clock=clock)
    queue.add_after("x", 5.0)
    queue.add_after("x", 1.0)  # earlier: replaces
    clock.step(1.0)
    assert len(queue) == 1
    queue.done(await queue.get())
    clock.step(10.0)  # the 5 s timer was cancelled
    assert len(queue) == 0

    queue.add_after("y", 1.0)
    queue.add_after("y", 5.0)  # later: ignored
    clock.step(1.0)
    assert len(queue) == 1
    queue.done(await queue.get())
    clock.step(10.0)
    assert len(queue) == 0


async def test_shutdown_drops_delayed_keys() -> None:
    clock = FakeClock()
    queue = new_queue(clock=clock)
    queue.add_after("x", 1.0)
    queue.shutdown()
    clock.step(2.0)
    assert len(queue) == 0
    queue.add_after("y", 0.5)
    assert clock.timers == []


async def test_add_after_on_real_clock_fires() -> None:
    queue: WorkQueue[str] = WorkQueue("real", registry=CollectorRegistry())
    queue.add_after("x", 0.01)
    assert len(queue) == 0
    assert await asyncio.wait_for(queue.get(), 1) == "x"


# -- metrics ---------------------------------------------------------------


async def test_metrics_follow_queue_activity() -> None:
    clock = FakeClock()
    registry = CollectorRegistry()
    queue = new_queue(clock=clock, registry=registry)
    labels = {"name": "test", "controller": "test"}

    def value(metric: str, **extra: str) -> float | None:
        return registry.get_sample_value(metric, {**labels, **extra})

    queue.add("a")
    queue.add("b")
    queue.add("a")  # collapsed: not an add
    assert value("workqueue_adds_total") == 2
    assert value("workqueue_depth", priority="") == 2

    clock.step(1.5)
    assert await queue.get() == "a"
    assert value("workqueue_depth", priority="") == 1
    assert value("workqueue_queue_duration_seconds_count") == 1
    assert value("workqueue_queue_duration_seconds_sum") == pytest.approx(1.5)
    assert value("workqueue_unfinished_work_seconds") == 0
    clock.step(2.0)
    assert value("workqueue_unfinished_work_seconds") == pytest.approx(2.0)
    assert value("workqueue_longest_running_processor_seconds") == pytest.approx(2.0)

    assert await queue.get() == "b"  # waited 3.5 s
    assert value("workqueue_queue_duration_seconds_sum") == pytest.approx(5.0)
    clock.step(1.0)
    assert value("workqueue_unfinished_work_seconds") == pytest.approx(3.0 + 1.0)
    assert value("workqueue_longest_running_processor_seconds") == pytest.approx(3.0)

    queue.add("a")  # re-added while processing: waiting, so counted in depth
    assert value("workqueue_depth", priority="") == 1
    assert value("workqueue_adds_total") == 3
    queue.done("a")
    assert value("workqueue_work_duration_seconds_count") == 1
    assert value("workqueue_work_duration_seconds_sum") == pytest.approx(3.0)
    assert value("workqueue_longest_running_processor_seconds") == pytest.approx(1.0)

    assert value("workqueue_retries_total") == 0
    queue.add_after("c", 1.0)
    queue.add_rate_limited("d")
    assert value("workqueue_retries_total") == 2
    # Histogram buckets are controller-runtime's: 10 ns .. 1000 s.
    assert value("workqueue_queue_duration_seconds_bucket", le="1e-08") == 0
    assert value("workqueue_queue_duration_seconds_bucket", le="1000.0") == 2
