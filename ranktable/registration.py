"""Self-registration: the value a launcher writes on its own pod, and its reader.

A launcher that starts in a job opted into self-registration patches one
annotation of its own pod (:data:`ranktable.clusterspec.REGISTERED_ANNOTATION`)
to say that its container runs and which address it sees. The controller may
then count the member before the kubelet's next relist publishes Running and
the pod IP (about a second later). The value is small JSON::

    {"ip": "10.4.0.17", "started": "2026-12-01T23:00:00.123456Z"}
    {"ip": "10.4.0.17", "ips": ["10.4.0.17", "fd00:10:4::11"], "started": "..."}

``ip`` is the pod's primary IP as the downward API gives it to the container
(``status.podIP``); ``ips``, written only on dual-stack pods, every IP of the
pod (``status.podIPs``, primary first), so the controller can take the
address of the family the job asks for (:mod:`model.network`) before the
kubelet's status has it; ``started`` the wall clock when the launcher started,
for the benchmarks' stage timestamps.
Standard library only, Python 3.9 syntax: the one-file launcher carries it,
and loads it (with :mod:`ranktable.launch.kubeapi`) before the rest of itself to
send the registration early (:mod:`ranktable.launch.earlyreg`), so it imports
nothing heavier than ``json`` and ``ipaddress``.
"""

from __future__ import annotations

import ipaddress
import json
import time
from typing import TYPE_CHECKING

from ranktable.frozen import record

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

#: Annotation a launcher sets on its own pod when it starts (self-registration,
#: opt-in): JSON ``{"ip": ..., "started": ...}``. The controller may count the
#: member before the kubelet reports it Running; the ValidatingAdmissionPolicy
#: in ``build/launcher-rbac.yaml`` lets a launcher change nothing else.
#: (Also exported as :data:`ranktable.clusterspec.REGISTERED_ANNOTATION`.)
REGISTERED_ANNOTATION = "ring-controller.io/registered"
#: At most this many characters (the admission policy enforces the same bound).
MAX_LENGTH = 256


@record
class Registration:
    """A parsed registration: the member's IP, when its launcher started (RFC 3339, may be ""),
    and its other IPs (the other family's on a dual-stack pod, else empty)."""

    ip: str
    started: str
    other_ips: tuple[str, ...] = ()


def registration_value(*, ip: str, started: str, ips: Sequence[str] = ()) -> str:
    """The annotation value for ``ip``, ``started`` and the pod's ``ips`` (all of them, ``ip`` among them;
    written only when there are more than ``ip``); ValueError if one is not an IP address."""
    ipaddress.ip_address(ip)
    value: dict[str, Any] = {"ip": ip, "started": started}
    listed = [ip, *(a for a in ips if a != ip)]
    for address in listed:
        ipaddress.ip_address(address)
    if len(listed) > 1:
        value["ips"] = listed
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def started_text(started: float) -> str:
    """``started`` (seconds since the epoch) as the registration writes it: RFC 3339, UTC, microseconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(started)) + f".{int(started % 1 * 1e6):06d}Z"


def registration_patch(*, ip: str, started: str, ips: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON merge patch a launcher sends to its own pod (:func:`registration_value`); ValueError for a non-address."""
    return {"metadata": {"annotations": {REGISTERED_ANNOTATION: registration_value(ip=ip, started=started, ips=ips)}}}


def pod_path(namespace: str, pod: str) -> str:
    """The API path of pod ``namespace/pod`` (both DNS names, checked: ValueError for anything else)."""
    for part in (namespace, pod):
        if not part or not all(c.isalnum() or c in "-." for c in part) or not part.isascii():
            raise ValueError(f"{part!r} is not a Kubernetes object name")
    return f"/api/v1/namespaces/{namespace}/pods/{pod}"


def parse_registration(text: str | None) -> Registration | None:
    """The registration in ``text`` (None when there is none); ValueError with the reason if malformed."""
    if text is None or text == "":
        return None
    if len(text) > MAX_LENGTH:
        raise ValueError(f"registration is {len(text)} characters, over {MAX_LENGTH}")
    try:
        obj = json.loads(text)
    except ValueError:
        raise ValueError(f"registration {text[:40]!r} is not JSON") from None
    if not isinstance(obj, dict):
        raise ValueError("registration is not a JSON object")
    ip = obj.get("ip")
    if not isinstance(ip, str):
        raise ValueError("registration has no string 'ip'")
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        raise ValueError(f"registration ip {ip!r} is not an IP address") from None
    started = obj.get("started", "")
    if not isinstance(started, str):
        raise ValueError("registration 'started' is not a string")
    ips = obj.get("ips", [])
    if not isinstance(ips, list) or not all(isinstance(a, str) for a in ips):
        raise ValueError("registration 'ips' is not a list of strings")
    for address in ips:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise ValueError(f"registration ips: {address!r} is not an IP address") from None
    return Registration(ip=ip, started=started, other_ips=tuple(a for a in ips if a != ip))
