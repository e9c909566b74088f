"""click types for the declared kinds (``cli/params.py``): sizes, strict non-negative integers,
case-insensitive names, cache formats, bounded numbers.

Each one converts with the reader ``cli/fast_parse.py`` also calls, so a value means the same
whichever parser read it; here a reader's ``BadInput`` becomes click's usage error.
"""

from __future__ import annotations

from typing import Any

import click

from csa_plan.cli import params
from csa_plan.planner.errors import I63_LIMIT, BadInput


def _read(kind: click.ParamType, reader: Any, value: Any, param: click.Parameter | None,
          ctx: click.Context | None, what: str, *extra: Any) -> Any:
    """``reader(text, option, *extra)``; its ``BadInput`` becomes click's usage error for ``param``."""
    try:
        return reader(str(value), param.opts[0] if param else what, *extra)
    except BadInput as exc:
        kind.fail(exc.problem, param, ctx)


class SizeType(click.ParamType):
    """``--device-memory`` / ``--reserved`` / ``--limit``: bytes, GB, GiB or a GPU name."""

    name = "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        return _read(self, params.read_size, value, param, ctx, "size")


class CountType(click.ParamType):
    """A non-negative integer below 2^63, as people type it: ``128k``, ``128K``, ``1e6``, ``1,000,000``
    (planner/amounts.py); 0 is allowed (the gate decides whether it is usable)."""

    name = "INT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 0:
                self.fail(f"{value} is negative", param, ctx)
            if value >= I63_LIMIT:
                self.fail(f"{value} is too large (must be below 2^63)", param, ctx)
            return value
        return _read(self, params.read_count, value, param, ctx, "count")


class CountsType(click.ParamType):
    """Whole numbers separated by commas or spaces (``params.read_counts``)."""

    name = "N,N,..."

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[int, ...]:
        if isinstance(value, tuple):
            return value
        return _read(self, params.read_counts, value, param, ctx, "counts")


class SuggestChoice(click.Choice):
    """A choice matched without regard to case; a miss names the closest choice (did you mean)."""

    def __init__(self, choices: Any) -> None:
        super().__init__(list(choices), case_sensitive=False)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return _read(self, params.read_name, value, param, ctx, "value", tuple(self.choices))


class CacheFormatName(click.ParamType):
    """``--kv-format``: a known cache format name (``params.read_cache_format``)."""

    name = "FORMAT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        return _read(self, params.read_cache_format, value, param, ctx, "cache format")


class FloatType(click.ParamType):
    """A finite decimal number at most ``high`` (``nan``, ``inf``, ``1e300`` are refused); the
    lower bound (positive, non-negative) is the domain type's to check and name."""

    name = "FLOAT"

    def __init__(self, high: float) -> None:
        self.high = high

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):  # a default: only its range to check
            from csa_plan.planner.values import check_range

            try:
                return check_range("options", param.opts[0] if param else "value", value, low=-self.high,
                                   high=self.high)
            except BadInput as exc:
                self.fail(exc.problem, param, ctx)
        return _read(self, params.read_number, value, param, ctx, "value", self.high)


SIZE = SizeType()
COUNT = CountType()
COUNTS = CountsType()
CACHE_FORMAT = CacheFormatName()
