"""A stock PyTorch image for the real node: Debian bookworm's python3 and PyTorch from PyPI, no ring-controller.

Opt-in only (``build/test.sh --with torch``): PyPI's Linux ``torch`` wheel
brings its CUDA libraries as dependencies, 2.8 GB of wheels for torch 2.15.0
(downloaded here in 33 s) and several GB installed, which does not fit CI's
cold budget. Made from the cached bookworm root of
:mod:`tests.support.pythonroots` plus a venv ``/opt/torch`` holding
:data:`TORCH`, packed like :mod:`tests.support.pythonimages` and imported as
``ring-devcluster.local/torch:<version>``. Wheels are cached in
``$RING_IMAGES_CACHE/torch-wheels``; pip runs from its wheel and is not
installed. Prints what each step took.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ringdevcluster import node
from tests.support import pythonimages, pythonroots

TORCH = "torch==2.15.0"
PIP = "pip==26.3"
VENV = "/opt/torch"


def _say(message: str) -> None:
    print(f"torch image: {message}", file=sys.stderr, flush=True)


def image_name() -> str:
    """The image's reference: ``ring-devcluster.local/torch:<version>``."""
    return f"ring-devcluster.local/torch:{TORCH.split('==')[1]}"


def image(workdir: Path, *, timings: dict[str, Any] | None = None) -> str:
    """The PyTorch image's name in the node's containerd (built and imported now if missing).

    ``timings``, when given, receives what a build took (nothing when the image was there):
    ``wheels_cached`` (every wheel was in the cache before), ``root_cached`` (the bookworm root
    was), and the seconds from the start to the end of each step: ``wheels_s``, ``installed_s``,
    ``total_s``; ``wheels_bytes``, every wheel in the cache; ``installed``, ``du -sh`` of the root
    with the venv.
    """
    name = image_name()
    if name in node.image_names() or f"docker.io/{name}" in node.image_names():
        return name
    started = time.monotonic()
    wheels = pythonroots.cache_dir().parent / "torch-wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    before = {w.name for w in wheels.glob("*.whl")}
    root_cached = (pythonroots.cache_dir() / "bookworm" / "var" / "lib" / "dpkg" / "status").exists()
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--progress-bar", "off",
         "--only-binary=:all:", "--dest", str(wheels), TORCH, PIP],
        check=True, capture_output=True, timeout=1800,
    )  # fmt: skip
    wheels_s = time.monotonic() - started
    _say(f"wheels {TORCH} in {wheels} ({wheels_s:.0f}s)")
    workdir.mkdir(parents=True, exist_ok=True)
    root = workdir / "torch-root"
    shutil.rmtree(root, ignore_errors=True)
    subprocess.run(["cp", "-a", "--reflink=auto", str(pythonroots.ensure_root("bookworm")), str(root)], check=True)
    (root / "tmp" / "wheels").mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(wheels), str(root / "tmp" / "wheels")], check=True)
    try:
        env = ["/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "HOME=/root", "PYTHONDONTWRITEBYTECODE=1"]
        subprocess.run(["chroot", str(root), *env, "python3", "-m", "venv", "--without-pip", VENV], check=True)
        pip = next(wheels.glob("pip-*.whl")).name
        subprocess.run(
            ["chroot", str(root), *env, f"{VENV}/bin/python", f"/tmp/wheels/{pip}/pip", "install", "--quiet",
             "--disable-pip-version-check", "--no-cache-dir", "--no-index", "--find-links", "/tmp/wheels",
             "--only-binary=:all:", "--no-warn-script-location", TORCH],
            check=True, timeout=1800,
        )  # fmt: skip
    finally:
        subprocess.run(["umount", str(root / "tmp" / "wheels")], check=False)
    installed_s, installed = time.monotonic() - started, _du(root)
    _say(f"installed into {VENV} ({installed_s:.0f}s, {installed})")
    pythonimages.pack(root, name=name, workdir=workdir, env_path=f"{VENV}/bin", created_by=f"bookworm + {TORCH}")
    shutil.rmtree(root, ignore_errors=True)
    total_s = time.monotonic() - started
    _say(f"{name}: built and imported in {total_s:.0f}s")
    if timings is not None:
        timings.update(
            wheels_cached=before >= {w.name for w in wheels.glob("*.whl")},
            root_cached=root_cached,
            wheels_s=round(wheels_s, 1),
            wheels_bytes=sum(w.stat().st_size for w in wheels.glob("*.whl")),
            installed_s=round(installed_s, 1),
            total_s=round(total_s, 1),
            installed=installed,
        )
    return name


def _du(path: Path) -> str:
    return subprocess.run(["du", "-sh", str(path)], capture_output=True, text=True).stdout.split()[0]
