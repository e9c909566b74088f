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


def shape_class(doc: str | None) -> type:
    """A fresh class with every kind of field (required, default, factory, ``init=False``) and a
    ``__post_init__``; with ``doc`` a docstring (a docstring-less record compiles its ``__init__``
    when it is defined, to document its signature)."""
    class Shape:
        a: int
        b: str = "b"
        c: list = field(default_factory=list)
        d: int = field(default=7, init=False)
        e: tuple = field(default_factory=tuple, init=False)

        def __post_init__(self) -> None:
            object.__setattr__(self, "seen", (self.a, self.b))

    Shape.__doc__ = doc
    return Shape


def test_init_and_frozen_guards_as_dataclass():
    """``__init__`` and the frozen ``__setattr__``/``__delattr__`` are written by ``record`` itself:
    the same signature, defaults, factories, ``init=False`` fields, ``__post_init__`` and errors."""
    import inspect

    def body():
        return shape_class(doc=None)

    for options in ({}, {"kw_only": True}, {"eq": False}):
        R, D = record(body(), **options), dataclass(body(), frozen=True, **options)
        assert str(inspect.signature(R)) == str(inspect.signature(D))
        assert R.__init__.__annotations__ == D.__init__.__annotations__
        assert repr(R.__init__.__defaults__) == repr(D.__init__.__defaults__)
        assert repr(R.__init__.__kwdefaults__) == repr(D.__init__.__kwdefaults__)
        assert R.__init__.__qualname__ == D.__init__.__qualname__.replace("Shape", "Shape")
        r, d = R(a=1, b="x"), D(a=1, b="x")
        assert repr(r) == repr(d) and r.seen == d.seen == (1, "x") and r.d == 7 and r.e == () and r.c == [] == d.c
        assert R(a=1).c is not R(a=1).c  # a fresh list per instance
        assert dataclasses.fields(R)[3].init is False and R.__dataclass_params__.frozen is True
        assert R.__dataclass_params__.init is True and R.__match_args__ == D.__match_args__
        for attempt in (lambda o: setattr(o, "a", 2), lambda o: setattr(o, "new", 1),
                        lambda o: delattr(o, "a")):
            with pytest.raises(dataclasses.FrozenInstanceError) as got_r:
                attempt(r)
            with pytest.raises(dataclasses.FrozenInstanceError) as got_d:
                attempt(d)
            assert str(got_r.value) == str(got_d.value)
        with pytest.raises(TypeError, match="missing 1 required"):
            R()

    for bad in ("b: int = 0\n    a: int",):  # the same error as dataclass for a default before a required field
        ns: dict = {}
        exec(f"class Bad:\n    {bad}", ns)
        with pytest.raises(TypeError, match="non-default argument 'a' follows default argument"):
            record(ns["Bad"])


def test_a_docstring_less_record_documents_its_signature_as_dataclass():
    R = record(type("P", (), {"__annotations__": {"x": "int"}, "__module__": __name__}))
    D = dataclass(type("P", (), {"__annotations__": {"x": "int"}, "__module__": __name__}), frozen=True)
    assert R.__doc__ == D.__doc__ == "P(x: 'int')"


def test_a_subclass_of_a_frozen_record_stays_checked():
    @record
    class Base:
        a: int

    with pytest.raises(TypeError, match="cannot inherit non-frozen dataclass from a frozen one"):
        @dataclass
        class Loose(Base):
            b: int = 0

    @dataclass(frozen=True)
    class Tight(Base):
        b: int = 0

    with pytest.raises(dataclasses.FrozenInstanceError):
        Tight(1).b = 3


def test_init_is_compiled_when_first_looked_up():
    """A record never built costs no compile; its first construction puts the real ``__init__`` in place."""
    @record
    class Lazy:
        a: int
        b: int = 2

    assert not callable(getattr(Lazy.__dict__["__init__"], "__code__", None))  # not compiled yet
    assert Lazy(1) == Lazy(1, 2) and Lazy.__dict__["__init__"].__code__.co_varnames[:3] == ("self", "a", "b")
    assert Lazy.__init__ is Lazy.__dict__["__init__"] and Lazy.__init__.__qualname__.endswith("Lazy.__init__")


def test_the_first_constructions_bind_without_a_compile_as_the_compiled_init_does():
    """Until ``COMPILE_AFTER`` constructions a record binds its arguments from the fields' plan; every
    call gives what the compiled ``__init__`` (and ``dataclass``) gives: the same fields, fresh
    factory values, ``__post_init__``, and for a call that does not bind, the same TypeError."""
    from csa_plan.planner.record import COMPILE_AFTER

    def body():
        return shape_class(doc="A record with every kind of field.")

    calls = [((1,), {}), ((1, "x"), {}), ((1, "x", [2]), {}), ((), {"a": 1}), ((1,), {"c": [5], "b": "y"}),
             ((), {"a": 1, "b": "z", "c": []}), ((), {}), ((1, 2, 3, 4), {}), ((1,), {"a": 2}),
             ((1,), {"d": 3}), ((1,), {"nope": 0}), ((), {"b": "only"})]
    for options in ({}, {"kw_only": True}):
        D = dataclass(body(), frozen=True, **options)
        for args, kwargs in calls:
            R = record(body(), **options)  # a fresh class: not compiled yet
            assert type(R.__dict__["__init__"]).__name__ == "_FirstInit"
            try:
                want = D(*args, **kwargs)
            except TypeError as exc:
                with pytest.raises(TypeError) as got:
                    R(*args, **kwargs)
                assert str(got.value) == str(exc)
                continue
            got = R(*args, **kwargs)
            assert type(R.__dict__["__init__"]).__name__ == "_FirstInit"  # bound without a compile
            assert repr(got) == repr(want) and got.seen == want.seen and got.d == want.d and got.e == want.e
            if len(args) < 3 and "c" not in kwargs:
                assert R(*args, **kwargs).c is not got.c  # a fresh list each time
    built = record(body())
    for _ in range(COMPILE_AFTER):
        built(1)
    assert type(built.__dict__["__init__"]).__name__ == "_FirstInit"
    built(1)
    assert type(built.__dict__["__init__"]).__name__ == "function"  # the next one compiled it
    assert repr(built(1, "q")) == repr(dataclass(body(), frozen=True)(1, "q"))
