"""What the agent needs from the Kubernetes API, as a protocol.

The agent decides and writes, but it does not own a client: the daemon
(:mod:`ringcontroller`) passes in an object with these methods, so the layers
stay one-way and the agent's logic runs in unit tests on plain data.
Implementations map HTTP failures onto the exceptions below; any other
exception means "retry later" to the caller.
"""

from __future__ import annotations

from typing import Any, Protocol

Json = dict[str, Any]


class ApiError(Exception):
    """An API call failed; ``status`` is the HTTP code (0: no response)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status


class Conflict(ApiError):
    """409: the object changed since the resourceVersion we wrote against, or
    (on create) it already exists."""


class NotFound(ApiError):
    """404: the object does not exist."""


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
