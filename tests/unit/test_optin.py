"""Which opt-in tests a run selects: the PodGroup tests need a Kubernetes 1.37 control plane."""

from __future__ import annotations

import pytest

from tests.support.optin import podgroups_selected


@pytest.mark.parametrize(
    ("environ", "selected"),
    [
        ({}, False),
        ({"RING_DEVCLUSTER_KUBE": "1.35"}, False),
        ({"RING_DEVCLUSTER_KUBE": "v1.36.2"}, False),
        ({"RING_DEVCLUSTER_KUBE": "v1.37.2"}, True),
        ({"RING_DEVCLUSTER_KUBE": "1.37"}, True),
        ({"RING_DEVCLUSTER_KUBE": "v1.38.0"}, True),
        ({"RING_TEST_PODGROUPS": "1"}, True),
        ({"RING_TEST_PODGROUPS": "0", "RING_DEVCLUSTER_KUBE": "1.32"}, False),
    ],
    ids=["default", "1.35", "1.36", "v1.37.2 (the matrix)", "1.37", "1.38", "forced", "1.32"],
)
def test_podgroup_tests_run_from_kubernetes_1_37_or_when_asked(environ: dict[str, str], selected: bool) -> None:
    assert podgroups_selected(environ) is selected
