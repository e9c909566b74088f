"""The published trace formats: which columns (or JSON keys) hold what, in which unit.

A format is recognised by its header (CSV) or its first record's keys (JSONL), or named
with ``--format``. Names are matched case-folded. ``--columns`` maps the three roles of
any other file onto its own names, ``--time-unit`` says what its numeric times count.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from csa_plan.planner.errors import BadInput


class Container(str, Enum):
    CSV = "csv"
    JSONL = "jsonl"


class TimeUnit(str, Enum):
    S = "s"
    MS = "ms"
    US = "us"
    NS = "ns"

    @property
    def digits(self) -> int:
        """Nanoseconds per unit as a power of ten."""
        return {"s": 9, "ms": 6, "us": 3, "ns": 0}[self.value]


ROLES = ("arrival", "prompt", "output")


@dataclass(frozen=True)
class TraceFormat:
    """One published layout: the column (or key) of each role, the time unit of numeric
    arrivals (dates are always read as dates), and the optional columns it carries."""

    name: str
    container: Container
    title: str
    arrival: str
    prompt: str
    output: str
    unit: TimeUnit = TimeUnit.S
    model: str | None = None  # request classes by this column (BurstGPT)
    failures_when_output_zero: bool = False  # BurstGPT: a failed request logs 0 response tokens
    hash_ids: str | None = None  # Mooncake: prefix-block ids
    block_tokens: int | None = None  # tokens per hash block
    optional: tuple[str, ...] = ()

    def column(self, role: str) -> str:
        return {"arrival": self.arrival, "prompt": self.prompt, "output": self.output}[role]

    @property
    def required(self) -> tuple[str, ...]:
        return (self.arrival, self.prompt, self.output) + ((self.model,) if self.model else ())


FORMATS: dict[str, TraceFormat] = {f.name: f for f in (
    TraceFormat("azure", Container.CSV, "Azure LLM inference trace (2023 or 2024, code or conversation)",
                "TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    TraceFormat("burstgpt", Container.CSV, "BurstGPT (v1: 6 columns; later releases add Session ID, Elapsed time)",
                "Timestamp", "Request tokens", "Response tokens", model="Model", failures_when_output_zero=True,
                optional=("Log Type", "Total tokens", "Session ID", "Elapsed time")),
    TraceFormat("csv", Container.CSV, "csa-plan CSV", "arrival_s", "prompt_tokens", "output_tokens"),
    TraceFormat("mooncake", Container.JSONL, "Mooncake / FAST'25 JSONL (timestamp in ms)",
                "timestamp", "input_length", "output_length", unit=TimeUnit.MS, hash_ids="hash_ids", block_tokens=512),
    TraceFormat("bailian", Container.JSONL, "Qwen Bailian usage JSONL (timestamp in s)",
                "timestamp", "input_length", "output_length", hash_ids="hash_ids", block_tokens=16,
                optional=("chat_id", "parent_chat_id", "type", "turn")),
    TraceFormat("jsonl", Container.JSONL, "csa-plan JSONL", "arrival_s", "prompt_tokens", "output_tokens"),
)}

FORMAT_NAMES = tuple(FORMATS)


def fold(name: str) -> str:
    """Header names compare case-folded, surrounding spaces ignored."""
    return name.strip().casefold()


def detect(container: Container, names: list[str]) -> TraceFormat | None:
    """The first format of ``container`` whose required columns are all present
    (the most specific first: Bailian is Mooncake plus chat_id)."""
    have = {fold(n) for n in names}
    order = ("bailian", "mooncake", "jsonl") if container is Container.JSONL else ("azure", "burstgpt", "csv")
    for name in order:
        fmt = FORMATS[name]
        if name == "bailian" and "chat_id" not in have:
            continue
        if {fold(c) for c in fmt.required} <= have:
            return fmt
    return None


def with_columns(base: TraceFormat | None, container: Container, columns: tuple[tuple[str, str], ...],
                 unit: TimeUnit | None) -> TraceFormat:
    """A format with ``--columns`` roles and ``--time-unit`` applied over ``base`` (or a bare one)."""
    from dataclasses import replace

    fmt = base or TraceFormat("columns", container, "columns mapped with --columns", "", "", "")
    mapping = dict(columns)
    if base is None:
        absent = [r for r in ROLES if r not in mapping]
        if absent:
            raise BadInput("options", "--columns", f"name the {', '.join(absent)} column(s) too "
                           "(arrival=NAME,prompt=NAME,output=NAME)")
    fmt = replace(fmt, **{r: mapping[r] for r in ROLES if r in mapping})
    taken: dict[str, str] = {}
    for role in ROLES:  # with the layout's own names too: prompt=output_tokens leaves output on that column
        name = fmt.column(role)
        other = taken.get(fold(name))
        if other is not None:
            given = [r for r in (other, role) if r not in mapping]
            why = f" ({given[0]} by the {fmt.name} layout)" if given else ""
            raise BadInput("options", "--columns", f"the column {printable(name, 40)!r} is named for both {other} "
                                                   f"and {role}{why}: each role needs its own column")
        taken[fold(name)] = role
    if unit is not None:
        fmt = replace(fmt, unit=unit)
    return fmt


def parse_columns(text: str | None) -> tuple[tuple[str, str], ...]:
    """``arrival=TIMESTAMP,prompt=ContextTokens,output=GeneratedTokens`` as (role, name) pairs."""
    if not text:
        return ()
    out: dict[str, str] = {}
    for part in text.split(","):
        role, sep, name = part.partition("=")
        role = role.strip().lower()
        if not sep or role not in ROLES or not name.strip():
            raise BadInput("options", "--columns", f"expected ROLE=NAME with ROLE one of {', '.join(ROLES)}, "
                           f"got {part.strip()[:40]!r}")
        if role in out:
            raise BadInput("options", "--columns", f"{role} is named twice")
        for other, taken in out.items():  # one column cannot hold two roles (arrival=a,prompt=a,output=a)
            if fold(taken) == fold(name.strip()):
                raise BadInput("options", "--columns", f"the column {printable(name.strip(), 40)!r} is named for "
                                                       f"both {other} and {role}: each role needs its own column")
        out[role] = name.strip()
    return tuple(out.items())


def parse_where(items: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``--where model=ChatGPT`` (repeatable; all must hold) as (folded column, value) pairs."""
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise BadInput("options", "--where", f"expected COLUMN=VALUE, got {item[:40]!r}")
        out.append((fold(key).replace("_", " "), value.strip()))
    return tuple(out)


def excerpt(raw: bytes | str, limit: int = 40) -> str:
    """A short, escaped quotation of input for a message: control characters and escape
    sequences never reach the terminal, and a long value shows its length."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    shown = repr(text[:limit])
    if len(text) > limit:
        shown = shown[:-1] + "…" + shown[-1] + f" ({len(raw):,} {'bytes' if isinstance(raw, bytes) else 'characters'})"
    return shown


def printable(text: str, limit: int = 80) -> str:
    """A name from a file made safe to print: escapes for control characters, bounded."""
    shown = repr(text[:limit])[1:-1]
    return shown + ("…" if len(text) > limit else "")


def trace_document(summary) -> dict:
    """The ``workload`` fields a trace adds to a JSON report (nothing for a generated mix)."""
    if summary is None:
        return {}
    doc = {"format": summary.format, "rows_read": summary.rows,
           "excluded": {reason: count for reason, count in summary.excluded}}
    if summary.prefix is not None:
        p = summary.prefix
        doc["prefix_blocks"] = {"block_tokens": p.block_tokens, "blocks": p.blocks, "shared_blocks": p.shared_blocks,
                                "shared_fraction": round(p.shared_fraction, 6)}
    return doc
