"""Human formatting of exact numbers (rendering only; the core never rounds)."""

from __future__ import annotations

from typing import Any

from csa_plan.planner.units import GiB, KiB, MiB


def fmt_bytes(n: int) -> str:
    """Exact bytes with separators, plus a binary-unit hint for large values."""
    if n >= GiB:
        return f"{n:,} ({n / GiB:.2f} GiB)"
    if n >= MiB:
        return f"{n:,} ({n / MiB:.1f} MiB)"
    return f"{n:,}"


def fmt_bytes_short(n: int) -> str:
    """A compact binary-unit form for narrow cells (one way to write a size: ``140.40 GiB``);
    ``--json`` carries the exact integer."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n >= GiB:
        return f"{sign}{n / GiB:.2f} GiB"
    if n >= MiB:
        return f"{sign}{n / MiB:.2f} MiB"
    if n >= KiB:
        return f"{sign}{n / KiB:.2f} KiB"
    return f"{sign}{n} B"


def fmt_size(n: int) -> str:
    """A size in the answer lines: the binary unit first, the exact bytes after (never cut)."""
    if abs(n) >= KiB:
        return f"{fmt_bytes_short(n)} ({n:,} B)"
    return f"{n:,} B"


def fmt_rate(v: float | None, at_least: bool = False) -> str:
    """A rate in requests/s; ``at_least`` marks a lower bound (the search ceiling)."""
    if v is None:
        return "-"
    return ("≥" if at_least else "") + (f"{v:,.3g}" if v < 1000 else f"{v:,.0f}")


def plural(n: int, noun: str, plural_form: str | None = None) -> str:
    """``1 device``, ``2 devices``, ``1,000 requests``: the count with separators, the noun agreeing."""
    word = noun if n == 1 else (plural_form or noun + "s")
    return f"{n:,} {word}"


def marker(step: dict[str, Any]) -> str:
    """What a step's label gets: " (est. ±30 %)" for an estimate with its band, " (est.)", or nothing."""
    if not step["estimate"]:
        return ""
    band = step.get("band_pct")
    return f" (est. ±{band} %)" if band is not None else " (est.)"
