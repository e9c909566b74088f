"""Option types shared by every command: sizes, and strict non-negative integers."""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import click

from csa_plan.planner.errors import I63_LIMIT, BadInput, CsaPlanError


class SizeType(click.ParamType):
    """``--device-memory`` / ``--reserved`` / ``--limit``: bytes, GB, GiB or a GPU name."""

    name = "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        from csa_plan.planner.memory import parse_size

        option = param.opts[0] if param else "size"
        try:
            return parse_size(str(value), option)
        except BadInput as exc:
            self.fail(exc.problem, param, ctx)


class CountType(click.ParamType):
    """A non-negative integer below 2^63; 0 is allowed (the gate decides whether it is usable)."""

    name = "INT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value).strip().replace("_", "")
            if len(text.lstrip("+-0")) > 19 and text.lstrip("+-").isdigit():
                self.fail(f"{text[:40]}... is too large (must be below 2^63)", param, ctx)
            try:
                number = int(text, 10)
            except ValueError:
                self.fail(f"{str(value)[:40]!r} is not an integer", param, ctx)
        if number < 0:
            self.fail(f"{number} is negative", param, ctx)
        if number >= I63_LIMIT:
            self.fail(f"{number} is too large (must be below 2^63)", param, ctx)
        return number


SIZE = SizeType()
COUNT = CountType()


def enum_choice(enum: type) -> click.Choice:
    """A click choice whose values are the enum's: the list is never written by hand."""
    return click.Choice([member.value for member in enum])


MAX_MESSAGE_CHARS = 600


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """One line of at most ``limit`` characters: the middle of an overlong message is elided."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    half = (limit - 5) // 2
    return f"{text[:half]} ... {text[-half:]}"


def bad_input_exits(func: Callable[..., int]) -> Callable[..., int]:
    """Turn a ``CsaPlanError`` raised anywhere below a command into one line and its exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> int:
        try:
            return func(*args, **kwargs)
        except CsaPlanError as exc:
            click.echo(f"csa-plan: error: {one_line(str(exc))}", err=True)
            sys.exit(int(exc.exit_code))

    return wrapper
