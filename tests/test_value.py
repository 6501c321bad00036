"""kcompact.value's ``@frozen`` and ``@mutable`` against the ``dataclasses`` classes they stand for.

Each shape is declared twice, once with the standard decorator and once with ours, and every test asks the same of
both: what a caller sees (construction, defaults, errors, equality, hashing, repr, pickling, ``replace``,
``asdict``, ``match``) must not tell them apart.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import threading
from dataclasses import FrozenInstanceError, InitVar, asdict, field, fields, replace
from typing import Any, ClassVar

import pytest

from kcompact.value import frozen, mutable


def _shapes(tag: str, decorate: Any, standard: Any) -> dict[str, tuple[type[Any], type[Any]]]:
    """The same class bodies under both decorators: ``{name: (ours, standard)}``, each class a global of this
    module (named ``<tag>_<ours|standard>_<Class>``) so that pickle finds it."""

    def both(body: Any) -> tuple[type[Any], type[Any]]:
        made = []
        for side, decorator in (("ours", decorate), ("standard", standard)):
            cls = decorator(body())
            cls.__qualname__ = f"{tag}_{side}_{cls.__name__}"
            globals()[cls.__qualname__] = cls
            made.append(cls)
        return made[0], made[1]

    def plain() -> type[Any]:
        class Offsets:
            base_offset: int
            last_offset: int
            name: str = "orders-0"
            KIND: ClassVar[str] = "segment"

        return Offsets

    def defaults() -> type[Any]:
        class Defaults:
            key: bytes | None
            headers: list[int] = field(default_factory=list)
            note: str = field(default="none", repr=False, compare=False)
            position: int = field(default=0, hash=False)
            size_in_bytes: int = field(default=7, init=False)
            epoch: int = field(default=-1, kw_only=True)
            tags: dict[str, int] = field(default_factory=dict, kw_only=True)

        return Defaults

    def post_init() -> type[Any]:
        class Checked:
            offset: int

            def __post_init__(self) -> None:
                if self.offset < 0:
                    raise ValueError(f"negative offset {self.offset}")

        return Checked

    def own_methods() -> type[Any]:
        class Own:
            a: int
            b: int

            def __eq__(self, other: object) -> bool:
                return type(other) is type(self) and self.a == other.a

            def __hash__(self) -> int:
                return hash(self.a)

            def __repr__(self) -> str:
                return f"Own<{self.a}>"

        return Own

    def empty() -> type[Any]:
        class Nothing:
            pass

        return Nothing

    return {"plain": both(plain), "defaults": both(defaults), "post_init": both(post_init),
            "own_methods": both(own_methods), "empty": both(empty)}


FROZEN = _shapes("frozen", frozen, dataclasses.dataclass(frozen=True, slots=True))
MUTABLE = _shapes("mutable", mutable, dataclasses.dataclass(slots=True))
ARGUMENTS = {"plain": ((5, 9), {}), "defaults": ((b"k",), {"epoch": 3}), "post_init": ((4,), {}),
             "own_methods": ((1, 2), {}), "empty": ((), {})}


def _pairs(shapes: dict[str, tuple[type[Any], type[Any]]]) -> list[Any]:
    return [pytest.param(*classes, *ARGUMENTS[name], id=name) for name, classes in shapes.items()]


def _state(instance: Any) -> Any:
    """What a caller can see of an instance, with the class's name left out."""
    return (repr(instance).split("(", 1)[-1], [(f.name, getattr(instance, f.name)) for f in fields(instance)])


