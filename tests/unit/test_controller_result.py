"""The controller's worker loop follows the :class:`agent.agent.Result` a sync returns.

No API server is needed: the controller is built offline (its informers are
never started) and its agent is replaced by one that answers from a script,
so what is checked is the loop alone: a result that asks to look again later
brings the key back through ``add_after`` and is counted as controller-runtime
counts it (``requeue_after``), ``DONE`` is a ``success``, and a raise an
``error`` retried with backoff.
"""

from __future__ import annotations

import asyncio
from typing import cast

from kubernetes_asyncio.client import ApiClient

from agent.agent import DONE, Result
from model.records import JobKey
from ringcontroller.controller import QUEUE_NAME, Controller
from ringcontroller.metrics import REGISTRY
from ringcontroller.options import parse

KEY = JobKey("vcjob/ns/j")


class Scripted:
    """An agent whose sync returns (or raises) the next item of ``script``; then ``DONE``."""

    def __init__(self, script: list[Result | Exception]) -> None:
        self.script = script
        self.calls: list[float] = []
        self.finished = asyncio.Event()

    async def sync(self, key: JobKey) -> Result:
        self.calls.append(asyncio.get_running_loop().time())
        if not self.script:
            self.finished.set()
            return DONE
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    def status(self, key: JobKey) -> None:
        return None


def reconciles(result: str) -> float:
    value = REGISTRY.get_sample_value(
        "controller_runtime_reconcile_total", {"controller": QUEUE_NAME, "result": result}
    )
    return value or 0.0


async def test_the_loop_requeues_after_the_delay_the_result_asks_for() -> None:
    controller = Controller(api=cast(ApiClient, None), options=parse(["--workers", "1"]))
    agent = Scripted([Result.after(0.2), RuntimeError("boom")])
    controller.agent = agent  # type: ignore[assignment]
    before = {r: reconciles(r) for r in ("success", "requeue_after", "error")}
    controller.start_workers()
    controller.queue.add(KEY)
    try:
        await asyncio.wait_for(agent.finished.wait(), timeout=30)
    finally:
        await controller.stop(timeout=5)
    assert len(agent.calls) == 3  # requeued after the delay, then retried after the error
    assert agent.calls[1] - agent.calls[0] >= 0.2
    after = {r: reconciles(r) - before[r] for r in before}
    assert after == {"requeue_after": 1.0, "error": 1.0, "success": 1.0}
