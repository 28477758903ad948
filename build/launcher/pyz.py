#!/usr/bin/env python3
"""Write ``dist/ring-launch.pyz``: the launcher as one file, standard library only.

    python3 build/launcher/pyz.py [--out dist/ring-launch.pyz]

A zipapp (``#!/usr/bin/env python3``, then a zip): the ``ranktable`` package's
modules (what ``ring-launch`` imports, and nothing above that layer: an
import-linter contract keeps ``ranktable`` on the standard library) and a
``__main__.py`` that calls :func:`ranktable.launch.pyzmain.run`. Reproducible: the
members are sorted and stamped with a fixed time, so the same sources give
the same bytes (and the same sha256 in ``--install``'s line).

Bytecode: zipimport cannot cache compiled modules, so a sources-only file
compiles all of them at every start (about 30 ms of CPU here). The archive
therefore also holds each module compiled by the Python that builds it
(``ranktable/NAME.pyc``, ``ranktable/launch/NAME.pyc``, unchecked hash-based: no timestamps). That Python's
minor version (3.11, the controller image's and bookworm's) uses them; any
other finds a foreign magic number and zipimport falls back to the source.
Prints the path, size, sha256 and the bytecode's Python version.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import py_compile
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "ranktable"
SHEBANG = b"#!/usr/bin/env python3\n"
MAIN = b"""# ring-launch, the one-file launcher (build/launcher/pyz.py). See ranktable/launch/pyzmain.py.
from ranktable.launch.pyzmain import run

run()
"""
#: 1980-01-01, the zip format's earliest time: no build time in the bytes.
STAMP = (1980, 1, 1, 0, 0, 0)


def members(repo: Path = REPO) -> list[tuple[str, bytes]]:
    """The archive's (name, bytes), sorted: ``__main__.py``, every ``ranktable/**/*.py`` and its ``.pyc``."""
    files = [("__main__.py", MAIN)]
    with tempfile.TemporaryDirectory() as tmp:
        for path in sorted((repo / PACKAGE).rglob("*.py")):
            name = path.relative_to(repo).as_posix()
            files.append((name, path.read_bytes()))
            cfile = os.path.join(tmp, name.replace("/", "_") + "c")
            py_compile.compile(
                str(path),
                cfile=cfile,
                dfile=name,
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
            )
            files.append((name + "c", Path(cfile).read_bytes()))
    return sorted(files)


def build(out: Path, repo: Path = REPO) -> bytes:
    """Write the zipapp to ``out`` (atomically) and return its bytes."""
    buffer = io.BytesIO()
    buffer.write(SHEBANG)
    with zipfile.ZipFile(buffer, "a", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, data in members(repo):
            info = zipfile.ZipInfo(name, date_time=STAMP)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    data = buffer.getvalue()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, 0o755)
    tmp.replace(out)
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist" / "ring-launch.pyz")
    args = parser.parse_args(argv)
    data = build(args.out)
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    print(
        f"{args.out} ({len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}, bytecode for Python {version})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
