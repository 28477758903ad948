"""``ring-launch``: wait for the cluster spec, export every framework's environment, run the trainer.

Usage::

    ring-launch [--config-dir DIR] [--timeout S] [--poll-interval S] [--pod NAME]
                [--from-api [--namespace NS] [--configmap NAME] [--kubeconfig FILE]]
                [--hostfile-dir DIR] [--supervise [--grace-period S] [--max-restarts N]]
                -- CMD [ARG ...]
    ring-launch [options] --print env|json|hostfile

It runs as the training container's entry point, before any framework is
imported. It waits (:mod:`ranktable.launch.wait`) until the spec is ``completed`` and
lists this pod, then sets every variable of
:data:`ranktable.exports.FRAMEWORKS` (``TF_CONFIG``; PyTorch's and torchrun's;
JAX's; PaddlePaddle's; MindSpore's; ``RANK_TABLE_FILE`` when the job has
Ascend devices and a rank table is present, ``DIR/hccl.json``, in API mode a
local copy; MPI hostfiles written to ``--hostfile-dir``; ``RING_EPOCH``),
and then either

* replaces itself with ``CMD`` (``os.execvp``, the default): the trainer keeps
  the container's PID, receives its signals directly and its exit code is the
  container's; or
* with ``--supervise``, stays the parent and restarts CMD in place when the
  membership changes (:mod:`ranktable.launch.supervise`); or
* with ``--print``, prints what it would export (``env``: ``KEY=value`` lines,
  shell-quoted, for ``eval``; ``json``: one object; ``hostfile``: the hostfile
  text) and exits 0.

Why a launcher and not DNS: the spec holds every member's pod IP and port the
moment the last member is Running, so the trainer starts with a complete,
resolvable cluster and no probing. Pod identity is ``--pod``, else
``$POD_NAME``, else ``$HOSTNAME``; ``$POD_UID``/``$POD_IP`` (downward API),
when set, guard against a stale spec written for a predecessor pod of the same
name.

The launcher is standard library only and runs on Python 3.9 and newer
(an import-linter contract and the tests keep it so): ``build/build.sh``
packs :mod:`ranktable` into one file, ``dist/ring-launch.pyz``
(:mod:`ranktable.launch.pyzmain` is its entry), which any image with a python3 runs
as ``python3 ring-launch.pyz -- CMD``; the package's ``ring-launch`` console
script runs this same module. ``--from-api`` loads :mod:`ranktable.launch.apiwatch`
(``http.client`` over ``ssl``) only when used, which keeps a
file-mode start fast. A start loads no ``dataclasses`` (:mod:`ranktable.frozen`):
the modules tests/support/launcherpyz.py ``HEAVY`` names. Other standard
modules are used as they are (the rule in CONTRIBUTING.md: a stand-in stays
only where it saves 10 ms of wall time for one launcher starting alone).
``--install DIR`` (the pyz only) copies the running file into ``DIR``,
verified and atomically, for an init container.

Exit codes (when CMD was not started or did not end by itself), :mod:`ranktable.launch.exitcodes`:
2 usage error, 3 this pod never appeared in the completed spec, 4
``--max-restarts`` spent, 7 CMD's environment over the exec limit
(:func:`fit_exec_limit`), 65 malformed spec, 66 the launcher file is damaged,
69 Python older than 3.9 (from the pyz's entry), 77 the API server refused
(401/403: the Role is missing), 78 no usable API configuration (token
file, CA bundle, kubeconfig; a server certificate that fails verification;
no ``ssl``), 124 timeout, 1 any other API or I/O error, 126/127 CMD
not executable / not found.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from typing import TYPE_CHECKING

from ranktable.clusterspec import CONFIGMAP_PREFIX, PodNotInSpec, SpecError
from ranktable.exports import (
    OVERSIZED_ENV,
    ExecLimitError,
    ExecLimits,
    Overflow,
    entry_size,
    exec_limits,
    exec_overflow,
    file_reader,
    file_variable,
    frameworks_text,
    member_env,
    oversized,
)
from ranktable.hostfile import FILE_NAMES, hostfile_text
from ranktable.launch import exitcodes, launchopts, pyzfile
from ranktable.launch.wait import (
    FileSource,
    Ready,
    Source,
    WaitTimeout,
    default_config_dir,
    identity_from_env,
    wait_for_spec,
)
from ranktable.podenv import POD_IP_ENV, pod_ips, pod_name, pod_namespace
from ranktable.registration import started_text
from ranktable.stored import rank_table_file as rank_table_file_for
from ranktable.stored import replace_file, temp_dir

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping, Sequence
    from typing import Final

    from ranktable.launch.apiwatch import ApiSource
    from ranktable.launch.earlyreg import Early

#: When this launcher started (wall clock): the registration's ``started``.
STARTED: Final = time.time()

#: ``--supervise`` defaults (:mod:`ranktable.launch.supervise` is imported only when used).
DEFAULT_GRACE: Final = launchopts.DEFAULT_GRACE
DEFAULT_MAX_RESTARTS: Final = launchopts.DEFAULT_MAX_RESTARTS

EXIT_USAGE: Final = exitcodes.USAGE
EXIT_NOT_IN_SPEC: Final = exitcodes.NOT_IN_SPEC
EXIT_EXEC_LIMIT: Final = exitcodes.EXEC_LIMIT
EXIT_MALFORMED: Final = exitcodes.MALFORMED
EXIT_DAMAGED: Final = exitcodes.DAMAGED
EXIT_API_DENIED: Final = exitcodes.API_DENIED
EXIT_API_CONFIG: Final = exitcodes.API_CONFIG
EXIT_TIMEOUT: Final = exitcodes.TIMEOUT
EXIT_ERROR: Final = exitcodes.ERROR
EXIT_NOT_EXECUTABLE: Final = exitcodes.NOT_EXECUTABLE
EXIT_NOT_FOUND: Final = exitcodes.NOT_FOUND

_EPILOG = """\
environment read: POD_NAME (else HOSTNAME) names this pod; POD_UID and POD_IP,
when set, must match the spec's member. RING_CONFIG_DIR, RING_TIMEOUT,
RING_CONFIGMAP (else rings-config-$RING_JOB_NAME), POD_NAMESPACE,
RING_HOSTFILE_DIR give defaults for the options.

