"""Operating the daemon on the real control plane: leader election and
fail-over, the shipped RBAC, metrics, probes, logs, and an API-server restart.

Controllers run as real processes (``ControllerProcess``) in the test's
namespace, with their Lease there too. Fail-over tests use short lease
timings (4 s / 3 s / 1 s) to stay fast, except the SIGTERM test, which uses
the shipped defaults (15 s / 10 s / 2 s): a released Lease must be taken in
about one retry period, far below the lease duration. Measured figures are
printed (``pytest -s`` shows them).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from kubernetes_asyncio import config as async_config
from kubernetes_asyncio.client import ApiClient, Configuration
from prometheus_client import CollectorRegistry

from agent.api import ApiError
from model.keys import EPOCH_ANNOTATION
from ringcontroller import kubeconfig as daemon_config
from ringcontroller.kube import RestKubeAPI
from ringcontroller.leader import LeaderElector
from ringcontroller.main import elector_for
from ringcontroller.options import parse
from ringdevcluster import Cluster
from tests.support.charts import shipped, template
from tests.support.controllerproc import ControllerProcess
from tests.support.factories import pod_template, volcano_job
from tests.support.kubehelp import (
    all_members,
    create_pods,
    create_volcano_job,
    events_for,
    wait_for,
    wait_for_async,
    wait_spec,
)

pytestmark = pytest.mark.integration

LEASE = "ring-controller"
SHORT = [
    "--leader-elect-lease-duration",
    "4s",
    "--leader-elect-renew-deadline",
    "3s",
    "--leader-elect-retry-period",
    "1s",
]
SHORT_LEASE_SECONDS = 4.0
MASTER = "leader_election_master_status"
Json = dict[str, Any]


class Controllers:
    """Starts controller processes for one test; stops every one afterwards."""

    def __init__(self, kubeconfig: Path, namespace: str, tmp_path: Path) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.tmp_path = tmp_path
        self.started: list[ControllerProcess] = []

    def start(
        self, name: str, *, leader_elect: bool = True, extra: list[str] | None = None, kubeconfig: Path | None = None
    ) -> ControllerProcess:
        args = list(extra or [])
        if leader_elect:
            args += ["--leader-elect", "--leader-election-namespace", self.namespace]
        proc = ControllerProcess(
            kubeconfig=str(kubeconfig or self.kubeconfig),
            namespace=self.namespace,
            log_path=self.tmp_path / f"controller-{name}.log",
            extra=args,
        )
        self.started.append(proc)
        return proc.start()

    def stop_all(self) -> None:
        for proc in self.started:
            if proc.proc is not None and proc.proc.poll() is None:
                proc.send(signal.SIGCONT)  # in case a test froze it
            code = proc.stop(signal.SIGTERM)
            print(f"{proc.log_path.name}: exit code {code}; log tail:\n{proc.log_tail(15)}")


@pytest.fixture
def controllers(kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[Controllers]:
    ctl = Controllers(kubeconfig, namespace, tmp_path)
    yield ctl
    ctl.stop_all()


def is_leader(proc: ControllerProcess) -> bool:
    return proc.metric(MASTER, name=LEASE) == 1.0


def wait_leader(proc: ControllerProcess, timeout: float = 30.0) -> None:
    wait_for(lambda: is_leader(proc), timeout=timeout, what=f"{proc.log_path.name} leading")


def wait_standby(proc: ControllerProcess) -> None:
    """Until the process has read the Lease and found it held by another."""
    wait_for(
        lambda: any('"leader.standby"' in line for line in proc.log_lines()), what=f"{proc.log_path.name} standing by"
    )
    assert proc.metric(MASTER, name=LEASE) == 0.0


def identity_of(proc: ControllerProcess) -> str:
    for line in proc.log_lines():
        record = json.loads(line)
        if record.get("event") == "leader.campaigning":
            return str(record["identity"])
    raise AssertionError(f"no leader.campaigning line in {proc.log_path}")


def read_lease(k8s: Any, namespace: str) -> Any:
    return client.CoordinationV1Api(k8s.api).read_namespaced_lease(LEASE, namespace)


def writes(proc: ControllerProcess) -> float:
    return proc.metric("ringcontroller_configmap_writes_total") or 0.0


def run_job(
    k8s: Any, namespace: str, name: str, *, tasks: list[tuple[str, int]] | None = None, timeout: float = 60.0
) -> Json:
    """A Volcano Job with its pods, as Volcano creates them; returns the completed spec."""
    tasks = tasks or [("chief", 1), ("worker", 2)]
    templates = {t: pod_template(port=4000 + i, configmap=f"rings-config-{name}") for i, (t, _) in enumerate(tasks)}
    job = create_volcano_job(k8s, namespace, volcano_job(name, tasks=tasks, templates=templates))
    create_pods(k8s, job, all_members(job))
    return wait_spec(k8s, namespace, f"rings-config-{name}", timeout=timeout)


# -- leader election --------------------------------------------------------------


def test_two_replicas_elect_one_leader_and_only_it_writes(k8s: Any, namespace: str, controllers: Controllers) -> None:
    a = controllers.start("a", extra=SHORT)
    wait_leader(a)
    b = controllers.start("b", extra=SHORT)
    wait_standby(b)
    spec = run_job(k8s, namespace, "one")
    assert len(spec["members"]) == 3
    assert is_leader(a) and not is_leader(b)
    assert writes(a) >= 2  # created initializing, then completed
    assert writes(b) == 0
    assert b.metric("controller_runtime_reconcile_total") == 0
    # The standby watched the job's changes but queued nothing.
    assert b.metric("workqueue_adds_total") == 0 and b.metric("workqueue_depth") == 0
    assert (a.metric("controller_runtime_reconcile_total", result="success") or 0) >= 1
    lease = read_lease(k8s, namespace)
    assert lease.spec.holder_identity == identity_of(a)
    assert lease.spec.lease_duration_seconds == 4
    # Both replicas keep their caches warm and report ready.
    assert a.probe("/readyz") == 200 and b.probe("/readyz") == 200


def test_sigkill_of_the_leader_fails_over_within_the_lease_duration(
    k8s: Any, namespace: str, controllers: Controllers
) -> None:
    a = controllers.start("a", extra=SHORT)
    wait_leader(a)
    b = controllers.start("b", extra=SHORT)
    wait_standby(b)
    before = read_lease(k8s, namespace).spec.lease_transitions or 0
    killed = time.monotonic()
    a.stop(signal.SIGKILL)
    wait_for(lambda: is_leader(b), timeout=SHORT_LEASE_SECONDS + 10, interval=0.05, what="standby takes over")
    took = time.monotonic() - killed
    print(f"FIGURE fail-over after SIGKILL (lease 4s, renew 3s, retry 1s): {took:.2f}s")
    # The standby waited for the dead leader's claim to expire (it did not
    # steal a live lease): the killed leader renewed at most one retry period
    # (1 s) before the kill, so its 4 s claim was live for at least 3 s more.
    # A lower bound is a safety rule, not a speed: it cannot fail by slowness.
    assert took > 2.0
    lease = read_lease(k8s, namespace)
    assert lease.spec.holder_identity == identity_of(b)
    assert lease.spec.lease_transitions == before + 1
    # The new leader does the work.
    run_job(k8s, namespace, "after-kill")
    assert writes(b) >= 2


def test_sigterm_of_the_leader_releases_the_lease_and_the_standby_takes_over_in_one_retry_period(
    k8s: Any, namespace: str, controllers: Controllers
) -> None:
    # Shipped defaults: lease 15 s, renew 10 s, retry 2 s.
    a = controllers.start("a")
    wait_leader(a)
    b = controllers.start("b")
    wait_standby(b)
    run_job(k8s, namespace, "before-term")
    stopped = time.monotonic()
    code = a.stop(signal.SIGTERM)
    wait_for(lambda: is_leader(b), timeout=20, interval=0.05, what="standby takes over")
    took = time.monotonic() - stopped
    print(f"FIGURE fail-over after SIGTERM (defaults: lease 15s, renew 10s, retry 2s): {took:.2f}s")
    assert code == 0
    events = [json.loads(line)["event"] for line in a.log_lines()]
    assert events.index("controller.stopping") < events.index("controller.stopped") < events.index("leader.released")
    lease = read_lease(k8s, namespace)
    assert lease.spec.holder_identity == identity_of(b)
    run_job(k8s, namespace, "after-term")
    assert writes(b) >= 2


def test_a_leader_that_lost_its_lease_stops_at_once_and_exits_non_zero(
    k8s: Any, namespace: str, controllers: Controllers
) -> None:
    a = controllers.start("a", extra=SHORT)
    wait_leader(a)
    b = controllers.start("b", extra=SHORT)
    wait_standby(b)
    a.send(signal.SIGSTOP)  # frozen: no renewals
    wait_for(lambda: is_leader(b), timeout=SHORT_LEASE_SECONDS + 10, interval=0.1, what="standby takes over")
    a.send(signal.SIGCONT)
    assert a.wait_exit(timeout=15) == 1
    events = [json.loads(line) for line in a.log_lines()]
    lost = [e for e in events if e["event"] == "leader.lost"]
    assert lost and lost[0]["reason"] in ("renew deadline exceeded", f"lease taken by {identity_of(b)}")
    assert "controller.leadership_lost" in [e["event"] for e in events]
    assert is_leader(b)
    assert read_lease(k8s, namespace).spec.holder_identity == identity_of(b)


async def _async_client(kubeconfig: Path) -> ApiClient:
    cfg = Configuration()
    await async_config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return ApiClient(configuration=cfg)


def _elector(
    api: ApiClient,
    namespace: str,
    identity: str,
    *,
    lease: float,
    renew: float,
    retry: float,
    reads: list[tuple[float, str]] | None = None,
) -> LeaderElector:
    """A candidate; with ``reads``, every Lease it GETs is noted there as (monotonic start, holder)."""
    send = RestKubeAPI(api).request

    async def request(method: str, path: str, *, body: Json | None = None) -> Json:
        started = time.monotonic()
        answer = await send(method, path, body=body)
        if reads is not None and method == "GET":
            reads.append((started, str((answer.get("spec") or {}).get("holderIdentity") or "")))
        return answer

    return LeaderElector(
        request=request, namespace=namespace, name=LEASE, identity=identity,
        lease_duration=lease, renew_deadline=renew, retry_period=retry, registry=CollectorRegistry(),
    )  # fmt: skip


async def test_expiry_is_judged_on_the_holders_duration_not_on_timestamps(
    k8s: Any, kubeconfig: Path, namespace: str
) -> None:
    # Another candidate holds the Lease for 6 s; its clock is decades off.
    old = "2000-01-01T00:00:00.000000Z"
    async with await _async_client(kubeconfig) as api:
        await RestKubeAPI(api).request(
            "POST",
            f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
            body={
                "metadata": {"name": LEASE},
                "spec": {
                    "holderIdentity": "other",
                    "leaseDurationSeconds": 6,
                    "acquireTime": old,
                    "renewTime": old,
                    "leaseTransitions": 5,
                },
            },
        )
        # Our own flag says 2 s: the holder's 6 s must win.
        elector = _elector(api, namespace, "me", lease=2.0, renew=1.5, retry=0.25)
        started = time.monotonic()
        await asyncio.wait_for(elector.acquire(), timeout=20)
        took = time.monotonic() - started
        print(f"\nFIGURE take-over of a 6s lease held by another (own flag 2s): {took:.2f}s")
        assert took >= 6.0, took  # the holder's 6 s, not our 2 s (a safety rule: slowness cannot fail it)
        lease = read_lease(k8s, namespace).spec
        assert (lease.holder_identity, lease.lease_duration_seconds, lease.lease_transitions) == ("me", 2, 6)
        now = dt.datetime.now(dt.UTC)
        assert abs((lease.renew_time - now).total_seconds()) < 5  # written in UTC
        assert lease.renew_time.microsecond or lease.acquire_time.microsecond  # MicroTime precision kept
        assert await elector.release()
        lease = read_lease(k8s, namespace).spec
        assert (lease.holder_identity or "", lease.lease_duration_seconds, lease.lease_transitions) == ("", 1, 6)


async def test_candidates_racing_for_a_free_lease_elect_exactly_one(kubeconfig: Path, namespace: str) -> None:
    lease, retry = 4.0, 0.5
    async with await _async_client(kubeconfig) as api:
        reads: list[list[tuple[float, str]]] = [[] for _ in range(3)]
        electors = [
            _elector(api, namespace, f"c{i}", lease=lease, renew=3.0, retry=retry, reads=reads[i]) for i in range(3)
        ]
        tasks = [asyncio.create_task(e.acquire()) for e in electors]
        holding: list[asyncio.Task[None]] = []
        try:
            done, _ = await asyncio.wait(tasks, timeout=10, return_when=asyncio.FIRST_COMPLETED)
            assert len(done) == 1
            winner = electors[tasks.index(done.pop())]
            holding.append(asyncio.create_task(winner.hold()))
            losers = [i for i, e in enumerate(electors) if e is not winner]

            # Each loser's chance to take an expired claim: two reads of the Lease
            # begun more than a lease duration (and a retry period) after it first
            # read the winner's; the first of them is judged, and acted on, before
            # the second begins. Without renewals, the claim it saw first was over.
            def judged_past_expiry(i: int) -> bool:
                first = next((t for t, holder in reads[i] if holder == winner.identity), None)
                return first is not None and sum(t > first + lease + retry for t, _ in reads[i]) >= 2

            await wait_for_async(
                lambda: all(judged_past_expiry(i) for i in losers) or sum(t.done() for t in tasks) > 1,
                timeout=30,
                what="every loser reading the Lease past the winner's first term",
            )
            assert sum(t.done() for t in tasks) == 1, "a second candidate took the Lease the winner kept renewing"
            assert [e.is_leader for e in electors].count(True) == 1
            assert not holding[0].done()
            assert {e.holder for e in electors if e is not winner} == {winner.identity}
        finally:
            for t in tasks + holding:
                t.cancel()
            await asyncio.gather(*tasks, *holding, return_exceptions=True)


async def test_a_renewal_is_one_write_and_a_lease_changed_by_another_is_read_first(
    k8s: Any, kubeconfig: Path, namespace: str
) -> None:
    # On a saturated API server every request of a renewal counts against the
    # renew deadline: the leader updates the Lease as it last wrote it, and reads
    # it only when the server refuses that write (someone else changed it).
    async with await _async_client(kubeconfig) as api:
        calls: list[tuple[str, int]] = []
        send = RestKubeAPI(api).request

        async def request(method: str, path: str, *, body: Json | None = None) -> Json:
            try:
                answer = await send(method, path, body=body)
            except ApiError as e:
                calls.append((method, e.status))
                raise
            calls.append((method, 200))
            return answer

        elector = LeaderElector(
            request=request, namespace=namespace, name=LEASE, identity="me",
            lease_duration=3.0, renew_deadline=2.0, retry_period=0.25, registry=CollectorRegistry(),
        )  # fmt: skip
        await asyncio.wait_for(elector.acquire(), timeout=20)
        assert calls == [("GET", 404), ("POST", 200)]
        holding = asyncio.create_task(elector.hold())
        try:
            await wait_for_async(lambda: len(calls) >= 6, what="four renewals")
            assert calls[2:6] == [("PUT", 200)] * 4
            # An admin labels the Lease: a new resourceVersion, the same holder.
            client.CoordinationV1Api(k8s.api).patch_namespaced_lease(
                LEASE, namespace, {"metadata": {"labels": {"touched-by": "admin"}}}
            )
            changed = len(calls)

            def refused_then_renewed() -> bool:
                after = calls[changed:]
                return ("PUT", 409) in after and after.index(("PUT", 409)) + 3 <= len(after)

            await wait_for_async(refused_then_renewed, what="the renewal after the admin's change")
            after = calls[changed:]
            first = after.index(("PUT", 409))
            assert after[first : first + 3] == [("PUT", 409), ("GET", 200), ("PUT", 200)]
            assert not holding.done() and elector.is_leader
            lease = read_lease(k8s, namespace)
            assert lease.spec.holder_identity == "me" and lease.metadata.labels == {"touched-by": "admin"}
        finally:
            holding.cancel()
            await asyncio.gather(holding, return_exceptions=True)
            await elector.release()


def _watch_renewals(
    k8s: Any,
    namespace: str,
    seconds: int,
    seen: list[tuple[str, dt.datetime]],
    *,
    watching: watch.Watch,
    stopping: threading.Event,
) -> None:
    """Every version of the Lease the API server sends (resourceVersion, renewTime), for ``seconds`` or until
    ``stopping`` is set and ``watching.stop()`` shuts its socket (so the watch ends with its test, not in a
    later one's API server restart); a broken stream is raised unless it was that stop."""
    try:
        _lease_events(k8s, namespace, seconds, seen, watching=watching)
    except urllib3.exceptions.ProtocolError:
        if not stopping.is_set():
            raise


def _lease_events(
    k8s: Any, namespace: str, seconds: int, seen: list[tuple[str, dt.datetime]], *, watching: watch.Watch
) -> None:
    stream = watching.stream(
        client.CoordinationV1Api(k8s.api).list_namespaced_lease,
        namespace,
        field_selector=f"metadata.name={LEASE}",
        timeout_seconds=seconds,
    )
    for event in stream:
        lease = event["object"]
        if lease.spec.renew_time is not None:
            seen.append((lease.metadata.resource_version, lease.spec.renew_time))


async def test_the_daemons_lease_renewals_keep_the_deadline_while_its_event_loop_is_busy(
    k8s: Any, kubeconfig: Path, namespace: str
) -> None:
    # The daemon's own wiring (elector_for: a thread, its own client) on the real API
    # server; the test's loop stands in for the workers and runs CPU-bound Python for
    # three renew deadlines. Every renewal the API server stored is watched from here.
    renew = 2.0
    options = parse(
        ["--kubeconfig", str(kubeconfig), "--leader-elect", "--leader-election-namespace", namespace,
         "--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s",
         "--leader-elect-retry-period", "0.25s"]
    )  # fmt: skip
    election = elector_for(options, await daemon_config.load(options.kubeconfig))
    seen: list[tuple[str, dt.datetime]] = []
    watching, stopping = watch.Watch(), threading.Event()
    watcher = threading.Thread(
        target=_watch_renewals,
        args=(k8s, namespace, 40, seen),
        kwargs={"watching": watching, "stopping": stopping},
        daemon=True,
    )
    watcher.start()
    await election.start()
    holding: asyncio.Task[None] | None = None
    try:
        await asyncio.wait_for(election.acquire(), timeout=20)
        holding = asyncio.create_task(election.hold())
        await asyncio.to_thread(wait_for, lambda: len(seen) >= 3, what="renewals watched")
        began = dt.datetime.now(dt.UTC)
        end = time.monotonic() + 3 * renew
        while time.monotonic() < end:  # holds this loop; competes for the GIL
            sum(range(200))
        ended = dt.datetime.now(dt.UTC)
        assert election.is_leader and election.may_write()
        await asyncio.to_thread(wait_for, lambda: seen[-1][1] > ended, what="a renewal after the busy stretch")
        times = sorted({t for _, t in seen})
        during = [t for t in times if began <= t <= ended]
        around = [t for t in times if t < began][-1:] + during + [t for t in times if t > ended][:1]
        gaps = [(b - a).total_seconds() for a, b in zip(around, around[1:], strict=False)]
        print(f"\nFIGURE Lease renewals while the daemon's loop was busy {3 * renew:.0f}s: {len(during)}, "
              f"largest gap {max(gaps):.2f}s (renew deadline {renew:.0f}s, retry 0.25s)")  # fmt: skip
        assert len(during) >= 3 and max(gaps) < renew, gaps
        assert not holding.done()
    finally:
        if holding is not None:
            holding.cancel()
        await election.release()
        await election.close()
        stopping.set()
        watching.stop()
        await asyncio.to_thread(watcher.join, 45)
        assert not watcher.is_alive(), "the Lease watch outlived its test"


# -- the shipped RBAC --------------------------------------------------------------

POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def _retarget(doc: Json, namespace: str) -> Json:
    """A manifest moved into the test's namespace; cluster-scoped names made unique."""
    doc = json.loads(json.dumps(doc))
    meta = doc["metadata"]
    if "namespace" in meta:
        meta["namespace"] = namespace
    if doc["kind"] in ("ClusterRole", "ClusterRoleBinding", *POLICY_KINDS):
        meta["name"] = f"{meta['name']}-{namespace}"
    if doc["kind"] == "ClusterRoleBinding":
        doc["roleRef"]["name"] = f"{doc['roleRef']['name']}-{namespace}"
    if doc["kind"] == "ValidatingAdmissionPolicyBinding":
        doc["spec"]["policyName"] = f"{doc['spec']['policyName']}-{namespace}"
    if doc["kind"] == "ValidatingAdmissionPolicy":
        for condition in doc["spec"]["matchConditions"]:  # the shipped account, moved like the others
            condition["expression"] = condition["expression"].replace(
                "system:serviceaccount:ring-controller:", f"system:serviceaccount:{namespace}:"
            )
    for subject in doc.get("subjects", []):
        subject["namespace"] = namespace
    return doc


def _status(call: Any) -> int:
    try:
        call()
    except ApiException as e:
        return int(e.status)
    return 200


@pytest.fixture
def short_namespace(k8s: Any) -> Iterator[str]:
    """A namespace with a short name: ``system:serviceaccounts:<ns>`` must fit a
    certificate's 64-character organization field."""
    name = f"t-rbac-{secrets.token_hex(3)}"
    k8s.core.create_namespace({"metadata": {"name": name, "labels": {"ring-controller.test/ns": "true"}}})
    wait_for(
        lambda: _status(lambda: k8s.core.read_namespaced_service_account("default", name)) == 200,
        what="default ServiceAccount",
    )
    yield name
    k8s.core.delete_namespace(name, propagation_policy="Background")


def test_the_charts_flow_schema_puts_the_lease_requests_in_the_leader_election_level(
    k8s: Any, devcluster: Cluster, short_namespace: str
) -> None:
    # API Priority and Fairness names the priority level of every request it
    # classified in a response header. The controller's ServiceAccount, without
    # the schema: its Lease requests in workload-low with all its other requests;
    # with the chart's schema (leaderElection.flowSchema): in leader-election.
    namespace = short_namespace
    docs = template({"leaderElection": {"enabled": True, "flowSchema": True}}, namespace=namespace)
    (schema,) = [d for d in docs if d["kind"] == "FlowSchema"]
    (account,) = [d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"]
    flow = client.FlowcontrolApiserverV1Api(k8s.api)
    levels = {pl.metadata.uid: pl.metadata.name for pl in flow.list_priority_level_configuration().items}
    user = f"system:serviceaccount:{namespace}:{account}"
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]
    sa_api = config.new_client_from_config(config_file=str(devcluster.user_kubeconfig(user=user, groups=groups)))  # type: ignore[no-untyped-call]

    def level(call: Any) -> str:
        try:
            _, _, headers = call()
        except ApiException as e:  # 403/404: classified all the same, before authorization
            headers = e.headers
        return levels.get(headers.get("X-Kubernetes-PF-PriorityLevel-UID"), "unclassified")

    def lease() -> Any:
        return client.CoordinationV1Api(sa_api).read_namespaced_lease_with_http_info(LEASE, namespace)

    def pods() -> Any:
        return client.CoreV1Api(sa_api).list_namespaced_pod_with_http_info(namespace)

    try:
        assert (level(lease), level(pods)) == ("workload-low", "workload-low")
        flow.create_flow_schema(schema)
        try:
            wait_for(lambda: level(lease) == "leader-election", what="the FlowSchema in force")
            assert level(pods) == "workload-low"  # only the Lease requests moved
        finally:
            flow.delete_flow_schema(schema["metadata"]["name"])
    finally:
        sa_api.close()


def test_shipped_rbac_runs_the_full_flow_and_forbids_everything_else(
    k8s: Any, devcluster: Cluster, kubeconfig: Path, short_namespace: str, tmp_path: Path
) -> None:
    namespace = short_namespace
    controllers = Controllers(kubeconfig, namespace, tmp_path)
    rbac = [_retarget(d, namespace) for d in shipped("rbac.yaml")]
    deploy = {d["kind"]: _retarget(d, namespace) for d in shipped("ring-controller.yaml")}
    cluster_scoped = [d for d in rbac if d["kind"].startswith("Cluster")]
    policies = [d for d in rbac if d["kind"] in POLICY_KINDS]
    admission = client.AdmissionregistrationV1Api(k8s.api)
    try:
        for doc in rbac:
            kind = doc["kind"]
            if kind == "ValidatingAdmissionPolicy":
                admission.create_validating_admission_policy(doc)
            elif kind == "ValidatingAdmissionPolicyBinding":
                admission.create_validating_admission_policy_binding(doc)
            elif kind == "ClusterRole":
                k8s.rbac.create_cluster_role(doc)
            elif kind == "ClusterRoleBinding":
                k8s.rbac.create_cluster_role_binding(doc)
            elif kind == "Role":
                k8s.rbac.create_namespaced_role(namespace, doc)
            elif kind == "RoleBinding":
                k8s.rbac.create_namespaced_role_binding(namespace, doc)
            else:
                raise AssertionError(f"unexpected {kind} in rbac.yaml")
        account = deploy["ServiceAccount"]["metadata"]["name"]
        k8s.core.create_namespaced_service_account(namespace, deploy["ServiceAccount"])
        # The Deployment is valid for this API server (strict field validation, nothing created).
        k8s.apps.create_namespaced_deployment(namespace, deploy["Deployment"], dry_run="All", field_validation="Strict")

        user = f"system:serviceaccount:{namespace}:{account}"
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]
        sa_kubeconfig = devcluster.user_kubeconfig(user=user, groups=groups)
        sa_api = config.new_client_from_config(config_file=str(sa_kubeconfig))  # type: ignore[no-untyped-call]
        core = client.CoreV1Api(sa_api)
        # The policy is in force once the API server denies a dry-run label change by the account.
        probe = k8s.core.create_namespaced_pod(
            namespace, {"metadata": {"name": "probe"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        )
        wait_for(
            lambda: (
                _status(
                    lambda: core.patch_namespaced_pod(
                        "probe", namespace, {"metadata": {"labels": {"x": "y"}}}, dry_run="All"
                    )
                )
                == 403
            ),
            what="the ValidatingAdmissionPolicy in force",
        )
        k8s.core.delete_namespaced_pod(probe.metadata.name, namespace, grace_period_seconds=0)
        proc = controllers.start("sa", kubeconfig=sa_kubeconfig, extra=SHORT)
        wait_leader(proc)
        spec = run_job(k8s, namespace, "rbac")
        assert len(spec["members"]) == 3
        wait_for(
            lambda: [e for e in events_for(k8s, namespace, "rbac") if e.reason == "SpecCompleted"],
            what="SpecCompleted event",
        )
        assert proc.metric("ringcontroller_api_requests_total", code="403") is None
        # Delivery: the controller annotated every member with the epoch, through RBAC and the policy.
        wait_for(
            lambda: all(
                (k8s.core.read_namespaced_pod(m["pod"], namespace).metadata.annotations or {}).get(EPOCH_ANNOTATION)
                == str(spec["epoch"])
                for m in spec["members"]
            ),
            what="every member annotated with the epoch",
        )
        touched = proc.metric("ringcontroller_pod_touches_total", result="ok")
        assert touched is not None and touched >= 3

        try:
            secret = k8s.core.create_namespaced_secret(namespace, {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
            pod = spec["members"][0]["pod"]
            assert len(core.list_namespaced_pod(namespace).items) == 3  # the identity works

            def patch(body: Json) -> int:
                return _status(lambda: core.patch_namespaced_pod(pod, namespace, body))

            # RBAC grants patch; the policy lets through the epoch annotation and nothing else.
            assert patch({"metadata": {"annotations": {EPOCH_ANNOTATION: "99"}}}) == 200
            assert patch({"metadata": {"annotations": {EPOCH_ANNOTATION: "x; rm -rf"}}}) == 403
            assert patch({"metadata": {"labels": {"x": "y"}}}) == 403
            assert patch({"metadata": {"annotations": {"other": "y"}}}) == 403
            assert patch({"metadata": {"annotations": {EPOCH_ANNOTATION: "100", "other": "y"}}}) == 403
            assert patch({"spec": {"activeDeadlineSeconds": 5}}) == 403
            assert patch({"metadata": {"finalizers": ["example.com/hold"]}}) == 403
            assert (
                _status(lambda: core.patch_namespaced_pod_status(pod, namespace, {"status": {"phase": "Failed"}}))
                == 403
            )
            assert _status(lambda: core.delete_namespaced_pod(pod, namespace)) == 403
            after = k8s.core.read_namespaced_pod(pod, namespace)
            assert "other" not in after.metadata.annotations
            # The "99" got through; the controller, level-triggered, sets its epoch back.
            wait_for(
                lambda: (
                    k8s.core.read_namespaced_pod(pod, namespace).metadata.annotations.get(EPOCH_ANNOTATION)
                    == str(spec["epoch"])
                ),
                what="the controller restoring the epoch annotation",
            )
            assert after.spec.active_deadline_seconds is None and "x" not in (after.metadata.labels or {})
            assert _status(lambda: core.read_namespaced_secret(secret.metadata.name, namespace)) == 403
            # Nodes: read (their topology labels), never written.
            node = core.list_node().items[0].metadata.name
            assert _status(lambda: core.patch_node(node, {"metadata": {"labels": {"x": "y"}}}, dry_run="All")) == 403
            assert _status(lambda: core.delete_node(node, dry_run="All")) == 403
            assert _status(lambda: core.delete_namespaced_config_map("rings-config-rbac", namespace)) == 403
        finally:
            sa_api.close()
    finally:
        controllers.stop_all()
        for doc in policies:
            delete_policy = (
                admission.delete_validating_admission_policy
                if doc["kind"] == "ValidatingAdmissionPolicy"
                else admission.delete_validating_admission_policy_binding
            )
            try:
                delete_policy(doc["metadata"]["name"])
            except ApiException as e:
                if e.status != 404:
                    raise
        for doc in cluster_scoped:
            delete = (
                k8s.rbac.delete_cluster_role if doc["kind"] == "ClusterRole" else k8s.rbac.delete_cluster_role_binding
            )
            try:
                delete(doc["metadata"]["name"])
            except ApiException as e:
                if e.status != 404:
                    raise


# -- metrics, probes, logs ---------------------------------------------------------------

FAMILIES = {
    # controller-runtime's names
    "workqueue_depth": "gauge",
    "workqueue_adds": "counter",
    "workqueue_queue_duration_seconds": "histogram",
    "workqueue_work_duration_seconds": "histogram",
    "workqueue_retries": "counter",
    "workqueue_unfinished_work_seconds": "gauge",
    "workqueue_longest_running_processor_seconds": "gauge",
    "controller_runtime_reconcile": "counter",
    "controller_runtime_reconcile_errors": "counter",
    "controller_runtime_reconcile_time_seconds": "histogram",
    "controller_runtime_max_concurrent_reconciles": "gauge",
    "controller_runtime_active_workers": "gauge",
    "leader_election_master_status": "gauge",
    # ours
    "ringcontroller_jobs": "gauge",
    "ringcontroller_spec_latency_seconds": "histogram",
    "ringcontroller_configmap_writes": "counter",
    "ringcontroller_invalid_inputs": "counter",
    "ringcontroller_events": "counter",
    "ringcontroller_watch_restarts": "counter",
    "ringcontroller_relists": "counter",
    "ringcontroller_api_requests": "counter",
    "ringcontroller_oldest_incomplete_spec_seconds": "gauge",
    # the process
    "process_resident_memory_bytes": "gauge",
    "process_cpu_seconds": "counter",
    "python_info": "gauge",
}


def test_metrics_probes_and_json_logs_after_a_job(k8s: Any, namespace: str, controllers: Controllers) -> None:
    proc = controllers.start("m", extra=["--log-level", "debug", "--workers", "3"])
    wait_leader(proc)
    assert proc.probe("/healthz") == 200 and proc.probe("/readyz") == 200
    run_job(k8s, namespace, "metrics")
    wait_for(lambda: proc.metric("ringcontroller_jobs", status="completed") == 1.0, what="job counted completed")
    m = proc.metric
    families = proc.families()
    missing = {name: kind for name, kind in FAMILIES.items() if families.get(name) != kind}
    assert not missing, missing
    names = sorted(n for n in families if not n.endswith("_created"))
    print(f"FIGURE metric families exported: {len(names)}: {', '.join(names)}")

    wait_for(lambda: m("workqueue_depth") == 0.0 and m("controller_runtime_active_workers") == 0.0, what="queue idle")
    reconciles = m("controller_runtime_reconcile_total")
    assert reconciles is not None and reconciles >= 2
    assert m("controller_runtime_reconcile_total", result="success") == reconciles
    for result in ("error", "requeue", "requeue_after"):
        assert m("controller_runtime_reconcile_total", result=result) == 0.0
    assert m("controller_runtime_reconcile_errors_total") == 0.0
    assert m("controller_runtime_reconcile_time_seconds_count") == reconciles
    assert m("workqueue_work_duration_seconds_count", name="ring-controller") == reconciles
    assert (m("workqueue_adds_total", name="ring-controller") or 0) >= reconciles
    assert m("controller_runtime_max_concurrent_reconciles", controller="ring-controller") == 3.0
    assert m(MASTER, name=LEASE) == 1.0
    assert m("ringcontroller_spec_latency_seconds_count") == 1.0
    latency = m("ringcontroller_spec_latency_seconds_sum")
    assert latency is not None and latency >= 0.0
    print(f"FIGURE last member ready -> spec written (1 job, 3 pods): {latency * 1000:.1f} ms")
    assert m("ringcontroller_configmap_writes_total", verb="create", result="ok") == 1.0
    assert (m("ringcontroller_configmap_writes_total", verb="update", result="ok") or 0) >= 1.0
    assert m("ringcontroller_oldest_incomplete_spec_seconds") == 0.0
    assert m("ringcontroller_events_total", type="Normal", reason="SpecCompleted") == 1.0
    assert (m("ringcontroller_api_requests_total", verb="list", code="200") or 0) >= 3
    assert (m("ringcontroller_api_requests_total", verb="watch", code="200") or 0) >= 3
    assert (m("ringcontroller_api_requests_total", verb="create", code="201") or 0) >= 2  # ConfigMap, Lease, Event
    assert m("ringcontroller_api_requests_total", code="<error>") is None
    assert m("ringcontroller_relists_total") == 0.0

    rss = proc.rss_kib() * 1024  # idle: the queue is empty and no worker busy (waited for above)
    print(f"FIGURE controller RSS at idle (1 job, 3 pods cached): {rss / 2**20:.1f} MiB")
    assert abs((m("process_resident_memory_bytes") or 0) - rss) < 0.2 * rss

    records = [json.loads(line) for line in proc.log_lines()]  # every line is JSON
    assert all({"event", "level", "timestamp"} <= r.keys() for r in records)
    assert all(r["timestamp"].endswith("Z") for r in records)
    # Library logs (stdlib logging) go through the same renderer, named by logger.
    assert any(r.get("logger") == "asyncio" for r in records)
    completed = [r for r in records if r["event"] == "ranktable.completed"]
    assert len(completed) == 1
    assert completed[0]["job"] == f"vcjob/{namespace}/metrics" and completed[0]["epoch"] == 1
    written = [r for r in records if r["event"] == "configmap.written"]
    assert written and all(r["job"] == f"vcjob/{namespace}/metrics" and "epoch" in r for r in written)


# -- API server outage --------------------------------------------------------------------


def test_api_server_restart_under_a_running_controller(
    k8s: Any, devcluster: Cluster, namespace: str, controllers: Controllers
) -> None:
    proc = controllers.start("api", leader_elect=False)
    run_job(k8s, namespace, "before")
    restarts = proc.metric("ringcontroller_watch_restarts_total") or 0.0
    relists = proc.metric("ringcontroller_relists_total") or 0.0
    failed = proc.metric("ringcontroller_api_requests_total", code="<error>") or 0.0
    assert devcluster.stop_component("kube-apiserver")
    try:
        # It has met the outage (a request failed for want of a server), and lives on.
        wait_for(
            lambda: (proc.metric("ringcontroller_api_requests_total", code="<error>") or 0.0) > failed,
            timeout=60,
            what="a request failing while the API server is down",
        )
        assert proc.proc is not None and proc.proc.poll() is None  # still running
        assert proc.probe("/healthz") == 200
    finally:
        devcluster.start_component("kube-apiserver")
    back = time.monotonic()
    # The watches come back. Their resourceVersions predate the new server's
    # watch cache, so it answers 410 Gone and the reflectors relist.
    wait_for(lambda: (proc.metric("ringcontroller_relists_total") or 0.0) > relists, timeout=90, what="a relist")
    run_job(k8s, namespace, "after", timeout=120)
    print(
        f"FIGURE after API server restart: job completed {time.monotonic() - back:.1f}s after the server was back; "
        f"relists {relists:.0f}->{proc.metric('ringcontroller_relists_total'):.0f}, "
        f"watch restarts {restarts:.0f}->{proc.metric('ringcontroller_watch_restarts_total'):.0f}, "
        f"failed requests {proc.metric('ringcontroller_api_requests_total', code='<error>') or 0:.0f}"
    )
    assert (proc.metric("ringcontroller_watch_restarts_total") or 0.0) > restarts
    # Leave the cluster as found: a fresh controller lists every kind and
    # takes a Lease (the restarted server's caches are all serving).
    wait_leader(controllers.start("api-check", extra=SHORT), timeout=60)
    assert proc.proc is not None and proc.proc.poll() is None
