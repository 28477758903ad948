"""``--touch-max-members`` on the real control plane: a job over the ceiling costs no pod writes and says so."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from model.keys import EPOCH_ANNOTATION
from tests.support.controllerproc import ControllerProcess
from tests.support.factories import pod_template, volcano_job
from tests.support.kubehelp import all_members, create_pods, create_volcano_job, events_for, wait_for, wait_spec

pytestmark = pytest.mark.integration


def _epochs(k8s: Any, namespace: str, spec: dict[str, Any]) -> list[str | None]:
    return [
        (k8s.core.read_namespaced_pod(m["pod"], namespace).metadata.annotations or {}).get(EPOCH_ANNOTATION)
        for m in spec["members"]
    ]


def test_a_job_over_the_touch_ceiling_gets_no_pod_writes_and_a_touch_skipped_event(
    k8s: Any, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    controller = ControllerProcess(
        kubeconfig=str(kubeconfig),
        namespace=namespace,
        log_path=tmp_path / "c.log",
        extra=["--touch-max-members", "2"],
    )
    controller.start()
    try:
        specs = {}
        for name, workers in (("small", 2), ("big", 3)):
            job = create_volcano_job(
                k8s,
                namespace,
                volcano_job(name, tasks=[("worker", workers)], template=pod_template(configmap=f"rings-config-{name}")),
            )
            create_pods(k8s, job, all_members(job))
            specs[name] = wait_spec(k8s, namespace, f"rings-config-{name}")
        skipped = wait_for(
            lambda: [e for e in events_for(k8s, namespace, "big") if e.reason == "TouchSkipped"],
            what="the TouchSkipped Event",
        )
        assert skipped[0].message.startswith("3 members is over --touch-max-members 2: 3 pods mounting the spec")
        wait_for(
            lambda: _epochs(k8s, namespace, specs["small"]) == [str(specs["small"]["epoch"])] * 2 or None,
            what="the small job's members touched",
        )
        assert _epochs(k8s, namespace, specs["big"]) == [None, None, None]
        assert controller.metric("ringcontroller_pod_touches_total", result="skipped") == 3
        assert controller.metric("ringcontroller_pod_touches_total", result="ok") == 2
    finally:
        controller.stop(signal.SIGTERM)
