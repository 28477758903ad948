"""``ring-controller`` as a real separate process, for tests and benchmarks: the tests' import path.

The class lives in :mod:`ringdevcluster.harness` (the demos use it too, and
import nothing from ``tests/``); ``free_port`` is the dev-cluster tool's own.
"""

from __future__ import annotations

from ringdevcluster.harness import ControllerProcess, controller_command, free_port

__all__ = ["ControllerProcess", "controller_command", "free_port"]
