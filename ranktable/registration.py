"""Self-registration: the value a launcher writes on its own pod, and its reader.

A launcher that starts in a job opted into self-registration patches one
annotation of its own pod (:data:`ranktable.clusterspec.REGISTERED_ANNOTATION`)
to say that its container runs and which address it sees. The controller may
then count the member before the kubelet's next relist publishes Running and
the pod IP (about a second later). The value is small JSON::

    {"ip": "10.4.0.17", "started": "2026-12-01T23:00:00.123456Z"}

``ip`` is the address the member will be reached at (the pod IP the
downward API gives the container, ``status.podIP``); ``started`` the wall
clock when the launcher started, for the benchmarks' stage timestamps.
Standard library only, Python 3.9 syntax: the one-file launcher carries it.
"""

from __future__ import annotations

import ipaddress
import json
from typing import NamedTuple

#: At most this many characters (the admission policy enforces the same bound).
MAX_LENGTH = 256


class Registration(NamedTuple):
    """A parsed registration: the member's IP and when its launcher started (RFC 3339, may be "")."""

    ip: str
    started: str


def registration_value(*, ip: str, started: str) -> str:
    """The annotation value for ``ip`` and ``started``; ValueError if ``ip`` is not an IP address."""
    ipaddress.ip_address(ip)
    return json.dumps({"ip": ip, "started": started}, separators=(",", ":"), sort_keys=True)


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
    return Registration(ip=ip, started=started)
