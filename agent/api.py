"""What the agent needs from the Kubernetes API, as a protocol.

The agent decides and writes, but it does not own a client: the daemon
(:mod:`ringcontroller`) passes in an object with these methods, so the layers
stay one-way and the agent's logic runs in unit tests on plain data.
Implementations map HTTP failures onto the exceptions below (the daemon's
client, :mod:`ringcontroller.kube`, raises them for every request it makes);
any other exception means "retry later" to the caller.

The error tree lives here, not in the daemon, because both layers need it:
the agent catches :class:`Conflict` and :class:`NotFound`, the daemon's
client raises them, and the agent may not import the daemon.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

Json = dict[str, Any]


class ApiError(Exception):
    """The API server answered with a failure ``Status`` (HTTP, or a watch ERROR event).

    The one error tree of every API call the product makes: ``status`` is the
    HTTP code (the Status's ``code``), ``reason`` its machine-readable reason
    (``NotFound``, ``AlreadyExists``, ``Conflict``, ``Expired``, ``Forbidden``,
    ...), ``message`` the human-readable text. Build one with :meth:`of` (or
    :meth:`from_status`, :meth:`from_body`), which picks the subclass, so
    callers catch :class:`Conflict`, :class:`NotFound` or :class:`Gone` by
    type. Any exception other than these means no answer arrived (a transport
    failure): retry later.
    """

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @staticmethod
    def of(status: int, reason: str, message: str) -> ApiError:
        """The error for an answer: :class:`NotFound` (404), :class:`Conflict` (409),
        :class:`Gone` (410, or reason ``Expired``/``Gone``), else :class:`ApiError`."""
        if status == 410 or reason in ("Expired", "Gone"):
            return Gone(status, reason, message)
        if status == 404:
            return NotFound(status, reason, message)
        if status == 409:
            return Conflict(status, reason, message)
        return ApiError(status, reason, message)

    @staticmethod
    def from_status(status: Json, *, http_status: int = 0) -> ApiError:
        """From a ``metav1.Status`` object (its ``code`` falls back to ``http_status``)."""
        code = status.get("code")
        return ApiError.of(
            code if isinstance(code, int) and code else http_status,
            str(status.get("reason") or ""),
            str(status.get("message") or ""),
        )

    @staticmethod
    def from_body(http_status: int, reason: str, body: bytes) -> ApiError:
        """From a failed response: its ``Status`` body, else the HTTP status and ``reason``."""
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("kind") == "Status":
            return ApiError.from_status(parsed, http_status=http_status)
        return ApiError.of(http_status, reason, body[:512].decode("utf-8", "replace"))


class Conflict(ApiError):
    """409: the object changed since the resourceVersion we wrote against, or
    (on create) it already exists."""


class NotFound(ApiError):
    """404: the object does not exist."""


class Gone(ApiError):
    """410 Gone / ``Expired``: the resourceVersion or continue token is too old
    (compacted away); list again."""


class NotLeader(Exception):
    """A write refused before it was sent: this process no longer holds the leader Lease
    (see ``LeaderElector.may_write``). The sync fails and is retried, by whichever
    process leads by then."""


class KubeAPI(Protocol):
    """ConfigMap and Event verbs the agent uses.

    Each returns the object the server returned (raw JSON). Calls are made only
    from inside a sync, never from event handlers.
    """

    async def get_configmap(self, namespace: str, name: str) -> Json | None:
        """The ConfigMap, or None if it does not exist."""
        ...

    async def create_configmap(self, namespace: str, body: Json) -> Json:
        """Create; raises Conflict if the name is taken."""
        ...

    async def replace_configmap(self, namespace: str, name: str, body: Json) -> Json:
        """Replace at ``body.metadata.resourceVersion``; raises Conflict or NotFound."""
        ...

    async def emit_event(self, *, involved: Json, event_type: str, reason: str, message: str) -> None:
        """Record an Event on ``involved`` (an ObjectReference); best effort."""
        ...

    async def annotate_pod(self, namespace: str, name: str, *, uid: str, annotations: dict[str, str]) -> None:
        """Merge ``annotations`` into pod ``name``, only if it still has ``uid``.

        Raises NotFound (gone), Conflict (the name now belongs to another
        pod) or ApiError (403 when the cluster forbids it).
        """
        ...
