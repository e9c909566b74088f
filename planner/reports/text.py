"""Text forms of domain values shared by documents and tables."""

from __future__ import annotations


def id_runs(ids: list[int]) -> str:
    """Compress ids into runs: [0,1,2,4,6,8] -> '0-2, 4-8/2' (layers, devices)."""
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


def shown_path(path: str) -> str:
    """Relative to the working directory when the file lies below it (readable, machine-independent)."""
    import os

    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def step_time_label(step_time: dict, fallback: str = "") -> str:
    """A step-time source as every output names it: its label and its stated error band
    (simulate's `step time:` line, sweep's engine points)."""
    label, band = step_time.get("label") or fallback, step_time.get("band")
    return label + (f" (error band: {band})" if band else "")