@pytest.mark.parametrize(("ours", "standard", "args", "kwargs"), _pairs(FROZEN) + _pairs(MUTABLE))
def test_an_instance_reads_as_the_standard_dataclass_reads(ours: type[Any], standard: type[Any],
                                                           args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    mine, theirs = ours(*args, **kwargs), standard(*args, **kwargs)
    assert _state(mine) == _state(theirs)
    assert repr(mine).replace(ours.__qualname__, "X") == repr(theirs).replace(standard.__qualname__, "X")
    assert dataclasses.is_dataclass(mine) and not isinstance(mine, type)
    assert [f.name for f in fields(mine)] == [f.name for f in fields(theirs)]
    assert asdict(mine) == asdict(theirs)
    assert ours.__match_args__ == standard.__match_args__
    assert ours.__slots__ == standard.__slots__
    assert not hasattr(mine, "__dict__")
    assert str(inspect.signature(ours)) == str(inspect.signature(standard))  # once the first call compiled it
    assert mine == ours(*args, **kwargs) and mine != theirs  # another class is never equal, as in dataclasses
    assert _state(pickle.loads(pickle.dumps(mine))) == _state(mine)
    assert pickle.loads(pickle.dumps(mine)) == mine
    assert copy.deepcopy(mine) == mine


@pytest.mark.parametrize(("ours", "standard", "args", "kwargs"), _pairs(FROZEN))
def test_frozen_refuses_assignment_and_hashes_by_its_fields(ours: type[Any], standard: type[Any],
                                                            args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    mine = ours(*args, **kwargs)
    for name in [f.name for f in fields(mine)] + ["elsewhere"]:
        with pytest.raises(FrozenInstanceError, match=f"cannot assign to field '{name}'"):
            setattr(mine, name, 1)
        with pytest.raises(FrozenInstanceError, match=f"cannot delete field '{name}'"):
            delattr(mine, name)
    if fields(mine) and ours.__name__ != "Defaults":  # Defaults holds a list: unhashable in both
        assert hash(mine) == hash(ours(*args, **kwargs))
        assert len({mine, ours(*args, **kwargs)}) == 1


def test_frozen_hashing_follows_compare_and_hash_as_dataclasses_does() -> None:
    @frozen
    class Entry:
        offset: int
        position: int = field(default=0, hash=False)
        note: str = field(default="", compare=False)

    assert hash(Entry(1, 2, "a")) == hash(Entry(1, 3, "b"))
    assert Entry(1, 2, "a") == Entry(1, 2, "b") != Entry(1, 3, "a")
    assert len({Entry(1, 2), Entry(1, 2), Entry(2, 2)}) == 2


@pytest.mark.parametrize(("ours", "standard", "args", "kwargs"), _pairs(MUTABLE))
def test_mutable_assigns_and_is_unhashable_unless_it_says_otherwise(ours: type[Any], standard: type[Any],
                                                                    args: tuple[Any, ...],
                                                                    kwargs: dict[str, Any]) -> None:
    mine, theirs = ours(*args, **kwargs), standard(*args, **kwargs)
    for instance in (mine, theirs):
        for f in fields(instance):
            setattr(instance, f.name, 11)
    assert _state(mine) == _state(theirs)
    if ours.__name__ == "Own":  # writes its own __hash__: kept, as dataclasses keeps it
        assert hash(mine) == hash(theirs)
    else:
        with pytest.raises(TypeError, match="unhashable"):
            hash(mine)
        with pytest.raises(TypeError, match="unhashable"):
            hash(theirs)


@pytest.mark.parametrize("decorate", [frozen, mutable], ids=["frozen", "mutable"])
def test_defaults_factories_and_errors_match(decorate: Any) -> None:
    ours, theirs = FROZEN["defaults"] if decorate is frozen else MUTABLE["defaults"]
    first, second = ours(b"a"), ours(b"a")
    assert first.headers == [] and first.headers is not second.headers  # a fresh list each time
    assert first.size_in_bytes == 7 and first.epoch == -1 and first.tags == {}
    assert _state(ours(b"a", [1], "n", 2, epoch=5)) == _state(theirs(b"a", [1], "n", 2, epoch=5))
    bad_calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((), {}), ((b"a", [], "n", 0, 9), {}), ((b"a",), {"size_in_bytes": 1}), ((b"a",), {"nope": 1})]
    for bad_args, bad_kwargs in bad_calls:
        with pytest.raises(TypeError) as mine:
            ours(*bad_args, **bad_kwargs)
        with pytest.raises(TypeError) as reference:
            theirs(*bad_args, **bad_kwargs)
        assert str(mine.value).split("__init__()")[-1] == str(reference.value).split("__init__()")[-1]
    checked = FROZEN["post_init"][0] if decorate is frozen else MUTABLE["post_init"][0]
    with pytest.raises(ValueError, match="negative offset -1"):
        checked(-1)


@frozen
class FrozenSegment:
    base_offset: int
    size_in_bytes: int = 0

    def __post_init__(self) -> None:
        if self.size_in_bytes < 0:
            raise ValueError("negative size")


@mutable
class MutableSegment:
    base_offset: int
    size_in_bytes: int = 0

    def __post_init__(self) -> None:
        if self.size_in_bytes < 0:
            raise ValueError("negative size")


@pytest.mark.parametrize("segment", [FrozenSegment, MutableSegment], ids=["frozen", "mutable"])
def test_replace_builds_a_new_instance_through_init(segment: type[FrozenSegment | MutableSegment]) -> None:
    original = segment(10, 5)
    moved = replace(original, size_in_bytes=6)
    assert (type(moved), moved.base_offset, moved.size_in_bytes, original.size_in_bytes) == (segment, 10, 6, 5)
    with pytest.raises(ValueError, match="negative size"):
        replace(original, size_in_bytes=-1)


def test_a_frozen_instance_matches_by_position() -> None:
    match FrozenSegment(10, 6):
        case FrozenSegment(10, size):
            assert size == 6
        case _:
            pytest.fail("no positional match by __match_args__")


def test_subclasses_add_fields_and_stay_frozen() -> None:
    @frozen
    class Base:
        offset: int

    @frozen
    class Child(Base):
        position: int = 0

    child = Child(3, 4)
    assert (child.offset, child.position, repr(child)) == (3, 4, "test_subclasses_add_fields_and_stay_frozen."
                                                                  "<locals>.Child(offset=3, position=4)")
    assert child != Base(3) and Base(3) == Base(3)
    with pytest.raises(FrozenInstanceError):
        child.offset = 1  # type: ignore[misc]


def test_frozen_and_mutable_do_not_mix_in_one_line_of_bases() -> None:
    @frozen
    class Still:
        a: int

    @mutable
    class Moving:
        a: int

    with pytest.raises(TypeError, match="cannot inherit a mutable dataclass from the frozen"):
        @mutable
        class Thawed(Still):  # type: ignore[misc]
            b: int = 0

    with pytest.raises(TypeError, match="cannot inherit a frozen dataclass from the mutable"):
        @frozen
        class Stiff(Moving):  # type: ignore[misc]
            b: int = 0


def test_init_var_is_refused_when_the_class_is_made() -> None:
    with pytest.raises(TypeError, match="InitVar fields \\(secret\\)"):
        @frozen
        class Hidden:
            a: int
            secret: InitVar[int]


def test_many_threads_making_the_first_instance_all_get_it_right() -> None:
    @frozen
    class Point:
        x: int
        y: int = 2

    made: list[Point] = []
    barrier = threading.Barrier(8)

    def build(x: int) -> None:
        barrier.wait()
        made.append(Point(x))

    threads = [threading.Thread(target=build, args=(x,)) for x in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted((p.x, p.y) for p in made) == [(x, 2) for x in range(8)]
