"""``ring-controller``: the daemon's entry point.

Start-up order: flags, logging, client configuration (``--kubeconfig``, else
in-cluster, else ``$KUBECONFIG`` / ``~/.kube/config``), the /metrics and
probe endpoints, then the informers. The informers always run: a standby
keeps its caches warm and reports ready (``/readyz``) once they synced, so a
take-over needs no relist. The workers start once the caches synced and,
with ``--leader-elect``, only after this process acquired the Lease.

Ways out, as controller-runtime's manager takes them:

- SIGTERM/SIGINT: in-flight and queued syncs finish (bounded by
  ``--shutdown-timeout``) while the Lease is still renewed, then the Lease is
  released so a standby takes over within one retry period; exit 0.
- Lease lost (no renewal within the renew deadline, or another holder seen):
  the workers are cancelled at once, since another replica may already be
  writing, and the process exits 1 so its restart starts clean.
- A configuration error: exit 1 with the reason logged.
- An API server older than Kubernetes 1.32: exit 3 (:data:`EXIT_SERVER_TOO_OLD`)
  after one line naming the version found and the one needed, before any
  watch starts (:mod:`ringcontroller.serverinfo`).

Watches are closed (informer tasks cancelled) and the HTTP endpoints shut
down on every way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import sys
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import structlog

from agent.api import ApiError
from ranktable.backoff import Backoff
from ringcontroller import kube, kubeconfig, logs, probes
from ringcontroller.controller import DISCOVERY_BACKOFF, Controller
from ringcontroller.kube import ApiClient, Client, RestKubeAPI
from ringcontroller.kubeconfig import Connection
from ringcontroller.leader import ElectionThread, LeaderElector, default_identity, default_namespace
from ringcontroller.metrics import REGISTRY
from ringcontroller.options import VERSION, Options, parse
from ringcontroller.serverinfo import EXIT_SERVER_TOO_OLD, MIN_VERSION, parse_version, too_old_message

log = structlog.get_logger()

EXIT_OK = 0
EXIT_FAILED = 1
USER_AGENT = f"ring-controller/{VERSION}"


def elector_for(options: Options, connection: Connection) -> ElectionThread:
    """The Lease campaign of this process, from the ``--leader-elect*`` flags.

    It runs on a thread of its own with its own API client (see
    :class:`ringcontroller.leader.ElectionThread`): renewals never wait
    behind the workers.
    """
    identity = default_identity()
    namespace = options.leader_election_namespace or default_namespace()

    @contextlib.asynccontextmanager
    async def opened() -> AsyncIterator[LeaderElector]:
        async with Client(connection, user_agent=USER_AGENT) as api:
            yield LeaderElector(
                request=RestKubeAPI(api, registry=REGISTRY).request,
                namespace=namespace,
                name=options.leader_election_id,
                identity=identity,
                lease_duration=options.lease_duration,
                renew_deadline=options.renew_deadline,
                retry_period=options.retry_period,
                registry=REGISTRY,
            )

    return ElectionThread(opened)


async def check_server(api: ApiClient, stop: asyncio.Event) -> int | None:
    """Read the API server's ``/version``; None to go on, else the exit code.

    Retried with discovery's backoff while the server is unreachable (and
    given up, exit 0, once ``stop`` is set). A server below the floor: one
    ``server.too_old`` error line and :data:`EXIT_SERVER_TOO_OLD`. A refused
    or unreadable ``/version``: a warning, and start-up goes on (discovery
    then finds what the server serves).
    """
    floor = ".".join(map(str, MIN_VERSION))
    backoff = Backoff(initial=DISCOVERY_BACKOFF[0], cap=DISCOVERY_BACKOFF[1], jitter=0.0, reset_after=math.inf)
    while True:
        try:
            body = await kube.get_json(api, "/version", registry=REGISTRY)
            break
        except (ApiError, ValueError) as e:
            log.warning("server.version_unreadable", error=str(e), need=floor)
            return None
        except Exception as e:  # noqa: BLE001 - unreachable API server: keep trying, as discovery does
            delay = backoff.next_delay()
            log.warning("server.unreachable", error=str(e), retry_in=delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            if stop.is_set():
                return EXIT_OK
    found = parse_version(body)
    if found is None:
        log.warning("server.version_unknown", git_version=body.get("gitVersion"), need=floor)
        return None
    if not found.supported:
        log.error(
            "server.too_old", found=str(found), need=floor, exit_code=EXIT_SERVER_TOO_OLD, error=too_old_message(found)
        )
        return EXIT_SERVER_TOO_OLD
    log.info("server.version", found=str(found), need=floor)
    return None


async def _first(main: Awaitable[Any], *interrupts: asyncio.Task[Any]) -> bool:
    """Await ``main`` unless an interrupt task ends first (then cancel ``main``).

    True if ``main`` finished (its exception, if any, is raised). The
    interrupt tasks are left as they are.
    """
    task = asyncio.ensure_future(main)
    await asyncio.wait({task, *interrupts}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
        return True
    task.cancel()
    await asyncio.wait({task})
    return False


async def serve(
    controller: Controller, elector: ElectionThread | None, stop: asyncio.Event, *, shutdown_timeout: float
) -> int:
    """Run informers, the campaign and the workers until stopped or the lease is lost.

    ``shutdown_timeout`` bounds the drain; keep it within the renew deadline,
    since the lease is renewed while draining but a drain is not cut short
    if renewal fails meanwhile.
    """
    stopping = asyncio.create_task(stop.wait(), name="stop-signal")
    informers = asyncio.create_task(controller.start_informers(), name="informers-sync")
    holding: asyncio.Task[None] | None = None
    lost = False
    try:
        if elector is not None:
            log.info("leader.campaigning", lease=f"{elector.namespace}/{elector.name}", identity=elector.identity)
            if not await _first(elector.acquire(), stopping):
                log.info("controller.stopping", leader=False)
                return EXIT_OK
            holding = asyncio.create_task(elector.hold(), name="lease-renewal")
            controller.kube_api.may_write = elector.may_write
        interrupts = [t for t in (stopping, holding) if t is not None]
        if await _first(informers, *interrupts):
            controller.start_workers()
            await asyncio.wait(interrupts, return_when=asyncio.FIRST_COMPLETED)
        lost = holding is not None and holding.done()
        if lost:
            log.error("controller.leadership_lost", exit_code=EXIT_FAILED)
        else:
            log.info("controller.stopping", leader=elector.is_leader if elector else None)
    finally:
        stopping.cancel()
        informers.cancel()
        # The lease is still renewed (by `holding`) while the workers drain.
        await controller.stop(timeout=shutdown_timeout, drain=not lost, abort=holding)
        if holding is not None:
            if holding.done() and not lost:
                lost = True  # lost while draining: the drain was cut short
                log.error("controller.leadership_lost", exit_code=EXIT_FAILED)
            holding.cancel()
            await asyncio.wait({holding})
        if elector is not None and not lost:
            await elector.release()
    return EXIT_FAILED if lost else EXIT_OK


async def run(options: Options) -> int:
    """Run until SIGTERM/SIGINT or the loss of the lease; returns the exit code."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        connection = await kubeconfig.load(options.kubeconfig)
    except Exception as e:  # noqa: BLE001 - any config failure ends start-up with its reason
        log.error("config.failed", error=str(e))
        return EXIT_FAILED
    async with Client(connection, user_agent=USER_AGENT) as api:
        controller = Controller(api=api, options=options)
        elector = elector_for(options, connection) if options.leader_elect else None
        runners = await probes.serve(
            metrics_address=options.metrics_bind_address,
            health_address=options.health_probe_bind_address,
            registry=REGISTRY,
            ready=controller.synced,
        )
        log.info(
            "controller.starting",
            version=VERSION,
            server=connection.server,
            config=connection.source,
            namespaces=list(options.namespaces) or "*",
            label_key=options.label_key,
            workers=options.workers,
            leader_elect=options.leader_elect,
        )
        try:
            refused = await check_server(api, stop)
            if refused is not None:
                log.info("controller.exited", exit_code=refused)
                return refused
            if elector is not None:
                await elector.start()
            code = await serve(controller, elector, stop, shutdown_timeout=options.shutdown_timeout)
        finally:
            for runner in runners:
                await runner.cleanup()
            if elector is not None:
                await elector.close()
    log.info("controller.exited", exit_code=code)
    return code


def main(argv: list[str] | None = None) -> int:
    """Console entry point."""
    options = parse(argv)
    logs.setup(fmt=options.log_format, level=options.log_level)
    return asyncio.run(run(options))


if __name__ == "__main__":
    sys.exit(main())
