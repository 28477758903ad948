"""Leader election rules on plain data: the Lease record, its transitions, expiry.

The elector's I/O runs against the real API server in
``tests/integration/test_operations.py``; here are the rules it applies, and
its acquire/hold/release protocol on an in-memory Lease store with the
injectable clock (expiry moves only when the test moves the clock).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from ringcontroller.leader import (
    ElectionThread,
    LeaderElector,
    LeaseRecord,
    Observation,
    default_identity,
    default_namespace,
    micro_time,
    next_record,
    released_record,
)
from tests.support.memoryapi import MemoryLeases

NOW = dt.datetime(2025, 3, 4, 5, 6, 7, 890123, tzinfo=dt.UTC)
LATER = NOW + dt.timedelta(seconds=2)


class TestMicroTime:
    def test_utc_with_six_fraction_digits_and_z(self) -> None:
        assert micro_time(NOW) == "2025-03-04T05:06:07.890123Z"

    def test_whole_second_still_has_six_digits(self) -> None:
        assert micro_time(NOW.replace(microsecond=0)) == "2025-03-04T05:06:07.000000Z"

    def test_other_zone_is_converted_to_utc(self) -> None:
        plus_two = dt.timezone(dt.timedelta(hours=2))
        assert micro_time(NOW.astimezone(plus_two)) == "2025-03-04T05:06:07.890123Z"


class TestLeaseRecord:
    def test_round_trip(self) -> None:
        spec = {
            "holderIdentity": "a_1",
            "leaseDurationSeconds": 15,
            "acquireTime": "2025-03-04T05:06:07.890123Z",
            "renewTime": "2025-03-04T05:06:09.000001Z",
            "leaseTransitions": 3,
        }
        assert LeaseRecord.from_spec(spec).to_spec() == spec

    @pytest.mark.parametrize(
        "spec", [None, {}, {"holderIdentity": None, "leaseDurationSeconds": None}], ids=["none", "empty", "nulls"]
    )
    def test_missing_fields_read_as_free(self, spec: dict[str, object] | None) -> None:
        assert LeaseRecord.from_spec(spec) == LeaseRecord("", 0, "", "", 0)


class TestNextRecord:
    def test_new_lease_starts_a_term_without_transition(self) -> None:
        record = next_record(None, identity="me", duration=15, now=NOW)
        assert record == LeaseRecord("me", 15, micro_time(NOW), micro_time(NOW), 0)

    def test_renewal_keeps_acquire_time_and_transitions(self) -> None:
        held = next_record(None, identity="me", duration=15, now=NOW)
        held = LeaseRecord(held.holder, held.duration, held.acquire_time, held.renew_time, 4)
        renewed = next_record(held, identity="me", duration=15, now=LATER)
        assert renewed.acquire_time == micro_time(NOW)
        assert renewed.renew_time == micro_time(LATER)
        assert renewed.transitions == 4

    @pytest.mark.parametrize("holder", ["other", ""], ids=["taken-from-other", "free-after-release"])
    def test_taking_over_counts_a_transition_and_restarts_the_term(self, holder: str) -> None:
        old = LeaseRecord(holder, 15, "2020-01-01T00:00:00.000000Z", "2020-01-01T00:00:10.000000Z", 7)
        record = next_record(old, identity="me", duration=4, now=LATER)
        assert record == LeaseRecord("me", 4, micro_time(LATER), micro_time(LATER), 8)

    def test_release_frees_the_lease_with_one_second_duration(self) -> None:
        held = LeaseRecord("me", 15, micro_time(NOW), micro_time(NOW), 2)
        assert released_record(held, now=LATER) == LeaseRecord("", 1, micro_time(LATER), micro_time(LATER), 2)


class TestObservation:
    def record(
        self, holder: str = "other", duration: int = 15, renew: str = "2000-01-01T00:00:00.000000Z"
    ) -> LeaseRecord:
        return LeaseRecord(holder, duration, renew, renew, 0)

    def test_timestamps_in_the_record_are_not_used_for_expiry(self) -> None:
        # The holder's clock says the year 2000: still held, as seen from here.
        seen = Observation()
        seen.observe(self.record(), now=100.0)
        assert seen.held_by_other("me", now=100.0)

    def test_expiry_uses_the_holders_duration_from_our_observation(self) -> None:
        seen = Observation()
        seen.observe(self.record(duration=30), now=100.0)
        assert seen.held_by_other("me", now=129.9)
        assert not seen.held_by_other("me", now=130.0)

    def test_an_unchanged_record_does_not_restart_the_clock(self) -> None:
        seen = Observation()
        assert seen.observe(self.record(duration=10), now=100.0)
        assert not seen.observe(self.record(duration=10), now=109.0)
        assert not seen.held_by_other("me", now=110.5)

    def test_a_renewal_restarts_the_clock(self) -> None:
        seen = Observation()
        seen.observe(self.record(duration=10), now=100.0)
        assert seen.observe(self.record(duration=10, renew="2000-01-01T00:00:02.000000Z"), now=109.0)
        assert seen.held_by_other("me", now=118.9)
        assert not seen.held_by_other("me", now=119.0)

    @pytest.mark.parametrize("holder", ["me", ""], ids=["own", "free"])
    def test_own_or_free_lease_is_not_held_by_another(self, holder: str) -> None:
        seen = Observation()
        seen.observe(self.record(holder=holder), now=100.0)
        assert not seen.held_by_other("me", now=100.0)

    def test_nothing_observed_is_not_held(self) -> None:
        assert not Observation().held_by_other("me", now=0.0)


class TestElectorSettings:
    @pytest.mark.parametrize(
        ("lease", "renew", "retry"),
        [(10.0, 10.0, 2.0), (15.0, 2.0, 2.0), (15.0, 20.0, 2.0), (15.0, 10.0, 0.0)],
        ids=["renew-equals-lease", "retry-equals-renew", "renew-over-lease", "zero-retry"],
    )
    def test_rejects_unsafe_timings(self, lease: float, renew: float, retry: float) -> None:
        async def request(method: str, path: str, *, body: dict[str, object] | None = None) -> dict[str, object]:
            raise AssertionError("no request expected")

        with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
            LeaderElector(
                request=request, namespace="ns", name="lease", identity="me",
                lease_duration=lease, renew_deadline=renew, retry_period=retry,
            )  # fmt: skip


def test_identity_is_pod_name_plus_a_unique_suffix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "ring-controller-7d9f-abcde")
    first, second = default_identity(), default_identity()
    assert first.startswith("ring-controller-7d9f-abcde_")
    assert second.startswith("ring-controller-7d9f-abcde_")
    assert first != second


def test_namespace_comes_from_pod_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "ring-system")
    assert default_namespace() == "ring-system"


# The elector's protocol on an in-memory Lease store, with its injectable clock ------------


class Clock:
    """The elector's monotonic clock, moved by hand: expiry is judged only on it."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def elector(leases: MemoryLeases, clock: Clock, identity: str = "me") -> tuple[LeaderElector, CollectorRegistry]:
    registry = CollectorRegistry()
    # Real sleeps are tiny (retry 10 ms); the lease's 15 s pass only on `clock`.
    e = LeaderElector(
        request=leases, namespace="ns", name="lease", identity=identity,
        lease_duration=15.0, renew_deadline=10.0, retry_period=0.01,
        registry=registry, clock=clock, wall=lambda: NOW, rand=lambda: 0.0,
    )  # fmt: skip
    return e, registry


