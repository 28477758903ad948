"""The chaos run's fencing check on a synthetic audit log: which ConfigMap writes had no Lease behind them."""

from __future__ import annotations

import json
from pathlib import Path

from tests.chaos.audit import audit_check

NS = "chaos-lead"
USERS = {"user-a": "chaos-a_", "user-b": "chaos-b_"}


def lease(at: str, holder: str, *, user: str = "user-a", code: int = 200, duration: int = 15) -> dict[str, object]:
    return {
        "stage": "ResponseComplete",
        "verb": "update",
        "user": {"username": user},
        "objectRef": {"resource": "leases", "namespace": NS, "name": "ring-controller"},
        "responseStatus": {"code": code},
        "requestReceivedTimestamp": at,
        "stageTimestamp": at,
        "requestObject": {"spec": {"holderIdentity": holder, "leaseDurationSeconds": duration}},
    }


def write(at: str, user: str, *, code: int = 200, namespace: str = NS) -> dict[str, object]:
    return {
        "stage": "ResponseComplete",
        "verb": "update",
        "user": {"username": user},
        "objectRef": {"resource": "configmaps", "namespace": namespace, "name": "rings-config-x"},
        "responseStatus": {"code": code},
        "requestReceivedTimestamp": at,
        "stageTimestamp": at,
    }


def check(tmp_path: Path, *events: dict[str, object]) -> tuple[int, list[str]]:
    path = tmp_path / "audit.log"
    path.write_text("\n".join(json.dumps(e) for e in events) + "\nnot json\n")
    return audit_check(path, NS, USERS)


def t(seconds: float) -> str:
    return f"2026-12-01T10:00:{seconds:09.6f}Z"


def test_writes_by_the_holder_within_its_lease_are_fine(tmp_path: Path) -> None:
    assert check(tmp_path, lease(t(0), "chaos-a_1"), write(t(1), "user-a"), lease(t(10), "chaos-a_1"),
                 write(t(20), "user-a")) == (2, [])  # fmt: skip


def test_a_write_by_the_other_replica_is_a_non_leader_write(tmp_path: Path) -> None:
    writes, bad = check(tmp_path, lease(t(0), "chaos-a_1"), write(t(1), "user-b"))
    assert writes == 1 and len(bad) == 1 and "held by chaos-a_1" in bad[0]


def test_a_write_after_the_lease_ran_out_is_a_non_leader_write(tmp_path: Path) -> None:
    _, bad = check(tmp_path, lease(t(0), "chaos-a_1", duration=15), write(t(16), "user-a"))
    assert len(bad) == 1 and "expired" in bad[0]


def test_the_holder_changes_with_each_successful_lease_write_only(tmp_path: Path) -> None:
    _, bad = check(
        tmp_path,
        lease(t(0), "chaos-a_1"),
        lease(t(1), "chaos-b_1", user="user-b", code=409),  # lost the race: not the holder
        write(t(2), "user-a"),
        lease(t(3), "chaos-b_1", user="user-b"),
        write(t(4), "user-a"),  # the old leader, after the take-over
        write(t(5), "user-b"),
        lease(t(6), ""),  # released
        write(t(7), "user-b"),
    )
    assert [b.split()[1] for b in bad] == ["user-a", "user-b"]


def test_failed_writes_other_namespaces_and_other_users_are_ignored(tmp_path: Path) -> None:
    assert check(
        tmp_path,
        lease(t(0), "chaos-a_1"),
        write(t(1), "user-b", code=409),
        write(t(1), "user-b", namespace="elsewhere"),
        write(t(1), "someone-else"),
    ) == (0, [])
