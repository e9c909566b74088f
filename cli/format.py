"""Human formatting of exact numbers (rendering only; the core never rounds)."""

from __future__ import annotations

GIB = 1 << 30
MIB = 1 << 20


def fmt_bytes(n: int) -> str:
    """Exact bytes with separators, plus a binary-unit hint for large values."""
    if n >= GIB:
        return f"{n:,} ({n / GIB:.2f} GiB)"
    if n >= MIB:
        return f"{n:,} ({n / MIB:.1f} MiB)"
    return f"{n:,}"


def fmt_ids(ids: list[int]) -> str:
    """Compress layer ids into runs: [0,1,2,4,6,8] -> '0-2, 4-8/2'."""
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        step = ids[i + 1] - ids[i] if i + 1 < len(ids) else 1
        while j + 1 < len(ids) and ids[j + 1] - ids[j] == step:
            j += 1
        if j - i >= 2 or (j - i == 1 and step == 1):
            parts.append(f"{ids[i]}-{ids[j]}" + (f"/{step}" if step != 1 else ""))
            i = j + 1
        else:
            parts.append(str(ids[i]))
            i += 1
    return ", ".join(parts)
