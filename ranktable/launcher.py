"""``ring-launch``: wait for the cluster spec, export the environment, exec the trainer.

Usage::

    ring-launch [--config-dir DIR] [--timeout S] [--poll-interval S] [--pod NAME]
                [--from-api [--namespace NS] [--configmap NAME] [--kubeconfig FILE]]
                -- CMD [ARG ...]

It runs as the training container's entry point, before any framework is
imported. It waits (:mod:`ranktable.wait`) until the spec is ``completed`` and
lists this pod, then sets

* ``TF_CONFIG`` (:func:`ranktable.tfconfig.tf_config`),
* ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``
  (:func:`ranktable.torchenv.torch_env`),
* ``RANK_TABLE_FILE`` when the job has Ascend devices and a rank table is
  present (``DIR/hccl.json``; in API mode a temporary copy),
* ``RING_EPOCH``, the spec's epoch,

and replaces itself with ``CMD`` (``os.execvp``): the trainer keeps the
container's PID, receives its signals directly and its exit code is the
container's. Nothing stays behind to forward signals or reap children.

Why a launcher and not DNS: the spec holds every member's pod IP and port the
moment the last member is Running, so the trainer starts with a complete,
resolvable cluster and no probing. Pod identity is ``--pod``, else
``$POD_NAME``, else ``$HOSTNAME``; ``$POD_UID``/``$POD_IP`` (downward API),
when set, guard against a stale spec written for a predecessor pod of the same
name.

This module imports no Kubernetes client; ``--from-api`` loads
:mod:`ranktable.apiwatch` (and through it the ``kubernetes`` package) only
when used, which keeps a file-mode start fast.

Exit codes (when CMD was not started): 2 usage error, 3 this pod never
appeared in the completed spec, 65 malformed spec, 124 timeout, 1 API access
or I/O error, 126/127 CMD not executable / not found.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Final

from ranktable.clusterspec import PodNotInSpec, SpecError
from ranktable.tfconfig import tf_config
from ranktable.torchenv import torch_env
from ranktable.wait import (
    DEFAULT_POLL_INTERVAL,
    FileSource,
    Ready,
    Source,
    WaitTimeout,
    default_config_dir,
    default_timeout,
    identity_from_env,
    wait_for_spec,
)

EXIT_USAGE: Final = 2
EXIT_NOT_IN_SPEC: Final = 3
EXIT_MALFORMED: Final = 65
EXIT_TIMEOUT: Final = 124
EXIT_ERROR: Final = 1
EXIT_NOT_EXECUTABLE: Final = 126
EXIT_NOT_FOUND: Final = 127

_EPILOG = """\
environment read: POD_NAME (else HOSTNAME) names this pod; POD_UID and POD_IP,
when set, must match the spec's member. RING_CONFIG_DIR, RING_TIMEOUT,
RING_CONFIGMAP (else rings-config-$RING_JOB_NAME), POD_NAMESPACE give defaults
for the options.

environment set for CMD: TF_CONFIG, RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
RING_EPOCH, and RANK_TABLE_FILE for jobs with Ascend devices.

--from-api needs the pod's service account to have get, list and watch on
that one ConfigMap: a Role with apiGroups [""], resources ["configmaps"],
resourceNames [NAME], verbs ["get","list","watch"], bound to the account.

exit codes: 2 usage, 3 pod not in the completed spec, 65 malformed spec,
124 timeout, 1 API/I-O error, 126/127 CMD not executable/not found;
otherwise CMD's own exit code."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ring-launch",
        usage="ring-launch [options] -- CMD [ARG ...]",
        description="Wait for this pod's completed cluster spec, export TF_CONFIG and friends, exec CMD.",
        epilog=_EPILOG,
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
    return parser


def _log(message: str) -> None:
    print(f"ring-launch: {message}", file=sys.stderr, flush=True)


def launch_env(ready: Ready, *, rank_table_file: str | None) -> dict[str, str]:
    """The variables exported for the member in ``ready``.

    Raises :class:`SpecError` if the spec breaks TensorFlow's rules (see
    :func:`~ranktable.tfconfig.tf_config`).
    """
    pod = ready.member.pod
    env = {"TF_CONFIG": json.dumps(tf_config(ready.spec, pod=pod), separators=(",", ":"))}
    env.update(torch_env(ready.spec, pod=pod))
    env["RING_EPOCH"] = str(ready.spec.epoch)
    if rank_table_file:
        env["RANK_TABLE_FILE"] = rank_table_file
    return env


def main(argv: list[str] | None = None) -> int:
    """Run ``ring-launch``; returns an exit code only when CMD could not be started."""
    args_in = sys.argv[1:] if argv is None else list(argv)
    if "--" in args_in:
        split = args_in.index("--")
        options, command = args_in[:split], args_in[split + 1 :]
    else:
        options, command = args_in, []
    parser = _parser()
    try:
        args = parser.parse_args(options)
    except SystemExit as stop:  # --help, or a usage error argparse already printed
        return int(stop.code or 0)
    if not command:
        parser.print_usage(sys.stderr)
        _log("error: no command given; put it after `--`")
        return EXIT_USAGE
    try:
        timeout = default_timeout() if args.timeout is None else args.timeout
    except ValueError:
        _log(f"error: RING_TIMEOUT={os.environ.get('RING_TIMEOUT')!r} is not a number of seconds")
        return EXIT_USAGE
    if timeout <= 0 or args.poll_interval <= 0:
        _log("error: --timeout and --poll-interval must be positive")
        return EXIT_USAGE

    source: Source
    if args.from_api:
        from ranktable.apiwatch import ApiSource, default_namespace

        namespace = default_namespace(args.namespace)
        job = os.environ.get("RING_JOB_NAME")
        name = args.configmap or os.environ.get("RING_CONFIGMAP") or (f"rings-config-{job}" if job else None)
        if not namespace or not name:
            _log("error: --from-api needs --namespace (or $POD_NAMESPACE) and --configmap (or $RING_CONFIGMAP)")
            return EXIT_USAGE
        source = ApiSource(namespace=namespace, name=name, kubeconfig=args.kubeconfig, log=_log)
    else:
        source = FileSource(args.config_dir or default_config_dir(), interval=args.poll_interval)

    identity = identity_from_env(args.pod)
    try:
        ready = wait_for_spec(source, identity, timeout=timeout, progress=_log)
        rank_table_file = None
        if ready.hccl is not None:
            rank_table_file = source.rank_table_path(ready.hccl)
        elif ready.spec.has_devices:
            _log("warning: the spec lists Ascend devices but holds no hccl.json; RANK_TABLE_FILE is not set")
        env = launch_env(ready, rank_table_file=rank_table_file)
    except PodNotInSpec as err:
        _log(f"error: {err}")
        return EXIT_NOT_IN_SPEC
    except SpecError as err:
        _log(f"error: {err}")
        return EXIT_MALFORMED
    except WaitTimeout as err:
        _log(f"error: {err}")
        return EXIT_TIMEOUT
    except Exception as err:  # API access, I/O: report, never a traceback at the user
        _log(f"error: {type(err).__name__}: {err}")
        return EXIT_ERROR

    for key in sorted(env):
        _log(f"{key}={env[key]}")
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
        _log(f"error: cannot exec {command[0]}: {err}")
        return EXIT_NOT_EXECUTABLE
    return EXIT_ERROR  # unreachable: execvp returns only by raising


if __name__ == "__main__":
    sys.exit(main())