environment set for CMD, by framework (a trainer reads its own and ignores
the rest):
%s

--from-api needs the pod's service account to have get, list and watch on
that one ConfigMap: a Role with apiGroups [""], resources ["configmaps"],
resourceNames [NAME], verbs ["get","list","watch"], bound to the account.

--supervise: ring-launch stays the parent. When the spec moves to a new epoch
(a peer replaced, an address changed) it stops CMD (SIGTERM to its process
group, SIGKILL after --grace-period), waits for the completed spec that still
lists this pod and starts CMD again with the new environment and
RING_RESTART_COUNT=1, 2, ...; SIGTERM/SIGINT/SIGHUP are forwarded to CMD; it
exits with CMD's code when CMD ends by itself. The trainer must resume from
its own checkpoint. File mode sees a change only at the kubelet's next volume
sync: prefer --from-api with --supervise.

--install DIR (dist/ring-launch.pyz only): copy this file into DIR (an
emptyDir shared with the trainer), verified and atomically, then exit 0.

exit codes: %s;
otherwise CMD's own exit code (128+N for signal N)."""


def _parser() -> argparse.ArgumentParser:
    """``ring-launch``'s argparse parser, with the frameworks and exit codes at the end of ``--help``."""
    return launchopts.parser(
        epilog=_EPILOG
        % (frameworks_text(), "; ".join(f"{code} {what}" for code, what in sorted(exitcodes.TABLE.items())))
    )


def launch_options(argv: list[str]) -> argparse.Namespace:
    """The options of a ``ring-launch`` command line (``argv`` after the program name), as ``main`` reads them.

    For tools that show what a pod's launcher will do (``kubectl ring env``):
    the command from the pod spec is parsed by the launcher's own parser.
    Everything from ``--`` on is the trainer's and ignored. Raises
    ValueError (with argparse's message) when ``main`` would exit with a
    usage error.
    """
    import contextlib
    import io

    options = argv[: argv.index("--")] if "--" in argv else list(argv)
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            return _parser().parse_args(options)
    except SystemExit as stop:
        raise ValueError(
            errors.getvalue().strip().splitlines()[-1] if errors.getvalue().strip() else "--help"
        ) from stop


