"""Container images for the dev cluster's real node, written without a Docker engine or a registry.

The node's containerd imports images from a local file: a *docker-archive*
tarball (``manifest.json`` naming a config blob and one layer per entry in
``Layers``: the format ``docker save`` writes and ``ctr images import``
reads). :func:`write_docker_archive` packs a single-layer image from
``{path in the image: source}`` entries, byte-for-byte reproducible (fixed
mtimes and owners, sorted entries), so importing the same inputs twice yields
the same image id. The node needs one image of its own, the pod sandbox
(:data:`PAUSE_IMAGE`, the ``pause`` binary built in the node wrapper module);
tests add a busybox one (:func:`busybox_files`, from Debian's
``busybox-static``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = [
    "BUSYBOX",
    "Entry",
    "PAUSE_IMAGE",
    "busybox_files",
    "pause_files",
    "write_docker_archive",
]

#: The sandbox image the node's containerd and kubelet use (imported by ``up``).
PAUSE_IMAGE = "ring-devcluster.local/pause:1"
#: Debian's statically linked busybox (package ``busybox-static``).
BUSYBOX = Path("/bin/busybox")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One file of an image layer: its bytes (or a symlink target) and mode."""

    data: bytes = b""
    mode: int = 0o644
    symlink: str | None = None


def _layer(files: Mapping[str, Entry]) -> bytes:
    """A tar layer holding ``files`` and their parent directories, reproducibly."""
    out = io.BytesIO()
    dirs: set[str] = set()
    for path in files:
        parts = path.strip("/").split("/")[:-1]
        dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(dirs):
            info = tarfile.TarInfo(name + "/")
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name in sorted(files):
            entry = files[name]
            info = tarfile.TarInfo(name.strip("/"))
            info.mode = entry.mode
            if entry.symlink is not None:
                info.type, info.linkname = tarfile.SYMTYPE, entry.symlink
                tar.addfile(info)
            else:
                info.size = len(entry.data)
                tar.addfile(info, io.BytesIO(entry.data))
    return out.getvalue()


def write_docker_archive(
    path: Path,
    *,
    name: str,
    files: Mapping[str, Entry],
    entrypoint: Sequence[str] = (),
    cmd: Sequence[str] = (),
    env: Sequence[str] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",),
    user: str = "",
) -> Path:
    """Write a one-layer linux/amd64 image ``name`` (``host/repo:tag``) holding ``files`` to ``path``.

    ``files`` maps absolute paths inside the image to entries; parent
    directories are added. Returns ``path`` (written atomically).
    """
    layer = _layer(files)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config: dict[str, object] = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": list(env), "Entrypoint": list(entrypoint) or None, "Cmd": list(cmd) or None,
                   "User": user, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "ring-devcluster images.write_docker_archive"}],
    }  # fmt: skip
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = diff_id.split(":", 1)[1] + "/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": [name], "Layers": [layer_name]}]
    members = {
        "manifest.json": json.dumps(manifest).encode(),
        config_name: config_bytes,
        layer_name: layer,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member, data in members.items():
            info = tarfile.TarInfo(member)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, path)
    return path


def busybox_files(busybox: Path = BUSYBOX) -> dict[str, Entry]:
    """``/bin/busybox`` and a symlink per applet, from a static busybox on this machine.

    Raises FileNotFoundError naming the Debian package when it is missing.
    """
    if not busybox.is_file():
        raise FileNotFoundError(
            f"{busybox} is missing: install Debian's busybox-static (apt-get install busybox-static)"
        )
    if _dynamic(busybox):
        raise FileNotFoundError(f"{busybox} is dynamically linked: install Debian's busybox-static instead of busybox")
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout.split()
    files = {"/bin/busybox": Entry(data=busybox.read_bytes(), mode=0o755)}
    files.update({f"/bin/{a}": Entry(symlink="busybox") for a in applets if a != "busybox"})
    files["/etc/passwd"] = Entry(data=b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
    files["/etc/group"] = Entry(data=b"root:x:0:\nnogroup:x:65534:\n")
    files["/tmp/.keep"] = Entry(data=b"", mode=0o644)
    return files


def _dynamic(path: Path) -> bool:
    """True if the ELF executable at ``path`` names a program interpreter (is dynamically linked)."""
    with open(path, "rb") as f:
        header = f.read(64)
        if header[:4] != b"\x7fELF" or header[4] != 2:  # 64-bit ELF only
            return True
        phoff = int.from_bytes(header[32:40], "little")
        phentsize = int.from_bytes(header[54:56], "little")
        phnum = int.from_bytes(header[56:58], "little")
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    return any(int.from_bytes(table[i * phentsize : i * phentsize + 4], "little") == 3 for i in range(phnum))


def pause_files(pause: Path) -> dict[str, Entry]:
    """The sandbox image's only file: the ``pause`` binary at ``/pause``."""
    return {"/pause": Entry(data=pause.read_bytes(), mode=0o755)}
