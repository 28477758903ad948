"""``ring-controller``: the daemon's entry point.

Start-up order: flags, logging, client configuration (``--kubeconfig``, else
in-cluster, else ``$KUBECONFIG`` / ``~/.kube/config``), the /metrics and
probe endpoints, the informers (ready once synced), then the workers (at
once, or when this process becomes leader with ``--leader-elect``).
SIGTERM/SIGINT start a graceful shutdown bounded by ``--shutdown-timeout``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import structlog
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration

from agent import metrics as agent_metrics
from ringcontroller import logs, probes
from ringcontroller.controller import Controller
from ringcontroller.metrics import REGISTRY
from ringcontroller.options import VERSION, Options, parse

log = structlog.get_logger()

for _collector in agent_metrics.ALL:
    REGISTRY.register(_collector)


async def client_configuration(kubeconfig: str | None) -> Configuration:
    """Client configuration by the documented order of sources."""
    cfg = Configuration()
    if kubeconfig:
        await kube_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        kube_config.load_incluster_config(client_configuration=cfg)
    else:
        await kube_config.load_kube_config(client_configuration=cfg)
    return cfg


async def run(options: Options) -> int:
    """Run until SIGTERM/SIGINT; returns the exit code."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        cfg = await client_configuration(options.kubeconfig)
    except Exception as e:  # noqa: BLE001 - any config failure ends start-up with its reason
        log.error("config.failed", error=str(e))
        return 1
    async with ApiClient(configuration=cfg) as api:
        controller = Controller(api=api, options=options)
        runners = await probes.serve(
            metrics_address=options.metrics_bind_address,
            health_address=options.health_probe_bind_address,
            registry=REGISTRY,
            ready=controller.synced,
        )
        log.info("controller.starting", version=VERSION, server=cfg.host, namespace=options.namespace or "*", label_key=options.label_key)
        try:
            synced = asyncio.create_task(controller.start_informers())
            stopped = asyncio.create_task(stop.wait())
            await asyncio.wait({synced, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if synced.done():
                synced.result()
                controller.start_workers()
                await stopped
            else:
                synced.cancel()
            log.info("controller.stopping")
        finally:
            await controller.stop(timeout=options.shutdown_timeout)
            for runner in runners:
                await runner.cleanup()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Console entry point."""
    options = parse(argv)
    logs.setup(fmt=options.log_format, level=options.log_level)
    return asyncio.run(run(options))


if __name__ == "__main__":
    sys.exit(main())
