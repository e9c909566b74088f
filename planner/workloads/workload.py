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
MAX_TRACE_REQUESTS = 10_000_000  # rows kept from a trace (the same bound as a generated mix)
MAX_LINE_BYTES = 1 << 20  # one CSV row or JSONL record
MAX_FIELD_BYTES = 1024  # one CSV field (numbers, dates and model names are short)
MAX_TRACE_CLASSES = 256  # distinct request classes (BurstGPT models)
MAX_HASH_IDS = 1 << 16  # prefix-block ids in one record
MAX_TRACE_HASH_IDS = 1 << 26  # prefix-block ids in one trace: 67,108,864 (a 512 MiB trace of distinct 8-digit ids holds ~50M)
MAX_REPLAY_HASH_IDS = 1 << 21  # ids an engine replay keeps per request (it interns them): 2,097,152; above it
# the reader keeps only their summary (the ids are sorted in place for the distinct count, then dropped)
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
    ep: int | None = None             # expert-parallel ranks (the device budget's weight split)
    weights_bytes: int | None = None  # weights per device (replaces the inventory in the device budget)
    bucket: int | None = None
    policy: str | None = None
    prefill_tok_s: float | None = None
    tpot_ms: float | None = None
    rate_scale: float | None = None
    step_time: str | None = None      # physics | measured | fixed (steptime.StepSource); None: see settings.merge
    max_concurrency: int | None = None  # a closed-loop client: at most this many requests in flight
    spec_acceptance: float | None = None  # vLLM MTP: each draft's acceptance rate [default: TimeModel's]


@dataclass(frozen=True)
class TraceOptions:
    """How to read a trace: ``format`` None = recognise it from its header or first record."""

    format: str | None = None
    columns: tuple[tuple[str, str], ...] = ()  # (role, column name) from --columns
    time_unit: str | None = None  # s | ms | us | ns for numeric arrivals
    where: tuple[tuple[str, str], ...] = ()  # (folded column, value): rows kept when all match
    keep_failures: bool = False  # BurstGPT rows with 0 response tokens (failed requests)


@dataclass(frozen=True)
class PrefixSummary:
    """Prefix-block ids (Mooncake ``hash_ids``): how many blocks an unbounded prefix cache would reuse."""

    block_tokens: int
    blocks: int
    shared_blocks: int  # blocks whose id appeared in an earlier request (or earlier in this one)
    kept: bool = True  # False: more than MAX_REPLAY_HASH_IDS; the ids were summarised, not kept (no engine replay)

    @property
    def shared_fraction(self) -> float:
        return self.shared_blocks / self.blocks if self.blocks else 0.0


@dataclass(frozen=True)
class TraceSummary:
    """What the reader saw: the format, the rows read and why any were left out."""

    format: str
    title: str
    rows: int  # data rows read (before filters)
    excluded: tuple[tuple[str, int], ...] = ()  # (reason, rows)
    prefix: PrefixSummary | None = None
    fields: tuple[str, str, str] = ("arrival", "prompt tokens", "output tokens")  # the trace's own names


@dataclass(frozen=True, eq=False)
class Workload:
    """Requests in arrival order: arrival_ns int64; token counts int32 while every count is below
    2^30 (a sum of two stays exact), int64 otherwise; class ids the narrowest signed integer
    that holds them (int8 up to 128 classes, int16 for traces)."""

    source: str
    arrival_ns: "np.ndarray"
    prompt_tokens: "np.ndarray"
    output_tokens: "np.ndarray"
    class_ids: "np.ndarray"
    class_names: tuple[str, ...]
    settings: MixSettings = field(default_factory=MixSettings)
    notes: tuple[str, ...] = ()
    trace: TraceSummary | None = None
    hash_ids: "np.ndarray | None" = None  # every record's prefix-block ids, concatenated (int64)
    hash_offsets: "np.ndarray | None" = None  # request i's ids: hash_ids[hash_offsets[i]:hash_offsets[i + 1]]

    def __len__(self) -> int:
        return int(self.arrival_ns.shape[0])

    def base_rate_per_s(self) -> float:
        """Requests per second at rate scale 1: the count over the span of arrivals (0 when all arrive at
        once): what a rate scale is in requests per second (simulate's and sweep's rate searches)."""
        n = len(self)
        span = int(self.arrival_ns[-1] - self.arrival_ns[0]) if n else 0
        return n * NS_PER_S / span if span else 0.0

    def without_tokens(self) -> "Workload":
        """The same workload without its token columns, for a caller that holds a prepared
        scenario (its hold times and tiers) and reports only what the workload says about
        itself (source, count, classes, notes, trace summary): 8-16 bytes per request freed."""
        from dataclasses import replace

        return replace(self, prompt_tokens=self.prompt_tokens[:0].copy(), output_tokens=self.output_tokens[:0].copy())


