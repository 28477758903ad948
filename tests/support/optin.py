"""Which opt-in test groups a run selects (read by tests/conftest.py; plain functions, no cluster)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

#: The first Kubernetes minor that serves PodGroups (scheduling.k8s.io/v1beta1), in the dev cluster's flags too.
PODGROUPS_MINOR = 37


def podgroups_selected(environ: Mapping[str, str] = os.environ) -> bool:
    """True when the ``podgroups`` tests run: ``RING_TEST_PODGROUPS=1``, or ``RING_DEVCLUSTER_KUBE``
    names Kubernetes 1.37 or newer (``build/matrix.sh`` sets it per release; ``build/podgroups.sh``)."""
    if environ.get("RING_TEST_PODGROUPS") == "1":
        return True
    match = re.match(r"v?1\.(\d+)", environ.get("RING_DEVCLUSTER_KUBE", ""))
    return bool(match) and int(match.group(1)) >= PODGROUPS_MINOR
