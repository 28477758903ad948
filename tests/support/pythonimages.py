"""Plain Python images for the real node: the Debian roots of :mod:`tests.support.pythonroots`, nothing else.

The one-file launcher must run in images that know nothing of this project:
bullseye, bookworm and trixie with ``python3``, forky with ``python3.14`` and
``python3.15``. Each image is the cached root packed as a one-layer
docker-archive (user 65532:65532, ``CMD`` its Python) and imported into the
node's containerd as ``ring-devcluster.local/python:<root>-<key>``,
the key being a digest of the root's package list (a changed root is a new
image). Made once per root: about 120 MB per image; :func:`image` says how
long a cold one took.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from ringdevcluster import node
from tests.support import pythonroots

#: Directories the launcher tests mount into a root (tests.support.pythonroots): not part of the image.
_TEST_MOUNTS = ("./ring", "./etc/ring-config", "./run/secrets", "./root/.pyenv")


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def image(root_name: str, workdir: Path) -> str:
    """The image name of root ``root_name`` in the node's containerd (packed and imported now if missing)."""
    spec = pythonroots.ROOTS[root_name]
    root = pythonroots.ensure_root(root_name)
    key = _file_digest(root / "var" / "lib" / "dpkg" / "status")[:12]
    name = f"ring-devcluster.local/python:{root_name}-{key}"
    if f"{name}" in node.image_names() or f"docker.io/{name}" in node.image_names():
        return name
    started = time.monotonic()
    made_by = f"mmdebstrap --variant=minbase --include={','.join(spec.packages)} {spec.suite}"
    pack(root, name=name, workdir=workdir, created_by=made_by, cmd=spec.packages[-1])
    print(f"python image {name}: packed and imported in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return name


def pack(root: Path, *, name: str, workdir: Path, created_by: str, env_path: str = "", cmd: str = "python3") -> None:
    """Pack the directory ``root`` as the one-layer image ``name`` (user 65532:65532, ``CMD cmd``); import it."""
    workdir.mkdir(parents=True, exist_ok=True)
    slug = name.rsplit("/", 1)[-1].replace(":", "-")
    layer = workdir / f"{slug}-layer.tar"
    excludes = [f"--exclude={path}" for path in ("./dev/*", "./proc/*", "./sys/*", "./tmp/*", *_TEST_MOUNTS)]
    subprocess.run(
        ["tar", "-C", str(root), "--numeric-owner", "--sort=name", *excludes, "-cf", str(layer), "."],
        check=True, timeout=1800,
    )  # fmt: skip
    diff_id = "sha256:" + _file_digest(layer)
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": [f"PATH={env_path + ':' if env_path else ''}{path}"],
            "Cmd": [cmd],
            "User": "65532:65532",
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": created_by}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = diff_id.split(":", 1)[1] + "/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": [name], "Layers": [layer_name]}]
    archive = workdir / f"{slug}.tar"
    with tarfile.open(archive, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member, data in (("manifest.json", json.dumps(manifest).encode()), (config_name, config_bytes)):
            info = tarfile.TarInfo(member)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        tar.add(layer, arcname=layer_name)
    layer.unlink()
    try:  # ctr itself, not node.import_image: a PyTorch image takes longer than its 300 s
        subprocess.run(
            ["ctr", "--address", node.CONTAINERD_SOCKET, "-n", "k8s.io", "images", "import", str(archive)],
            check=True, capture_output=True, timeout=1800,
        )  # fmt: skip
    finally:
        archive.unlink()