def master(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("leader_election_master_status", {"name": "lease"})


async def until(predicate: Callable[[], bool], what: str) -> None:
    """Let the elector's task run until ``predicate`` holds (bounded by a count, not a time)."""
    for _ in range(2000):
        if predicate():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"never happened: {what}")


def gets(leases: MemoryLeases) -> int:
    return sum(1 for method, _ in leases.calls if method == "GET")


class TestElectorOnAStore:
    async def test_acquires_an_absent_lease_by_creating_it(self) -> None:
        leases, clock = MemoryLeases(), Clock()
        e, registry = elector(leases, clock)
        assert master(registry) == 0.0
        await asyncio.wait_for(e.acquire(), timeout=10)
        assert e.is_leader and master(registry) == 1.0
        assert leases.spec()["holderIdentity"] == "me" and leases.spec()["leaseTransitions"] == 0
        assert [m for m, _ in leases.calls] == ["GET", "POST"]

    async def test_waits_out_a_live_lease_held_by_another_then_takes_it(self) -> None:
        leases, clock = MemoryLeases(), Clock()
        leases.put_spec(LeaseRecord("other", 15, "t0", "t0", 3).to_spec())
        e, _ = elector(leases, clock)
        task = asyncio.create_task(e.acquire())
        try:
            await until(lambda: gets(leases) >= 5, "several attempts")
            clock.now += 14.9  # just inside the holder's 15 s since we first saw its record
            seen = gets(leases)
            await until(lambda: gets(leases) >= seen + 5, "more attempts")
            assert not e.is_leader and not task.done() and e.holder == "other"
            assert all(m == "GET" for m, _ in leases.calls)  # never tried to write a live lease
            # The holder renews: the claim is live again for 15 s from this observation.
            leases.put_spec({"renewTime": "t1"})
            seen = gets(leases)
            await until(lambda: gets(leases) >= seen + 3, "the renewal observed")
            clock.now += 14.9
            seen = gets(leases)
            await until(lambda: gets(leases) >= seen + 5, "more attempts")
            assert not task.done()
            clock.now += 0.2  # now 15 s without a change: expired
            await asyncio.wait_for(task, timeout=10)
        finally:
            task.cancel()
        assert e.is_leader
        spec = leases.spec()
        assert (spec["holderIdentity"], spec["leaseTransitions"], spec["acquireTime"]) == ("me", 4, micro_time(NOW))

    async def test_holds_by_renewing_and_stops_when_another_takes_the_lease(self) -> None:
        leases, clock = MemoryLeases(), Clock()
        e, registry = elector(leases, clock)
        await e.acquire()
        holding = asyncio.create_task(e.hold())
        try:
            await until(lambda: sum(1 for m, _ in leases.calls if m == "PUT") >= 3, "renewals")
            assert not holding.done() and e.is_leader
            # Someone takes the Lease (an admin, or a replica that judged it expired).
            leases.put_spec({"holderIdentity": "thief", "renewTime": "t9"})
            await asyncio.wait_for(holding, timeout=10)
        finally:
            holding.cancel()
        assert not e.is_leader and master(registry) == 0.0
        assert leases.spec()["holderIdentity"] == "thief"  # not taken back
        assert not await e.release()  # nothing to release

    async def test_hold_gives_up_at_the_renew_deadline_when_the_server_is_unreachable(self) -> None:
        leases, clock = MemoryLeases(), Clock()
        e, registry = elector(leases, clock)
        await e.acquire()
        leases.down = True
        holding = asyncio.create_task(e.hold())
        try:
            failed = len(leases.calls)
            await until(lambda: len(leases.calls) >= failed + 5, "failed renewals")
            clock.now += 9.9
            failed = len(leases.calls)
            await until(lambda: len(leases.calls) >= failed + 3, "more failed renewals")
            assert not holding.done() and e.is_leader  # still inside the renew deadline
            clock.now += 0.2
            await asyncio.wait_for(holding, timeout=10)
        finally:
            holding.cancel()
        assert not e.is_leader and master(registry) == 0.0

    async def test_may_write_only_within_the_renew_deadline_even_before_hold_notices(self) -> None:
        # A frozen process resumes with is_leader still True; the fence must already say no.
        leases, clock = MemoryLeases(), Clock()
        e, _ = elector(leases, clock)
        assert not e.may_write()  # not leading yet
        await e.acquire()
        assert e.may_write()
        clock.now += 9.9
        assert e.may_write()
        clock.now += 0.2  # past the renew deadline, no renewal ran (hold() is not even started)
        assert e.is_leader and not e.may_write()

    async def test_a_slow_renewal_counts_from_when_it_began(self) -> None:
        # A renewal that began at 105 and whose PUT took 8 s: the server may have
        # written it at any moment from 105 on, and a standby may have seen it then,
        # so the fence and the next deadline count from 105, not from its answer at 113.
        leases, clock = MemoryLeases(), Clock()

        async def slow_put(method: str, path: str, *, body: dict[str, Any] | None = None) -> dict[str, Any]:
            if method == "PUT" and not leases.down:
                clock.now += 8.0  # the request is slow, on the elector's own clock
                answer = await leases(method, path, body=body)
                leases.down = True  # every later renewal fails: only this one counts
                return answer
            return await leases(method, path, body=body)

        e, registry = elector(leases, clock)
        await e.acquire()  # GET + POST at 100
        e._request = slow_put  # the same store, answering slowly from now on
        clock.now = 105.0
        holding = asyncio.create_task(e.hold())
        try:
            await until(lambda: leases.down, "the slow renewal answered")
            assert clock.now == 113.0 and e.is_leader
            failed = len(leases.calls)
            await until(lambda: len(leases.calls) >= failed + 3, "failed renewals after it")
            clock.now = 114.9  # 9.9 s after the slow renewal began
            assert e.may_write() and not holding.done()
            clock.now = 115.1  # 10.1 s after it began, 2.1 s after its answer
            assert not e.may_write()
            await asyncio.wait_for(holding, timeout=10)
        finally:
            holding.cancel()
        assert not e.is_leader and master(registry) == 0.0

    async def test_a_renewal_is_one_update_of_the_lease_as_last_written(self) -> None:
        leases, clock = MemoryLeases(), Clock()
        e, _ = elector(leases, clock)
        await e.acquire()  # GET, POST
        holding = asyncio.create_task(e.hold())
        try:
            await until(lambda: len(leases.calls) >= 7, "renewals")
        finally:
            holding.cancel()
        assert [m for m, _ in leases.calls[2:7]] == ["PUT"] * 5  # no read before each write
        assert e.is_leader and leases.spec()["holderIdentity"] == "me"

    async def test_a_lease_changed_by_someone_else_is_read_and_judged_before_renewing(self) -> None:
        leases, clock = MemoryLeases(), Clock()
        e, _ = elector(leases, clock)
        await e.acquire()
        holding = asyncio.create_task(e.hold())
        try:
            await until(lambda: len(leases.calls) >= 4, "renewals")
            leases.put_spec({})  # an admin's write: a new resourceVersion, the same holder
            changed = len(leases.calls)
            await until(lambda: len(leases.calls) >= changed + 3, "the renewal after the change")
            assert [m for m, _ in leases.calls[changed : changed + 3]] == ["PUT", "GET", "PUT"]  # 409, read, renew
            assert not holding.done() and e.is_leader
        finally:
            holding.cancel()

    async def test_a_leader_keeps_the_lease_when_each_request_takes_nearly_half_the_renew_deadline(self) -> None:
        # Virtual time: sleeps and requests move only `clock`. Every request of a
        # saturated API server takes 4.5 s of the 10 s renew deadline (retry 2 s).
        # One request per renewal, each due a retry period after the last one
        # *began*, keeps every renewal inside the deadline. A read before each
        # write (9 s per renewal), or a retry period counted from the answer
        # (4.5 + 2 + 4.5 = 11 s), would miss it.
        leases, clock = MemoryLeases(), Clock()

        async def sleep(seconds: float) -> None:
            clock.now += seconds
            await asyncio.sleep(0)

        e = LeaderElector(
            request=leases, namespace="ns", name="lease", identity="me",
            lease_duration=15.0, renew_deadline=10.0, retry_period=2.0,
            registry=CollectorRegistry(), clock=clock, wall=lambda: NOW, rand=lambda: 0.0, sleep=sleep,
        )  # fmt: skip
        await e.acquire()
        open_at_answer: list[bool] = []

        async def saturated(method: str, path: str, *, body: dict[str, Any] | None = None) -> dict[str, Any]:
            clock.now += 4.5
            open_at_answer.append(e.may_write())  # False: a real deadline would have cut this request
            return await leases(method, path, body=body)

        e._request = saturated
        holding = asyncio.create_task(e.hold())
        try:
            await until(lambda: len(open_at_answer) >= 10, "ten renewals")
            assert all(open_at_answer), open_at_answer
            assert not holding.done() and e.is_leader
        finally:
            holding.cancel()

    async def test_a_renewal_reopens_the_fence(self) -> None:
        leases, clock = MemoryLeases(), Clock()
        e, _ = elector(leases, clock)
        await e.acquire()
        holding = asyncio.create_task(e.hold())
        try:
            clock.now += 9.0
            renewals = sum(1 for m, _ in leases.calls if m == "PUT")
            await until(lambda: sum(1 for m, _ in leases.calls if m == "PUT") > renewals, "a renewal")
            clock.now += 9.0  # 18 s after acquiring, 9 s after the renewal
            assert e.may_write()
        finally:
            holding.cancel()

    async def test_release_frees_the_lease_keeping_its_transitions(self) -> None:
        leases, clock = MemoryLeases(), Clock()
        leases.put_spec(LeaseRecord("", 1, "t0", "t0", 6).to_spec())
        e, registry = elector(leases, clock)
        await e.acquire()
        assert leases.spec()["leaseTransitions"] == 7
        assert await e.release()
        assert not e.is_leader and master(registry) == 0.0
        spec = leases.spec()
        assert (spec["holderIdentity"], spec["leaseDurationSeconds"], spec["leaseTransitions"]) == ("", 1, 7)

    async def test_release_leaves_a_lease_changed_by_someone_else_alone(self) -> None:
        leases, clock = MemoryLeases(), Clock()
        e, _ = elector(leases, clock)
        await e.acquire()
        leases.put_spec({"holderIdentity": "other", "renewTime": "t5"})
        assert not await e.release()
        assert leases.spec()["holderIdentity"] == "other"

    async def test_two_candidates_on_a_free_lease_elect_one(self) -> None:
        leases, clock = MemoryLeases(), Clock()
        a, _ = elector(leases, clock, "a")
        b, _ = elector(leases, clock, "b")
        ta, tb = asyncio.create_task(a.acquire()), asyncio.create_task(b.acquire())
        try:
            done, _ = await asyncio.wait({ta, tb}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
            assert len(done) == 1
            await until(lambda: gets(leases) >= 10, "the loser keeps trying")
            assert [a.is_leader, b.is_leader].count(True) == 1
            assert not (ta.done() and tb.done())
        finally:
            ta.cancel()
            tb.cancel()
        assert leases.spec()["holderIdentity"] == ("a" if a.is_leader else "b")


# The elector on its own thread, while the daemon's loop is busy ------------------------------


def busy(seconds: float) -> int:
    """CPU-bound Python on the calling thread (a worker deciding a huge job): holds the
    event loop for ``seconds`` and competes for the GIL the whole time."""
    end, spins = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        spins += sum(range(200))
    return spins


class Timed:
    """The store behind the elector, noting when each successful renewal began and on which thread."""

    def __init__(self, leases: MemoryLeases) -> None:
        self.leases = leases
        self.renewals: list[float] = []
        self.threads: set[str] = set()

    async def __call__(self, method: str, path: str, *, body: dict[str, Any] | None = None) -> dict[str, Any]:
        began = time.monotonic()
        self.threads.add(threading.current_thread().name)
        answer = await self.leases(method, path, body=body)
        if method in ("PUT", "POST"):
            self.renewals.append(began)
        return answer


LEASE, RENEW, RETRY = 1.5, 1.0, 0.1


def election_on(store: Timed) -> tuple[ElectionThread, list[str]]:
    opened_and_closed: list[str] = []

    @contextlib.asynccontextmanager
    async def opened() -> AsyncIterator[LeaderElector]:
        opened_and_closed.append(f"opened on {threading.current_thread().name}")
        yield LeaderElector(
            request=store, namespace="ns", name="lease", identity="me",
            lease_duration=LEASE, renew_deadline=RENEW, retry_period=RETRY, registry=CollectorRegistry(),
        )  # fmt: skip
        opened_and_closed.append(f"closed on {threading.current_thread().name}")

    return ElectionThread(opened), opened_and_closed


class TestElectionThread:
    async def test_renewals_keep_the_deadline_while_a_worker_holds_the_event_loop(self) -> None:
        store = Timed(MemoryLeases())
        election, _ = election_on(store)
        await election.start()
        holding: asyncio.Task[None] | None = None
        try:
            await asyncio.wait_for(election.acquire(), timeout=10)
            holding = asyncio.create_task(election.hold())
            await until(lambda: len(store.renewals) >= 3, "renewals")
            began = time.monotonic()
            busy(3 * RENEW)  # the daemon's loop runs nothing else for three renew deadlines
            ended = time.monotonic()
            assert election.is_leader and election.may_write()
            during = [t for t in store.renewals if began <= t <= ended]
            # Every renewal inside the deadline: at least one per renew deadline (about
            # one per retry period), the largest gap around the busy stretch below RENEW.
            assert len(during) >= 3, store.renewals
            edges = [t for t in store.renewals if t < began][-1:] + during
            gaps = [b - a for a, b in zip(edges, edges[1:], strict=False)] + [ended - during[-1]]
            print(f"\nFIGURE renewal gaps while the loop was busy {3 * RENEW:.0f}s: max {max(gaps):.3f}s, "
                  f"{len(during)} renewals (deadline {RENEW}s, retry {RETRY}s)")  # fmt: skip
            assert max(gaps) < RENEW, gaps
            await asyncio.sleep(0)
            assert not holding.done()
            assert store.threads == {"lease-renewal"}
        finally:
            if holding is not None:
                holding.cancel()
            await election.release()
            await election.close()

    async def test_release_stops_the_renewals_first_and_close_closes_the_client_on_its_thread(self) -> None:
        store = Timed(MemoryLeases())
        election, opened_and_closed = election_on(store)
        await election.start()
        await asyncio.wait_for(election.acquire(), timeout=10)
        holding = asyncio.create_task(election.hold())
        await until(lambda: len(store.renewals) >= 2, "renewals")
        holding.cancel()
        assert await election.release()
        calls = len(store.leases.calls)
        spec = store.leases.spec()
        assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("", 1)
        await election.close()
        assert opened_and_closed == ["opened on lease-renewal", "closed on lease-renewal"]
        assert len(store.leases.calls) == calls  # nothing renewed after the release
        assert not election.may_write()

    async def test_leadership_lost_on_the_thread_ends_hold_on_the_daemons_loop(self) -> None:
        store = Timed(MemoryLeases())
        election, _ = election_on(store)
        await election.start()
        try:
            await asyncio.wait_for(election.acquire(), timeout=10)
            holding = asyncio.create_task(election.hold())
            await until(lambda: len(store.renewals) >= 2, "renewals")
            store.leases.put_spec({"holderIdentity": "thief", "renewTime": "t9"})
            await asyncio.wait_for(holding, timeout=10)
            assert not election.is_leader and not election.may_write()
            assert not await election.release()
        finally:
            await election.close()
