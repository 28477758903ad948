"""The API server's version from ``/version`` bodies, judged against the floor (ringcontroller.serverinfo)."""

from __future__ import annotations

from typing import Any

import pytest

from ringcontroller.serverinfo import (
    EXIT_SERVER_TOO_OLD,
    MIN_VERSION,
    OPTIONAL_APIS,
    ServerVersion,
    parse_version,
    served_version,
    too_old_message,
)

# Bodies as servers send them (trimmed to the fields read).
UPSTREAM_135 = {"major": "1", "minor": "35", "gitVersion": "v1.35.4", "platform": "linux/amd64"}
EKS_131 = {"major": "1", "minor": "31+", "gitVersion": "v1.31.9-eks-5e0fdde"}
GKE_132 = {"major": "1", "minor": "32+", "gitVersion": "v1.32.4-gke.1415000"}
UNSTAMPED = {"major": "", "minor": "", "gitVersion": "v0.0.0-master+$Format:%H$"}


@pytest.mark.parametrize(
    ("body", "expected", "supported"),
    [
        pytest.param(UPSTREAM_135, (1, 35), True, id="upstream-1.35"),
        pytest.param(GKE_132, (1, 32), True, id="plus-suffix-at-the-floor"),
        pytest.param(EKS_131, (1, 31), False, id="plus-suffix-below-the-floor"),
        pytest.param({"gitVersion": "v1.33.2"}, (1, 33), True, id="git-version-only"),
        pytest.param({"major": "1", "minor": "", "gitVersion": "v1.30.0"}, (1, 30), False, id="empty-minor"),
        pytest.param({"major": "2", "minor": "0", "gitVersion": "v2.0.0"}, (2, 0), True, id="a-major-above"),
        pytest.param(
            {**UPSTREAM_135, "emulationMajor": "1", "emulationMinor": "31", "minCompatibilityMinor": "30"},
            (1, 31),
            False,
            id="emulating-below-the-floor",
        ),
        pytest.param(
            {**UPSTREAM_135, "emulationMajor": "1", "emulationMinor": "35"}, (1, 35), True, id="emulating-itself"
        ),
    ],
)
def test_parse_version_reads_the_api_surface(body: dict[str, Any], expected: tuple[int, int], supported: bool) -> None:
    found = parse_version(body)
    assert found is not None
    assert (found.major, found.minor) == expected
    assert found.supported is supported


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(UNSTAMPED, id="unstamped-build"),
        pytest.param({}, id="empty"),
        pytest.param({"major": "one", "minor": "x", "gitVersion": "latest"}, id="words"),
    ],
)
def test_a_version_that_names_none_is_none(body: dict[str, Any]) -> None:
    assert parse_version(body) is None


def test_the_floor_is_1_32_and_1_31_is_below_it() -> None:
    assert MIN_VERSION == (1, 32)
    assert ServerVersion(1, 32, "v1.32.0").supported
    assert not ServerVersion(1, 31, "v1.31.14").supported
    assert ServerVersion(1, 38, "v1.38.0").supported


def test_an_emulated_version_is_shown_as_such() -> None:
    found = parse_version({**UPSTREAM_135, "emulationMajor": "1", "emulationMinor": "33"})
    assert found is not None and found.emulated
    assert "v1.35.4" in str(found) and "emulating 1.33" in str(found)


def test_the_refusal_names_what_was_found_what_is_needed_and_the_exit_code() -> None:
    found = parse_version(EKS_131)
    assert found is not None
    message = too_old_message(found)
    assert "1.31" in message and "v1.31.9-eks-5e0fdde" in message
    assert "1.32 or newer" in message
    assert f"exit {EXIT_SERVER_TOO_OLD}" in message
    assert EXIT_SERVER_TOO_OLD not in (0, 1, 2)  # not success, a crash, or argparse's usage error


def test_every_optional_api_names_the_feature_it_turns_off() -> None:
    names = [api.name for api in OPTIONAL_APIS]
    assert len(set(names)) == len(names)
    assert {"hypernodes", "trainingruntimes", "validatingadmissionpolicies"} <= set(names)
    for api in OPTIONAL_APIS:
        assert "/" in api.group_version and api.resource and api.feature and api.hint


def test_resource_claims_are_read_at_the_newest_version_the_server_serves() -> None:
    claims = next(api for api in OPTIONAL_APIS if api.name == "resourceclaims")
    every = {
        "resource.k8s.io/v1": {"resourceclaims", "deviceclasses"},
        "resource.k8s.io/v1beta2": {"resourceclaims"},
        "resource.k8s.io/v1beta1": {"resourceclaims"},
    }
    assert served_version(claims, every) == "resource.k8s.io/v1"  # 1.34 and newer
    assert served_version(claims, {**every, "resource.k8s.io/v1": set()}) == "resource.k8s.io/v1beta2"  # 1.33
    assert served_version(claims, {"resource.k8s.io/v1beta1": {"resourceclaims"}}) == "resource.k8s.io/v1beta1"
    # A group version that lists other resources only does not count; none served: None (the feature is off).
    assert served_version(claims, {"resource.k8s.io/v1": {"deviceclasses"}}) is None
    assert served_version(claims, {}) is None
    hypernodes = next(api for api in OPTIONAL_APIS if api.name == "hypernodes")
    assert hypernodes.group_versions == (hypernodes.group_version,)  # no older version to fall back to
