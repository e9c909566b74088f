"""``@record``: a frozen dataclass whose ``__eq__``, ``__hash__`` and ``__repr__`` are shared functions.

``dataclasses.dataclass(frozen=True)`` compiles six methods from source for every class
(``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``); on
Python 3.11 that is about half a millisecond a class, and a ``check`` imports some fifty of
them before it answers (start-up: docs/architecture.md). ``@record`` is ``@dataclass(frozen=True)``
with the three comparison and display methods taken from this module instead of compiled
per class; they behave as the generated ones do (the same fields compared and hashed,
``NotImplemented`` for another class, the same repr text, ``...`` on recursion). The class
is a frozen dataclass in every other way: ``dataclasses.fields``, ``replace`` and
``asdict`` work, assignment raises ``FrozenInstanceError``. ``tests/planner/test_record.py``
compares a ``@record`` class with its ``@dataclass(frozen=True)`` twin.

The frozen ``__setattr__``/``__delattr__`` are closures made here rather than compiled, and
``__init__`` is compiled once, alone: ``dataclass(frozen=True)`` compiles each of the three
separately, about 0.35 ms a class for the two guards alone. Until then a record's first
``COMPILE_AFTER`` constructions bind their arguments from the fields' plan (``_FirstInit``),
and ``__init__`` is compiled on the next one or on any other lookup, so a record a command
builds a few times compiles nothing (about 0.1 ms a compile; an engine check builds forty
records, most of them fewer than 16 times). A record that inherits
from a dataclass (``dataclass`` refuses a frozen base under a class it processes as not frozen),
or declares ``InitVar``, ``KW_ONLY``, per-field ``kw_only`` or ``slots``, is left to
``dataclass(frozen=True)`` for those methods (on the vLLM check, only ``Vllm033``, which extends
the ``EngineModel`` record).
"""

from __future__ import annotations

import sys
from dataclasses import MISSING, Field, FrozenInstanceError, dataclass, fields
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


class _Factory:
    """The default shown for a field with a ``default_factory`` (``<factory>``, as dataclasses shows it)."""

    def __repr__(self) -> str:
        return "<factory>"


_HAS_FACTORY = _Factory()


def _frozen_guards(cls: type, names: tuple[str, ...]) -> tuple[Callable[..., None], Callable[..., None]]:
    """``__setattr__`` and ``__delattr__`` as ``dataclass(frozen=True)`` writes them, as closures."""
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    __setattr__.__qualname__ = f"{cls.__qualname__}.__setattr__"
    __delattr__.__qualname__ = f"{cls.__qualname__}.__delattr__"
    return __setattr__, __delattr__


def _init(cls: type, every: tuple[Any, ...]) -> Callable[..., None]:
    """The frozen ``__init__`` ``dataclass`` would compile for ``cls``: the same parameters,
    annotations, defaults and ``__post_init__`` call. Only the parameter names and the body are
    compiled; the defaults and annotations are set on the function afterwards (what compiling
    them would give, in less than half the compile time)."""
    self_name = "__dataclass_self__" if "self" in (f.name for f in every) else "self"
    env: dict[str, Any] = {"__record_set__": object.__setattr__}
    positional: list[str] = []
    keyword: list[str] = []
    defaults: list[Any] = []
    kwdefaults: dict[str, Any] = {}
    annotations: dict[str, Any] = {}
    body: list[str] = []
    for f in every:
        factory = f"__record_factory_{f.name}__"
        if f.default_factory is not MISSING:
            env[factory] = f.default_factory
            if f.init:
                env["__record_has_factory__"] = _HAS_FACTORY
                value = f"{factory}() if {f.name} is __record_has_factory__ else {f.name}"
            else:
                value = f"{factory}()"
        elif f.init:
            value = f.name
        else:
            continue  # read from the class attribute holding its default
        body.append(f"__record_set__({self_name},{f.name!r},{value})")
        if not f.init:
            continue
        annotations[f.name] = f.type
        default = f.default if f.default is not MISSING else (
            _HAS_FACTORY if f.default_factory is not MISSING else MISSING)
        if f.kw_only:
            keyword.append(f.name)
            if default is not MISSING:
                kwdefaults[f.name] = default
        else:
            positional.append(f.name)
            if default is not MISSING:
                defaults.append(default)
    annotations["return"] = None
    if hasattr(cls, "__post_init__"):
        body.append(f"{self_name}.__post_init__()")
    params = ",".join([self_name] + positional + (["*"] + keyword if keyword else []))
    lines = "\n".join(f"  {b}" for b in body or ["pass"])
    text = f"def __create_fn__({','.join(env)}):\n def __init__({params}):\n{lines}\n return __init__"
    module = sys.modules.get(cls.__module__)
    scope: dict[str, Any] = {}
    exec(compile(text, "<string>", "exec", dont_inherit=True), module.__dict__ if module else {}, scope)
    fn = scope["__create_fn__"](**env)
    fn.__defaults__ = tuple(defaults) or None
    fn.__kwdefaults__ = kwdefaults or None
    fn.__annotations__ = annotations
    fn.__qualname__ = f"{cls.__qualname__}.__init__"
    return fn


def _check_order(every: tuple[Any, ...]) -> None:
    """Refuse a required positional field after one with a default, when the class is defined (as dataclass does)."""
    seen_default = False
    for f in every:
        if f.init and not f.kw_only:
            if not (f.default is MISSING and f.default_factory is MISSING):
                seen_default = True
            elif seen_default:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")


