"""The node chaos run's judges on plain data: trainer runs from kubelet-timestamped logs, recovery, mixed epochs."""

from __future__ import annotations

from tests.chaos.nodelogs import TrainerRun, mixed_epochs, parse_runs, stepped_since

LOG = """\
2026-12-01T23:40:00.000000001Z RUN ring_epoch=2 restart=0
2026-12-01T23:40:05.5Z strategy ready workers=3 task=worker:1
2026-12-01T23:40:06.250000000Z step=1 loss=2.300000 epoch=1
2026-12-01T23:40:07Z step=2 loss=2.200000 epoch=1
2026-12-01T23:41:00.000000000Z RUN ring_epoch=3 restart=1
2026-12-01T23:41:10.000000000Z resumed from /checkpoints/ckpt-0 step=0
2026-12-01T23:41:11.000000000Z step=1 loss=2.300000 epoch=1
2026-12-01T23:41:11.500000000Z done steps=1 loss=2.3 test_accuracy=0.1 weights_sha256=ab12 weights_sum=1.5
2026-12-01T23:41:12.000000000Z RESULT {"last_step": 1, "weights_sha256": "ab"}
"""

T0 = 1796168400.0  # 2026-12-01T23:40:00Z


def test_runs_epochs_steps_and_the_result_are_read_with_kubelet_timestamps() -> None:
    first, second = parse_runs("tf-worker-1", LOG)
    assert (first.epoch, first.started) == (2, T0)
    assert first.steps == [(1, T0 + 6.25), (2, T0 + 7.0)] and first.result is None
    assert (second.epoch, second.steps, second.result) == (
        3,
        [(1, T0 + 71.0)],
        {"last_step": 1, "weights_sha256": "ab"},
    )


def test_lines_before_the_first_run_and_without_a_timestamp_are_ignored() -> None:
    assert parse_runs("p", "step=1 loss=1\n2026-12-01T23:40:07Z step=2 loss=1\n") == []


def run(pod: str, epoch: int, *steps: tuple[int, float]) -> TrainerRun:
    return TrainerRun(pod, epoch, steps[0][1] - 1 if steps else 0.0, list(steps))


def test_recovery_waits_for_every_member_and_takes_each_ones_first_step_after_the_fault() -> None:
    runs = [run("a", 1, (5, 100.0), (6, 130.0), (7, 131.0)), run("b", 2, (6, 140.0))]
    assert stepped_since(runs, ["a", "b", "c"], 120.0) == {"a": 130.0, "b": 140.0}
    assert stepped_since(runs, ["a"], 200.0) == {}


def test_after_a_fault_that_ends_the_trainers_only_new_runs_count() -> None:
    # The old run of "a" still finished step 6 after the fault; its new run stepped at 150.
    runs = [run("a", 1, (5, 100.0), (6, 121.0)), run("a", 2, (6, 150.0)), run("b", 2, (6, 150.1))]
    assert stepped_since(runs, ["a", "b"], 120.0, restarted=True) == {"a": 150.0, "b": 150.1}
    assert stepped_since(runs, ["a", "b"], 120.0) == {"a": 121.0, "b": 150.1}


def test_a_step_done_together_by_runs_of_different_epochs_is_mixed() -> None:
    same = [run("a", 2, (7, 100.0)), run("b", 2, (7, 100.2)), run("c", 2, (7, 100.1))]
    assert mixed_epochs(same, [(50.0, 2)])["steps_with_mixed_epochs"] == 0
    mixed = [run("a", 2, (7, 100.0)), run("b", 3, (7, 100.2)), run("c", 2, (7, 100.1))]
    assert mixed_epochs(mixed, [(50.0, 2)])["steps_with_mixed_epochs"] == 1


def test_the_same_step_number_again_after_a_resume_is_another_step() -> None:
    # Step 7 at epoch 2, then (resumed from a checkpoint) step 7 at epoch 3 a minute later.
    runs = [run("a", 2, (7, 100.0)), run("b", 2, (7, 100.1)), run("a", 3, (7, 160.0)), run("b", 3, (7, 160.1))]
    judged = mixed_epochs(runs, [(50.0, 2), (120.0, 3)])
    assert (judged["steps_with_mixed_epochs"], judged["steps_after_a_newer_epoch"]) == (0, 0)


def test_a_step_by_a_superseded_epoch_counts_after_the_lag() -> None:
    runs = [run("a", 2, (8, 121.0), (9, 122.0))]
    judged = mixed_epochs(runs, [(50.0, 2), (120.0, 3)], lag=1.5)
    assert (judged["steps_after_a_newer_epoch"], judged["old_epoch_stepped_on_s"]) == (1, 2.0)
