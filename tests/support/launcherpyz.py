"""The one-file launcher for tests: built by the real builder (build/launcher/pyz.py) into a path of the test's.

``build/`` is not a package, so the builder is loaded from its file; tests
build their own copy rather than trusting a ``dist/`` left by someone else.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BUILDER = Path(__file__).resolve().parents[2] / "build" / "launcher" / "pyz.py"


def builder() -> ModuleType:
    """build/launcher/pyz.py as a module (``build``, ``members``, ``SHEBANG``)."""
    spec = importlib.util.spec_from_file_location("ring_launch_pyz_builder", BUILDER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(out: Path) -> Path:
    """Write the pyz to ``out`` and return ``out``."""
    builder().build(out)
    return out


#: What a launcher start must not import (issue 24: the launcher's start is part of the job's
#: discovery time): the modules a stand-in keeps out, by the rule in CONTRIBUTING.md (its
#: figures: docs/performance.md), and modules only other paths use.
#: API mode loads http.client, ssl and socket (ranktable/launch/kubeapi.py); file mode loads none
#: of them (tests/unit/test_launcher_pyz.py API_CLIENT).
HEAVY = ("dataclasses", "inspect", "hashlib", "gzip", "shlex")