COMPILE_AFTER = 16  # constructions of a record before its __init__ is compiled


class _FirstInit:
    """A record's ``__init__`` until it is compiled. The first ``COMPILE_AFTER`` constructions bind
    their arguments here, by the fields' plan, with no compile; the next one, or any other lookup
    (``Cls.__init__``, ``inspect.signature``), compiles the real one and puts it in its place. A
    class a command builds a few times costs no compile (an engine check defines some fifty
    records and builds forty of them, thirty fewer than 16 times); a class built thousands of
    times gets the compiled one. A call that does not bind (too many or unknown arguments, a
    required one missing) is made through the compiled ``__init__``, so its ``TypeError`` is the
    one ``dataclass`` gives."""

    __slots__ = ("cls", "calls", "plan")

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.calls = 0
        self.plan: tuple[Any, ...] | None = None

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None or self.calls >= COMPILE_AFTER:
            return self.compiled().__get__(obj, owner)
        self.calls += 1
        return _BoundInit(self, obj)

    def compiled(self) -> Callable[..., None]:
        cls = self.cls
        fn = cls.__dict__["__init__"]
        if fn is self:
            fn = _init(cls, tuple(cls.__dataclass_fields__.values()))
            cls.__init__ = fn
        return fn

    def construct(self, obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """What the compiled ``__init__`` does with these arguments, without compiling it."""
        plan = self.plan
        if plan is None:
            plan = self.plan = _init_plan(tuple(self.cls.__dataclass_fields__.values()), hasattr(self.cls, "__post_init__"))
        positional, accepted, required, steps, post_init = plan
        given = dict(zip(positional, args))
        if len(args) > len(positional) or (kwargs and not (accepted.issuperset(kwargs)
                                                            and given.keys().isdisjoint(kwargs))):
            return self.compiled()(obj, *args, **kwargs)  # unknown, duplicated or too many: its TypeError
        given.update(kwargs)
        if not given.keys() >= required:
            return self.compiled()(obj, *args, **kwargs)  # a required one missing: its TypeError
        assign = object.__setattr__
        for name, init, default, factory in steps:
            if init:
                value = given.get(name, default)
                if value is _HAS_FACTORY and factory is not None:
                    value = factory()
            else:
                value = factory()
            assign(obj, name, value)
        if post_init:
            obj.__post_init__()
        return None


class _BoundInit:
    """``_FirstInit`` bound to the instance being built (what ``type.__call__`` calls)."""

    __slots__ = ("first", "obj")

    def __init__(self, first: _FirstInit, obj: Any) -> None:
        self.first, self.obj = first, obj

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        return self.first.construct(self.obj, args, kwargs)


def _init_plan(every: tuple[Any, ...], post_init: bool) -> tuple[Any, ...]:
    """The binding ``_init`` compiles, as data: the positional names, every name accepted, the
    required names, and per field set in order (name, from an argument, its default, its factory)."""
    positional, accepted, required, steps = [], set(), [], []
    for f in every:
        factory = None if f.default_factory is MISSING else f.default_factory
        if f.init:
            accepted.add(f.name)
            if not f.kw_only:
                positional.append(f.name)
            if f.default is not MISSING:
                default = f.default
            elif factory is not None:
                default = _HAS_FACTORY
            else:
                default = MISSING
                required.append(f.name)
            steps.append((f.name, True, default, factory))
        elif factory is not None:
            steps.append((f.name, False, MISSING, factory))
    return tuple(positional), frozenset(accepted), frozenset(required), tuple(steps), post_init


def _own_methods(cls: type, options: dict[str, Any]) -> bool:
    """Whether ``record`` can write ``__init__`` and the frozen guards itself (else dataclass does)."""
    if options.get("slots") or any(hasattr(b, "__dataclass_fields__") for b in cls.__mro__[1:]):
        return False
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))
        if "InitVar" in text or "KW_ONLY" in text:
            return False
        value = cls.__dict__.get(name)
        if isinstance(value, Field) and value.kw_only is not MISSING:
            return False
    return True


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
    if not _own_methods(cls, options):
        out = dataclass(cls, frozen=True, eq=False, repr=False, **options)
    else:
        init = options.pop("init", True)
        if not own.get("__doc__"):  # written below from the real __init__, not from object's text signature
            cls.__doc__ = cls.__name__
        out = dataclass(cls, frozen=False, init=False, eq=False, repr=False, **options)
        out.__dataclass_params__.frozen = True  # as dataclass(frozen=True) records it
        names = tuple(out.__dataclass_fields__)
        if init:
            out.__dataclass_params__.init = True
            if "__init__" not in own:
                _check_order(tuple(out.__dataclass_fields__.values()))
                out.__init__ = _FirstInit(out)
        for guard in _frozen_guards(out, names):
            if guard.__name__ in own:
                raise TypeError(f"Cannot overwrite attribute {guard.__name__} in class {out.__name__}")
            setattr(out, guard.__name__, guard)
        if not own.get("__doc__"):  # as dataclass writes it (a record without a docstring compiles __init__ here)
            import inspect

            try:
                out.__doc__ = out.__name__ + str(inspect.signature(out)).replace(" -> None", "")
            except (TypeError, ValueError):
                out.__doc__ = out.__name__
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
