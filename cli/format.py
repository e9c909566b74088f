"""Human formatting of exact numbers (rendering only; the core never rounds)."""

from __future__ import annotations

from csa_plan.planner.units import GiB, KiB, MiB


def fmt_bytes(n: int) -> str:
    """Exact bytes with separators, plus a binary-unit hint for large values."""
    if n >= GiB:
        return f"{n:,} ({n / GiB:.2f} GiB)"
    if n >= MiB:
        return f"{n:,} ({n / MiB:.1f} MiB)"
    return f"{n:,}"


def fmt_bytes_short(n: int) -> str:
    """A compact binary-unit form for narrow cells; ``--json`` carries the exact integer."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n >= GiB:
        return f"{sign}{n / GiB:.2f}GiB"
    if n >= MiB:
        return f"{sign}{n / MiB:.1f}MiB"
    if n >= KiB:
        return f"{sign}{n / KiB:.1f}KiB"
    return f"{sign}{n}B"
