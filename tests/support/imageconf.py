"""What goes into the images, read as build/image.sh and setup.cfg state it."""

from __future__ import annotations

import configparser
import shlex

from tests.support.clients import REPO

IMAGE_DIR = REPO / "build" / "image"


def image_conf() -> dict[str, str]:
    """build/image/image.conf as the shell sees it (NAME=value lines)."""
    conf: dict[str, str] = {}
    for line in (IMAGE_DIR / "image.conf").read_text().splitlines():
        words = shlex.split(line, comments=True)
        if words:
            assert len(words) == 1 and "=" in words[0], f"not NAME=value: {line!r}"
            name, value = words[0].split("=", 1)
            conf[name] = value
    return conf


def setup_cfg() -> configparser.ConfigParser:
    """The project's setup.cfg."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    return cfg
