"""``@record``: a frozen dataclass whose ``__eq__``, ``__hash__`` and ``__repr__`` are shared functions.

``dataclasses.dataclass(frozen=True)`` compiles six methods from source for every class
(``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``); on
Python 3.11 that is about half a millisecond a class, and a ``check`` imports some fifty of
them before it answers (start-up: docs/check.md). ``@record`` is ``@dataclass(frozen=True)``
with the three comparison and display methods taken from this module instead of compiled
per class; they behave as the generated ones do (the same fields compared and hashed,
``NotImplemented`` for another class, the same repr text, ``...`` on recursion). The class
is a frozen dataclass in every other way: ``dataclasses.fields``, ``replace`` and
``asdict`` work, assignment raises ``FrozenInstanceError``. ``tests/planner/test_record.py``
compares a ``@record`` class with its ``@dataclass(frozen=True)`` twin.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from operator import attrgetter
from reprlib import recursive_repr
from typing import Any, Callable, TypeVar

C = TypeVar("C", bound=type)


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The fields' values as a tuple (``attrgetter`` gives a bare value for one name)."""
    if not names:
        return lambda self: ()
    if len(names) == 1:
        name = names[0]
        return lambda self: (getattr(self, name),)
    return attrgetter(*names)


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is self.__class__:
        key = self.__class__.__record_compare__
        return key(self) == key(other)
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(self.__class__.__record_hash__(self))


@recursive_repr()
def _repr(self: Any) -> str:
    cls = self.__class__
    return f"{cls.__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in cls.__record_repr__)})"


def record(cls: C | None = None, /, *, eq: bool = True, **options: Any) -> Any:
    """``@dataclass(frozen=True, eq=eq, **options)`` with shared ``__eq__``/``__hash__``/``__repr__``."""
    if cls is None:
        return lambda c: record(c, eq=eq, **options)
    if options.get("order") or options.get("unsafe_hash") or "frozen" in options or "repr" in options:
        raise TypeError("@record is frozen with the shared methods; use @dataclass for other options")
    own = dict(cls.__dict__)
    out = dataclass(cls, frozen=True, eq=False, repr=False, **options)
    every = fields(out)
    if "__repr__" not in own:
        out.__record_repr__ = tuple(f.name for f in every if f.repr)
        out.__repr__ = _repr
    if eq:
        if "__eq__" not in own:
            out.__record_compare__ = _getter(tuple(f.name for f in every if f.compare))
            out.__eq__ = _eq
        class_hash = own.get("__hash__", MISSING)
        explicit = not (class_hash is MISSING or (class_hash is None and "__eq__" in own))
        if not explicit:  # as dataclass(eq=True, frozen=True) adds it
            out.__record_hash__ = _getter(tuple(f.name for f in every
                                                if (f.compare if f.hash is None else f.hash)))
            out.__hash__ = _hash
    return out
