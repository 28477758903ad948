"""The ``ring-devcluster`` command: ``up``, ``status``, ``down``, ``build``.

A thin layer over :mod:`ringdevcluster.cluster`: parse flags, print
progress to stderr and the result to stdout, map failures to a message and a
non-zero exit code (1: failed, 2: usage, 3: ``status`` found it unhealthy).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ringdevcluster import addons, build, cluster, controlplane, node
from ringdevcluster.pki import PkiError

_EPILOG = """\
examples:
  ring-devcluster up                  # build on first use (~10 min), start, print KUBECONFIG
  eval "$(ring-devcluster up -q)"     # start and export KUBECONFIG in this shell
  ring-devcluster up --with jobset,volcano   # also run real workload controllers
  ring-devcluster up --kube 1.32 --state-dir .state/k132  # another Kubernetes minor (its newest patch)
  ring-devcluster up --with node      # also a real node (kubelet, containerd, CoreDNS; root, one per machine)
  ring-devcluster up --ip-family ipv6 --state-dir .state/v6  # IPv6-only (default: dual, IPv4 first)
  ring-devcluster up --with prometheus # also Prometheus scraping the controller's pods (implies node)
  ring-devcluster up --with kueue     # also Kueue admitting JobSets and TrainJobs (implies jobset)
  ring-devcluster status              # components, pids, health; exit 3 if unhealthy
  ring-devcluster import-image app.tar # into the real node's containerd (imagePullPolicy: Never)
  ring-devcluster tools               # build helm and kubectl (cached) and print their paths
  "$(ring-devcluster tools helm)" lint build/chart/ring-controller
  ring-devcluster down                # stop exactly the processes `up` started

optional components (--with, comma-separated; a cluster keeps those it runs):
{components}

environment:
  RING_DEVCLUSTER_STATE   default state directory (else ~/.local/state/ring-devcluster)
  RING_DEVCLUSTER_CACHE   binary cache (else ~/.cache/ring-devcluster)
  RING_DEVCLUSTER_SOURCE  the Go wrapper modules (else <repo>/build/devcluster)
  RING_DEVCLUSTER_KUBE    the default of --kube (else the pinned release, {pinned})
  RING_DEVCLUSTER_IP_FAMILY  the default of --ip-family (else dual for a new cluster)
