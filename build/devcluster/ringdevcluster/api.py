"""The Kubernetes API and health endpoints, spoken with the standard library.

``urllib`` + ``ssl`` with the admin client certificate: the tool starts fast
and needs no client package. Loopback traffic never goes through an
``HTTP(S)_PROXY`` from the environment (:func:`no_proxy_opener`).
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from ringdevcluster.errors import ClusterError

__all__ = ["FIELD_MANAGER", "Api", "ApiError", "condition_true", "no_proxy_opener", "probe"]

#: The field manager of every server-side apply of the tool.
FIELD_MANAGER = "ring-devcluster"

Json = dict[str, Any]


def no_proxy_opener(context: ssl.SSLContext | None) -> urllib.request.OpenerDirector:
    """An opener that ignores proxy settings (and uses ``context`` for HTTPS, if given)."""
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)


def probe(opener: urllib.request.OpenerDirector, url: str, *, timeout: float = 2.0) -> tuple[bool, str]:
    """GET ``url``: (True, body) on 200, (False, reason) otherwise."""
    try:
        with opener.open(url, timeout=timeout) as resp:
            return resp.status == 200, resp.read(400).decode(errors="replace").strip()
    except urllib.error.HTTPError as err:
        return False, f"HTTP {err.code}: {err.read(400).decode(errors='replace').strip()}"
    except (OSError, urllib.error.URLError) as err:
        return False, str(getattr(err, "reason", err))


class ApiError(ClusterError):
    """A Kubernetes API request failed with an HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class Api:
    """A minimal JSON client for the admin user (certificate auth)."""

    def __init__(self, *, server: str, ca: Path, cert: Path, key: Path) -> None:
        context = ssl.create_default_context(cafile=str(ca))
        context.load_cert_chain(str(cert), str(key))
        self.server = server
        self.opener = no_proxy_opener(context)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        timeout: float = 10.0,
    ) -> Any:
        """Send ``body`` (JSON) to ``path``; the decoded response, or None if empty. :class:`ApiError` on a status."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with self.opener.open(req, timeout=timeout) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as err:
            raise ApiError(err.code, err.read(2000).decode(errors="replace")) from None
        return json.loads(payload) if payload else None

    def get(self, path: str) -> Json | None:
        """The object at ``path``, or None if it does not exist (404); other failures raise."""
        try:
            found: Json | None = self.request("GET", path)
        except ApiError as err:
            if err.status == 404:
                return None
            raise
        return found

    def apply(self, path: str, obj: dict[str, Any]) -> Any:
        """Server-side apply ``obj`` at ``path`` (the object's own URL)."""
        query = urllib.parse.urlencode({"fieldManager": FIELD_MANAGER, "force": "true"})
        return self.request("PATCH", f"{path}?{query}", obj, content_type="application/apply-patch+yaml")


def condition_true(obj: Json, kind: str) -> bool:
    """True if ``obj``'s status has condition ``kind`` with status ``"True"``."""
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in obj.get("status", {}).get("conditions") or []
    )
