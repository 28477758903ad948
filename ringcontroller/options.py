"""Command-line flags of ``ring-controller``, in controller-runtime's spelling.

Durations take Go-style values (``15s``, ``1m30s``, ``500ms``) or plain
seconds, so manifests written for Go controllers read the same.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

from model.keys import (
    DEFAULT_LABEL_KEY,
    DEFAULT_MAX_MEMBERS,
    DEFAULT_PORT,
    DEFAULT_TOUCH_MAX_MEMBERS,
    RANK_ORDER_ANNOTATION,
)
from model.topology import DEFAULT_TOPOLOGY_KEYS, RULE_SPEC, RULES, parse_keys
from ranktable.hccl import CHOICES, DEFAULT_CHOICE

VERSION = "0.1.0"

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration(text: str) -> float:
    """Seconds in a Go duration (``1m30s``) or a plain number of seconds."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (e.g. 15s, 1m30s, 500ms)")
    return total


_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def namespace_list(values: list[str]) -> tuple[str, ...]:
    """The namespaces named by ``--namespace`` values (repeated, comma-separated), in order, once each.

    Raises ValueError naming the first value that is not a namespace name
    (a DNS-1123 label: lower-case letters, digits and '-', at most 63).
    """
    names: list[str] = []
    for value in values:
        parts = [part.strip() for part in value.split(",")]
        for part in parts:
            if not part:
                raise ValueError(f"--namespace {value!r}: empty namespace name")
            if len(part) > 63 or not _NAMESPACE.fullmatch(part):
                raise ValueError(
                    f"--namespace {value!r}: {part!r} is not a namespace name "
                    "(lower-case letters, digits and '-', starting and ending alphanumeric, at most 63)"
                )
            names.append(part)
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True, slots=True)
class Options:
    """Parsed flags; see ``ring-controller --help`` for each."""

    kubeconfig: str | None
    namespaces: tuple[str, ...]
    """Watched namespaces; empty: all of them."""
    label_key: str
    workers: int
    ranktable_version: str
    default_port: int
    metrics_bind_address: str
    health_probe_bind_address: str
    leader_elect: bool
    leader_election_namespace: str
    leader_election_id: str
    lease_duration: float
    renew_deadline: float
    retry_period: float
    log_format: str
    log_level: str
    shutdown_timeout: float
    touch_pods: bool = True
    self_registration: bool = False
    rank_order: str = "spec"
    """``--rank-order``: the rule for jobs without the rank-order annotation."""
    topology_keys: tuple[str, ...] = DEFAULT_TOPOLOGY_KEYS
    """``--topology-keys``: node label keys of the topology path; empty: nodes are not watched."""
    max_members: int = DEFAULT_MAX_MEMBERS
    """``--max-members``: the most members one job may ask for; more makes the job invalid."""
    touch_max_members: int = DEFAULT_TOUCH_MAX_MEMBERS
    """``--touch-max-members``: the largest job whose members are touched (``--touch-pods``)."""


