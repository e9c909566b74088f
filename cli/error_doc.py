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
    """``--json`` among the options (before a ``--`` that ends them)."""
    for word in argv:
        if word == "--":
            return False
        if word == "--json":
            return True
    return False


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

        try:
            return func(*args, **kwargs)
        except CsaPlanError as exc:
            tell_failure(f"error: {one_line(str(exc))}", int(exc.exit_code), bool(kwargs.get("as_json")))
            sys.exit(int(exc.exit_code))

    return wrapper
