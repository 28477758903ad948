"""The DNS-probing baseline (build/examples/baseline/dns_probe.py): its discovery rule on plain data.

The baseline is what the benchmark compares ring-controller with, so its rule
must be the seed's: names probed in index order, a count accepted once it is
at least two and two consecutive rounds agree, every 5 s.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "build" / "examples" / "baseline" / "dns_probe.py"
_spec = importlib.util.spec_from_file_location("dns_probe", _PATH)
assert _spec is not None and _spec.loader is not None
dns_probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dns_probe)


class Clock:
    """Probe rounds against a schedule: worker i resolves from round ``ready[i]`` on."""

    def __init__(self, ready: list[int]) -> None:
        self.ready = ready
        self.round = 1
        self.sleeps: list[float] = []

    def resolve(self, name: str) -> bool:
        index = int(name.split(".")[0].rsplit("-", 1)[1])
        return index < len(self.ready) and self.ready[index] <= self.round

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.round += 1


def run(ready: list[int], attempts: int = 60) -> tuple[int, Clock]:
    clock = Clock(ready)
    lines: list[str] = []
    say: Callable[[str], None] = lines.append
    found = dns_probe.discover_workers("tj", "ns", resolve=clock.resolve, sleep=clock.sleep, attempts=attempts, say=say)
    return found, clock


@pytest.mark.parametrize(
    ("ready", "found", "rounds"),
    [
        ([1, 1, 1], 3, 2),  # all there: the second round confirms
        ([1, 1, 2, 2], 4, 3),  # two appear one round late: counts 2, 4, 4
        ([1, 3, 3], 3, 4),  # one worker alone first (never accepted), then 3, 3
    ],
    ids=["all-at-once", "late-pair", "lone-first"],
)
def test_accepts_after_two_equal_rounds_of_at_least_two(ready: list[int], found: int, rounds: int) -> None:
    got, clock = run(ready)
    assert got == found
    assert clock.round == rounds and clock.sleeps == [5.0] * (rounds - 1)


def test_a_worker_later_than_two_rounds_is_left_out() -> None:
    # Worker 2's name resolves from round 3 on: rounds 1 and 2 agree on 2 workers.
    got, _ = run([1, 1, 3])
    assert got == 2


def test_a_gap_hides_every_later_worker() -> None:
    # Worker 1 is late: probing stops at the first failure, so 2 and 3 are not seen either.
    got, clock = run([1, 4, 1, 1])
    assert got == 4 and clock.round == 5


def test_one_worker_is_never_enough() -> None:
    with pytest.raises(dns_probe.DiscoveryFailed, match=r"^no stable worker count after 5 attempts \(last: 1\)$"):
        run([1], attempts=5)


def test_hostname_and_tf_config_use_dns_names() -> None:
    assert dns_probe.parse_hostname("tf-job-node-0-3") == ("tf-job", 3)
    with pytest.raises(ValueError, match="^hostname 'tf-job-worker-3' is not <trainjob>-node-0-<index>$"):
        dns_probe.parse_hostname("tf-job-worker-3")
    config = dns_probe.tf_config("tj", "ns", 1, 2, 12345)
    assert config == {
        "cluster": {
            "worker": ["tj-node-0-0.tj.ns.svc.cluster.local:12345", "tj-node-0-1.tj.ns.svc.cluster.local:12345"]
        },
        "task": {"type": "worker", "index": 1},
    }
