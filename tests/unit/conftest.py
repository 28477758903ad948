"""Hypothesis profiles for the property tests.

``ci`` (the default) is derandomized (the same examples on every run, so a
failure in CI reproduces locally) and small enough that all property tests
take a few seconds. ``deep`` explores: ``HYPOTHESIS_PROFILE=deep pytest
tests/unit -k propert`` runs many more, random examples.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=60,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("deep", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