def _topology_keys(text: str) -> tuple[str, ...]:
    try:
        return parse_keys(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def parser() -> argparse.ArgumentParser:
    """The argument parser (separate so docs and tests can render it)."""
    p = argparse.ArgumentParser(
        prog="ring-controller",
        description=(
            "Watch labelled Volcano Jobs and their pods and write a complete, IP-based "
            "cluster spec (cluster.json, and hccl.json for Ascend jobs) into each job's "
            "rings-config ConfigMap the moment the last member is ready."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--kubeconfig",
        help="kubeconfig file; default: in-cluster config, then $KUBECONFIG (its first file), then ~/.kube/config",
    )
    p.add_argument(
        "--namespace",
        dest="namespaces",
        action="append",
        default=argparse.SUPPRESS,  # absent: all namespaces (and no "(default: ...)" in --help)
        metavar="NS[,NS...]",
        help="watch only these namespaces: repeat the flag or separate names with commas; each gets its own "
        "informers, so a Role in each suffices, plus read access to the cluster-scoped ClusterTrainingRuntimes "
        "where Kubeflow Trainer is installed (default: all namespaces, with build/rbac.yaml's ClusterRole)",
    )
    p.add_argument(
        "--label-key", default=DEFAULT_LABEL_KEY, help="label selecting workloads and pods; its value names the runtime"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=16,
        help="jobs synced concurrently (cheap asyncio tasks; more keep a burst of completions from queueing behind each other's writes)",
    )
    p.add_argument(
        "--ranktable-version",
        choices=CHOICES,
        default=DEFAULT_CHOICE,
        help=(
            "layout of hccl.json: auto picks 1.0, 1.2 (A3 super pods) or 2.0 (huawei.com/npu) per job as "
            "ascend-operator does; 1.0, 1.2, 2.0 force one of ascend-operator's tables; v1, v2 HCCL-Controller's"
        ),
    )
    p.add_argument(
        "--touch-pods",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="after a spec completes, annotate each member pod with its epoch (ring-controller.io/epoch) so the "
        "kubelet refreshes the mounted ConfigMap at once (under a second) instead of at its next periodic sync "
        "(about a minute); needs pods/patch, which build/rbac.yaml grants and fences to that one annotation with "
        "a ValidatingAdmissionPolicy. --no-touch-pods for clusters that forbid pod writes",
    )
    p.add_argument(
        "--touch-max-members",
        type=int,
        default=DEFAULT_TOUCH_MAX_MEMBERS,
        help="--touch-pods costs one pod write per member per epoch: the members of a larger job are not touched "
        "(a TouchSkipped Event says so once per epoch) and their mounted spec arrives with the kubelet's periodic "
        "sync; ring-launch --from-api delivers at any size without pod writes",
    )
    p.add_argument(
        "--self-registration",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="count a member as soon as its launcher registered itself on its own pod (annotation "
        "ring-controller.io/registered, which build/launcher-rbac.yaml lets the pod set and nothing else), "
        "before the kubelet reports it Running (about a second earlier); a workload's annotation "
        'ring-controller.io/self-register: "true" or "false" overrides this per job',
    )
    p.add_argument(
        "--rank-order",
        choices=RULES,
        default=RULE_SPEC,
        help="how jobs without the annotation " + RANK_ORDER_ANNOTATION + " are ranked: spec (task order, then "
        "index) or topology (by the topology path of each member's node, then spec order: ring neighbours are "
        "network neighbours); the annotation (spec or topology) on a workload overrides it",
    )
    p.add_argument(
        "--topology-keys",
        type=_topology_keys,
        default=DEFAULT_TOPOLOGY_KEYS,
        metavar="KEY[,KEY...]",
        help="node label keys of the topology path, outermost first (default: region, zone, the EKS, GKE, "
        "Topograph and Kueue-example network levels, kubernetes.io/hostname; see docs/operating.md). The "
        "controller watches nodes (get/list/watch) to read them; an empty value stops that, and topology "
        "order then groups members by node name only",
    )
    p.add_argument(
        "--max-members",
        type=int,
        default=DEFAULT_MAX_MEMBERS,
        help="the most members one job may ask for: a job asking for more gets no spec, a TooManyMembers Warning "
        'Event naming this limit, a log line and ringcontroller_invalid_inputs_total{kind,reason="too_many_members"}',
    )
    p.add_argument("--default-port", type=int, default=DEFAULT_PORT, help="member port when the pod names none")
    p.add_argument("--metrics-bind-address", default=":8080", help="address of /metrics; '0' disables")
    p.add_argument("--health-probe-bind-address", default=":8081", help="address of /healthz and /readyz; '0' disables")
    p.add_argument("--leader-elect", action="store_true", help="run leader election; only the leader writes")
    p.add_argument(
        "--leader-election-namespace",
        default="",
        help="namespace of the Lease (default: the pod's namespace, else 'default')",
    )
    p.add_argument("--leader-election-id", default="ring-controller", help="name of the Lease")
    p.add_argument(
        "--leader-elect-lease-duration",
        dest="lease_duration",
        type=duration,
        default=15.0,
        help="how long a lease is valid without renewal",
    )
    p.add_argument(
        "--leader-elect-renew-deadline",
        dest="renew_deadline",
        type=duration,
        default=10.0,
        help="how long the leader retries renewing before it gives up",
    )
    p.add_argument(
        "--leader-elect-retry-period",
        dest="retry_period",
        type=duration,
        default=2.0,
        help="interval between acquire/renew attempts",
    )
    p.add_argument("--log-format", choices=("json", "console"), default="json", help="log line format")
    p.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), default="info", help="lowest level logged"
    )
    p.add_argument(
        "--shutdown-timeout", type=duration, default=10.0, help="time allowed to finish in-flight work on SIGTERM"
    )
    p.add_argument("--version", action="version", version=f"ring-controller {VERSION}")
    return p


def parse(argv: list[str] | None = None) -> Options:
    """Parse ``argv``; exits with a usage message on bad flags."""
    p = parser()
    a = p.parse_args(argv)
    if a.workers < 1:
        p.error("--workers must be at least 1")
    if a.touch_max_members < 0:
        p.error("--touch-max-members must be at least 0")
    if a.max_members < 1:
        p.error("--max-members must be at least 1")
    if not 1 <= a.default_port <= 65535:
        p.error("--default-port must be within 1-65535")
    if not a.retry_period < a.renew_deadline < a.lease_duration:
        p.error("leader election needs retry period < renew deadline < lease duration")
    try:
        namespaces = namespace_list(getattr(a, "namespaces", []))
    except ValueError as e:
        p.error(str(e))
    return Options(
        kubeconfig=a.kubeconfig,
        namespaces=namespaces,
        label_key=a.label_key,
        workers=a.workers,
        ranktable_version=a.ranktable_version,
        default_port=a.default_port,
        metrics_bind_address=a.metrics_bind_address,
        health_probe_bind_address=a.health_probe_bind_address,
        leader_elect=a.leader_elect,
        leader_election_namespace=a.leader_election_namespace,
        leader_election_id=a.leader_election_id,
        lease_duration=a.lease_duration,
        renew_deadline=a.renew_deadline,
        retry_period=a.retry_period,
        log_format=a.log_format,
        log_level=a.log_level,
        shutdown_timeout=a.shutdown_timeout,
        touch_pods=a.touch_pods,
        self_registration=a.self_registration,
        rank_order=a.rank_order,
        topology_keys=a.topology_keys,
        max_members=a.max_members,
        touch_max_members=a.touch_max_members,
    )
