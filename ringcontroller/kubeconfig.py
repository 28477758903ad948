"""Where the daemon's API server is and how it proves who it is: a :class:`Connection`.

The daemon's client (:class:`ringcontroller.kube.Client`) needs the server's
URL, a TLS context and, per request, an ``Authorization`` header. They are
read by the launcher's reader (:mod:`ranktable.launch.kubeconfig`: one
reader, one set of rules, for the daemon, ``ring-launch --from-api`` and
self-registration), in the documented order: ``--kubeconfig``, the
in-cluster service account (``KUBERNETES_SERVICE_HOST`` set), then
``$KUBECONFIG`` (its first file) or ``~/.kube/config``. The service
account's bound token is read again for every request (the kubelet rotates
it in place).

Why not kubernetes-asyncio's loader: importing it imports the whole
generated client (``kubernetes_asyncio.client``: every API class and
model), about 36 MB of the daemon's resident memory that it never uses (it
sends raw JSON, :mod:`ringcontroller.kube`). A kubeconfig whose user
authenticates through an ``exec`` plugin or an ``auth-provider`` (cloud
CLIs, OIDC) is still served: those are handed to kubernetes-asyncio's
loader, imported then and only then (:func:`_plugin_connection`).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ranktable.launch.kubeapi import tls_context
from ranktable.launch.kubeconfig import ApiConfigError, ClientConfig, PluginUserError, load_client_config

__all__ = ["ApiConfigError", "Connection", "connection_of", "load"]

Authorization = Callable[[], Awaitable["str | None"]]


@dataclass(frozen=True)
class Connection:
    """One API server and this process's credentials for it."""

    server: str
    """``https://host:port``: an IPv6 host bracketed, no trailing slash."""
    ssl: ssl.SSLContext | None
    """None for a plain-HTTP server."""
    authorization: Authorization
    """The ``Authorization`` header's value for the next request, or None."""
    source: str
    """Where it came from, for the start-up log line."""


def connection_of(config: ClientConfig) -> Connection:
    """The connection of the launcher's :class:`~ranktable.launch.kubeconfig.ClientConfig`."""
    context = tls_context(config) if config.tls else None

    async def authorization() -> str | None:
        token = config.bearer()
        return f"Bearer {token}" if token else None

    scheme = "https" if config.tls else "http"
    return Connection(
        server=f"{scheme}://{config.authority}", ssl=context, authorization=authorization, source=config.where
    )


async def _plugin_connection(plugin: PluginUserError) -> Connection:
    """A user with an ``exec`` plugin or ``auth-provider``: kubernetes-asyncio's loader runs it."""
    from kubernetes_asyncio import config as kube_config  # only for these users: it imports the generated client
    from kubernetes_asyncio.client import Configuration

    cfg = Configuration()
    await kube_config.load_kube_config(
        config_file=plugin.path, context=plugin.context or None, client_configuration=cfg
    )
    context = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    if cfg.cert_file:
        context.load_cert_chain(cfg.cert_file, keyfile=cfg.key_file)
    if not cfg.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE

    async def authorization() -> str | None:
        bearer = (await cfg.auth_settings()).get("BearerToken")
        return str(bearer["value"]) if bearer else None

    return Connection(
        server=str(cfg.host).rstrip("/"),
        ssl=context,
        authorization=authorization,
        source=f"kubeconfig {plugin.path} (credentials from its plugin, by kubernetes-asyncio's loader)",
    )


async def load(kubeconfig: str | None) -> Connection:
    """The daemon's connection by the documented order of sources; :class:`ApiConfigError` says what is wrong."""
    try:
        config = await asyncio.to_thread(load_client_config, kubeconfig)
    except PluginUserError as plugin:
        return await _plugin_connection(plugin)
    return connection_of(config)