"""


def _pinned() -> str:
    try:
        source = build.find_source_dir()
        return build.module_version((source / "kube" / "go.mod").read_text(), "k8s.io/kubernetes")
    except (build.BuildError, OSError):
        return "see build/devcluster/kube/go.mod"


def _add_kube(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kube",
        default=None,
        metavar="VERSION",
        help="the Kubernetes release: a minor (1.32: its newest patch on the Go module proxy) or a version "
        "(1.32.13); each release's binaries are cached apart (default: $RING_DEVCLUSTER_KUBE, else the pinned one)",
    )


def _say(message: str) -> None:
    print(f"ring-devcluster: {message}", file=sys.stderr, flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ring-devcluster",
        description=(
            "A real local Kubernetes control plane (etcd, kube-apiserver with RBAC, "
            "kube-controller-manager, kube-scheduler, kwok fake nodes) on loopback. "
            "Pods on the fake nodes become Running with IPs in 127.1.0.0/16."
        ),
        epilog=_EPILOG.format(components=addons.describe(list(addons.ADDONS)), pinned=_pinned()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help=f"directory owning the cluster (default: {cluster.default_state_dir()})",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    up = sub.add_parser(
        "up", parents=[common], help="start the cluster (or reuse a healthy one); write STATE_DIR/kubeconfig"
    )
    up.add_argument("--nodes", type=int, default=cluster.DEFAULT_NODES, help="fake nodes to register (default 4)")
    up.add_argument("--source", type=Path, default=None, help="the Go wrapper modules (build/devcluster)")
    up.add_argument(
        "-q", "--quiet", action="store_true", help="no usage hints after start-up (progress still goes to stderr)"
    )
    up.add_argument(
        "--with",
        dest="addons",
        type=_names,
        action="extend",
        default=[],
        metavar="NAMES",
        help=f"also run these components: {','.join(addons.ADDONS)} (trainer implies jobset)",
    )
    _add_kube(up)
    up.add_argument(
        "--ip-family",
        choices=controlplane.IP_FAMILIES,
        default=None,
        help="the cluster's IP families: dual (IPv4 first; pods on the real node get one address of each), "
        "ipv4 or ipv6 (Service ranges, the real node's bridge and its pods); default: $RING_DEVCLUSTER_IP_FAMILY, "
        "else the running cluster's, else dual",
    )
    up.add_argument(
        "--second-network",
        action="store_true",
        default=None,
        help=f"with node: every pod on the real node also gets {node.SECOND_INTERFACE} on bridge {node.BRIDGE2} "
        f"({node.POD_CIDR2}), announced in its network-status annotation as {node.SECOND_NETWORK} "
        "(default: $RING_DEVCLUSTER_SECOND_NETWORK=1; a new cluster only)",
    )
    up.add_argument(
        "--multus",
        action="store_true",
        default=None,
        help=f"with --second-network (implied): attach it by the Multus CNI thin plugin (built from the Go module "
        f"proxy) and a NetworkAttachmentDefinition {node.SECOND_NETWORK}; a pod asks for it with "
        f"{node.NETWORKS_ANNOTATION} and gets {node.MULTUS_INTERFACE} (default: $RING_DEVCLUSTER_MULTUS=1; a new "
        "cluster only)",
    )
    sub.add_parser("status", parents=[common], help="show components, pids and health; exit 3 if unhealthy")
    down = sub.add_parser("down", parents=[common], help="stop the processes `up` started")
    down.add_argument("--purge", action="store_true", help="also delete the state directory's data, PKI and logs")
    imp = sub.add_parser(
        "import-image", parents=[common], help="import docker-archive tarballs into the real node's containerd"
    )
    imp.add_argument("archives", nargs="+", type=Path, metavar="ARCHIVE", help="docker-archive (or OCI) tarball")
    bld = sub.add_parser("build", help="only build (or find cached) binaries and print their paths")
    bld.add_argument("--source", type=Path, default=None, help="the Go wrapper modules (build/devcluster)")
    bld.add_argument(
        "--with",
        dest="addons",
        type=_names,
        action="extend",
        default=[],
        metavar="NAMES",
        help="also build these optional components",
    )
    _add_kube(bld)
    bld.add_argument(
        "--download-only",
        action="store_true",
        help="only download the Go modules the uncached builds need (and those of the client tools), "
        "two at a time at nice 19; build/test.sh runs it beside the first builds",
    )
    tools = sub.add_parser(
        "tools", help=f"build (or find cached) the client tools ({', '.join(build.TOOL_MODULES)}); print their paths"
    )
    tools.add_argument("--source", type=Path, default=None, help="the Go wrapper modules (build/devcluster)")
    tools.add_argument(
        "names",
        nargs="*",
        type=_tool,
        metavar="TOOL",
        help=f"print only these tools' paths, one a line (of: {', '.join(build.TOOL_MODULES)}; default: all, as NAME: PATH)",
    )
    return parser


def _tool(value: str) -> str:
    if value not in build.TOOL_MODULES:
        raise argparse.ArgumentTypeError(f"unknown tool {value!r}; choose from {', '.join(build.TOOL_MODULES)}")
    return value


def _names(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    try:
        return addons.expand(names)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _up(args: argparse.Namespace) -> int:
    started = time.monotonic()
    # Progress goes to stderr even with --quiet (a silent 20-minute cold build
    # looks like a hang); stdout carries only the export line.
    c = cluster.ensure_up(
        state_dir=args.state_dir,
        nodes=args.nodes,
        source=args.source,
        say=_say,
        addons=args.addons,
        kube=args.kube,
        ip_family=args.ip_family,
        second_network=args.second_network,
        multus=args.multus,
    )
    if not args.quiet:
        _say(
            f"up in {time.monotonic() - started:.1f}s: {c.server} (Kubernetes {c.versions.get('kube', '?')}, "
            f"etcd {c.versions.get('etcd', '?')}, kwok {c.versions.get('kwok', '?')}), {args.nodes} fake nodes, "
            f"IP family {c.ip_family}"
        )
        if c.addons:
            _say("with " + ", ".join(f"{a} {c.versions.get(a, '?')}" for a in c.addons))
        _say(f"logs: {c.state_dir / 'logs'}; stop with: ring-devcluster down --state-dir {c.state_dir}")
        _say("use it with:")
    print(f"export KUBECONFIG={c.kubeconfig}")
    return 0


def _status(args: argparse.Namespace) -> int:
    c = cluster.load(args.state_dir)
    where = args.state_dir or cluster.default_state_dir()
    if c is None:
        print(f"no cluster in {where}")
        return 3
    statuses = c.status()
    print(f"state dir: {c.state_dir}\napiserver: {c.server}\nkubeconfig: {c.kubeconfig}\nIP family: {c.ip_family}")
    if c.multus:
        print(
            f"second pod network: NetworkAttachmentDefinition {node.SECOND_NETWORK} on {node.BRIDGE2}, attached by "
            f"Multus ({node.MULTUS_INTERFACE} in each pod annotated {node.NETWORKS_ANNOTATION})"
        )
    elif c.second_network:
        print(f"second pod network: {node.SECOND_NETWORK} on {node.BRIDGE2} ({node.SECOND_INTERFACE} in each pod)")
    width = max(len("COMPONENT"), *(len(s.name) for s in statuses))
    print(f"{'COMPONENT':<{width}} {'PID':>8} {'RSS':>8}  {'HEALTH':<8} DETAIL")
    for s in statuses:
        health = "ok" if s.healthy else ("failing" if s.running else "stopped")
        detail = "" if s.healthy else s.detail.splitlines()[0][:80] if s.detail else ""
        mem = f"{_rss_kib(s.pid) / 1024:.0f}M" if s.pid else "-"
        print(f"{s.name:<{width}} {s.pid or '-':>8} {mem:>8}  {health:<8} {detail}")
    ok = all(s.healthy for s in statuses)
    if "node" in c.addons:
        waiting = _node_line(c)
        ok = ok and not waiting
    rss = sum(_rss_kib(s.pid) for s in statuses if s.pid)
    print(f"healthy: {'yes' if ok else 'no'}; resident memory: {rss / 1024:.0f} MiB")
    return 0 if ok else 3


def _node_line(c: cluster.Cluster) -> list[str]:
    """Print the real node's state; return what it still waits for (empty: Ready)."""
    try:
        waiting = node.pending(c.api.get)
        pods = c.api.request("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node.NODE_NAME}")
    except (cluster.ClusterError, OSError) as err:
        print(f"real node {node.NODE_NAME}: API not reachable ({err})")
        return [str(err)]
    state = "Ready" if not waiting else "; ".join(waiting)
    addrs = node.addresses(c.ip_family)
    print(
        f"real node {node.NODE_NAME} ({', '.join(addrs.node_ips)} on {node.BRIDGE}, "
        f"pods {', '.join(map(str, addrs.pod_cidrs))}): {state}, {len(pods.get('items', []))} pods"
    )
    return waiting


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _down(args: argparse.Namespace) -> int:
    stopped = cluster.down(args.state_dir, purge=args.purge)
    print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
    return 0


