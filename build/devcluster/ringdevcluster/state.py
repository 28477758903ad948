"""The state directory that owns one cluster: where it is, its lock, ``state.json``.

The directory holds ``state.json`` (ports, binaries, each component's argv
and environment, the addons), ``pki/``, ``etcd/`` (data), ``logs/``,
``run/<component>.pid`` and, once the cluster is ready, ``kubeconfig``
(admin). Every command takes the directory's ``lock`` file first, so two
``up`` calls cannot race.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["VERSION", "default_state_dir", "locked", "read_state", "resolve", "wipe", "write_state"]

#: The layout of ``state.json``; a file of another version is stale (the next ``up`` starts afresh).
VERSION = 1


def default_state_dir() -> Path:
    """``$RING_DEVCLUSTER_STATE``, else ``$XDG_STATE_HOME/ring-devcluster``
    (default ``~/.local/state/ring-devcluster``)."""
    env = os.environ.get("RING_DEVCLUSTER_STATE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "ring-devcluster"


def resolve(state_dir: Path | str | None) -> Path:
    """``state_dir`` (else :func:`default_state_dir`) as an absolute path."""
    return (Path(state_dir) if state_dir is not None else default_state_dir()).resolve()


@contextlib.contextmanager
def locked(state_dir: Path) -> Iterator[None]:
    """Hold the state directory's lock (created with the directory if missing) for the block."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_state(state_dir: Path) -> dict[str, Any] | None:
    """``state.json`` of ``state_dir``, or None if it is missing, unreadable or of another version."""
    try:
        state = json.loads((state_dir / "state.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or state.get("version") != VERSION:
        return None
    return state


def write_state(state_dir: Path, state: dict[str, Any]) -> None:
    """Replace ``state.json`` atomically."""
    tmp = state_dir / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(state_dir / "state.json")


def wipe(state_dir: Path) -> None:
    """Delete everything in ``state_dir`` but its lock."""
    for entry in state_dir.iterdir():
        if entry.name == "lock":
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
