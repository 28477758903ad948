"""The entry of ``dist/ring-launch.pyz``, and ``ring-launch --install``.

The one-file launcher is a zipapp: ``__main__.py`` at its root calls
:func:`run`, which checks the interpreter before it imports anything that
needs Python 3.9 (this module and :mod:`ranktable.exitcodes` parse on any
Python 3: no annotations, no f-strings), then sends the self-registration
when asked for (:func:`ranktable.earlyreg.start`: before the rest of the
launcher is loaded, which is most of its start) and runs
:func:`ranktable.launcher.main`. What it reports, one line each:

* Python older than 3.9: exit 69, naming the version and the interpreter.
* A damaged archive (a member that does not decompress or import): exit 66.
  A *truncated* file cannot get that far: its zip directory (at the end) is
  gone, so Python runs the file as a script and stops at its binary content
  (``SyntaxError: source code cannot contain null bytes``, exit 1) before
  any of our code runs. That is why the file is installed with
  :func:`install`, which verifies the archive and renames it into place, so a
  trainer sees a whole file or none (``python3: can't open file ...``, exit 2).
"""

import os
import sys
from collections.abc import Callable  # noqa: F401 - named in a type comment

from ranktable import exitcodes

#: The name ``--install`` gives the file in the target directory.
PYZ_NAME = "ring-launch.pyz"
MIN_PYTHON = (3, 9)
EXIT_DAMAGED = exitcodes.DAMAGED
EXIT_OLD_PYTHON = exitcodes.OLD_PYTHON


def archive():  # type: () -> str
    """The path of the running .pyz ('' when the launcher does not run from one)."""
    loader = globals().get("__loader__")
    path = getattr(loader, "archive", "")
    return str(path or "")


def damaged(err):  # type: (BaseException) -> str
    """The one-line message for a launcher file whose modules cannot be loaded."""
    return "%s is damaged or incomplete (%s: %s); copy it again (ring-launch.pyz --install DIR)" % (
        archive() or "the ring-launch installation",
        type(err).__name__,
        err,
    )


def run():  # type: () -> None
    """``python3 ring-launch.pyz ...``: check the interpreter, then run the launcher; exits."""
    if sys.version_info < MIN_PYTHON:
        sys.stderr.write(
            "ring-launch: needs Python %d.%d or newer; %s is Python %s\n"
            % (MIN_PYTHON[0], MIN_PYTHON[1], sys.executable or "python", sys.version.split()[0])
        )
        sys.exit(EXIT_OLD_PYTHON)
    early = None
    argv = sys.argv[1:]
    if "--from-api" in (argv[: argv.index("--")] if "--" in argv else argv):  # file mode loads no TLS client
        try:
            from ranktable import earlyreg
        except Exception:  # noqa: BLE001 - damaged: the import below says so
            pass
        else:
            try:
                early = earlyreg.start(argv)  # --register: the PATCH goes out before the rest loads
            except Exception:  # noqa: BLE001 - anything unforeseen: main registers the ordinary way and says why
                early = None
    try:
        from ranktable.launcher import main
    except Exception as err:  # noqa: BLE001 - any failure to load our own modules means a damaged file
        sys.stderr.write("ring-launch: error: %s\n" % damaged(err))
        sys.exit(EXIT_DAMAGED)
    sys.exit(main(early=early))


def install(directory, log):  # type: (str, Callable[[str], None]) -> int
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
                raise zipfile.BadZipFile("member %s fails its CRC check" % (bad or "__main__.py is missing"))
        os.replace(tmp, target)
        tmp = ""
    except (OSError, zipfile.BadZipFile) as err:
        say("error: cannot install %s into %s: %s" % (source, directory, err))
        return exitcodes.DAMAGED if isinstance(err, zipfile.BadZipFile) else exitcodes.ERROR
    finally:
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    say(
        "installed %s (%d bytes, sha256 %s); run: python3 %s -- CMD"
        % (target, len(data), hashlib.sha256(data).hexdigest()[:16], target)
    )
    return 0