def default_hostfile_dir() -> str:
    """``$RING_HOSTFILE_DIR``, else ``$TMPDIR/ring-launch`` (``/tmp/ring-launch`` when no temporary directory is writable)."""
    if os.environ.get("RING_HOSTFILE_DIR"):
        return os.environ["RING_HOSTFILE_DIR"]
    try:
        base = temp_dir()
    except OSError:  # a read-only root without a writable /tmp: write_hostfiles warns, the launch goes on
        base = "/tmp"
    return os.path.join(base, "ring-launch")


def write_hostfiles(ready: Ready, directory: str) -> str | None:
    """Write both hostfiles of ``ready`` into ``directory`` (atomically); the directory, or None if not writable."""
    try:
        os.makedirs(directory, exist_ok=True)
        for flavor, name in FILE_NAMES.items():
            replace_file(os.path.join(directory, name), hostfile_text(ready.spec, flavor=flavor).encode("utf-8"))
    except OSError as err:
        _log(f"warning: cannot write hostfiles to {directory} ({err}); the hostfile variables are not set")
        return None
    return directory


def _log(message: str) -> None:
    print(f"ring-launch: {message}", file=sys.stderr, flush=True)


def _register(source: ApiSource, pod: str | None, early: Early | None = None) -> None:
    """Self-registration (``--register``): one PATCH of this pod's annotation; a refusal is said once, never fatal.

    ``early``: the PATCH :mod:`ranktable.launch.earlyreg` already sent for this pod
    (on ``source``'s connection); only its answer is read here. Raises
    :class:`~ranktable.launch.kubeconfig.ApiConfigError` for what no wait
    fixes (an unreadable token file, a server certificate that fails
    verification): ``main`` reports it and exits 78.
    """
    from ranktable.launch.kubeapi import ApiStatusError

    ip = os.environ.get(POD_IP_ENV, "")
    if not ip:
        _log("warning: --register needs $POD_IP (downward API status.podIP); not registered, waiting as usual")
        return
    try:
        if early is not None:
            early.answer()
        else:
            source.register(pod=pod_name(pod), ip=ip, started=started_text(STARTED), ips=pod_ips())
    except ApiStatusError as err:
        _log(
            f"warning: self-registration refused ({err.status} {err.reason}: {err.message}); waiting for the "
            "kubelet's Running status instead. Grant it with build/launcher-rbac.yaml and "
            "serviceAccountName: ring-launch"
        )
    except (OSError, ValueError) as err:
        _log(f"warning: self-registration failed ({type(err).__name__}: {err}); waiting as usual")
    else:
        _log(f"registered on pod {pod_name(pod)} at {ip}")


def launch_env(ready: Ready, *, rank_table_file: str | None, hostfile_dir: str | None = None) -> dict[str, str]:
    """The variables exported for the member in ``ready`` (:func:`ranktable.exports.member_env`).

    Raises :class:`SpecError` if the spec breaks a framework's rules (see
    :func:`~ranktable.tfconfig.tf_config`).
    """
    return member_env(ready.spec, pod=ready.member.pod, rank_table_file=rank_table_file, hostfile_dir=hostfile_dir)


