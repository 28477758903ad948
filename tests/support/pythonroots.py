"""Plain Debian root filesystems with nothing but ``python3``: where the one-file launcher must run.

``ring-launch.pyz`` promises Python 3.9 (bullseye), 3.11 (bookworm) and 3.13
(trixie). A root per suite is made once with ``mmdebstrap --variant=minbase
--include=python3`` (Debian's mirror; about a minute each) and cached under
``$RING_IMAGES_CACHE/python-roots/<suite>`` (default ``~/.cache/ring-images``;
measured cold: 66 s wall, 21 CPU-s, 113 MB for bullseye).
:func:`run_in` runs a command in one with ``chroot`` inside a private mount
namespace (``unshare -m``), with host directories bind-mounted in: no
container runtime, root needed. The host network is shared, so the launcher
reaches the local API server at 127.0.0.1 as a pod reaches its service.
A root that cannot be made raises: tests never skip.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

SUITES = {"bullseye": "3.9", "bookworm": "3.11", "trixie": "3.13"}


def cache_dir() -> Path:
    base = os.environ.get("RING_IMAGES_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ring-images"
    )
    return Path(base) / "python-roots"


def ensure_root(suite: str) -> Path:
    """The cached root of ``suite`` (made now if missing)."""
    root = cache_dir() / suite
    if (root / "usr" / "bin" / "python3").exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one maker per cache; a second waits, then finds it made
        if (root / "usr" / "bin" / "python3").exists():
            return root
        return _make(suite, root)


def _make(suite: str, root: Path) -> Path:
    if os.geteuid() != 0:
        raise RuntimeError(f"no Python root for {suite} at {root}: making one needs root (mmdebstrap, chroot)")
    if shutil.which("mmdebstrap") is None:  # as build/image.sh does: from Debian
        apt = [
            "apt-get",
            "install",
            "-y",
            "-q",
            "--no-install-recommends",
            "-o",
            "DPkg::Lock::Timeout=600",
            "mmdebstrap",
        ]
        if subprocess.run(apt, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True)
            subprocess.run(apt, check=True, capture_output=True)
    tmp = root.with_name(f"{suite}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(
        [
            "mmdebstrap", "--variant=minbase", "--include=python3",
            "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*",
            suite, str(tmp), f"deb http://deb.debian.org/debian {suite} main",
        ],
        check=True, capture_output=True, timeout=900,
    )  # fmt: skip
    tmp.rename(root)
    return root


def run_in(
    suite: str,
    argv: list[str],
    *,
    binds: Mapping[str, Path],
    env: Mapping[str, str],
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in the root of ``suite``, read-only, with ``binds`` (path inside -> host directory) mounted."""
    root = ensure_root(suite)
    q = shlex.quote(str(root))
    targets = []
    for inside, host in binds.items():
        target = f"{root}/{inside.lstrip('/')}"
        # /var/run is an absolute symlink in Debian roots: a path through a
        # symlink would be created on the host. Name the real path (/run/...).
        if not os.path.realpath(target).startswith(f"{root}/"):
            raise ValueError(f"{inside} leaves the root through a symlink; use its real path")
        targets.append((shlex.quote(target), shlex.quote(str(host))))
    # Mount points first, then the root read-only as readOnlyRootFilesystem makes it (no writable
    # /tmp either), then the binds, which stay writable.
    script = [f"mkdir -p {target}" for target, _ in targets]
    script += [f"mount --bind {q} {q}", f"mount -o remount,bind,ro {q}"]
    script += [f"mount --bind {host} {target}" for target, host in targets]
    script.append("exec chroot " + shlex.quote(str(root)) + " " + " ".join(shlex.quote(a) for a in argv))
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", " && ".join(script)],
        env={"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
