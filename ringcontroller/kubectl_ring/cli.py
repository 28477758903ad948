"""``kubectl-ring``: flags, the reads each command needs, exit codes.

    kubectl ring get [-n NS | -A] [-o wide|json|yaml]
    kubectl ring describe [KIND/]JOB [-n NS] [-o json|yaml]
    kubectl ring env POD [-n NS] [-c CONTAINER] [-o env|json]

Reads with GET only (:mod:`~ringcontroller.kubectl_ring.api`); every failure
is one line on stderr and a non-zero exit code (:data:`EXIT_CODES`), never a
traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from collections.abc import Sequence
from typing import Final

from model import trainjob
from model.keys import (
    DEFAULT_LABEL_KEY,
    DEFAULT_PORT,
    MANAGED_LABEL,
    MANAGED_VALUE,
    NETWORK_CLAIM_ANNOTATION,
    RANK_ORDER_ANNOTATION,
)
from model.kinds import KINDS
from model.pod import pod_record
from model.records import key_of, object_key, split_group
from model.topology import DEFAULT_TOPOLOGY_KEYS, RULE_TOPOLOGY, RULES, RankOrder, parse_keys
from ranktable.clusterspec import PodNotInSpec, SpecError
from ranktable.hccl import CHOICES, DEFAULT_CHOICE
from ringcontroller.kubectl_ring import render
from ringcontroller.kubectl_ring.api import (
    CONFIGMAPS,
    EVENTS,
    PODS,
    REQUEST_TIMEOUT,
    Json,
    NotServed,
    Reader,
    ReadError,
)
from ringcontroller.kubectl_ring.jobs import JobView, Snapshot, find, launch_setup, pod_env, views
from ringcontroller.resource import HYPERNODES, NODES, RESOURCE_CLAIMS, RESOURCE_CLAIMS_OLDER, RUNTIMES, of_kind

EXIT_OK: Final = 0
EXIT_ERROR: Final = 1
EXIT_USAGE: Final = 2
EXIT_NOT_IN_SPEC: Final = 3
EXIT_WAITING: Final = 4
EXIT_MALFORMED: Final = 65
EXIT_CODES: Final = f"""exit codes: {EXIT_OK} ok; {EXIT_ERROR} API server unreachable, forbidden, or no such job/pod; \
{EXIT_USAGE} usage; env only: {EXIT_NOT_IN_SPEC} the completed spec does not list the pod, \
{EXIT_WAITING} ring-launch would still wait, {EXIT_MALFORMED} the spec is malformed (ring-launch's codes)"""

_DESCRIPTION = """\
The ring-controller's view of training jobs, read-only: which jobs it serves,
their spec status, and why a job's spec is not complete yet.

  kubectl ring get [-n NS | -A] [-o wide|json|yaml]
      one line per job: kind, name, spec status, epoch, members counting /
      expected, age of the spec (its last write), ConfigMap
  kubectl ring describe [KIND/]JOB [-o json|yaml]
      the members in rank order and, while the spec is not completed, why:
      slots without a pod, pods not Running or without an IP, bad ports or
      device annotations, the job's Warning Events, and what you can do
  kubectl ring env POD [-c CONTAINER] [-o env|json]
      what ring-launch exports in that pod (TF_CONFIG, torch, JAX, ...),
      computed by ring-launch's own code from the ConfigMap

It reads through your kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config)
and needs only get and list on the workloads, pods, ConfigMaps and Events
(see the ClusterRole in docs/jobs.md). Decisions are the controller's own code run
on what is read now; pass --label-key, --default-port and --ranktable-version
when the controller runs with other values."""


def _common(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """The options every command takes, before or after the command's name.

    On the subcommands their defaults are suppressed, so an option given
    before the command is not reset by the subcommand's default.
    """
    group = parser.add_argument_group("cluster and controller options")
    group.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    group.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    group.add_argument("-n", "--namespace", default=None, help="namespace (default: the context's, else default)")
    group.add_argument(
        "--label-key",
        default=DEFAULT_LABEL_KEY,
        help=f"the controller's --label-key: selects workloads and pods (default {DEFAULT_LABEL_KEY})",
    )
    group.add_argument(
        "--default-port",
        type=int,
        default=DEFAULT_PORT,
        help=f"the controller's --default-port (default {DEFAULT_PORT})",
    )
    group.add_argument(
        "--ranktable-version",
        choices=CHOICES,
        default=DEFAULT_CHOICE,
        help=f"the controller's --ranktable-version (default {DEFAULT_CHOICE})",
    )
    group.add_argument(
        "--rank-order",
        choices=RULES,
        default="spec",
        help="the controller's --rank-order (default spec)",
    )
    group.add_argument(
        "--topology-keys",
        type=parse_keys,
        default=DEFAULT_TOPOLOGY_KEYS,
        metavar="KEY[,KEY...]",
        help="the controller's --topology-keys (default: the controller's default)",
    )
    group.add_argument(
        "--request-timeout",
        type=float,
        default=REQUEST_TIMEOUT,
        help=f"seconds per API request (default {REQUEST_TIMEOUT:g})",
    )
    if suppress:
        for action in group._group_actions:
            action.default = argparse.SUPPRESS


def parser() -> argparse.ArgumentParser:
    """The whole command line (``kubectl-ring --help``)."""
    top = argparse.ArgumentParser(
        prog="kubectl ring",
        description=_DESCRIPTION,
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(top, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _common(common, suppress=True)
    sub = top.add_subparsers(dest="command", metavar="{get,describe,env}")
    get = sub.add_parser("get", parents=[common], help="list the jobs the controller serves", epilog=EXIT_CODES)
    get.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    get.add_argument("-o", "--output", choices=("wide", "json", "yaml"), default=None, help="output format")
    describe = sub.add_parser(
        "describe", parents=[common], help="one job: members in rank order, why it waits", epilog=EXIT_CODES
    )
    describe.add_argument(
        "job", metavar="[KIND/]JOB", help="a job name, or KIND/NAME (kinds: " + ", ".join(k.short for k in KINDS) + ")"
    )
    describe.add_argument(
        "-o", "--output", choices=("json", "yaml"), default=None, help="machine-readable output (default: text)"
    )
    env = sub.add_parser("env", parents=[common], help="what ring-launch exports in a pod", epilog=EXIT_CODES)
    env.add_argument("pod", metavar="POD")
    env.add_argument("-c", "--container", default=None, help="container (default: the one running ring-launch)")
    env.add_argument(
        "-o", "--output", choices=("env", "json"), default="env", help="like ring-launch --print (default env)"
    )
    return top


def _fail(message: str, code: int = EXIT_ERROR) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the exit code (see :data:`EXIT_CODES`)."""
    top = parser()
    try:
        args = top.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as stop:  # --help (0) or a usage error argparse printed (2)
        return int(stop.code or 0)
    if args.command is None:
        top.print_help(sys.stderr)
        return EXIT_USAGE
    if args.command == "get" and args.all_namespaces and args.namespace:
        return _fail("-A and -n exclude each other", EXIT_USAGE)
    try:
        reader = Reader(kubeconfig=args.kubeconfig, context=args.context, timeout=args.request_timeout)
    except ReadError as err:
        return _fail(str(err))
    try:
        if args.command == "get":
            return _get(reader, args)
        if args.command == "describe":
            return _describe(reader, args)
        return _env(reader, args)
    except ReadError as err:
        return _fail(str(err))
    except BrokenPipeError:  # | head
        return EXIT_OK
    finally:
        reader.close()


def read(reader: Reader, namespace: str | None, *, label_key: str, rank_order: str = "spec") -> Snapshot:
    """Every labelled workload and pod in ``namespace`` (None: all), the managed ConfigMaps and the runtimes used;
    the nodes too when a job is topology-ordered (``rank_order`` is the controller's rule).

    Kinds whose CRD is not installed are skipped, as the controller skips them.
    Nodes that cannot be read (no permission) leave the paths unknown, with a note.
    """
    workloads: list[tuple[str, Json]] = []
    for kind in KINDS:
        try:
            items = reader.items(of_kind(kind), namespace=namespace, label_selector=label_key)
        except NotServed:
            continue
        workloads += [(kind.short, item) for item in items]
    runtimes: dict[str, int | None] = {}
    for short, raw in workloads:
        ref = ((raw.get("spec") or {}).get("runtimeRef") or {}).get("name")
        if short == trainjob.SHORT and ref and ref not in runtimes:
            found = reader.get(RUNTIMES, ref)
            runtimes[ref] = trainjob.runtime_nodes(found) if found is not None else None
    pods = reader.items(PODS, namespace=namespace, label_selector=label_key)
    configmaps: dict[str, Json] = {
        key_of(cm): cm
        for cm in reader.items(CONFIGMAPS, namespace=namespace, label_selector=f"{MANAGED_LABEL}={MANAGED_VALUE}")
    }
    nodes: list[Json] = []
    hypernodes: list[Json] = []
    if any(_rank_order(raw, rank_order) == RULE_TOPOLOGY for _, raw in workloads):
        try:
            nodes = reader.items(NODES, namespace=None)
        except ReadError as err:
            print(f"note: nodes not readable ({err}): topology paths are unknown", file=sys.stderr)
        try:
            hypernodes = reader.items(HYPERNODES, namespace=None)
        except NotServed:
            pass  # Volcano's network topology is not installed
        except ReadError as err:
            print(f"note: HyperNodes not readable ({err}): their tiers are left out", file=sys.stderr)
    claims: list[Json] = []
    if any(NETWORK_CLAIM_ANNOTATION in ((raw.get("metadata") or {}).get("annotations") or {}) for _, raw in workloads):
        for resource in (RESOURCE_CLAIMS, *RESOURCE_CLAIMS_OLDER):  # the newest version served
            try:
                claims = reader.items(resource, namespace=namespace)
                break
            except NotServed:
                continue  # not at this version; none at all: no DRA, the members wait as the controller's do
            except ReadError as err:
                print(f"note: ResourceClaims not readable ({err}): their NICs are unknown", file=sys.stderr)
                break
    return Snapshot(
        workloads=tuple(workloads),
        pods=tuple(pods),
        configmaps=configmaps,
        runtimes=runtimes,
        nodes=tuple(nodes),
        hypernodes=tuple(hypernodes),
        claims=tuple(claims),
    )


def _rank_order(raw: Json, default: str) -> str:
    return str(((raw.get("metadata") or {}).get("annotations") or {}).get(RANK_ORDER_ANNOTATION, default)).strip()


def _views(
    reader: Reader, namespace: str | None, args: argparse.Namespace, *, name: str | None = None
) -> list[JobView]:
    """The job views in ``namespace``; only those of workloads called ``name`` when given
    (``describe`` and ``env`` explain one job, not every job around it)."""
    snapshot = read(reader, namespace, label_key=args.label_key, rank_order=args.rank_order)
    if name is not None:
        group = split_group(name)  # NAME-GROUP: a group of a LeaderWorkerSet NAME
        names = {name, group[0]} if group is not None else {name}
        named = tuple(w for w in snapshot.workloads if (w[1].get("metadata") or {}).get("name") in names)
        snapshot = dataclasses.replace(snapshot, workloads=named)
    found = _compute(snapshot, args)
    # A job's ConfigMap missing from the managed ones may exist unlabelled (foreign): look, so it is reported.
    extra: dict[str, Json] = dict(snapshot.configmaps)
    for v in found:
        key = object_key(v.workload.namespace, v.workload.configmap)
        if v.configmap is None and key not in extra:
            cm = reader.get(CONFIGMAPS, v.workload.configmap, namespace=v.workload.namespace)
            if cm is not None:
                extra[key] = cm
    if len(extra) != len(snapshot.configmaps):
        snapshot = dataclasses.replace(snapshot, configmaps=extra)
        found = _compute(snapshot, args)
    return found


def _compute(snapshot: Snapshot, args: argparse.Namespace) -> list[JobView]:
    return views(
        snapshot,
        label_key=args.label_key,
        default_port=args.default_port,
        hccl_version=args.ranktable_version,
        order=RankOrder(rule=args.rank_order, keys=args.topology_keys),
    )


def _get(reader: Reader, args: argparse.Namespace) -> int:
    namespace = None if args.all_namespaces else (args.namespace or reader.namespace)
    found = _views(reader, namespace, args)
    if args.output in ("json", "yaml"):
        sys.stdout.write(render.dump(render.get_data(found), args.output))
        return EXIT_OK
    if not found:
        where = "any namespace" if namespace is None else f"namespace {namespace}"
        print(f"No jobs labelled {args.label_key} found in {where}.", file=sys.stderr)
        return EXIT_OK
    sys.stdout.write(render.get_table(found, wide=args.output == "wide", all_namespaces=namespace is None))
    return EXIT_OK


def _one(reader: Reader, args: argparse.Namespace, ref: str, namespace: str) -> JobView | int:
    matches = find(_views(reader, namespace, args, name=ref.rpartition("/")[2]), ref)
    if not matches:
        return _fail(
            f"no job {ref!r} labelled {args.label_key} in namespace {namespace} "
            f"(`kubectl ring get -n {namespace}` lists them)"
        )
    if len(matches) > 1:
        names = ", ".join(f"{m.kind.short}/{m.workload.job_name}" for m in matches)
        return _fail(f"{ref!r} names several jobs: {names}; say which with KIND/NAME", EXIT_USAGE)
    return matches[0]


def _describe(reader: Reader, args: argparse.Namespace) -> int:
    namespace = args.namespace or reader.namespace
    view = _one(reader, args, args.job, namespace)
    if isinstance(view, int):
        return view
    w = view.workload
    events = [
        e
        for e in reader.items(EVENTS, namespace=namespace, field_selector=f"involvedObject.name={w.name},type=Warning")
        if (e.get("involvedObject") or {}).get("kind") == w.kind
        and (e.get("involvedObject") or {}).get("uid") in (None, "", w.uid)
    ]
    events.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    if args.output in ("json", "yaml"):
        sys.stdout.write(render.dump(render.describe_data(view, events=events, label_key=args.label_key), args.output))
        return EXIT_OK
    sys.stdout.write(render.describe_text(view, events=events, label_key=args.label_key))
    return EXIT_OK


def _env(reader: Reader, args: argparse.Namespace) -> int:
    namespace = args.namespace or reader.namespace
    pod = reader.get(PODS, args.pod, namespace=namespace)
    if pod is None:
        return _fail(f"pod {args.pod!r} not found in namespace {namespace}")
    record = pod_record(pod, default_port=args.default_port)
    if not record.job_keys:
        return _fail(
            f"pod {args.pod} belongs to no workload the controller serves (no owner of a served kind, "
            "no PodGroup in spec.schedulingGroup)"
        )
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if args.label_key not in labels:
        print(
            f"warning: pod {args.pod} lacks the label {args.label_key}: the controller does not see it", file=sys.stderr
        )
    views_here = [
        v
        for key in record.job_keys
        for v in _views(reader, namespace, args, name=key.rpartition("/")[2])
        if v.workload.key == key
    ]
    if not views_here:
        if record.group is not None and record.job is None:
            return _fail(
                f"pod {args.pod} names PodGroup {record.group.rpartition('/')[2]} (spec.schedulingGroup), "
                f"which does not exist or is not labelled {args.label_key}"
            )
        shown = " or ".join(record.job_keys)
        return _fail(f"pod {args.pod} belongs to {shown}, which is not a workload labelled {args.label_key}")
    view = views_here[0]
    cm_name = view.workload.configmap
    try:
        setup = launch_setup(pod, container=args.container)
    except ValueError as err:
        return _fail(str(err))
    if setup.configmap:
        cm_name = setup.configmap
    configmap = reader.get(CONFIGMAPS, cm_name, namespace=namespace)
    try:
        result = pod_env(pod, configmap, where=f"ConfigMap {namespace}/{cm_name}", container=args.container)
    except PodNotInSpec as err:
        return _fail(f"ring-launch would exit {EXIT_NOT_IN_SPEC}: {err}", EXIT_NOT_IN_SPEC)
    except SpecError as err:
        return _fail(f"ring-launch would exit {EXIT_MALFORMED}: {err}", EXIT_MALFORMED)
    for note in result.setup.notes:
        print(f"note: {note}", file=sys.stderr)
    if result.env is None:
        missing = "" if configmap is not None else " (the ConfigMap does not exist yet)"
        return _fail(
            f"ring-launch in pod {args.pod} would still wait: {result.waiting}{missing}; "
            f"`kubectl ring describe {view.kind.short}/{view.workload.job_name} -n {namespace}` says why",
            EXIT_WAITING,
        )
    env = result.env
    if args.output == "json":
        sys.stdout.write(json.dumps(env, sort_keys=True) + "\n")
    else:
        sys.stdout.write("".join(f"{key}={shlex.quote(env[key])}\n" for key in sorted(env)))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
