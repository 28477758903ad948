"""``ring-launch``'s command line: its argparse parser and the option rules that hold beyond argparse.

:func:`ranktable.launch.launcher.main` parses the command line with
:func:`parser`, then applies :func:`check_options` (the rules argparse
cannot state) before it waits. The one-file launcher's early registration
(:mod:`ranktable.launch.earlyreg`) reads the same command line the same way
(:func:`parsed_quietly`) before the rest of the launcher is loaded, to decide
whether ``main`` would get as far as registering.

``argparse`` is imported when a command line is parsed, not when this
module is: :mod:`ranktable.launch.wait` and ``kubectl ring`` read only the
defaults here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

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

#: ``--print``'s choices.
PRINT_CHOICES = ("env", "json", "hostfile")


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


def check_parsed(args: argparse.Namespace, command: Sequence[str]) -> float:
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


def parser(*, epilog: str = "") -> argparse.ArgumentParser:
    """``ring-launch``'s argparse parser (``epilog``: the end of ``--help``, which ``main`` fills in)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="ring-launch",
        usage="ring-launch [options] -- CMD [ARG ...]\n       ring-launch [options] --print env|json|hostfile",
        description=(
            "Wait for this pod's completed cluster spec, export every framework's variables "
            "(TF_CONFIG, torch, JAX, Paddle, MindSpore, MPI hostfiles), exec or supervise CMD."
        ),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config-dir",
        default=None,
        help="directory holding cluster.json, the mounted ConfigMap (env RING_CONFIG_DIR, default /etc/ring-config)",
    )
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds to wait before giving up (env RING_TIMEOUT, default 600)"
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=DEFAULT_POLL_INTERVAL,
        help=f"seconds between reads of the file (default {DEFAULT_POLL_INTERVAL:g})",
    )
    parser.add_argument("--pod", default=None, help="this pod's name (default: $POD_NAME, else $HOSTNAME)")
    parser.add_argument("--from-api", action="store_true", help="watch the ConfigMap through the API server")
    parser.add_argument(
        "--register",
        action="store_true",
        default=None,
        help="API mode: register this launcher on its own pod at start (annotation ring-controller.io/registered, "
        "with $POD_IP) so a job opted into self-registration completes before the kubelet reports the pod Running; "
        "needs the grant in build/launcher-rbac.yaml, else it says so once and waits as usual (env RING_REGISTER=1)",
    )
    parser.add_argument(
        "--namespace", default=None, help="API mode: namespace (default: $POD_NAMESPACE, else the service account's)"
    )
    parser.add_argument(
        "--configmap",
        default=None,
        help="API mode: ConfigMap name (default: $RING_CONFIGMAP, else rings-config-$RING_JOB_NAME)",
    )
    parser.add_argument(
        "--kubeconfig", default=None, help="API mode: kubeconfig file (default: in-cluster, else $KUBECONFIG)"
    )
    parser.add_argument(
        "--hostfile-dir",
        default=None,
        help="directory the MPI hostfiles are written to (env RING_HOSTFILE_DIR, default $TMPDIR/ring-launch)",
    )
    parser.add_argument(
        "--print",
        dest="print_as",
        choices=PRINT_CHOICES,
        default=None,
        help="wait, print what would be exported (env: shell-quoted KEY=value lines; json; hostfile), exit 0",
    )
    parser.add_argument(
        "--install",
        metavar="DIR",
        default=None,
        help="the .pyz only: copy this file into DIR (verified, atomic) and exit",
    )
    parser.add_argument(
        "--supervise", action="store_true", help="stay the parent: restart CMD in place when the membership changes"
    )
    parser.add_argument(
        "--grace-period",
        type=float,
        default=DEFAULT_GRACE,
        help=f"--supervise: seconds between SIGTERM and SIGKILL of CMD (default {DEFAULT_GRACE:g})",
    )
    parser.add_argument(
        "--max-restarts",
        type=int,
        default=DEFAULT_MAX_RESTARTS,
        help=f"--supervise: restarts allowed before giving up with exit 4 (default {DEFAULT_MAX_RESTARTS})",
    )
    return parser


def parsed_quietly(argv: Sequence[str]) -> argparse.Namespace | None:
    """``argv`` (after the program name) as ``main`` reads it, or None where ``main`` would stop first.

    None for ``--help`` and a usage error (argparse's or :func:`check_parsed`'s):
    nothing is printed here, ``main`` says it. What follows ``--`` is the command.
    """
    import contextlib
    import io

    words = list(argv)
    split = words.index("--") if "--" in words else len(words)
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            args = parser().parse_args(words[:split])
        check_parsed(args, words[split + 1 :])
    except (SystemExit, UsageError):
        return None
    return args
