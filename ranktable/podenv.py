"""Who this pod is, from the downward API: one place for the variables' names.

Both sides read it: the launcher (its member identity, the namespace of its
ConfigMap) and the daemon (its Event ``reportingInstance``, its Lease
identity, the Lease's namespace). The manifests set ``POD_NAME``,
``POD_NAMESPACE``, ``POD_UID`` and ``POD_IP`` through ``fieldRef``; outside a
pod the fallbacks below apply. Pure stdlib, so it lives in the lowest layer.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Final

POD_NAME_ENV: Final = "POD_NAME"
POD_NAMESPACE_ENV: Final = "POD_NAMESPACE"
POD_UID_ENV: Final = "POD_UID"
POD_IP_ENV: Final = "POD_IP"
#: ``status.podIPs`` through the downward API: the pod's IPs, comma-separated, primary first.
POD_IPS_ENV: Final = "POD_IPS"
#: The namespace of the pod's service account, mounted in every pod that has one.
SERVICE_ACCOUNT_NAMESPACE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def pod_name(explicit: str | None = None) -> str:
    """``explicit``, else ``$POD_NAME``, else ``$HOSTNAME``, else the host name (empty values skipped)."""
    name = explicit or os.environ.get(POD_NAME_ENV) or os.environ.get("HOSTNAME")
    if name:
        return name
    import socket  # only without $POD_NAME and $HOSTNAME (the launcher's TLS needs no socket module)

    return socket.gethostname()


def pod_namespace(explicit: str | None = None) -> str | None:
    """``explicit``, else ``$POD_NAMESPACE``, else the service account's namespace file, else None."""
    if explicit:
        return explicit
    if os.environ.get(POD_NAMESPACE_ENV):
        return os.environ[POD_NAMESPACE_ENV]
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def pod_ips() -> tuple[str, ...]:
    """``$POD_IPS`` split at commas (empty entries dropped): every IP of the pod, or () when unset."""
    return tuple(ip.strip() for ip in os.environ.get(POD_IPS_ENV, "").split(",") if ip.strip())
