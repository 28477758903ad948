"""The daemon's HTTP endpoints: ``/metrics`` and ``/healthz`` + ``/readyz``.

Served by aiohttp (already a dependency of kubernetes-asyncio) on the event
loop of the controller, so a wedged loop fails the liveness probe too.
``/readyz`` answers 200 once every informer's cache has synced; ``/healthz``
answers 200 while the process is serving at all.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


def parse_address(address: str) -> tuple[str, int] | None:
    """``host:port`` (``:8080`` means all interfaces) -> (host, port); ``0`` -> None (disabled)."""
    if address in ("0", ""):
        return None
    host, _, port = address.rpartition(":")
    return (host or "0.0.0.0", int(port))


async def serve(
    *,
    metrics_address: str,
    health_address: str,
    registry: CollectorRegistry,
    ready: Callable[[], bool],
) -> list[web.AppRunner]:
    """Start the endpoints; returns runners the caller must ``cleanup()`` at shutdown."""

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="caches not synced")

    runners: list[web.AppRunner] = []
    routes = {
        metrics_address: [web.get("/metrics", metrics)],
        health_address: [web.get("/healthz", healthz), web.get("/readyz", readyz)],
    }
    if metrics_address == health_address:
        routes = {metrics_address: routes[metrics_address] + routes[health_address]}
    for address, handlers in routes.items():
        bind = parse_address(address)
        if bind is None:
            continue
        app = web.Application()
        app.add_routes(handlers)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, bind[0], bind[1]).start()
        runners.append(runner)
    return runners
