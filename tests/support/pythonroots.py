"""Plain Debian root filesystems with nothing but Python: where the one-file launcher must run.

``ring-launch.pyz`` promises Python 3.9 and newer. :data:`PYTHONS` is the
matrix it is checked on, each interpreter run inside a plain Debian root
(:data:`ROOTS`) made once with ``mmdebstrap --variant=minbase
--include=PACKAGES SUITE`` from Debian's mirror and cached under
``$RING_IMAGES_CACHE/python-roots/<root>`` (default ``~/.cache/ring-images``):

* Debian's own interpreters: ``python3`` of bullseye (3.9), bookworm (3.11)
  and trixie (3.13); ``python3.14`` and ``python3.15`` of forky (Debian's
  testing suite, which carries both).
* 3.10 and 3.12, which no Debian suite on the mirror carries: pyenv builds
  (``$RING_PYENV_ROOT``, else ``$PYENV_ROOT``, else ``~/.pyenv``), built
  against bookworm's libraries (OpenSSL 3.0) and run in the bookworm root with
  their directory bind-mounted read-only at its own path (their
  ``libpython`` is found by that path). The interpreter is the pyenv
  build; libc, OpenSSL and zlib are the root's.
* :data:`OLD` (3.8, 3.7, 3.6 from pyenv, same way): interpreters the entry
  must turn away with its one line and exit 69.

:func:`run_in` runs a command in a root with ``chroot`` inside a private
mount namespace (``unshare -m``), host directories bind-mounted in: no
container runtime, root needed. The host network is shared, so the launcher
reaches the local API server at 127.0.0.1 as a pod reaches its service.
A root that cannot be made, or a pyenv interpreter that is missing, raises:
tests never skip.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Root:
    """A plain Debian root: ``mmdebstrap --variant=minbase --include=<packages> <suite>``."""

    suite: str
    packages: tuple[str, ...]


#: The roots by name (the name is also the cache directory's).
ROOTS = {
    "bullseye": Root("bullseye", ("python3",)),
    "bookworm": Root("bookworm", ("python3",)),
    "trixie": Root("trixie", ("python3",)),
    "forky": Root("forky", ("python3.14", "python3.15")),
}


@dataclass(frozen=True)
class Python:
    """One interpreter of the matrix: ``version`` (major.minor) run as ``command`` in root ``root``.

    ``pyenv`` names a pyenv version prefix (``"3.10"``): the interpreter is
    then the newest ``<pyenv root>/versions/3.10.*`` of the host, mounted
    into the root; otherwise ``command`` is a path or name inside the root.
    """

    version: str
    root: str
    command: str = ""
    pyenv: str = ""

    @property
    def how(self) -> str:
        """Where the interpreter comes from, in words (test ids, messages)."""
        if self.pyenv:
            return f"pyenv {self.pyenv} in {self.root}"
        return f"{ROOTS[self.root].suite}'s {self.command}"


#: Every Python the launcher is checked on: each supported minor version from 3.9.
PYTHONS = (
    Python("3.9", "bullseye", "python3"),
    Python("3.10", "bookworm", pyenv="3.10"),
    Python("3.11", "bookworm", "python3"),
    Python("3.12", "bookworm", pyenv="3.12"),
    Python("3.13", "trixie", "python3"),
    Python("3.14", "forky", "python3.14"),
    Python("3.15", "forky", "python3.15"),
)

#: Interpreters older than 3.9: the entry turns them away (exit 69). Python 2 is no ``python3``:
#: it stops at ``-I`` (``Unknown option``) before any of the launcher's code runs; without ``-I``
#: it gets the same line and exit 69 (the entry imports nothing Python 2 lacks before its check).
OLD = (
    Python("3.6", "bookworm", pyenv="3.6"),
    Python("3.7", "bookworm", pyenv="3.7"),
    Python("3.8", "bookworm", pyenv="3.8"),
)


def cache_dir() -> Path:
    """Where the roots are cached: ``$RING_IMAGES_CACHE/python-roots`` (default ``~/.cache/ring-images``)."""
    base = os.environ.get("RING_IMAGES_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ring-images"
    )
    return Path(base) / "python-roots"


def pyenv_root() -> Path:
    """The pyenv root the 3.10, 3.12 and older interpreters come from."""
    return Path(os.environ.get("RING_PYENV_ROOT") or os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv"))


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else -1 for part in name.split("."))


def pyenv_dir(prefix: str) -> Path:
    """The newest ``versions/<prefix>.N`` of :func:`pyenv_root` (raises, naming what to install, if none)."""
    versions = pyenv_root() / "versions"
    candidates = list(versions.glob(f"{prefix}.*")) if versions.is_dir() else []
    found = [p for p in candidates if p.name[len(prefix) + 1 :].isdigit()]  # 3.10.13, not 3.10.13t or 3.10-dev
    if not found:
        raise RuntimeError(
            f"no Python {prefix} under {versions}: the launcher's matrix runs pyenv's {prefix} in the bookworm "
            f"root (`pyenv install {prefix}` on a bookworm host, or set RING_PYENV_ROOT to a pyenv root that has it)"
        )
    return max(found, key=lambda p: _version_key(p.name)).resolve()


def argv_of(python: Python) -> tuple[list[str], dict[str, Path]]:
    """The interpreter's path inside its root and the read-only binds it needs (inside path -> host directory)."""
    if not python.pyenv:
        return [python.command], {}
    home = pyenv_dir(python.pyenv)
    return [str(home / "bin" / f"python{python.pyenv}")], {str(home): home}