def fit_exec_limit(
    env: dict[str, str],
    *,
    command: Sequence[str],
    directory: str | None,
    inherited: Mapping[str, str],
    limits: ExecLimits | None = None,
) -> dict[str, str]:
    """``env`` made to fit the exec limit (:mod:`ranktable.exports`), or :class:`ExecLimitError`.

    Each variable of ``env`` whose ``NAME=value`` is over the per-string
    limit is left out: its value is written to ``directory/NAME`` and
    ``RING_NAME_FILE`` names that file, with one warning line naming the
    variable, its size, the limit and who reads it
    (:data:`ranktable.exports.FILE_FORMS`). The launcher cannot know which
    framework the trainer is, so a variable only one framework reads does
    not stop the others' trainers; ``$RING_OVERSIZED=stop`` stops instead
    (for a TensorFlow trainer that would otherwise start without
    ``TF_CONFIG``, as a single worker). Raises :class:`ExecLimitError` when a
    variable is over and ``RING_OVERSIZED=stop``, ``directory`` is None or
    not writable, and when ``inherited`` (the launcher's own environment)
    overlaid with the result and ``command`` still would not fit.
    """
    limits = limits if limits is not None else exec_limits()
    stop = inherited.get(OVERSIZED_ENV, "").strip().lower() == "stop"
    fitted = dict(env)
    for name in oversized(env, per_string=limits.per_string):
        overflow = Overflow(what=name, size=entry_size(name, env[name]), limit=limits.per_string, kind="per_string")
        if stop:
            raise ExecLimitError(overflow, f"{OVERSIZED_ENV}=stop")
        if directory is None:
            raise ExecLimitError(overflow, "and no writable directory to put it in a file (--hostfile-dir)")
        path = os.path.join(directory, name)
        try:
            os.makedirs(directory, exist_ok=True)
            replace_file(path, env[name].encode("utf-8"))
        except OSError as err:
            raise ExecLimitError(overflow, f"and {path} cannot be written ({err})") from None
        del fitted[name]
        fitted[file_variable(name)] = path
        _log(
            f"warning: {overflow.message}: not exported; its value is in {path} "
            f"(${file_variable(name)}). {file_reader(name)}"
        )
    merged = dict(inherited)
    merged.update(fitted)
    over_all = exec_overflow(merged, list(command), limits=limits)
    if over_all is not None:
        raise ExecLimitError(over_all)
    return fitted


