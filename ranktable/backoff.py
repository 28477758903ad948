"""One exponential backoff schedule for every retry loop of the product.

The daemon's informers (:mod:`ringcontroller.reflector`), its API discovery
(:mod:`ringcontroller.controller`) and the launcher's API watch
(:mod:`ranktable.launch.apiwatch`) all retry with :class:`Backoff`; each names its
own figures next to the loop, here are only the schedule and client-go's
reflector defaults. It lives in the lowest layer so that the launcher, which
may import nothing above :mod:`ranktable`, shares it. Pure stdlib.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Backoff"]


class Backoff:
    """Exponential backoff with jitter that resets after a quiet period.

    The defaults are client-go's reflector backoff: delays start at
    ``initial`` (0.8 s) and double (``factor``) up to ``cap`` (30 s); each
    delay gets up to ``jitter`` (100 %) of itself added at random. If more
    than ``reset_after`` (120 s) passed since the previous delay, the sequence
    starts again from ``initial``; :meth:`reset` starts it again at once
    (after a success). Call :meth:`next_delay` once per failure.
    """

    def __init__(
        self,
        *,
        initial: float = 0.8,
        cap: float = 30.0,
        factor: float = 2.0,
        jitter: float = 1.0,
        reset_after: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] | None = None,
    ) -> None:
        self._initial = initial
        self._cap = cap
        self._factor = factor
        self._jitter = jitter
        self._reset_after = reset_after
        self._clock = clock
        self._rand = rand  # random.random, imported at the first jittered delay (a launcher start skips it)
        self._next = initial
        self._last: float | None = None

    def next_delay(self) -> float:
        """Seconds to wait before the next attempt."""
        now = self._clock()
        if self._last is not None and now - self._last > self._reset_after:
            self._next = self._initial
        self._last = now
        base = self._next
        self._next = min(self._next * self._factor, self._cap)
        if not self._jitter:
            return base
        if self._rand is None:
            import random

            self._rand = random.random
        return base + base * self._jitter * self._rand()

    def reset(self) -> None:
        """Start again from ``initial``: the next failure waits the least."""
        self._next = self._initial
        self._last = None
