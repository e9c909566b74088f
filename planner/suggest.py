"""Did-you-mean: the closest valid value for a refused choice, name or key.

One mechanism for every place that refuses a name from a fixed set (presets, GPU
names, layout profiles, cache formats, choice options, spec keys), so each such
message ends the same way: ``(known: a, b, c); did you mean 'b'?``.
"""

from __future__ import annotations

from typing import Iterable

MAX_LISTED = 12  # a longer list is cut (the suggestion still comes from all of them)


def _norm(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def closest(value: str, known: Iterable[str]) -> str | None:
    """The known value nearest to ``value`` (case, '-', '_' and '.' ignored), or None."""
    import difflib

    choices = [str(k) for k in known]
    if not choices:
        return None
    text = str(value)[:200]
    by_norm: dict[str, str] = {}
    for c in choices:
        by_norm.setdefault(_norm(c), c)
    key = _norm(text)
    if key in by_norm:
        return by_norm[key]
    # A prefix or containment match first (fp8 -> fp8_e4m3_block64), then difflib.
    hits = [c for n, c in by_norm.items() if key and (n.startswith(key) or key in n)]
    if len(hits) == 1:
        return hits[0]
    pool = list(by_norm) if not hits else [_norm(h) for h in hits]
    match = difflib.get_close_matches(key, pool, n=1, cutoff=0.5 if len(key) <= 3 else 0.6)
    return by_norm[match[0]] if match else (hits[0] if hits else None)


def did_you_mean_model(value: str, known: Iterable[str]) -> str:
    """``did_you_mean`` for names whose digits are a model number or a version (GPU cards, model
    presets, engine releases): only a name with the same digits and the same first letter is offered,
    so ``h20`` is never "corrected" to ``h200``, ``b300`` to ``mi300x``, ``deepseek-v3`` to ``deepseek-v4-pro`` or ``vllm-0.8.5`` to ``vllm-0.25``."""
    def digits(text: str) -> str:  # an 'o' typed after a digit is read as the 0 it stands for (h2O)
        import re

        return "".join(ch for ch in re.sub(r"(?<=[0-9])[oO]", "0", text) if ch.isdigit())

    def first(text: str) -> str:  # the family letter: b300 (NVIDIA) is never mi300x (AMD)
        return next((ch for ch in text.casefold() if ch.isalnum()), "")

    typed = digits(str(value))
    return did_you_mean(value, [k for k in known if digits(str(k)) == typed and first(str(k)) == first(str(value))])


def listed(known: Iterable[str]) -> str:
    names = [str(k) for k in known]
    shown = ", ".join(names[:MAX_LISTED])
    return shown + (f", ... ({len(names)} in all)" if len(names) > MAX_LISTED else "")


def did_you_mean(value: str, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` or ``""`` when nothing is close."""
    best = closest(value, list(known))
    return f"; did you mean {best!r}?" if best is not None else ""


def unknown_problem(what: str, value: str, known: Iterable[str], versioned: bool = False) -> str:
    """The whole problem text: ``unknown WHAT 'v' (known: ...); did you mean '...'?`` (``versioned``:
    the digits are a version, offered only with the same digits: ``did_you_mean_model``)."""
    names = [str(k) for k in known]
    shown = str(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    hint = did_you_mean_model(value, names) if versioned else did_you_mean(value, names)
    return f"unknown {what} {shown!r} (known: {listed(names)}){hint}"
