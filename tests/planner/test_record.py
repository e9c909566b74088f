"""``@record`` (planner/record.py) behaves as ``@dataclass(frozen=True)``: equality, hashing, repr."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest

from csa_plan.planner.record import record


def twins(**options):
    """The same class body under @record and under @dataclass(frozen=True)."""
    def body():
        class Point:
            x: int
            y: tuple = ()
            note: str = field(default="", compare=False)
            secret: str = field(default="s", repr=False)
            tag: int = field(default=0, hash=False)
        return Point

    return record(body(), **options), dataclass(body(), frozen=True, **options)


@pytest.mark.parametrize("options", [{}, {"eq": False}, {"kw_only": True}])
def test_same_behaviour_as_a_frozen_dataclass(options):
    R, D = twins(**options)
    for args in ({"x": 1}, {"x": 1, "y": (2, [3]), "note": "n", "secret": "t", "tag": 4}):
        r, d, r2 = R(**args), D(**args), R(**args)
        assert repr(r) == repr(d)
        assert (r == r2) == (d == D(**args))
        assert (r == R(**{**args, "note": "other"})) == (d == D(**{**args, "note": "other"}))
        assert (r == R(**{**args, "x": 9})) == (d == D(**{**args, "x": 9}))
        assert (r.__eq__(d)) is (d.__eq__(r)) is NotImplemented if options.get("eq", True) else True
        if args.get("y", ()) == () or not isinstance(args["y"][1], list):
            assert (hash(r) == hash(R(**args))) == (hash(d) == hash(D(**args)))
            if options.get("eq", True):
                assert hash(r) == hash(d)  # the same tuple of hashed fields
        with pytest.raises(dataclasses.FrozenInstanceError):
            r.x = 2
        assert dataclasses.replace(r, x=5).x == 5 and dataclasses.asdict(r) == dataclasses.asdict(d)
        assert [f.name for f in dataclasses.fields(r)] == [f.name for f in dataclasses.fields(d)]


@record
class Pickled:
    a: int
    b: tuple = ()


def test_pickles_as_a_dataclass():  # sweep executors send records between processes
    assert pickle.loads(pickle.dumps(Pickled(1, (2,)))) == Pickled(1, (2,))


def test_unhashable_field_and_recursion_as_dataclass():
    R, D = twins()
    with pytest.raises(TypeError):
        hash(R(1, (2, [3])))
    with pytest.raises(TypeError):
        hash(D(1, (2, [3])))
    r, d = R(1, ([],)), D(1, ([],))
    r.y[0].append(r)
    d.y[0].append(d)
    assert repr(r) == repr(d) and "..." in repr(r)


def test_subclasses_and_own_methods():
    @record
    class Base:
        a: int

    @record
    class Child(Base):
        b: int = 0

    @dataclass(frozen=True)
    class DBase:
        a: int

    @dataclass(frozen=True)
    class DChild(DBase):
        b: int = 0

    assert repr(Child(1, 2)) == repr(DChild(1, 2)).replace("DChild", "Child")
    assert Child(1, 2) != Base(1) and Child(1, 2) == Child(1, 2) and hash(Child(1, 2)) == hash(DChild(1, 2))

    @record
    class Own:
        a: int

        def __repr__(self) -> str:
            return "own"

        def __eq__(self, other: object) -> bool:
            return True

    assert repr(Own(1)) == "own" and Own(1) == 3
    assert hash(Own(1)) == hash((1,))  # __eq__ without __hash__: hashed as dataclass(frozen=True) does


def test_refuses_options_it_does_not_carry():
    for options in ({"order": True}, {"frozen": False}, {"repr": False}, {"unsafe_hash": True}):
        with pytest.raises(TypeError):
            record(type("X", (), {"__annotations__": {"a": "int"}}), **options)
