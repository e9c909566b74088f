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


def fit_line(fit: dict[str, Any], pool: str, article: str = "the") -> str:
    """A command's count of requests of max_seq_len in ``pool`` ("state pool"), with its authority.
    Where vLLM's admission charges more than a decoding request holds (``fit.steady_decode``), the
    count is said as what it is, admitted at once into an empty pool, and the decoding figure follows."""
    n, length, steady = fit["requests_that_fit"], fit["max_seq_len"], fit.get("steady_decode")
    if steady and n is not None:
        return (f"requests of {length:,} tokens admitted at once into an empty {pool}: {n:,}; decoding (each "
                f"holds {fmt_bytes_short(steady['per_request_bytes'])}): {steady['count']:,} at once "
                f"({fit['authority']})")
    count = f"{n:,}" if n is not None else ("any number" if fit["unbounded"] else f"none ({fit['no_answer']})")
    return f"requests of {length:,} tokens that fit {article} {pool}: {count} ({fit['authority']})"
