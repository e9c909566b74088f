"""Device memory: one size parser for every option, and the GPU name table.

GPU names stand for the total that the driver reports for the card (MiB; the card table
is ``planner/cards.py``), so the planner sees exactly what a runtime on that card can see;
a card name parses to a ``CardBytes`` that carries the card (its rules follow it). No utilisation
factor is applied unless the user subtracts one with ``--reserved``.
"""

from __future__ import annotations


from csa_plan.planner.errors import I63_LIMIT, BadInput

from csa_plan.planner.cards import CARDS, MIB, CardBytes, find_card
from csa_plan.planner.record import record

# memory.total as the driver reports it, in MiB: a view of the card table (planner/cards.py).
GPU_MEMORY_MIB: dict[str, int] = {name: c.memory_mib for name, c in CARDS.items()}

UNITS: dict[str, int] = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}

SIZE_HELP = ("bytes, GB/MB/TB (powers of 10), GiB/MiB/TiB (powers of 2), g/m/k (10^9...) or G/M/K (2^30...) "
             "as vLLM reads them, or a GPU name")


def parse_size(text: str, source: str, field: str | None = None) -> int:
    """A byte count from ``150000000000``, ``141GB``, ``80GiB``, ``80G``, ``1.5TB``, ``1e9`` or a GPU name."""
    from csa_plan.planner.amounts import SUFFIXES, checked_whole, exact_number, split_number
    from csa_plan.planner.suggest import did_you_mean, did_you_mean_model

    named = find_card(text)
    if named is not None:
        return CardBytes(named)
    shown = text.strip() if len(text.strip()) <= 40 else text.strip()[:37] + "..."
    parts = split_number(text)
    unit = None
    if parts is not None:
        unit = SUFFIXES.get(parts[1], UNITS.get(parts[1].lower()))
    if parts is None or unit is None:
        gpus = ", ".join(GPU_MEMORY_MIB)
        hint = ""
        if parts is None:
            hint = did_you_mean_model(text.strip(), GPU_MEMORY_MIB) if text.strip()[:1].isalpha() else ""
        elif parts[1]:
            hint = did_you_mean(parts[1], ["GB", "GiB", "MB", "MiB", "TB", "TiB", "G", "g"])
        raise BadInput(source, field, f"cannot read size {shown!r} (use {SIZE_HELP}: {gpus}){hint}")
    number, suffix = parts
    if "e" in number.lower():
        whole = exact_number(number, source, field, "size")
        hint = f"; did you mean {int(whole):,}?" if whole.denominator == 1 and 0 <= whole < I63_LIMIT else ""
        raise BadInput(source, field, f"size {shown!r}: write bytes without an exponent "
                       f"(1,000,000,000, 1GB or 1GiB){hint}")
    if suffix in ("K", "M", "G", "T"):
        value = exact_number(number, source, field, "size")
        if value.denominator != 1:
            raise BadInput(source, field, f"size {shown!r}: a fraction with a binary suffix is ambiguous; "
                           f"did you mean {number}{suffix}iB?")
    value = exact_number(number, source, field, "size") * unit
    if value.denominator != 1:
        if unit < 1000 or "." not in number:  # a fraction of a byte is no figure an engine prints
            raise BadInput(source, field, f"size {shown!r} is not a whole number of bytes")
        return _printed(value, number, suffix, unit, shown, source, field)
    if value >= I63_LIMIT:
        raise BadInput(source, field, f"size {shown!r} is too large (must be below 2^63 bytes)")
    if not suffix and 0 < value < MIB:  # '--device-memory 141' meant 141GB, not 141 bytes
        raise BadInput(source, field, f"size {shown!r} has no unit and is under 1 MiB as bytes: write "
                       f"{number}B for bytes; did you mean {number}GB?")
    return checked_whole(value, shown, source, field, "size")


class PrintedBytes(int):
    """A size given as a decimal figure an engine prints (``84.91GiB``, from vLLM's "Available KV cache
    memory: 84.91 GiB"): the figure times its unit, rounded down to a whole byte; ``note`` says the
    bytes it is read as and the range the printed digits stand for (the CLI shows it)."""

    note: str

    def __new__(cls, value: int, note: str) -> "PrintedBytes":
        made = super().__new__(cls, value)
        made.note = note
        return made

    def __reduce__(self):  # pickles (sweep workers) with its note
        return (PrintedBytes, (int(self), self.note))


def _printed(value, number: str, suffix: str, unit: int, shown: str, source: str, field: str | None) -> int:
    from fractions import Fraction

    if value >= I63_LIMIT:
        raise BadInput(source, field, f"size {shown!r} is too large (must be below 2^63 bytes)")
    if value < 0:
        raise BadInput(source, field, f"size {shown!r} is negative")
    whole = int(value)  # rounded down: never more than the printed figure
    places = len(number.partition(".")[2])
    half = int(Fraction(unit, 2 * 10**places))
    name = field or source
    return PrintedBytes(whole, f"{name} {shown} read as {whole:,} B ({number} x {_unit_text(suffix, unit)} "
                               f"rounded down to a whole byte; a figure printed to {places} decimal"
                               f"{'s' if places != 1 else ''} stands for up to {half:,} B either side)")


def _unit_text(suffix: str, unit: int) -> str:
    power = unit.bit_length() - 1
    return f"2^{power}" if unit == 1 << power and power >= 10 else f"{unit:,}"


@record
class DeviceBudget:
    """What the ledger may hand out on one device: memory minus reserved, never 0."""

    memory_bytes: int
    reserved_bytes: int

    @property
    def limit_bytes(self) -> int:
        return self.memory_bytes - self.reserved_bytes


def device_budget(memory_bytes: int | None, reserved_bytes: int, source: str = "options") -> DeviceBudget | None:
    """``None`` means unlimited; a budget of zero or less is bad input, never 'unlimited'."""
    if memory_bytes is None:
        if reserved_bytes:
            raise BadInput(source, "--reserved", "needs --device-memory to subtract from")
        return None
    if memory_bytes <= 0:
        raise BadInput(source, "--device-memory", "must be positive")
    if reserved_bytes >= memory_bytes:
        raise BadInput(source, "--reserved",
                       f"{reserved_bytes} bytes is at or above the device memory ({memory_bytes} bytes)")
    return DeviceBudget(memory_bytes, reserved_bytes)