def ensure_root(name: str) -> Path:
    """The cached root ``name`` of :data:`ROOTS` (made now if missing)."""
    root = cache_dir() / name
    if _made(root):
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one maker per cache; a second waits, then finds it made
        if _made(root):
            return root
        return _make(ROOTS[name], root)


def _made(root: Path) -> bool:
    # The last step of _make is the rename: a root that exists is whole.
    return (root / "var" / "lib" / "dpkg" / "status").exists()


def mmdebstrap_argv(root: Root, target: Path) -> list[str]:
    """The ``mmdebstrap`` command that makes ``root`` in ``target``."""
    return [
        "mmdebstrap", "--variant=minbase", f"--include={','.join(root.packages)}",
        "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        # A testing suite's Release file is valid for a week; a mirror that serves a snapshot can
        # serve it past that date. Its signature is still checked.
        '--aptopt=Acquire::Check-Valid-Until "false"',
        root.suite, str(target), f"deb http://deb.debian.org/debian {root.suite} main",
    ]  # fmt: skip


def _make(spec: Root, root: Path) -> Path:
    if os.geteuid() != 0:
        raise RuntimeError(f"no Python root at {root}: making one needs root (mmdebstrap, chroot)")
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
    tmp = root.with_name(f"{root.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    made = subprocess.run(mmdebstrap_argv(spec, tmp), capture_output=True, text=True, timeout=900)
    if made.returncode != 0:
        tail = "\n".join(made.stderr.splitlines()[-15:])
        raise RuntimeError(f"mmdebstrap could not make the {spec.suite} root ({' '.join(spec.packages)}):\n{tail}")
    tmp.rename(root)
    return root


def run_in(
    name: str,
    argv: list[str],
    *,
    binds: Mapping[str, Path],
    env: Mapping[str, str],
    read_only: Mapping[str, Path] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in root ``name``, read-only, with ``binds`` and ``read_only`` (path inside -> host) mounted.

    ``binds`` stay writable; ``read_only`` are mounted read-only.
    """
    root = ensure_root(name)
    q = shlex.quote(str(root))
    mounts = [(inside, host, True) for inside, host in binds.items()]
    mounts += [(inside, host, False) for inside, host in (read_only or {}).items()]
    targets = []
    for inside, host, writable in mounts:
        target = f"{root}/{inside.lstrip('/')}"
        # /var/run is an absolute symlink in Debian roots: a path through a
        # symlink would be created on the host. Name the real path (/run/...).
        if not os.path.realpath(target).startswith(f"{root}/"):
            raise ValueError(f"{inside} leaves the root through a symlink; use its real path")
        targets.append((shlex.quote(target), shlex.quote(str(host)), writable))
    # Mount points first, then the root read-only as readOnlyRootFilesystem makes it (no writable
    # /tmp either), then the binds.
    script = [f"mkdir -p {target}" for target, _, _ in targets]
    script += [f"mount --bind {q} {q}", f"mount -o remount,bind,ro {q}"]
    for target, source, writable in targets:
        script.append(f"mount --bind {source} {target}")
        if not writable:
            script.append(f"mount -o remount,bind,ro {target}")
    script.append("exec chroot " + shlex.quote(str(root)) + " " + " ".join(shlex.quote(a) for a in argv))
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", " && ".join(script)],
        env={"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_python(
    python: Python,
    args: list[str],
    *,
    binds: Mapping[str, Path],
    env: Mapping[str, str],
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run ``python`` with ``args`` in its root (see :func:`run_in`); a pyenv interpreter is mounted read-only."""
    argv, interpreter = argv_of(python)
    return run_in(python.root, [*argv, *args], binds=binds, env=env, read_only=interpreter, timeout=timeout)
