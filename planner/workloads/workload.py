"""Workloads: a YAML request mix, an Azure-format CSV trace, or JSONL requests.

Every reader returns a ``Workload`` of parallel integer arrays: arrival time in
nanoseconds from the first request (so trace timestamps with 7 fractional digits
stay exact), prompt and output tokens, and a request-class id. Readers are
strict: a malformed row is bad input naming its line, never skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from csa_plan.planner.units import NS_PER_S
from csa_plan.planner.errors import I63_LIMIT

if TYPE_CHECKING:  # numpy is imported lazily so the CLI's --help stays fast
    import numpy as np

MAX_TRACE_BYTES = 512 << 20
MAX_GENERATED_REQUESTS = 10_000_000  # bounds memory: the simulator holds a few arrays per request
MAX_RATE_PER_S = 1e9
MIN_RATE_PER_S = 1e-9
MAX_SIGMA = 20.0
MAX_ARRIVAL_S = (I63_LIMIT - 1) / NS_PER_S  # the int64 nanosecond clock
TRACE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
JSONL_FIELDS = ("arrival_s", "prompt_tokens", "output_tokens")


@dataclass(frozen=True)
class MixSettings:
    """What a mix spec may say about the run; ``None`` means 'not said' (the CLI decides)."""

    model: str | None = None
    layout: str | None = None
    max_seq_len: int | None = None
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    router: str | None = None
    device_memory_bytes: int | None = None
    reserved_bytes: int | None = None
    reserve: str | None = None
    bucket: int | None = None
    policy: str | None = None
    prefill_tok_s: float | None = None
    tpot_ms: float | None = None
    rate_scale: float | None = None


@dataclass(frozen=True, eq=False)
class Workload:
    """Requests in arrival order; arrays are numpy int64 (class ids int32)."""

    source: str
    arrival_ns: "np.ndarray"
    prompt_tokens: "np.ndarray"
    output_tokens: "np.ndarray"
    class_ids: "np.ndarray"
    class_names: tuple[str, ...]
    settings: MixSettings = field(default_factory=MixSettings)
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(self.arrival_ns.shape[0])


