"""What the API server is: its version against the supported floor, and the optional APIs it serves.

Start-up asks ``/version`` once (retried while the server is unreachable,
like discovery). A server below :data:`MIN_VERSION` is refused before any
watch starts: the daemon logs the version it found and the one it needs and
exits :data:`EXIT_SERVER_TOO_OLD`, which Kubernetes shows as the container's
exit code (its restarts stay in CrashLoopBackOff until the server is
upgraded). A server whose version cannot be read (a build from source that
was not stamped says ``v0.0.0``) is let through with a warning: it may well
serve everything.

The version read is the API surface the server offers: a server that
emulates an older minor (``--emulated-version``, whose ``/version`` then
carries ``emulationMajor``/``emulationMinor``) is judged by that minor.
Managed offerings append a ``+`` to the minor (``"32+"``); it is ignored.

Optional APIs (:data:`OPTIONAL_APIS`): what a server lacks turns off the
feature that needs it, with one log line saying so, and the gauge
``ringcontroller_api_available{api}`` (1 served, 0 not) shows it; the rest
of the daemon runs as usual. An API that older releases serve at an older
version with the fields the daemon reads (DRA's ResourceClaims:
``resource.k8s.io/v1`` from 1.34, ``v1beta2`` in 1.33, ``v1beta1`` in 1.32,
where the cluster enables it) is used at the newest version the server
serves (:func:`served_version`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Final

from model import hypernode, podgroup, trainjob
from ringcontroller.resource import RESOURCE_CLAIMS, RESOURCE_CLAIMS_OLDER

__all__ = [
    "EXIT_SERVER_TOO_OLD",
    "MIN_VERSION",
    "OPTIONAL_APIS",
    "OptionalApi",
    "ServerVersion",
    "parse_version",
    "served_version",
    "too_old_message",
]

MIN_VERSION: Final = (1, 32)
"""The oldest Kubernetes minor the daemon runs against (major, minor)."""

EXIT_SERVER_TOO_OLD: Final = 3
"""The exit code when the API server is older than :data:`MIN_VERSION`."""

_NUMBER = re.compile(r"(\d+)")
_GIT_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.\d+)?")


@dataclasses.dataclass(frozen=True)
class ServerVersion:
    """An API server's version as ``/version`` reports it.

    ``major``/``minor`` are the API surface's (the emulated minor where the
    server emulates one); ``git_version`` is the binary's release string;
    ``emulated`` is True when the two differ by emulation.
    """

    major: int
    minor: int
    git_version: str
    emulated: bool = False

    @property
    def supported(self) -> bool:
        """True when this version is :data:`MIN_VERSION` or newer."""
        return (self.major, self.minor) >= MIN_VERSION

    def __str__(self) -> str:
        if self.emulated:
            return f"{self.major}.{self.minor} (binary {self.git_version}, emulating {self.major}.{self.minor})"
        return f"{self.major}.{self.minor} ({self.git_version})" if self.git_version else f"{self.major}.{self.minor}"


def _number(value: Any) -> int | None:
    """The leading digits of a ``/version`` field (``"32+"`` is 32); None when it has none."""
    match = _NUMBER.match(str(value)) if value is not None else None
    return int(match.group(1)) if match else None


def parse_version(body: Mapping[str, Any]) -> ServerVersion | None:
    """The version in a ``/version`` response body; None when it names none.

    Reads ``emulationMajor``/``emulationMinor`` when both are numbers, else
    ``major``/``minor``, else the ``vX.Y`` at the start of ``gitVersion``.
    A version of 0 (an unstamped build, ``v0.0.0``) counts as none.
    """
    git = str(body.get("gitVersion") or "")
    binary: tuple[int, int] | None = None
    major, minor = _number(body.get("major")), _number(body.get("minor"))
    if major is not None and minor is not None:
        binary = (major, minor)
    else:
        match = _GIT_VERSION.match(git)
        if match:
            binary = (int(match.group(1)), int(match.group(2)))
    em_major, em_minor = _number(body.get("emulationMajor")), _number(body.get("emulationMinor"))
    if em_major and em_minor is not None:
        return ServerVersion(em_major, em_minor, git, emulated=binary != (em_major, em_minor))
    if binary is None or binary[0] == 0:
        return None
    return ServerVersion(binary[0], binary[1], git)


def too_old_message(found: ServerVersion) -> str:
    """The one line a refused start-up logs: what was found, what is needed, what to do."""
    need = ".".join(map(str, MIN_VERSION))
    return (
        f"the API server is Kubernetes {found}; ring-controller needs {need} or newer "
        f"(exit {EXIT_SERVER_TOO_OLD}): upgrade the cluster's control plane, or run a ring-controller "
        "release that supports this version"
    )


@dataclasses.dataclass(frozen=True)
class OptionalApi:
    """An API the daemon uses where the server serves it.

    ``name`` labels the gauge and the log line; ``group_version`` and
    ``resource`` are looked up by discovery; ``older`` lists older group
    versions (newest first) that serve the same resource with the fields the
    daemon reads, used when ``group_version`` is not served; ``feature`` says
    what is off without it and ``hint`` how to get it.
    """

    name: str
    group_version: str
    resource: str
    feature: str
    hint: str
    older: tuple[str, ...] = ()

    @property
    def group_versions(self) -> tuple[str, ...]:
        """``group_version`` then ``older``: the versions discovery looks up, in preference order."""
        return (self.group_version, *self.older)


def served_version(api: OptionalApi, served: Mapping[str, set[str] | frozenset[str]]) -> str | None:
    """The newest of ``api.group_versions`` whose discovery document (``served``: group version to
    its resources' names) lists ``api.resource``; None when none does."""
    for group_version in api.group_versions:
        if api.resource in served.get(group_version, ()):
            return group_version
    return None


OPTIONAL_APIS: Final = (
    OptionalApi(
        name="hypernodes",
        group_version=f"{hypernode.GROUP}/{hypernode.VERSION}",
        resource=hypernode.PLURAL,
        feature="HyperNode paths in topology rank order (node labels are still used)",
        hint="install Volcano's network topology CRD (HyperNode), then restart",
    ),
    OptionalApi(
        name="trainingruntimes",
        group_version=f"{trainjob.GROUP}/{trainjob.VERSION}",
        resource=trainjob.RUNTIME_PLURAL,
        feature="a TrainJob's node count from its ClusterTrainingRuntime (TrainJobs that set numNodes still work)",
        hint="install Kubeflow Trainer's CRDs, then restart",
    ),
    OptionalApi(
        name="resourceclaims",
        group_version=f"{RESOURCE_CLAIMS.group}/{RESOURCE_CLAIMS.version}",
        resource=RESOURCE_CLAIMS.plural,
        feature="members' addresses from a DRA-allocated NIC (the ring-controller.io/network-claim annotation)",
        hint=(
            "Kubernetes 1.34 or newer serves resource.k8s.io/v1 (DRA); 1.32 and 1.33 serve v1beta1 (v1beta2) "
            "when the DynamicResourceAllocation and DRAResourceClaimDeviceStatus feature gates and the API "
            "(--runtime-config) are on; then restart"
        ),
        # The same status.devices[].networkData in each (alpha in 1.32, beta in 1.33, GA in 1.34+).
        older=tuple(f"{r.group}/{r.version}" for r in RESOURCE_CLAIMS_OLDER),
    ),
    OptionalApi(
        name="podgroups",
        group_version=f"{podgroup.GROUP}/{podgroup.VERSION}",
        resource=podgroup.PLURAL,
        feature="PodGroups as jobs (pods naming their group in spec.schedulingGroup); the other kinds are served",
        hint=(
            "Kubernetes 1.37 or newer with the beta API on: kube-apiserver "
            "--runtime-config=scheduling.k8s.io/v1beta1=true --feature-gates=GenericWorkload=true; then restart"
        ),
    ),
    OptionalApi(
        name="validatingadmissionpolicies",
        group_version="admissionregistration.k8s.io/v1",
        resource="validatingadmissionpolicies",
        feature=(
            "self-registration (--self-registration and the ring-controller.io/self-register annotation): "
            "without the ValidatingAdmissionPolicy that fences the launcher's pod grant, a registration "
            "annotation proves nothing; specs wait for the kubelet's Running as without it"
        ),
        hint="enable admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy (GA since Kubernetes 1.30)",
    ),
)
"""The optional APIs, looked up by discovery at start-up."""
