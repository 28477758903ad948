"""The one-file launcher as a file: where it runs from, its damage message, ``--install``.

Shared by the entry (:mod:`ranktable.launch.pyzmain`) and the launcher
(:mod:`ranktable.launch.launcher`), so neither imports the other. The entry
imports it only after it has checked the interpreter's version, so unlike the
entry this module is ordinary Python 3.9.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ranktable.launch import exitcodes

#: The name ``--install`` gives the file in the target directory.
PYZ_NAME = "ring-launch.pyz"


def archive() -> str:
    """The path of the running .pyz ('' when the launcher does not run from one)."""
    loader = globals().get("__loader__")
    path = getattr(loader, "archive", "")
    return str(path or "")


def damaged(err: BaseException) -> str:
    """The one-line message for a launcher file whose modules cannot be loaded."""
    where = archive() or "the ring-launch installation"
    return (
        f"{where} is damaged or incomplete ({type(err).__name__}: {err}); copy it again (ring-launch.pyz --install DIR)"
    )


def install(directory: str, log: Callable[[str], None]) -> int:
    """Copy the running .pyz into ``directory`` as ``ring-launch.pyz``: verified, then renamed into place.

    For an init container: ``python3 /ring-launch/ring-launch.pyz --install /ring``.
    The copy is read back and every member's CRC checked before the rename,
    so the trainer never sees a partial file. Returns the exit code.
    """
    say = log
    source = archive()
    if not source:
        say("error: --install works only from dist/ring-launch.pyz (python3 ring-launch.pyz --install DIR)")
        return exitcodes.USAGE
    import hashlib
    import tempfile
    import zipfile

    target = os.path.join(directory, PYZ_NAME)
    tmp = ""
    try:
        with open(source, "rb") as handle:
            data = handle.read()
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".ring-launch.", suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o755)
        with zipfile.ZipFile(tmp) as copy:
            bad = copy.testzip()
            if bad is not None or "__main__.py" not in copy.namelist():
                raise zipfile.BadZipFile(f"member {bad or '__main__.py is missing'} fails its CRC check")
        os.replace(tmp, target)
        tmp = ""
    except (OSError, zipfile.BadZipFile) as err:
        say(f"error: cannot install {source} into {directory}: {err}")
        return exitcodes.DAMAGED if isinstance(err, zipfile.BadZipFile) else exitcodes.ERROR
    finally:
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    say(
        f"installed {target} ({len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}); "
        f"run: python3 {target} -- CMD"
    )
    return 0
