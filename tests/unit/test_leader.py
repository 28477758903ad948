"""Leader election rules on plain data: the Lease record, its transitions, expiry.

The elector's I/O runs against the real API server in
``tests/integration/test_operations.py``; here are the rules it applies.
"""

from __future__ import annotations

import datetime as dt

import pytest

from ringcontroller.leader import (
    LeaderElector,
    LeaseRecord,
    Observation,
    default_identity,
    default_namespace,
    micro_time,
    next_record,
    released_record,
)

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
