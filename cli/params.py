"""A command's parameters declared once, as data, without click.

Each command declares its argument and options here (``Arg``, ``Opt``) and its body as a plain
function (``CommandSpec``). Two readers take the same declaration:

* ``cli/click_command.py`` builds the click command from it: help, usage errors, every
  unusual spelling, the reference behaviour;
* ``cli/fast_parse.py`` parses a plain command line (long options and values that convert)
  without importing click, and hands anything else to click (start-up: docs/architecture.md).

Values are converted by ``convert`` below on both paths, so ``--max-seq-len 1M`` is one number
whichever parser read it; ``tests/cli/test_fast_parse.py`` requires the two parsers to give the
command the same arguments.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Callable

from csa_plan.cli.exit_codes import EXIT_CODES_HELP
from csa_plan.planner.record import record


class Kind(Enum):
    """How an option's text becomes its value (the click type ``cli/click_command.py`` gives it)."""

    TEXT = "text"  # the text as given
    COUNT = "count"  # planner/amounts.py parse_count: 128k, 128K, 1e6, 1,000,000
    COUNTS = "counts"  # counts separated by commas or spaces: 1,2,4,8
    SIZE = "size"  # planner/memory.py parse_size: bytes, 141GB, 80GiB, a GPU name
    NUMBER = "number"  # a finite decimal number within +-high (planner/values.py)
    FLOAT = "float"  # Python's float(), as click.FLOAT reads it
    CHOICE = "choice"  # one of ``choices``, exactly as written
    NAME = "name"  # one of ``choices``, whatever the case; a miss names the closest (did you mean)
    CACHE_FORMAT = "cache-format"  # a known cache format name (planner/descriptor.py)
    FLAG = "flag"  # present: True
    SWITCH = "switch"  # --x: True, --no-x: False


VALUELESS = (Kind.FLAG, Kind.SWITCH)


@record
class Arg:
    """A positional argument: required unless it has a default."""

    dest: str
    metavar: str | None = None
    default: Any = None
    required: bool = True


@record
class Opt:
    """One option: its spellings (``decls``; ``off`` for a switch's negative spellings), where
    its value goes (``dest``) and how it is read."""

    decls: tuple[str, ...]
    dest: str
    kind: Kind = Kind.TEXT
    default: Any = None
    help: str = ""
    metavar: str | None = None
    multiple: bool = False
    choices: tuple[str, ...] = ()
    high: float = 0.0  # Kind.NUMBER: the bound on |value|
    off: tuple[str, ...] = ()  # Kind.SWITCH: the negative spellings
    show_default: bool = False
    help_from: Callable[[Opt], str] | None = None  # help written when help is shown (reads a registry)


@record
class CommandSpec:
    """A command: its parameters in help order and the function they are passed to (by ``dest``);
    its help is that function's docstring, and ``epilog`` ends the help."""

    name: str
    params: tuple[Arg | Opt, ...]
    callback: Callable[..., int]
    epilog: str = EXIT_CODES_HELP


def convert(opt: Opt, text: str, spelling: str) -> Any:
    """``text`` as ``opt``'s value; ``BadInput`` (naming ``spelling``) when it is not one."""
    kind = opt.kind
    if kind is Kind.TEXT:
        return text
    if kind is Kind.COUNT:
        return read_count(text, spelling)
    if kind is Kind.COUNTS:
        return read_counts(text, spelling)
    if kind is Kind.SIZE:
        return read_size(text, spelling)
    if kind is Kind.NUMBER:
        return read_number(text, spelling, opt.high)
    if kind is Kind.FLOAT:
        try:
            return float(text)
        except ValueError:
            raise _bad(spelling, f"{text!r} is not a valid float") from None
    if kind is Kind.CHOICE:
        if text in opt.choices:
            return text
        raise _bad(spelling, f"{text!r} is not one of {', '.join(map(repr, opt.choices))}")
    if kind is Kind.NAME:
        return read_name(text, spelling, opt.choices)
    if kind is Kind.CACHE_FORMAT:
        return read_cache_format(text, spelling)
    raise TypeError(f"{spelling} takes no value")


def read_count(text: str, spelling: str) -> int:
    """A non-negative whole number below 2^63, as people type it (planner/amounts.py)."""
    from csa_plan.planner.amounts import parse_count

    return parse_count(text, "options", spelling)


def read_counts(text: str, spelling: str) -> tuple[int, ...]:
    """Whole numbers separated by commas or spaces, at most 1,024 of them (vLLM's list options)."""
    parts = text.replace(",", " ").split()
    if not parts:
        raise _bad(spelling, "expected one or more whole numbers, e.g. 1,2,4,8")
    if len(parts) > 1024:
        raise _bad(spelling, f"{len(parts):,} values: at most 1,024")
    return tuple(read_count(part, spelling) for part in parts)


def read_size(text: str, spelling: str) -> int:
    """Bytes, a unit (141GB, 80GiB) or a GPU name (planner/memory.py)."""
    from csa_plan.planner.memory import parse_size

    return parse_size(text, spelling)


def read_number(text: str, spelling: str, high: float) -> float:
    """A finite decimal number within +-``high``; the lower bound is the domain type's to name."""
    from csa_plan.planner.values import parse_float_text

    return parse_float_text("options", spelling, text, low=-high, high=high)


def read_name(text: str, spelling: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` matched without regard to case; a miss names the closest."""
    folded = text.casefold()
    for choice in choices:
        if folded == choice.casefold():
            return choice
    from csa_plan.planner.suggest import unknown_problem

    raise _bad(spelling, unknown_problem("value", text, choices))


def read_cache_format(text: str, spelling: str) -> str:
    """A known cache format name; on the command line anything else is bad input with a suggestion
    (an unknown format inside a model file stays the gate's typed refusal, UnknownCacheFormat)."""
    from csa_plan.planner.descriptor import CACHE_FORMAT_NAMES, RECORD_FORMAT_NAMES
    from csa_plan.planner.suggest import did_you_mean, unknown_problem

    stripped = text.strip()
    names = CACHE_FORMAT_NAMES + RECORD_FORMAT_NAMES  # a shared-state model's record formats too (its gate decides)
    for known in names:
        if stripped.casefold() == known:
            return known
    problem = unknown_problem("cache format", stripped, names)
    v4_hint = did_you_mean(stripped, CACHE_FORMAT_NAMES)  # a near V4 name is offered first, as before V4.1
    if v4_hint:
        problem = problem.removesuffix(did_you_mean(stripped, names)) + v4_hint
    raise _bad(spelling, problem)


def _bad(spelling: str, problem: str) -> Exception:
    from csa_plan.planner.errors import BadInput

    return BadInput("options", spelling, problem)
