"""The leader's Lease writes of one bench run, as the API server's audit log recorded them.

The dev cluster audits every Lease ``create``/``update`` at ``Request``
level (``build/devcluster``'s audit policy), so the log holds, per renewal,
when the server received the write, when it answered, and the ``renewTime``
the client stamped just before sending it. From those, for the first
leader's term in one namespace (the writes naming the holder of the first
write; after a fail-over another holder writes)::

    python -m tests.bench.leaseaudit --namespace bench-1x20000-d1-c7826c \\
        --audit-log .state/devcluster/logs/audit.log --json OUT.json

- ``apart_s``: time between successive writes received (a renewal every
  retry period on an idle server);
- ``server_s``: the server's time per write (received to answered);
- ``client_to_server_s``: from the client's ``renewTime`` stamp to the
  server receiving the write (time spent in the client's process and on
  the wire: waiting for a core or the GIL shows here).

Each as count, min, p50, p90, max.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.bench.measure import percentiles

Json = dict[str, Any]


def _instant(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _summary(values: list[float]) -> Json:
    q = percentiles(values) if values else {}
    return {
        "count": len(values),
        "min": round(min(values), 3) if values else None,
        **{k: round(v, 3) for k, v in q.items() if k in ("p50", "p90", "max")},
    }


def lease_writes(lines: Iterable[str], namespace: str) -> Json:
    """The summary (see the module doc) of the Lease writes in ``namespace`` found in audit ``lines``."""
    received: list[dt.datetime] = []
    server: list[float] = []
    client: list[float] = []
    holder: str | None = None
    for line in lines:
        if namespace not in line or '"leases"' not in line:
            continue
        entry = json.loads(line)
        ref = entry.get("objectRef") or {}
        if ref.get("resource") != "leases" or ref.get("namespace") != namespace:
            continue
        if entry.get("verb") not in ("create", "update") or entry.get("stage") != "ResponseComplete":
            continue
        spec = (entry.get("requestObject") or {}).get("spec") or {}
        holder = spec.get("holderIdentity") if holder is None else holder
        if spec.get("holderIdentity") != holder:
            continue  # a later leader's term (after a fail-over)
        got, done = _instant(entry["requestReceivedTimestamp"]), _instant(entry["stageTimestamp"])
        received.append(got)
        server.append((done - got).total_seconds())
        stamp = spec.get("renewTime")
        if stamp:
            client.append((got - _instant(stamp)).total_seconds())
    received.sort()
    apart = [(b - a).total_seconds() for a, b in zip(received, received[1:], strict=False)]
    return {
        "namespace": namespace,
        "holder": holder,
        "writes": len(received),
        "first": received[0].isoformat() if received else None,
        "last": received[-1].isoformat() if received else None,
        "apart_s": _summary(apart),
        "server_s": _summary(server),
        "client_to_server_s": _summary(client),
    }


def main(argv: list[str] | None = None) -> int:
    """Print (and with ``--json`` write) the summary of one namespace's Lease writes."""
    p = argparse.ArgumentParser(prog="python -m tests.bench.leaseaudit", description=__doc__.split("\n\n")[0])
    p.add_argument("--namespace", required=True)
    p.add_argument("--audit-log", type=Path, required=True)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    with args.audit_log.open(encoding="utf-8") as f:
        result = lease_writes(f, args.namespace)
    result["command"] = " ".join(["python -m tests.bench.leaseaudit", *(argv if argv is not None else sys.argv[1:])])
    text = json.dumps(result, indent=2, sort_keys=True) + "\n"
    print(text, end="")
    if args.json:
        args.json.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