def _import_image(args: argparse.Namespace) -> int:
    c = cluster.load(args.state_dir)
    if c is None or "node" not in c.addons or c.pid("containerd") is None:
        _say(
            f"no running real node in {args.state_dir or cluster.default_state_dir()} (start it with `up --with node`)"
        )
        return 1
    for archive in args.archives:
        node.import_image(archive)
        print(f"imported {archive}")
    return 0


def _build(args: argparse.Namespace) -> int:
    modules = addons.modules(addons.expand(args.addons))
    kube = build.resolve_kube(args.kube or os.environ.get("RING_DEVCLUSTER_KUBE") or None)
    if args.download_only:
        took = build.download(source=args.source, say=_say, addons=modules, kube=kube)
        print("downloaded: " + (", ".join(f"{k} {v:.0f}s" for k, v in took.items()) or "nothing to build"))
        return 0
    paths, versions = build.ensure_binaries(source=args.source, say=_say, addons=modules, kube=kube)
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def _tools(args: argparse.Namespace) -> int:
    paths = build.ensure_tools(args.names or build.TOOL_MODULES, source=args.source, say=_say)
    for name in args.names or build.TOOL_MODULES:
        print(paths[name] if args.names else f"{name}: {paths[name]}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ring-devcluster`` console script."""
    args = _parser().parse_args(argv)
    if args.command == "up" and not 1 <= args.nodes <= 250:
        _say("--nodes must be between 1 and 250")
        return 2
    handlers = {
        "up": _up,
        "status": _status,
        "down": _down,
        "build": _build,
        "import-image": _import_image,
        "tools": _tools,
    }
    try:
        return handlers[args.command](args)
    except (build.BuildError, cluster.ClusterError, PkiError, node.NodeError) as err:
        _say(f"error: {err}")
        return 1
    except KeyboardInterrupt:
        _say("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
