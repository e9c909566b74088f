"""Units and integer rounding: every byte and time conversion is defined here, once.

Bytes are Python ints and never rounded; these helpers are the only rounding the
planner does, and they round up (a buffer is never smaller than its content).
"""

from __future__ import annotations

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for ints, exact at any size (no float)."""
    return -(-a // b)


def round_up(n: int, multiple: int) -> int:
    """The smallest multiple of ``multiple`` that is at least ``n``."""
    return ceil_div(n, multiple) * multiple
