"""The one-file launcher's self-registration, sent before the rest of the launcher is loaded.

With ``--register`` (or ``$RING_REGISTER``) the launcher's PATCH of its own
pod (:mod:`ranktable.registration`) is what the controller waits for, so
the time from process start to that PATCH is the job's discovery overhead.
Most of it used to be imports: ``dataclasses`` (and
``inspect``), the spec and framework modules, none of which the PATCH
needs. Eight launchers starting
at once on a two-core node pay that eight times over.

So :func:`ranktable.launch.pyzmain.run` calls :func:`start` first. It reads the
command line as ``main`` will (:func:`ranktable.launch.launchopts.parsed_quietly`),
loads the client configuration (:mod:`ranktable.launch.kubeconfig`), opens the TLS
connection and writes the PATCH (:meth:`ranktable.launch.kubeapi.KubeClient.send_first`),
all on ``os``, ``http.client`` (with ``ssl`` and ``socket``), ``json`` and ``ipaddress``, and returns
an :class:`Early` without waiting for the answer. The launcher then loads
itself while the API server works; :func:`ranktable.launch.launcher.main` reads the
answer (:meth:`Early.answer`), says what it said before (registered, refused
once, failed), and lists and watches the spec ConfigMap on the same
connection.

:func:`start` sends nothing, and ``main`` registers the ordinary way, when
anything is out of the plain case: a command line on which ``main`` would
stop (``--help``, a usage error), no
``--from-api``, no registration asked for, no namespace or ConfigMap name,
no ``$POD_IP``, a configuration or connection problem. ``main`` then meets
the same condition and reports it with the message and exit code it always
had. The console script ``ring-launch`` does not use this module.
"""

from __future__ import annotations

import os
import time

from ranktable.launch import launchopts
from ranktable.launch.kubeapi import CONNECT_TIMEOUT, KubeClient
from ranktable.launch.kubeconfig import ApiConfigError, load_client_config
from ranktable.podenv import POD_IP_ENV, pod_ips, pod_name, pod_namespace
from ranktable.registration import pod_path, registration_patch, started_text


class Early:
    """A registration PATCH on the wire: for whom it was sent, and the client that sent it.

    Whoever takes it must call :meth:`answer` (or ``client.close()``)
    before the client's next request.
    """

    def __init__(self, *, namespace: str, pod: str, kubeconfig: str | None, ip: str, client: KubeClient) -> None:
        self.namespace = namespace
        self.pod = pod
        self.kubeconfig = kubeconfig
        self.ip = ip
        self.client = client

    def answer(self) -> None:
        """Wait for the API server's answer; raises as :meth:`ranktable.launch.apiwatch.ApiSource.register` does."""
        self.client.answer_first(timeout=CONNECT_TIMEOUT)


def start(argv: list[str], *, started: float | None = None) -> Early | None:
    """Send this launcher's registration now if ``argv`` asks for it and nothing stands in the way (see above)."""
    args = launchopts.parsed_quietly(argv)  # what main will read, or None where main stops first
    if args is None or args.install is not None or not args.from_api:
        return None
    if not launchopts.register_requested(args.register):
        return None
    namespace = pod_namespace(args.namespace or None)
    configmap = args.configmap or os.environ.get(launchopts.CONFIGMAP_ENV) or os.environ.get(launchopts.JOB_ENV)
    ip = os.environ.get(POD_IP_ENV, "")
    if not namespace or not configmap or not ip:
        return None
    pod = pod_name(args.pod or None)
    kubeconfig = args.kubeconfig or None
    try:
        body = registration_patch(
            ip=ip, started=started_text(time.time() if started is None else started), ips=pod_ips()
        )
        path = pod_path(namespace, pod)
        client = KubeClient(load_client_config(kubeconfig), connect_timeout=CONNECT_TIMEOUT)
    except (ApiConfigError, ValueError):
        return None
    try:
        client.send_first(path, body)
    except (ApiConfigError, OSError, ValueError):
        client.close()
        return None
    return Early(namespace=namespace, pod=pod, kubeconfig=kubeconfig, ip=ip, client=client)
