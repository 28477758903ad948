"""Giving freed memory back to the system after a big job's decision.

A 20,000-member spec is rendered, validated and compressed in a few big
buffers (megabytes of text) and many small objects; once freed, glibc keeps
much of that in its heaps (the decision thread's arena among them) and the
process's resident size stays up. ``malloc_trim(0)`` returns the free pages
of every arena: on a 20,000-member job it took 6-8 MB off the resident size
after the completing decision. The daemon calls :func:`release` on the
decision thread after each big decision (:class:`agent.worker.Offload`), so
its cost (milliseconds) is not the event loop's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from functools import cache

__all__ = ["release"]


@cache
def _trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


def release() -> None:
    """Return the C library's free heap pages to the system (nothing where it cannot)."""
    trim = _trim()
    if trim is not None:
        trim(0)
