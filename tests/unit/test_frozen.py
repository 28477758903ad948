"""ranktable.frozen: the launcher's frozen records behave as the frozen dataclasses they replaced."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys

import pytest

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


def test_the_module_loads_neither_dataclasses_nor_typing() -> None:
    code = (
        "import sys; import ranktable.frozen, ranktable.clusterspec; "
        "print(sorted({'dataclasses', 'typing', 'inspect'} & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(REPO)!r}); {code}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert out.strip() == "[]"
