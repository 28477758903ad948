"""The images build/image.sh makes without a Docker engine, checked as built.

``build/image.sh --check`` runs its self-check on the image it wrote (runc, as
65532:65532, read-only root, no capabilities, tmpfs on /tmp: the Deployment's
security context): ``ring-controller --version``, ``ring-launch --help``,
the clients import, and for the trainer ``import tensorflow`` and the
examples. Here the docker-archive the node imports is also read back,
independently of the script: its tag, user, entrypoint and ports are the ones
``build/ring-controller.yaml`` and ``build/image/image.conf`` name.

Needs root (mmdebstrap, chroot, runc). The first build takes minutes (about
4 for the controller, 10 for the trainer on 2 cores); layers are cached in
~/.cache/ring-images, so later runs take seconds plus the check.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.support.imageconf import image_conf, setup_cfg

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def root() -> None:
    """build/image.sh needs root (mmdebstrap, chroot, runc): without it these tests fail, never skip."""
    if os.geteuid() != 0:
        pytest.fail("build/image.sh needs root (mmdebstrap, chroot, runc); run the tests as root", pytrace=False)


def build(flag: str) -> str:
    """Run build/image.sh FLAG --check; its progress and check lines (stderr) are returned."""
    done = subprocess.run(
        [str(REPO / "build" / "image.sh"), flag, "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stderr


def archive_config(path: Path) -> tuple[list[str], dict[str, Any], int]:
    """(RepoTags, image config, layer count) of a docker-archive tarball."""
    with tarfile.open(path) as tar:
        manifest_file = tar.extractfile("manifest.json")
        assert manifest_file is not None
        (manifest,) = json.load(manifest_file)
        config_file = tar.extractfile(manifest["Config"])
        assert config_file is not None
        config = json.load(config_file)
    return manifest["RepoTags"], config, len(manifest["Layers"])


def check_line(output: str, label: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip().startswith(label)]
    assert lines, f"no '{label}' line in the self-check output:\n{output[-3000:]}"
    return lines[-1]


def test_controller_image() -> None:
    conf = image_conf()
    version = setup_cfg()["metadata"]["version"]
    output = build("--controller")
    assert check_line(output, "ring-controller --version:").endswith(f"ring-controller {version}")
    assert "uid=65532" in check_line(output, "id:")
    assert check_line(output, "ring-launch --help:").startswith("ring-launch --help: usage: ring-launch")

    tags, config, layers = archive_config(REPO / "dist" / "images" / f"ring-controller-{version}.tar")
    assert any(tag.split("/")[-1] == f"{conf['CONTROLLER_IMAGE']}:{version}" for tag in tags), tags
    cfg = config["config"]
    assert cfg["User"] == f"{conf['USER_ID']}:{conf['GROUP_ID']}"
    assert cfg["Entrypoint"] == [conf["CONTROLLER_ENTRYPOINT"]]
    assert sorted(cfg["ExposedPorts"]) == sorted(f"{p}/tcp" for p in conf["CONTROLLER_EXPOSE"].split())
    assert "PYTHONDONTWRITEBYTECODE=1" in cfg["Env"]
    assert layers == 3  # base, deps, app: a product change rebuilds only the last


@pytest.mark.e2e
def test_trainer_image() -> None:
    conf = image_conf()
    version = setup_cfg()["metadata"]["version"]
    output = build("--trainer")
    assert check_line(output, "import tensorflow:").startswith("import tensorflow: tensorflow ")
    assert "train.py" in check_line(output, "examples:")
    assert "uid=65532" in check_line(output, "id:")

    tags, config, _ = archive_config(REPO / "dist" / "images" / f"ring-trainer-{version}.tar")
    assert any(tag.split("/")[-1] == f"{conf['TRAINER_IMAGE']}:{version}" for tag in tags), tags
    assert config["config"]["User"] == f"{conf['USER_ID']}:{conf['GROUP_ID']}"
    assert config["config"]["WorkingDir"] == conf["TRAINER_APP"]
