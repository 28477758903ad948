"""Restart in place: 3 real TensorFlow workers under ``ring-launch --supervise`` survive a pod replacement.

Mid-training one worker's pod is deleted and recreated (see
:mod:`tests.support.recovery`). The controller writes the new spec; the two
surviving supervisors stop their trainers and start them again with the new
``TF_CONFIG`` (``RING_RESTART_COUNT=1``), the replacement pod's launcher
starts its trainer, and all three resume from the last checkpoint and finish
with identical weights. The same job then recovers the other way, by a
whole-job restart (every pod recreated at a new job version, as Volcano
``RestartJob`` or a JobSet restart does), and both recovery times are
printed (figures, not assertions).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support import tfharness
from tests.support.controllerproc import ControllerProcess
from tests.support.recovery import CHECKPOINT_EVERY, FAIL_AT, STEPS, WORKERS, TrainingJob, recovery_seconds

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cifar_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tfharness.make_cifar10(tmp_path_factory.mktemp("cifar10"), per_batch=64, seed=5)


def _check_resumed_in_sync(results: dict[int, dict[str, Any]], logs: str) -> int:
    """Every worker resumed from the same checkpoint, finished every step, holds the same weights."""
    resumed = {r["resumed_from_step"] for r in results.values()}
    assert len(resumed) == 1, f"workers resumed from different checkpoints {resumed}\n{logs}"
    step = resumed.pop()
    assert step >= FAIL_AT - FAIL_AT % CHECKPOINT_EVERY and step % CHECKPOINT_EVERY == 0, logs
    assert all(r["last_step"] == STEPS and r["workers"] == WORKERS for r in results.values()), logs
    assert len({r["weights_sha256"] for r in results.values()}) == 1, logs
    assert len({tuple(r["losses"]) for r in results.values()}) == 1, logs
    return int(step)


def test_survivors_restart_in_place_and_resume_from_the_checkpoint(
    k8s: Any, namespace: str, kubeconfig: Path, controller: ControllerProcess, tmp_path: Path, cifar_dir: Path
) -> None:
    def run(
        name: str, *, supervise: bool, recover: Callable[[TrainingJob], float]
    ) -> tuple[dict[int, dict[str, Any]], str, float]:
        """Train job ``name`` to step :data:`FAIL_AT`, break it with ``recover``, train to the end: the
        results per worker, the job's description (for messages) and when ``recover`` began."""
        job = TrainingJob(
            k8s=k8s,
            namespace=namespace,
            kubeconfig=str(kubeconfig),
            name=name,
            tmp=tmp_path,
            cifar=cifar_dir,
            supervise=supervise,
        )
        try:
            job.start()
            job.wait_for_step(FAIL_AT)
            began = recover(job)
            results = job.finish()
            logs = job.describe()
        finally:
            job.stop()
        return results, logs, began

    results, logs, t0 = run("inplace", supervise=True, recover=lambda job: job.replace_one(1))
    step = _check_resumed_in_sync(results, logs)
    # The survivors were restarted by their supervisors; the replacement is a first start.
    assert [results[i]["restart_count"] for i in range(WORKERS)] == [1, 0, 1], logs
    survivor_tf = [results[i]["tf_config"]["cluster"]["worker"] for i in range(WORKERS)]
    assert survivor_tf[0] == survivor_tf[1] == survivor_tf[2], logs  # one new ring, the replacement's address in it
    in_place_s = recovery_seconds(results, t0)

    whole_results, whole_logs, t1 = run("wholejob", supervise=False, recover=TrainingJob.restart_whole_job)
    _check_resumed_in_sync(whole_results, whole_logs)
    assert [whole_results[i]["restart_count"] for i in range(WORKERS)] == [0, 0, 0]
    whole_s = recovery_seconds(whole_results, t1)
    print(
        f"\nFIGURE recovery, pod deleted -> every worker training again (s): "
        f"restart in place {in_place_s:.2f}, whole-job restart {whole_s:.2f} "
        f"(3 TF workers, resumed from step {step}, kwok pods)"
    )
