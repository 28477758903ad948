"""TF_CONFIG and the PyTorch variables for every role mix."""

from __future__ import annotations

from typing import Any

import pytest

from ranktable.clusterspec import STATUS_INITIALIZING, PodNotInSpec, SpecError
from ranktable.tfconfig import tf_config
from ranktable.torchenv import torch_env
from tests.support.specs import make_spec


def addr(rank: int) -> str:
    return f"127.1.0.{rank + 1}:{2222 + rank}"


CASES: list[Any] = [
    pytest.param(
        [("worker", 3)],
        "job-worker-2",
        {"cluster": {"worker": [addr(0), addr(1), addr(2)]}, "task": {"type": "worker", "index": 2}},
        id="worker-only",
    ),
    pytest.param(
        [("chief", 1), ("worker", 2)],
        "job-chief-0",
        {"cluster": {"chief": [addr(0)], "worker": [addr(1), addr(2)]}, "task": {"type": "chief", "index": 0}},
        id="chief+worker:chief",
    ),
    pytest.param(
        [("chief", 1), ("worker", 2)],
        "job-worker-0",
        {"cluster": {"chief": [addr(0)], "worker": [addr(1), addr(2)]}, "task": {"type": "worker", "index": 0}},
        id="chief+worker:worker-index-is-within-role",
    ),
    pytest.param(
        [("chief", 1), ("worker", 2), ("ps", 2)],
        "job-ps-1",
        {
            "cluster": {"chief": [addr(0)], "worker": [addr(1), addr(2)], "ps": [addr(3), addr(4)]},
            "task": {"type": "ps", "index": 1},
        },
        id="chief+worker+ps:ps",
    ),
    pytest.param(
        [("ps", 1), ("worker", 2)],
        "job-worker-1",
        {"cluster": {"worker": [addr(1), addr(2)], "ps": [addr(0)]}, "task": {"type": "worker", "index": 1}},
        id="ps-first-in-spec",
    ),
    pytest.param(
        [("chief", 1), ("worker", 2), ("evaluator", 1)],
        "job-worker-1",
        {"cluster": {"chief": [addr(0)], "worker": [addr(1), addr(2)]}, "task": {"type": "worker", "index": 1}},
        id="evaluator:trainers-do-not-see-it",
    ),
    pytest.param(
        [("chief", 1), ("worker", 2), ("evaluator", 1)],
        "job-evaluator-0",
        {"cluster": {"evaluator": [addr(3)]}, "task": {"type": "evaluator", "index": 0}},
        id="evaluator:sees-only-itself",
    ),
    pytest.param(
        [("trainer", 2)],
        "job-trainer-1",
        {"cluster": {"worker": [addr(0), addr(1)]}, "task": {"type": "worker", "index": 1}},
        id="custom-task-is-worker",
    ),
    pytest.param(
        [("master", 1), ("worker", 2)],
        "job-worker-0",
        {"cluster": {"worker": [addr(0), addr(1), addr(2)]}, "task": {"type": "worker", "index": 1}},
        id="custom-and-worker-share-one-list-by-rank",
    ),
    pytest.param(
        [("chief", 1), ("learner", 1), ("worker", 1)],
        "job-worker-0",
        {"cluster": {"chief": [addr(0)], "worker": [addr(1), addr(2)]}, "task": {"type": "worker", "index": 1}},
        id="chief+custom+worker",
    ),
]


@pytest.mark.parametrize(("tasks", "pod", "expected"), CASES)
def test_tf_config(tasks: list[tuple[str, int]], pod: str, expected: dict[str, Any]) -> None:
    config = tf_config(make_spec(tasks), pod=pod)
    assert config == expected
    assert list(config["cluster"]) == list(expected["cluster"])  # chief, worker, ps order


@pytest.mark.parametrize(
    ("tasks", "role"),
    [
        pytest.param([("chief", 2), ("worker", 1)], "chief", id="two-chiefs"),
        pytest.param([("worker", 1), ("evaluator", 2)], "evaluator", id="two-evaluators"),
    ],
)
def test_tensorflow_singleton_roles_are_enforced(tasks: list[tuple[str, int]], role: str) -> None:
    with pytest.raises(SpecError, match=f"at most one '{role}' task, the spec has 2"):
        tf_config(make_spec(tasks), pod="job-worker-0")


def test_tf_config_needs_a_completed_spec_and_a_member() -> None:
    with pytest.raises(SpecError, match="initializing, not completed"):
        tf_config(make_spec([("worker", 2)], status=STATUS_INITIALIZING), pod="job-worker-0")
    with pytest.raises(PodNotInSpec, match="job-worker-0, job-worker-1"):
        tf_config(make_spec([("worker", 2)]), pod="other")


@pytest.mark.parametrize(
    ("tasks", "pod", "rank"),
    [
        pytest.param([("worker", 2)], "job-worker-0", 0, id="worker-0-is-master"),
        pytest.param([("chief", 1), ("worker", 3)], "job-worker-2", 3, id="rank-counts-across-tasks"),
        pytest.param([("ps", 1), ("worker", 1)], "job-worker-0", 1, id="ps-first"),
    ],
)
def test_torch_env(tasks: list[tuple[str, int]], pod: str, rank: int) -> None:
    spec = make_spec(tasks)
    assert torch_env(spec, pod=pod) == {
        "MASTER_ADDR": "127.1.0.1",
        "MASTER_PORT": "2222",
        "RANK": str(rank),
        "WORLD_SIZE": str(len(spec.members)),
    }


def test_torch_env_needs_a_completed_spec_and_a_member() -> None:
    with pytest.raises(SpecError, match="not completed"):
        torch_env(make_spec([("worker", 2)], status=STATUS_INITIALIZING), pod="job-worker-0")
    with pytest.raises(PodNotInSpec, match="^pod 'nobody' is not in the cluster spec"):
        torch_env(make_spec([("worker", 2)]), pod="nobody")
