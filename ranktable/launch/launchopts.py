"""``ring-launch``'s option rules that hold beyond argparse, and a reader of its command line without argparse.

:func:`ranktable.launch.launcher.main` parses the command line with argparse, then
applies :func:`check_options` (the rules argparse cannot state) before it
waits. The one-file launcher's early registration (:mod:`ranktable.launch.earlyreg`)
must decide whether ``main`` would get as far as registering *before*
argparse and the rest of the launcher are loaded: :func:`scan` reads the
command line when every option in it is spelled out in full (``--opt VALUE``
or ``--opt=VALUE``), :func:`parsed_without_argparse` converts it as argparse
would, and the same :func:`check_options` then says whether ``main`` would
stop with a usage error. Anything :func:`scan` does not read
exactly (an abbreviation, ``-h``, an unknown option, a value that looks like
an option) makes it answer None, and ``main`` alone decides, as always.

Standard library only and light (no ``argparse``, no ``typing``): the early
registration pays for every module it imports before its PATCH. When the
command line is read exactly, :func:`parsed_without_argparse` gives ``main``
what argparse would, so the plain container command never loads argparse.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from types import SimpleNamespace

TYPE_CHECKING = False  # typing is not imported at run time (see ranktable.records)
if TYPE_CHECKING:  # not at run time: the early registration path must not load argparse
    import argparse
    from typing import Union

#: The variables that stand in for options (``ring-launch --help`` lists them all).
TIMEOUT_ENV = "RING_TIMEOUT"
CONFIGMAP_ENV = "RING_CONFIGMAP"
JOB_ENV = "RING_JOB_NAME"
REGISTER_ENV = "RING_REGISTER"
DEFAULT_TIMEOUT = 600.0
#: File mode: seconds between reads of the file. ``--supervise``: seconds from SIGTERM to SIGKILL, restarts allowed.
DEFAULT_POLL_INTERVAL = 0.5
DEFAULT_GRACE = 10.0
DEFAULT_MAX_RESTARTS = 10

#: ``ring-launch``'s options that take a value, and those that do not (argparse's parser in
#: :mod:`ranktable.launch.launcher` must accept exactly these; a unit test compares them).
VALUED = frozenset(
    {
        "--config-dir",
        "--timeout",
        "--poll-interval",
        "--pod",
        "--namespace",
        "--configmap",
        "--kubeconfig",
        "--hostfile-dir",
        "--print",
        "--install",
        "--grace-period",
        "--max-restarts",
    }
)
FLAGS = frozenset({"--from-api", "--register", "--supervise"})
PRINT_CHOICES = ("env", "json", "hostfile")

if TYPE_CHECKING:
    Scanned = dict[str, Union[str, bool]]


class UsageError(ValueError):
    """``ring-launch`` exits 2 with this message (``no_command``: after printing its usage line)."""

    def __init__(self, message: str, *, no_command: bool = False) -> None:
        super().__init__(message)
        self.no_command = no_command


def default_timeout(environ: Mapping[str, str] | None = None) -> float:
    """``$RING_TIMEOUT`` (seconds), else 600; ValueError if it is not a number."""
    value = (os.environ if environ is None else environ).get(TIMEOUT_ENV)
    return float(value) if value else DEFAULT_TIMEOUT


def register_requested(flag: bool | None, environ: Mapping[str, str] | None = None) -> bool:
    """Whether to self-register: ``--register``, else ``$RING_REGISTER`` is ``1`` or ``true``."""
    return bool(flag) or (os.environ if environ is None else environ).get(REGISTER_ENV, "") in ("1", "true")


def check_options(
    *,
    command: Sequence[str],
    print_as: str | None,
    supervise: bool,
    timeout: float | None,
    poll_interval: float | None = None,
    grace_period: float | None = None,
    max_restarts: int | None = None,
) -> float:
    """The seconds to wait (``timeout``, else :func:`default_timeout`); raises :class:`UsageError` as ``main`` reports it.

    None for ``poll_interval``, ``grace_period`` or ``max_restarts``: not
    given, so the launcher's default, which is valid.
    """
    if print_as is not None and (command or supervise):
        raise UsageError("error: --print takes no command and no --supervise")
    if not command and print_as is None:
        raise UsageError("error: no command given; put it after `--`", no_command=True)
    if (grace_period is not None and grace_period < 0) or (max_restarts is not None and max_restarts < 0):
        raise UsageError("error: --grace-period and --max-restarts must not be negative")
    try:
        seconds = default_timeout() if timeout is None else timeout
    except ValueError:
        raise UsageError(f"error: {TIMEOUT_ENV}={os.environ.get(TIMEOUT_ENV)!r} is not a number of seconds") from None
    if not (seconds > 0 and (poll_interval is None or poll_interval > 0)):  # also NaN, which would wait forever
        raise UsageError("error: --timeout and --poll-interval must be positive")
    return seconds


def check_parsed(args: argparse.Namespace | SimpleNamespace, command: Sequence[str]) -> float:
    """:func:`check_options` for the options argparse parsed (``ring-launch``'s parser) and ``command``."""
    return check_options(
        command=command,
        print_as=args.print_as,
        supervise=args.supervise,
        timeout=args.timeout,
        poll_interval=args.poll_interval,
        grace_period=args.grace_period,
        max_restarts=args.max_restarts,
    )


def scan(argv: Sequence[str]) -> tuple[Scanned, list[str]] | None:
    """``argv`` (after the program name) as ({option: value, flag: True}, command after ``--``), or None.

    None whenever argparse might read ``argv`` differently: an option that
    is not spelled in full, ``-h``/``--help``, a positional word, a missing
    value or one that starts with ``-``, an option given twice.
    """
    split = list(argv).index("--") if "--" in argv else len(argv)
    words, command = list(argv[:split]), list(argv[split + 1 :])
    options: Scanned = {}
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, value = word.partition("=")
        if name in FLAGS and not eq:
            found: str | bool = True
        elif name in VALUED and eq:
            found = value
        elif name in VALUED and i + 1 < len(words) and not words[i + 1].startswith("-"):
            found = words[i + 1]
            i += 1
        else:
            return None
        if name in options:
            return None
        options[name] = found
        i += 1
    return options, command


#: What ``ring-launch``'s parser gives an option not on the command line (its
#: ``dest`` -> default); the launcher's parser uses the same values.
PARSED_DEFAULTS: dict[str, object] = {
    "config_dir": None,
    "timeout": None,
    "poll_interval": DEFAULT_POLL_INTERVAL,
    "pod": None,
    "from_api": False,
    "register": None,
    "namespace": None,
    "configmap": None,
    "kubeconfig": None,
    "hostfile_dir": None,
    "print_as": None,
    "install": None,
    "supervise": False,
    "grace_period": DEFAULT_GRACE,
    "max_restarts": DEFAULT_MAX_RESTARTS,
}
_CONVERT = {"--timeout": float, "--poll-interval": float, "--grace-period": float, "--max-restarts": int}


def parsed_without_argparse(argv: Sequence[str]) -> SimpleNamespace | None:
    """``argv`` read as argparse would read it (the same attribute names, types and defaults), or None.

    For the plain command line of a container (every option spelled out,
    no usage error): ``main`` then neither imports ``argparse`` nor builds
    its parser (what that saves: docs/launcher.md#what-a-start-costs),
    and the early registration reads the same answer before the rest of
    the launcher is loaded. None for anything :func:`scan` does not read
    exactly, for a value argparse would refuse (a number that is not one, a
    ``--print`` choice it does not offer) and for a line on which ``main``
    would stop with a usage error (:func:`check_parsed`); ``main`` hands
    those to argparse, as always.
    """
    scanned = scan(argv)
    if scanned is None:
        return None
    options, command = scanned
    if options.get("--print", PRINT_CHOICES[0]) not in PRINT_CHOICES:
        return None
    values = dict(PARSED_DEFAULTS)
    try:
        for name, value in options.items():
            dest = "print_as" if name == "--print" else name[2:].replace("-", "_")
            values[dest] = _CONVERT[name](value) if name in _CONVERT else value
        parsed = SimpleNamespace(**values)
        check_parsed(parsed, command)
    except ValueError:  # UsageError, or a number argparse would refuse
        return None
    return parsed
