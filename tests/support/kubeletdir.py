"""A ConfigMap volume directory written the way the kubelet writes it, for launcher tests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ranktable.clusterspec import ClusterSpec, spec_to_json
from ranktable.hccl import render_hccl


class KubeletDir:
    """A ConfigMap volume directory updated the way the kubelet's atomic writer does it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.generation = 0

    def publish(self, files: dict[str, str] | dict[str, bytes]) -> None:
        """Make ``files`` the volume's content (``binaryData`` keys as bytes), as one atomic swap."""
        self.generation += 1
        stamp = self.root / f"..2026_01_31_12_00_00.{self.generation:09d}"
        stamp.mkdir()
        for name, content in files.items():
            if isinstance(content, bytes):
                (stamp / name).write_bytes(content)
            else:
                (stamp / name).write_text(content)
        data = self.root / "..data"
        old = os.readlink(data) if data.is_symlink() else None
        tmp = self.root / "..data_tmp"
        os.symlink(stamp.name, tmp)
        os.replace(tmp, data)
        for name in files:
            link = self.root / name
            if not link.is_symlink():
                os.symlink(f"..data/{name}", link)
        for link in self.root.iterdir():
            if link.is_symlink() and not link.name.startswith("..") and link.name not in files:
                link.unlink()
        if old:
            shutil.rmtree(self.root / old)

    def publish_spec(self, spec: ClusterSpec, *, hccl: bool = False) -> None:
        files = {"cluster.json": spec_to_json(spec)}
        if hccl:
            files["hccl.json"] = render_hccl(spec)
        self.publish(files)
