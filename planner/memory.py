"""Device memory: one size parser for every option, and the GPU name table.

GPU names stand for the total that ``nvidia-smi`` reports for the card (MiB), so
the planner sees exactly what a runtime on that card can see. No utilisation
factor is applied unless the user subtracts one with ``--reserved``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from csa_plan.planner.errors import I63_LIMIT, BadInput

MIB = 1 << 20

# memory.total as nvidia-smi prints it, in MiB. Sources: nvidia-smi tables quoted in
# public issue threads and logs (H200 "143771MiB", H100/H800 "81559MiB", B200 "183359MiB").
GPU_MEMORY_MIB: dict[str, int] = {
    "h200": 143771,
    "h100": 81559,
    "h800": 81559,
    "b200": 183359,
    "a100-80gb": 81920,
    "a100-40gb": 40960,
    "l40s": 46068,
}

UNITS: dict[str, int] = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}

_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str, source: str, field: str | None = None) -> int:
    """A byte count from ``150000000000``, ``141GB``, ``80GiB``, ``1.5TB`` or a GPU name."""
    key = text.strip().lower()
    if key in GPU_MEMORY_MIB:
        return GPU_MEMORY_MIB[key] * MIB
    match = _SIZE.match(text)
    if not match or match.group(2).lower() not in UNITS:
        gpus = ", ".join(GPU_MEMORY_MIB)
        raise BadInput(source, field, f"cannot read size {text!r} (use bytes, GB, GiB or a GPU name: {gpus})")
    try:
        value = Decimal(match.group(1)) * UNITS[match.group(2).lower()]
    except InvalidOperation:
        raise BadInput(source, field, f"cannot read size {text!r}") from None
    if value != value.to_integral_value():
        raise BadInput(source, field, f"size {text!r} is not a whole number of bytes")
    if value >= I63_LIMIT:
        raise BadInput(source, field, f"size {text!r} is too large (must be below 2^63 bytes)")
    return int(value)


@dataclass(frozen=True)
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
