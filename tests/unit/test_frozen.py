"""ranktable.frozen: the launcher's frozen records behave as the frozen dataclasses they replaced."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ranktable import frozen
from ranktable.clusterspec import Device, Member
from ranktable.frozen import FrozenInstanceError, field, record
from tests.support.clients import REPO


@record
class Point:
    x: int
    y: int = 0
    label: str = field(default="", compare=False)


@record
class Other:
    x: int
    y: int = 0
    label: str = ""


def test_init_takes_fields_in_order_by_position_or_keyword_with_defaults() -> None:
    assert (Point(1).x, Point(1).y, Point(1).label) == (1, 0, "")
    p = Point(1, 2, "a")
    assert (p.x, p.y, p.label) == (1, 2, "a") and Point(y=2, x=1, label="a") == p
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'x'"):
        Point()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        Point(1, z=3)  # type: ignore[call-arg]


def test_equality_and_hash_follow_the_compared_fields_of_the_same_class_only() -> None:
    assert Point(1, 2, "a") == Point(1, 2, "b") and hash(Point(1, 2, "a")) == hash(Point(1, 2, "b"))
    assert Point(1, 2) != Point(1, 3) and Point(1, 2) != Point(2, 2)
    assert Point(1, 2) != Other(1, 2) and Point(1, 2) != (1, 2)
    assert len({Point(1, 2, "a"), Point(1, 2, "b"), Point(1, 3)}) == 2


def test_records_are_frozen() -> None:
    p = Point(1)
    with pytest.raises(FrozenInstanceError, match="cannot assign to field 'x' of Point"):
        p.x = 2  # type: ignore[misc]
    with pytest.raises(AttributeError, match="cannot delete field 'y' of Point"):
        del p.y  # type: ignore[misc]
    assert p.x == 1 and p.y == 0


def test_repr_names_every_field() -> None:
    assert repr(Point(1, 2, "a")) == "Point(x=1, y=2, label='a')"


def test_replace_and_fields() -> None:
    p = Point(1, 2, "a")
    assert frozen.replace(p, y=5) == Point(1, 5) and frozen.replace(p, y=5).label == "a"
    assert frozen.fields(Point) == ("x", "y", "label") == frozen.fields(p)
    with pytest.raises(TypeError, match="no field z"):
        frozen.replace(p, z=1)
    with pytest.raises(TypeError, match="not a record"):
        frozen.fields(object())


def test_copies_and_pickles_keep_the_values() -> None:
    m = Member(0, "worker", "worker", 0, "p", "u", "10.0.0.1", 1, "n", devices=(Device("0", "1.1.1.1", "7"),))
    for twin in (copy.copy(m), copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert twin == m and twin.devices[0].super_device_id == "7" and twin.address == "10.0.0.1:1"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("x: int = 0\n    y: int\n", "follows one with a default"),
        ("x: list = []\n", "mutable default"),
        ("x: ClassVar[int] = 0\n", "ClassVar"),
    ],
)
def test_what_a_record_cannot_be_is_refused_at_decoration(body: str, message: str) -> None:
    scope: dict[str, object] = {"record": record}
    with pytest.raises(TypeError, match=message):
        exec(f"from __future__ import annotations\n@record\nclass Bad:\n    {body}", scope)


def test_a_record_cannot_extend_another() -> None:
    with pytest.raises(TypeError, match="cannot extend"):

        @record
        class Child(Point):
            z: int = 0


def test_the_module_loads_no_dataclasses() -> None:
    code = (
        "import sys; import ranktable.frozen, ranktable.clusterspec; "
        "print(sorted({'dataclasses', 'inspect'} & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(REPO)!r}); {code}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert out.strip() == "[]"


# -- differential: generated record classes against dataclass(frozen=True) ---------------------------

values = st.integers(-3, 3) | st.text(max_size=3) | st.none() | st.tuples(st.integers(0, 2))


@st.composite
def class_shapes(draw: st.DrawFn) -> list[tuple[str, bool, object]]:
    """Fields of a class: (name, compared, default or NO), defaults only after the fields without one."""
    names = draw(st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), max_size=5, unique=True))
    required = draw(st.integers(0, len(names)))
    return [(name, draw(st.booleans()), NO if i < required else draw(values)) for i, name in enumerate(names)]


NO = object()


def both_classes(shape: list[tuple[str, bool, object]]) -> tuple[type, type]:
    """The same class body decorated by ``frozen.record`` and by ``dataclasses.dataclass(frozen=True)``."""
    made = []
    for decorate, make_field in (
        (record, frozen.field),
        (dataclasses.dataclass(frozen=True), dataclasses.field),
    ):
        body: dict[str, object] = {"__annotations__": {name: "object" for name, _, _ in shape}}
        for name, compared, default in shape:
            if not compared:
                body[name] = make_field(compare=False) if default is NO else make_field(default=default, compare=False)
            elif default is not NO:
                body[name] = default
        made.append(decorate(type("Shape", (), body)))  # type: ignore[operator]
    return made[0], made[1]


def outcome(call: Any) -> tuple[str, Any]:
    try:
        return "ok", call()
    except (TypeError, AttributeError) as err:
        return type(err).__name__, None


@settings(max_examples=60)
@given(
    shape=class_shapes(),
    args=st.lists(values, max_size=6),
    kwargs=st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), values, max_size=3),
    other=st.lists(values, max_size=6),
    changes=st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), values, max_size=2),
)
def test_records_behave_as_frozen_dataclasses(
    shape: list[tuple[str, bool, object]],
    args: list[object],
    kwargs: dict[str, object],
    other: list[object],
    changes: dict[str, object],
) -> None:
    mine, theirs = both_classes(shape)
    assert frozen.fields(mine) == tuple(f.name for f in dataclasses.fields(theirs))
    built = outcome(lambda: mine(*args, **kwargs))
    expected = outcome(lambda: theirs(*args, **kwargs))
    assert built[0] == expected[0], (shape, args, kwargs)  # both build, or both refuse with a TypeError
    if built[0] != "ok":
        return
    a, b = built[1], expected[1]
    assert repr(a) == repr(b)
    assert [getattr(a, name) for name, _, _ in shape] == [getattr(b, name) for name, _, _ in shape]
    # equality and hashing against a second instance (built from other values, or a copy)
    second = outcome(lambda: mine(*other)), outcome(lambda: theirs(*other))
    assert second[0][0] == second[1][0]
    a2, b2 = (second[0][1], second[1][1]) if second[0][0] == "ok" else (mine(*args, **kwargs), theirs(*args, **kwargs))
    assert (a == a2) == (b == b2) and (a != a2) == (b != b2)
    assert (hash(a) == hash(a2)) == (hash(b) == hash(b2)) or (a != a2)
    assert (a == b) is False and (b == a) is False  # a record equals only its own class
    for name, _, _ in shape:  # one field changed: equal (and the same hash) exactly when dataclasses says so
        a3, b3 = frozen.replace(a, **{name: ("changed",)}), dataclasses.replace(b, **{name: ("changed",)})
        assert (a == a3) == (b == b3) and ((hash(a) == hash(a3)) or (b != b3)), name
    # replace, and refusing what is no field
    replaced = outcome(lambda: frozen.replace(a, **changes)), outcome(lambda: dataclasses.replace(b, **changes))
    assert replaced[0][0] == replaced[1][0], changes
    if replaced[0][0] == "ok":
        assert repr(replaced[0][1]) == repr(replaced[1][1])
    # frozen: assignment and deletion of fields (and of other names) raise FrozenInstanceError
    for name in [*(n for n, _, _ in shape), "new_attr"]:
        with pytest.raises(FrozenInstanceError, match=f"cannot assign to field '{name}'"):
            setattr(a, name, 1)
        with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot assign to field '{name}'"):
            setattr(b, name, 1)
        with pytest.raises(FrozenInstanceError, match=f"cannot delete field '{name}'"):
            delattr(a, name)
        with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot delete field '{name}'"):
            delattr(b, name)
