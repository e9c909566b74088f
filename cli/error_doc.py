"""How a failure is told: one line on stderr and, when ``--json`` was asked for, one JSON line on stdout.

A script that reads ``--json`` output gets a document on every exit, not an empty stdout:
``{"schema": "csa-plan/error/v1", "exit_code": 2, "message": "..."}`` (docs/json-schemas.md).
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, Sequence

from csa_plan.cli.stream import echo

ERROR_SCHEMA = "csa-plan/error/v1"


def json_asked(argv: Sequence[str]) -> bool:
    """``--json`` among the options as click reads the line: before a ``--`` that ends them, and not the
    value of an option that takes one (``--resume --json`` names a file called --json, as
    ``--resume=--json`` does), so both parsers agree on every line."""
    valued = _valued_options(argv)
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word == "--":
            return False
        elif word == "--json":
            return True
        else:
            skip = word in valued
    return False


def _valued_options(argv: Sequence[str]) -> frozenset[str]:
    """Every spelling of an option that takes a value, for the group and the line's command."""
    from csa_plan.cli.commands import COMMANDS

    names = {"--color"}  # the group's one valued option (cli/main.py)
    command = next((w for w in argv if w in COMMANDS), None)
    if command is not None:
        try:
            from csa_plan.cli.commands import load_command
            from csa_plan.cli.params import VALUELESS, Opt

            spec = load_command(command)
        except Exception:  # noqa: BLE001 - not installed, or a bug: click's path tells it
            return frozenset(names)
        for param in spec.params:
            if isinstance(param, Opt) and param.kind not in VALUELESS:
                names.update(param.decls)
    return frozenset(names)


def tell_failure(line: str, exit_code: int, as_json: bool) -> None:
    """``csa-plan: LINE`` on stderr; with ``--json`` also the error document on stdout."""
    echo(f"csa-plan: {line}", err=True)
    if as_json:
        import json

        message = line.removeprefix("error: ")
        echo(json.dumps({"schema": ERROR_SCHEMA, "exit_code": int(exit_code), "message": message}))


MAX_MESSAGE_CHARS = 600


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """One line of at most ``limit`` characters: the middle of an overlong message is elided."""
    from csa_plan.planner.text import printable

    if len(text) > 8 * limit:  # bounded work on an unbounded message
        text = text[:4 * limit] + " ... " + text[-4 * limit:]
    text = printable(" ".join(text.split()))
    if len(text) <= limit:
        return text
    half = (limit - 5) // 2
    return f"{text[:half]} ... {text[-half:]}"


def bad_input_exits(func: Callable[..., int]) -> Callable[..., int]:
    """Turn a ``CsaPlanError`` raised anywhere below a command into one line and its exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> int:
        from csa_plan.planner.errors import CsaPlanError

        for value in kwargs.values():  # a decimal size pasted from a log (84.91GiB): the bytes it is read as
            note = getattr(value, "note", None)
            if isinstance(value, int) and isinstance(note, str):
                echo(f"note: {note}", err=True)
        try:
            return func(*args, **kwargs)
        except CsaPlanError as exc:
            tell_failure(f"error: {one_line(str(exc))}", int(exc.exit_code), bool(kwargs.get("as_json")))
            sys.exit(int(exc.exit_code))

    return wrapper
