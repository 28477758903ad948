"""One informer of a resource per watched namespace, read as one cache.

``--namespace`` may name several namespaces. A list or watch covers one
namespace or all of them, so watching a few means one :class:`Reflector` per
namespace; RBAC can then be a Role per namespace instead of a ClusterRole.
:class:`Scoped` holds those reflectors and routes each read to the one of the
key's namespace. With no namespace given it holds a single all-namespaces
reflector, exactly what the controller ran before namespaces could be listed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

from ringcontroller.reflector import Reflector

R = TypeVar("R")

__all__ = ["Scoped"]


class Scoped(Generic[R]):
    """Reflectors of one resource, by watched namespace (``None``: all namespaces)."""

    def __init__(self, make: Callable[[str | None], Reflector[R]], namespaces: Sequence[str] = ()) -> None:
        scopes: list[str | None] = list(dict.fromkeys(namespaces)) or [None]
        self.by_namespace: dict[str | None, Reflector[R]] = {ns: make(ns) for ns in scopes}

    def __iter__(self) -> Iterator[Reflector[R]]:
        return iter(self.by_namespace.values())

    def __len__(self) -> int:
        """The number of cached records, over every namespace."""
        return sum(len(r.store) for r in self)

    def _for(self, namespace: str) -> Reflector[R] | None:
        if None in self.by_namespace:
            return self.by_namespace[None]
        return self.by_namespace.get(namespace)

    def get(self, key: str) -> R | None:
        """The record of object key ``namespace/name``; None when absent or its namespace is not watched."""
        reflector = self._for(key.partition("/")[0])
        return reflector.store.get(key) if reflector else None

    def by_index(self, index: str, value: str, *, namespace: str) -> list[R]:
        """Records of ``namespace`` whose ``index`` holds ``value``."""
        reflector = self._for(namespace)
        return reflector.store.by_index(index, value) if reflector else []

    def list(self) -> list[R]:
        """Every cached record, namespace after namespace."""
        return [record for r in self for record in r.store.list()]
