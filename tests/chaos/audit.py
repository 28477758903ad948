"""The chaos run's fencing check: which ConfigMap writes, in an API server audit log, had no Lease behind them.

Plain data in, plain data out (no cluster, no dev-cluster tool), so its unit
test runs in the pip-only tier; ``tests/chaos/run.py`` applies it to the
audit log of its leader-failover scenario.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path


def audit_check(path: Path, namespace: str, prefixes: dict[str, str]) -> tuple[int, list[str]]:
    """(ConfigMap writes by the replicas, those made while another held the Lease or it had expired).

    From the API server's audit log: every successful Lease write says who
    holds it from then on (``holderIdentity``, "" when released) for its
    ``leaseDurationSeconds``; a ConfigMap write by replica user U received at
    t is a non-leader write unless the last Lease write completed before t
    names U's identity and its claim had not run out at t.
    """
    leases: list[tuple[str, str, int]] = []  # (time, holder, duration)
    writes: list[tuple[str, str, str]] = []  # (time, user, what)
    for line in path.read_text(errors="replace").splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        ref = e.get("objectRef") or {}
        if ref.get("namespace") != namespace or e.get("stage") != "ResponseComplete":
            continue
        if int((e.get("responseStatus") or {}).get("code", 500)) >= 300:
            continue
        user = (e.get("user") or {}).get("username", "")
        if ref.get("resource") == "leases":
            spec = ((e.get("requestObject") or {}).get("spec")) or {}
            leases.append(
                (e["stageTimestamp"], str(spec.get("holderIdentity") or ""), int(spec.get("leaseDurationSeconds") or 0))
            )
        elif ref.get("resource") == "configmaps" and user in prefixes:
            writes.append((e["requestReceivedTimestamp"], user, f"{e['verb']} {ref.get('name')}"))
    leases.sort()
    bad = []
    for t, user, what in writes:
        before = [lease for lease in leases if lease[0] <= t]
        if not before:
            bad.append(f"{t} {user} {what}: before any Lease")
            continue
        at, holder, duration = before[-1]
        expired = _seconds(t) - _seconds(at) > duration
        if not holder.startswith(prefixes[user]) or expired:
            bad.append(
                f"{t} {user} {what}: Lease held by {holder or 'nobody'} since {at}{' (expired)' if expired else ''}"
            )
    return len(writes), bad


def _seconds(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
