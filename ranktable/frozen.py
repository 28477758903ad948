"""Frozen records: what ``@dataclass(frozen=True)`` gives the launcher's classes, without importing ``dataclasses``.

Why this exists: every training container starts the launcher, and the
launcher's start is part of the job's discovery time. ``dataclasses``
loads ``inspect`` (and ``ast``, ``dis``, ``tokenize``...) and decorating
the launcher's classes with it costs more again: together more than the
10 ms of wall time per launcher start the rule in CONTRIBUTING.md asks of a
stand-in (the figures: docs/performance.md, "Stand-ins for
standard-library modules"). :func:`record` does the part those classes use.
``tests/unit/test_frozen.py`` checks it against ``dataclasses`` on
generated classes.

``@record`` on a class whose fields are annotated in its body (with
``from __future__ import annotations``: only the names are read) adds

* ``__init__`` taking the fields in order, positionally or by keyword; a
  field with a value in the class body (or ``field(default=...)``) is
  optional, and fields after it must be too;
* ``__eq__`` and ``__hash__`` over the fields, in order, but those declared
  ``field(compare=False)``; a record equals only a record of its own class;
* ``__repr__`` over every field;
* ``__setattr__``/``__delattr__`` that raise :class:`FrozenInstanceError`
  (an ``AttributeError``, as ``dataclasses`` raises).

:func:`replace` and :func:`fields` are ``dataclasses.replace`` and the
names of ``dataclasses.fields``. Not supported (refused when decorating):
inheritance between records, ``ClassVar`` fields, mutable defaults. Type
checkers see these classes as frozen dataclasses (PEP 681's
``dataclass_transform``). Python 3.9 syntax; standard library only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, Callable, TypeVar, dataclass_transform

    T = TypeVar("T")

__all__ = ["FrozenInstanceError", "field", "fields", "record", "replace"]

#: The attribute a record class keeps its field table in: ((name, compared, default or _NO_DEFAULT), ...).
_FIELDS = "__record_fields__"
_NO_DEFAULT = object()


class FrozenInstanceError(AttributeError):
    """Assignment to a field of a record (records are immutable)."""


class _Field:
    __slots__ = ("compare", "default")

    def __init__(self, default: object, compare: bool) -> None:
        self.default = default
        self.compare = compare


def field(*, default: Any = _NO_DEFAULT, compare: bool = True) -> Any:
    """A field's options in the class body: ``x: str = field(default="", compare=False)``."""
    return _Field(default, compare)


def _frozen_setattr(self: object, name: str, value: object) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r} of {type(self).__name__}")


def _frozen_delattr(self: object, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r} of {type(self).__name__}")


def _record(cls: type) -> type:
    for base in cls.__mro__[1:]:
        if _FIELDS in base.__dict__:
            raise TypeError(f"{cls.__name__}: a record cannot extend another record ({base.__name__})")
    table = []
    seen_default = False
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        kind = str(annotation).split("[", 1)[0].strip()
        if kind in ("ClassVar", "typing.ClassVar", "Final", "typing.Final"):
            raise TypeError(f"{cls.__name__}.{name}: ClassVar and Final are not fields of a record")
        value = cls.__dict__.get(name, _NO_DEFAULT)
        compare = True
        if isinstance(value, _Field):
            options = value
            value, compare = options.default, options.compare
            if value is _NO_DEFAULT:
                delattr(cls, name)
        if value is not _NO_DEFAULT:
            if isinstance(value, (list, dict, set)):
                raise TypeError(f"{cls.__name__}.{name}: a mutable default would be shared by every instance")
            seen_default = True
            setattr(cls, name, value)  # the class attribute is the default, as with dataclasses
        elif seen_default:
            raise TypeError(f"{cls.__name__}.{name}: a field without a default follows one with a default")
        table.append((name, compare, value))
    names = [name for name, _, _ in table]
    compared = [name for name, compare, _ in table if compare]
    # One small function per class, compiled once: a generated __init__ is as fast per
    # instance as dataclasses' (the controller builds 16,384-member specs with these).
    defaults = {f"_d_{name}": value for name, _, value in table if value is not _NO_DEFAULT}
    params = ", ".join(f"{name}=_d_{name}" if f"_d_{name}" in defaults else name for name in names)
    body = "".join(f"    _set(self, {name!r}, {name})\n" for name in names) or "    pass\n"
    key = "(" + "".join(f"self.{name}, " for name in compared) + ")"
    source = (
        f"def __init__(self, {params}):\n{body}"
        f"def _key(self):\n    return {key}\n"
        "def __eq__(self, other):\n"
        "    if other.__class__ is not self.__class__:\n        return NotImplemented\n"
        "    return _key(self) == _key(other)\n"
        "def __hash__(self):\n    return hash(_key(self))\n"
    )
    scope: dict[str, Any] = {"_set": object.__setattr__, **defaults}
    exec(compile(source, f"<record {cls.__name__}>", "exec"), scope)
    for generated in ("__init__", "__eq__", "__hash__"):
        scope[generated].__qualname__ = f"{cls.__qualname__}.{generated}"
        scope[generated].__module__ = cls.__module__
    init = scope["__init__"]

    def __repr__(self: object) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{type(self).__qualname__}({inner})"

    for name, function in (
        ("__init__", init),
        ("__eq__", scope["__eq__"]),
        ("__hash__", scope["__hash__"]),
        ("__repr__", __repr__),
        ("__setattr__", _frozen_setattr),
        ("__delattr__", _frozen_delattr),
    ):
        setattr(cls, name, function)
    setattr(cls, _FIELDS, tuple(table))
    return cls


if TYPE_CHECKING:

    @dataclass_transform(frozen_default=True, eq_default=True, field_specifiers=(field,))
    def record(cls: type[T]) -> type[T]: ...

else:

    def record(cls):
        """Make ``cls`` a frozen record (see the module docstring)."""
        return _record(cls)


def fields(obj_or_class: object) -> tuple[str, ...]:
    """The field names of a record or record class, in order."""
    cls = obj_or_class if isinstance(obj_or_class, type) else type(obj_or_class)
    table = cls.__dict__.get(_FIELDS)
    if table is None:
        raise TypeError(f"{cls.__name__} is not a record")
    return tuple(name for name, _, _ in table)


def replace(obj: T, **changes: Any) -> T:
    """A copy of record ``obj`` with ``changes`` (field name -> value); TypeError for a name that is no field."""
    names = fields(obj)
    unknown = sorted(set(changes) - set(names))
    if unknown:
        raise TypeError(f"{type(obj).__name__} has no field {', '.join(unknown)}")
    build: Callable[..., T] = type(obj)
    return build(**{name: changes[name] if name in changes else getattr(obj, name) for name in names})
