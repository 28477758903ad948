"""Which Kubernetes Events are sent: client-go's event correlator rules, reduced.

A pod whose device annotation flaps between valid and invalid many times a
second makes the worker report the same problem again after every valid
spell (a problem that comes back is reported again), and a spec that
completes again and again announces each new epoch. Without a filter each
of those is one more Event object written to etcd: unbounded writes caused
by someone else's bug. client-go puts every Event through an
``EventCorrelator``; this is the part of it that bounds the writes:

- **Duplicates** (same object, type, reason and message) within
  ``dedupe_seconds`` (client-go: 10 minutes) are not sent again. client-go
  instead patches the first Event's ``count``; here the repeats are counted
  in ``ringcontroller_events_dropped_total{cause="duplicate"}`` and the log,
  which keeps the agent's API protocol to create-only.
- **Spam filter**: a token bucket per involved object (client-go: burst 25,
  one token every 5 minutes). Events beyond it are dropped and counted
  (``cause="rate_limited"``).

State is bounded: at most ``max_keys`` duplicate keys and buckets are kept
(least recently used evicted), so a flood of distinct messages cannot grow
memory either. ``allow`` is synchronous and called from one event loop.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Literal

Json = dict[str, Any]
Verdict = Literal["send", "duplicate", "rate_limited"]

#: client-go's defaults (``EventSourceObjectSpamFilter``, ``EventAggregator``).
BURST = 25
REFILL_SECONDS = 300.0
DEDUPE_SECONDS = 600.0
MAX_KEYS = 4096


class EventCorrelator:
    """Decides, for each Event the agent wants to send, whether it is sent. See the module doc."""

    def __init__(
        self,
        *,
        burst: int = BURST,
        refill_seconds: float = REFILL_SECONDS,
        dedupe_seconds: float = DEDUPE_SECONDS,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._burst = burst
        self._refill = refill_seconds
        self._dedupe = dedupe_seconds
        self._max = max_keys
        self._clock = clock
        self._sent: OrderedDict[tuple[str, ...], float] = OrderedDict()
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at

    def allow(self, *, involved: Json, event_type: str, reason: str, message: str) -> Verdict:
        """``"send"`` (and account for it), or why the Event is dropped."""
        now = self._clock()
        obj = "/".join(str(involved.get(k, "")) for k in ("kind", "namespace", "name", "uid"))
        key = (obj, event_type, reason, message)
        last = self._sent.get(key)
        if last is not None and now - last < self._dedupe:
            self._sent.move_to_end(key)
            return "duplicate"
        tokens, at = self._buckets.get(obj, (float(self._burst), now))
        tokens = min(float(self._burst), tokens + (now - at) / self._refill)
        if tokens < 1.0:
            self._put(self._buckets, obj, (tokens, now))
            return "rate_limited"
        self._put(self._buckets, obj, (tokens - 1.0, now))
        self._put(self._sent, key, now)
        return "send"

    @property
    def tracked(self) -> int:
        """Keys held (duplicate keys plus buckets); at most ``2 * max_keys``."""
        return len(self._sent) + len(self._buckets)

    def _put(self, table: OrderedDict[Any, Any], key: Any, value: Any) -> None:
        table[key] = value
        table.move_to_end(key)
        while len(table) > self._max:
            table.popitem(last=False)
