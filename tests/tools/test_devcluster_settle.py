"""ensure_up's first look at a recorded cluster: a slow health check is asked again, a dead process is not."""

from __future__ import annotations

from pathlib import Path

from ringdevcluster.cluster import ComponentStatus, settled_status


def _status(name: str, *, running: bool = True, healthy: bool = True) -> ComponentStatus:
    return ComponentStatus(
        name=name, pid=1 if running else None, running=running, healthy=healthy, detail="", log=Path("x")
    )


def test_a_slow_health_check_of_a_running_cluster_is_asked_again() -> None:
    answers = [
        [_status("etcd"), _status("kube-apiserver", healthy=False)],  # /readyz timed out under load
        [_status("etcd"), _status("kube-apiserver")],
    ]
    said: list[str] = []
    found = settled_status(lambda: answers.pop(0), grace=5, say=said.append, interval=0)
    assert all(s.healthy for s in found)
    assert len(said) == 1 and "kube-apiserver" in said[0]


def test_a_process_that_is_not_running_is_not_waited_for() -> None:
    calls: list[int] = []

    def status() -> list[ComponentStatus]:
        calls.append(1)
        return [_status("etcd", running=False, healthy=False), _status("kube-apiserver")]

    found = settled_status(status, grace=5, say=lambda _m: None, interval=0)
    assert len(calls) == 1 and not found[0].healthy


def test_the_wait_ends_after_the_grace() -> None:
    found = settled_status(lambda: [_status("etcd", healthy=False)], grace=0.05, say=lambda _m: None, interval=0.01)
    assert not found[0].healthy