def main(argv: list[str] | None = None, *, early: Early | None = None) -> int:
    """Run ``ring-launch``; returns an exit code only when CMD could not be started.

    ``early``: the registration the one-file launcher sent before it loaded
    this module (:func:`ranktable.launch.earlyreg.start`, for the same ``argv``);
    its answer is read, and its connection used, where ``main`` would
    otherwise register.
    """
    args_in = sys.argv[1:] if argv is None else list(argv)
    if "--" in args_in:
        split = args_in.index("--")
        options, command = args_in[:split], args_in[split + 1 :]
    else:
        options, command = args_in, []
    try:
        args = _parser().parse_args(options)
    except SystemExit as stop:  # --help, or a usage error argparse already printed
        return int(stop.code or 0)
    if args.install is not None:
        return pyzfile.install(args.install, log=_log)
    try:
        timeout = launchopts.check_parsed(args, command)
    except launchopts.UsageError as err:
        if err.no_command:
            _parser().print_usage(sys.stderr)
        _log(str(err))
        return EXIT_USAGE

    source: Source
    if args.from_api:
        try:
            from ranktable.launch.apiwatch import ApiAccessError, ApiConfigError, ApiSource
        except ImportError as err:
            _log(f"error: {pyzfile.damaged(err)}")
            return EXIT_DAMAGED

        namespace = pod_namespace(args.namespace)
        job = os.environ.get(launchopts.JOB_ENV)
        name = args.configmap or os.environ.get(launchopts.CONFIGMAP_ENV) or (CONFIGMAP_PREFIX + job if job else None)
        if not namespace or not name:
            _log("error: --from-api needs --namespace (or $POD_NAMESPACE) and --configmap (or $RING_CONFIGMAP)")
            return EXIT_USAGE
        register = launchopts.register_requested(args.register)
        if early is not None and not (
            register
            and (early.namespace, early.pod, early.kubeconfig)
            == (namespace, pod_name(args.pod), args.kubeconfig or None)
        ):
            early.client.close()  # sent for another reading of the command line: never, unless scan and argparse part
            early = None
        client = early.client if early is not None else None
        source = ApiSource(namespace=namespace, name=name, kubeconfig=args.kubeconfig, log=_log, client=client)
        try:
            source.connect()
        except ApiConfigError as err:
            _log(f"error: {err}")
            return EXIT_API_CONFIG
        if register:
            try:
                _register(source, args.pod, early)
            except ApiConfigError as err:  # the token file, or a server certificate that fails verification
                _log(f"error: {err}")
                return EXIT_API_CONFIG
        refused: tuple[type[Exception], ...] = (ApiAccessError,)
        unconfigured: tuple[type[Exception], ...] = (ApiConfigError,)
    else:
        if early is not None:
            early.client.close()
        if args.register:
            _log("error: --register needs --from-api (the spec then comes back through the API in milliseconds)")
            return EXIT_USAGE
        refused = unconfigured = ()
        source = FileSource(args.config_dir or default_config_dir(), interval=args.poll_interval)

    identity = identity_from_env(args.pod)
    hostfile_dir = args.hostfile_dir or default_hostfile_dir()

    def environment(ready: Ready) -> dict[str, str]:
        rank_table_file = None
        if ready.hccl is not None:
            try:
                rank_table_file = rank_table_file_for(
                    ready.hccl, epoch=ready.spec.epoch, default=source.rank_table_path
                )
            except OSError as err:  # a read-only root without a writable $TMPDIR (or $RING_RANK_TABLE_DIR)
                _log(f"warning: cannot write the rank table ({err}); RANK_TABLE_FILE is not set")
        elif ready.spec.has_devices:
            _log("warning: the spec lists Ascend devices but holds no hccl.json; RANK_TABLE_FILE is not set")
        written = write_hostfiles(ready, hostfile_dir)
        env = launch_env(ready, rank_table_file=rank_table_file, hostfile_dir=written)
        if args.print_as is not None:
            return env
        return fit_exec_limit(env, command=command, directory=written, inherited=os.environ)

    try:
        ready = wait_for_spec(source, identity, timeout=timeout, progress=_log)
        env = environment(ready)
    except PodNotInSpec as err:
        _log(f"error: {err}")
        return EXIT_NOT_IN_SPEC
    except ExecLimitError as err:
        _log(f"error: {err}")
        return EXIT_EXEC_LIMIT
    except SpecError as err:
        _log(f"error: {err}")
        return EXIT_MALFORMED
    except WaitTimeout as err:
        _log(f"error: {err}")
        return EXIT_TIMEOUT
    except refused as err:
        _log(f"error: {err}")
        return EXIT_API_DENIED
    except unconfigured as err:
        _log(f"error: {err}")
        return EXIT_API_CONFIG
    except Exception as err:  # noqa: BLE001 - API access, I/O: report, never a traceback at the user
        _log(f"error: {type(err).__name__}: {err}")
        return EXIT_ERROR

    if args.print_as == "env":
        import shlex

        sys.stdout.write("".join(f"{key}={shlex.quote(env[key])}\n" for key in sorted(env)))
        return 0
    if args.print_as == "json":
        sys.stdout.write(json.dumps(env, sort_keys=True) + "\n")
        return 0
    if args.print_as == "hostfile":
        sys.stdout.write(hostfile_text(ready.spec))
        return 0
    for key in sorted(env):
        _log(f"{key}={env[key]}")
    if args.supervise:
        try:
            from ranktable.launch.supervise import Supervisor
        except ImportError as err:
            _log(f"error: {pyzfile.damaged(err)}")
            return EXIT_DAMAGED

        return Supervisor(
            command=command,
            source=source,
            identity=identity,
            first=ready,
            environment=environment,
            grace=args.grace_period,
            max_restarts=args.max_restarts,
            timeout=timeout,
            log=_log,
        ).run()
    os.environ.update(env)
    _log(f"exec {' '.join(command)}")
    sys.stdout.flush()
    try:
        os.execvp(command[0], command)
    except FileNotFoundError:
        _log(f"error: command not found: {command[0]}")
        return EXIT_NOT_FOUND
    except PermissionError:
        _log(f"error: command not executable: {command[0]}")
        return EXIT_NOT_EXECUTABLE
    except OSError as err:
        if err.errno == errno.E2BIG:  # fit_exec_limit's estimate fell short of this kernel's count
            limits = exec_limits()
            _log(
                f"error: cannot exec {command[0]}: the command line and environment are over the exec limit "
                f"(E2BIG; {limits.per_string:,} bytes per variable, {limits.total:,} in all); the largest "
                "variables: "
                + ", ".join(
                    f"{k} {entry_size(k, v):,} bytes"
                    for k, v in sorted(os.environ.items(), key=lambda kv: -entry_size(*kv))[:3]
                )
            )
            return EXIT_EXEC_LIMIT
        _log(f"error: cannot exec {command[0]}: {err}")
        return EXIT_NOT_EXECUTABLE
    return EXIT_ERROR  # unreachable: execvp returns only by raising


if __name__ == "__main__":
    sys.exit(main())
