"""The plugin's reads: GET requests through the sync client, one error tree for users.

Every request is a GET (one object, or every page of a list), so the plugin
works with a read-only role (docs/jobs.md, "Why is my job waiting?"). Failures
become :class:`ReadError` with a message fit to print: an unreachable API
server, a missing kubeconfig, a forbidden list (naming the verb, resource
and namespace the role lacks); 404 is not an error but ``None`` (``get``) or
"kind not served" (``list``), because a cluster without, say, Volcano simply
has no Volcano Jobs.
"""

from __future__ import annotations

import json
import os
from typing import Any, Final
from urllib.parse import urlencode

from ranktable.podenv import pod_namespace
from ringcontroller.resource import CONFIGMAPS, EVENTS, PODS, Resource

__all__ = ["CONFIGMAPS", "EVENTS", "PODS", "NotServed", "ReadError", "Reader", "Resource"]

Json = dict[str, Any]

#: Seconds per request (connect and read).
REQUEST_TIMEOUT: Final = 15.0
#: Items per page of a list.
PAGE: Final = 500


class ReadError(Exception):
    """A read failed; the message says what and why, for the user (no traceback)."""


class NotServed(ReadError):
    """The API server does not serve the resource (its CRD is not installed)."""


class Reader:
    """GETs against the API server of a kubeconfig context.

    ``kubeconfig`` None: ``$KUBECONFIG`` or ``~/.kube/config`` (the client's
    own rules), else the in-cluster service account. ``namespace`` is the
    context's namespace (``default`` if it names none), kubectl's default
    for ``-n``.
    """

    def __init__(self, *, kubeconfig: str | None = None, context: str | None = None, timeout: float = REQUEST_TIMEOUT):
        try:
            from kubernetes import client, config
        except ImportError as err:
            raise ReadError(f"the kubernetes client is not installed ({err}): pip install ring-controller") from None
        self._timeout = timeout
        self.namespace = "default"
        try:
            if kubeconfig is None and not _kubeconfig_exists() and os.environ.get("KUBERNETES_SERVICE_HOST"):
                config.load_incluster_config()  # type: ignore[no-untyped-call]
                self._api = client.ApiClient()
                self.namespace = pod_namespace() or "default"
            else:
                self._api = config.new_client_from_config(config_file=kubeconfig, context=context)  # type: ignore[no-untyped-call]
                contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
                chosen = next((c for c in contexts if c.get("name") == context), active) if context else active
                self.namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
        except Exception as err:  # noqa: BLE001 - config errors come in many types; all are the user's to fix
            where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise ReadError(f"cannot load the kubeconfig ({where}): {err}") from None
        self.server = str(self._api.configuration.host)

    def close(self) -> None:
        self._api.close()  # type: ignore[no-untyped-call]

    def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Json | None:
        """The object, or None when it does not exist."""
        try:
            return self._request(resource.path(namespace, name), [])
        except NotServed:
            return None

    def items(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Json]:
        """Every item (all pages); ``namespace`` None: all namespaces. Raises NotServed on 404."""
        query: list[tuple[str, str]] = [("limit", str(PAGE))]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        items: list[Json] = []
        token = ""
        while True:
            body = self._request(resource.path(namespace), query + ([("continue", token)] if token else []))
            items.extend(body.get("items") or [])
            token = str((body.get("metadata") or {}).get("continue") or "")
            if not token:
                return items

    def _request(self, path: str, query: list[tuple[str, str]]) -> Json:
        """One GET through the client's REST layer (its TLS, proxy and auth settings, exec plugins included).

        The generated API classes changed their calling convention across
        the ``kubernetes`` releases setup.cfg allows; the REST layer's
        ``request(method, url, headers=, _request_timeout=)`` did not.
        """
        from kubernetes.client.exceptions import ApiException

        configuration = self._api.configuration
        headers = {"Accept": "application/json", "User-Agent": "kubectl-ring"}
        for setting in configuration.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[str(setting["key"])] = str(setting["value"])
        url = f"{configuration.host}{path}" + (f"?{urlencode(query)}" if query else "")
        try:
            response = self._api.rest_client.request(  # type: ignore[no-untyped-call]
                "GET", url, headers=headers, _request_timeout=self._timeout
            )
            status = int(response.status)
            data = response.data if response.data is not None else response.read()
        except ApiException as err:  # older clients raise on any status but 2xx
            status, data = int(err.status or 0), err.body
            if not status:
                raise ReadError(f"cannot reach the API server at {self.server}: {err.reason}") from None
        except Exception as err:  # noqa: BLE001 - urllib3's connection errors, TLS, timeouts
            raise ReadError(f"cannot reach the API server at {self.server}: {_reason(err)}") from None
        if status == 404:
            raise NotServed(f"{path}: not found")
        if not 200 <= status < 300:
            raise ReadError(_api_message(status, data, path))
        try:
            body = json.loads(data)
        except (TypeError, ValueError):
            raise ReadError(f"GET {path}: the API server answered {status} without JSON") from None
        if not isinstance(body, dict):
            raise ReadError(f"GET {path}: the API server answered {status} with a JSON {type(body).__name__}")
        return body


def _kubeconfig_exists() -> bool:
    if os.environ.get("KUBECONFIG"):
        return True
    return os.path.exists(os.path.expanduser("~/.kube/config"))


def _api_message(status: int, body: Any, path: str) -> str:
    """The API server's own message (its Status object), else the HTTP status."""
    try:
        message = str(json.loads(body).get("message") or "")
    except (TypeError, ValueError, AttributeError):
        message = ""
    if status == 401:
        return f"the API server refused the credentials (401 Unauthorized): {message or path}"
    if status == 403:
        return f"forbidden (403): {message or path}; the plugin needs get and list (see docs/jobs.md)"
    return f"GET {path}: HTTP {status}: {message or 'no message'}"


def _reason(err: BaseException) -> str:
    """The innermost cause of a connection error, without urllib3's object reprs."""
    inner: BaseException = err
    reason = getattr(err, "reason", None)
    if isinstance(reason, BaseException):
        inner = reason
    text = str(inner)
    if ": " in text and "object at 0x" in text:
        text = text.rsplit(": ", 1)[-1]
    return text or type(inner).__name__
