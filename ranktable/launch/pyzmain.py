"""The entry of ``dist/ring-launch.pyz``, and ``ring-launch --install``.

The one-file launcher is a zipapp: ``__main__.py`` at its root calls
:func:`run`, which checks the interpreter before it imports anything that
needs Python 3.9 (this module and :mod:`ranktable.launch.exitcodes` parse on any
Python 3: no annotations, no f-strings), then sends the self-registration
when asked for (:func:`ranktable.launch.earlyreg.start`: before the rest of the
launcher is loaded, which is most of its start) and runs
:func:`ranktable.launch.launcher.main`. What it reports, one line each:

* Python older than 3.9: exit 69, naming the version and the interpreter.
* A damaged archive (a member that does not decompress or import): exit 66.
  A *truncated* file cannot get that far: its zip directory (at the end) is
  gone, so Python runs the file as a script and stops at its binary content
  (``SyntaxError: source code cannot contain null bytes``, exit 1) before
  any of our code runs. That is why the file is installed with
  :func:`ranktable.launch.pyzfile.install`, which verifies the archive and renames it into place, so a
  trainer sees a whole file or none (``python3: can't open file ...``, exit 2).
"""

import sys

from ranktable.launch import exitcodes

MIN_PYTHON = (3, 9)
EXIT_DAMAGED = exitcodes.DAMAGED
EXIT_OLD_PYTHON = exitcodes.OLD_PYTHON


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
            from ranktable.launch import earlyreg
        except Exception:  # noqa: BLE001 - damaged: the import below says so
            pass
        else:
            try:
                early = earlyreg.start(argv)  # --register: the PATCH goes out before the rest loads
            except Exception:  # noqa: BLE001 - anything unforeseen: main registers the ordinary way and says why
                early = None
    try:
        from ranktable.launch.launcher import main
    except Exception as err:  # noqa: BLE001 - any failure to load our own modules means a damaged file
        sys.stderr.write("ring-launch: error: %s\n" % _damaged(err))
        sys.exit(EXIT_DAMAGED)
    sys.exit(main(early=early))


def _damaged(err):  # type: (BaseException) -> str
    """The damage message, from :mod:`ranktable.launch.pyzfile` when that member itself loads.

    Imported only here, after the version check: that module is ordinary
    Python 3.9 (annotations, f-strings), and the old-Python line must come first.
    """
    try:
        from ranktable.launch.pyzfile import damaged
    except Exception:  # noqa: BLE001 - that member is damaged too
        return "the ring-launch file is damaged or incomplete (%s: %s); copy it again" % (type(err).__name__, err)
    return damaged(err)
