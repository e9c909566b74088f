"""Replay a workload through device memory: admission, refusal, queueing, residency.

Time model: a request holds its groups from admission until prefill
(prompt / prefill_tok_s) plus decode (output x tpot_ms) completes; times are
integer nanoseconds so ties are exact. At one instant releases happen before
admissions; queued requests (FIFO) are tried after the releases, before the
instant's arrivals.

Two implementations share ``Scenario`` and must agree exactly (tests prove it):
``simulate`` decides admissions with integer per-stage totals and derives every
observable with numpy, and ``sim_replay.replay`` charges a real ``Ledger`` event by
event; ``sim_capacity.find_capacity`` bisects the arrival-rate scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING

from csa_plan.planner.clock import MAX_CLOCK_NS, MAX_SIM_NS, refuse_past, refuse_past_clock
from csa_plan.planner.units import NS_PER_S, round_up
from csa_plan.planner.errors import BadInput
from csa_plan.planner.layout import GroupBytes
from csa_plan.planner.placement import Placement, StageSplit, split_stages, stage_bundles
from csa_plan.planner.refusals import RefusalType
from csa_plan.planner.replay.draft_acceptance import DEFAULT_RATE

if TYPE_CHECKING:
    import numpy as np

    from csa_plan.planner.reserve.engine_run import EngineRun

    from csa_plan.planner.model import ModelSpec
    from csa_plan.planner.workloads.workload import Workload

TOKEN_CLIP = 1 << 40


DEFAULT_BUCKET = 4096
"""Tokens per bucket for ``--reserve fit``: prompt + output is rounded up to a multiple."""


class Reserve(str, Enum):
    MAX = "max"  # every group reserved for max_seq_len, as the runtime does
    FIT = "fit"  # prompt + output rounded up to the bucket


class Policy(str, Enum):
    REFUSE = "refuse"
    QUEUE = "queue"


class Outcome(int, Enum):
    ADMITTED = 0
    EXCEEDS_CAPACITY = 1  # prompt + output > max_seq_len
    NEVER_FITS = 2  # the bundle exceeds an empty device's limit
    OUT_OF_MEMORY = 3  # did not fit at arrival (refuse policy)
    RUNNING_CAP = 4  # the engine's running-request cap was full at arrival (refuse policy)


REASONS: dict[Outcome, str] = {
    Outcome.EXCEEDS_CAPACITY: RefusalType.REQUEST_EXCEEDS_CAPACITY.value,
    Outcome.NEVER_FITS: RefusalType.NEVER_FITS.value,
    Outcome.OUT_OF_MEMORY: RefusalType.OUT_OF_MEMORY.value,
    Outcome.RUNNING_CAP: RefusalType.RUNNING_REQUEST_CAP.value,
}


@dataclass(frozen=True)
class TimeModel:
    prefill_tok_s: float = 10_000.0
    tpot_ms: float = 20.0
    rate_scale: float = 1.0  # > 1 compresses arrivals (a faster arrival rate)
    step_time: str = "fixed"  # steptime.StepSource: engine replays only (the ledger's steps are the constants)
    max_concurrency: int | None = None  # a closed-loop client (engine replays): at most this many in flight
    spec_acceptance: float = DEFAULT_RATE  # vLLM MTP replays: each draft's acceptance rate

    def __post_init__(self) -> None:
        from csa_plan.planner.limits import MAX_PREFILL_TOK_S, MAX_RATE_SCALE, MAX_TPOT_MS

        for name, value, positive, high in (("--prefill-tok-s", self.prefill_tok_s, True, MAX_PREFILL_TOK_S),
                                            ("--tpot-ms", self.tpot_ms, False, MAX_TPOT_MS),
                                            ("--rate-scale", self.rate_scale, True, MAX_RATE_SCALE)):
            if not math.isfinite(value) or value < 0 or (positive and value == 0):
                raise BadInput("options", name, f"must be {'positive' if positive else 'non-negative'}, got {value}")
            if value > high:
                from csa_plan.planner.values import shown_against
                raise BadInput("options", name, f"must be at most {high:g}, got {shown_against(value, high)}")


@dataclass(frozen=True)
class SimConfig:
    placement: Placement = Placement()
    limit_bytes: int = 0  # per device; 0 = unlimited (accounts, never refuses)
    reserve: Reserve = Reserve.MAX
    bucket: int = DEFAULT_BUCKET
    policy: Policy = Policy.REFUSE
    time: TimeModel = TimeModel()
    layout: str = "exact"
    max_seq_len: int | None = None  # None: the model's own
    engine: "EngineRun | None" = None  # charge what this engine model charges (planner/engines)
    max_running: int = 0  # running requests per replica at most (the engine's cap); 0 = no cap

    def __post_init__(self) -> None:
        if self.bucket < 1:
            raise BadInput("options", "--bucket", f"must be at least 1, got {self.bucket}")
        if self.limit_bytes < 0:
            raise BadInput("options", "--device-memory", "limit must not be negative")


@dataclass(frozen=True, eq=False)
class Scenario:
    """Everything both implementations consume: per-request times and tiers, per-tier bundles."""

    config: SimConfig
    split: StageSplit
    max_seq_len: int
    window: int
    tier_tokens: tuple[int, ...]  # reserved tokens of each tier
    bundles: tuple[tuple[GroupBytes, ...], ...]  # [tier][stage]: bytes on each device of that stage
    base_arrival_ns: "np.ndarray"  # before --rate-scale
    arrival_ns: "np.ndarray"
    hold_ns: "np.ndarray"
    tier: "np.ndarray"  # -1 for a request refused up front
    upfront: "np.ndarray"  # Outcome per request: ADMITTED (= not refused up front) or a refusal
    class_ids: "np.ndarray"
    class_names: tuple[str, ...]
    source: str = "workload"  # the workload's file (messages name it)

    @property
    def requests(self) -> int:
        return int(self.arrival_ns.shape[0])

    @property
    def min_rate_scale(self) -> float:
        """The slowest rate scale whose arrival times the int64 nanosecond clock holds (the latest
        arrival / scale <= MAX_SIM_NS): a rate search never goes below it (0.0: no arrival to scale)."""
        last = float(self.base_arrival_ns.max()) if self.requests else 0.0
        if last <= 0:
            return 0.0
        floor = last / MAX_SIM_NS
        while not last / floor <= MAX_SIM_NS:  # float division may round just past the clock
            floor = math.nextafter(floor, math.inf)
        return floor

    def repeated(self, copies: int, rate_scale: float | None = None) -> "Scenario":
        """The scenario of its trace repeated ``copies`` times (``planner/steady.py`` ``EXTENSION``),
        at ``rate_scale`` (None: its own); 1 copy: itself at that scale."""
        import numpy as np

        from csa_plan.planner.steady import repeat_arrivals

        scale = self.config.time.rate_scale if rate_scale is None else rate_scale
        if copies <= 1 or not self.requests:
            return self if scale == self.config.time.rate_scale else self.with_rate_scale(scale)
        tile = lambda a: np.tile(a, copies)  # noqa: E731
        return replace(self, base_arrival_ns=repeat_arrivals(self.base_arrival_ns, copies), hold_ns=tile(self.hold_ns),
                       tier=tile(self.tier), upfront=tile(self.upfront),
                       class_ids=tile(self.class_ids)).with_rate_scale(scale)

    def with_rate_scale(self, rate_scale: float) -> "Scenario":
        import numpy as np

        time = replace(self.config.time, rate_scale=rate_scale)
        if rate_scale == 1.0 and (not self.requests or int(self.base_arrival_ns[-1]) <= 1 << 53):
            arrival = self.base_arrival_ns  # x / 1.0 rounds back to x exactly below 2^53
        else:  # the latest arrival first (x -> x / scale is monotone), then a slice at a time
            base = self.base_arrival_ns
            with np.errstate(over="ignore", invalid="ignore"):  # _ns refuses what overflowed
                if len(base):
                    refuse_past_clock(int(base.max()), rate_scale)
                arrival = np.empty(len(base), dtype=np.int64)
                for lo in range(0, len(base), SLICE):
                    x = base[lo:lo + SLICE] / rate_scale
                    np.rint(x, out=x)
                    arrival[lo:lo + len(x)] = x
        return replace(self, config=replace(self.config, time=time), arrival_ns=arrival)


SLICE = 1 << 19
"""Requests prepared together (bounds the temporaries)."""

MAX_RESERVE_TIERS = 2048
"""Distinct reserved lengths (tiers) of one run: each is planned over every layer (a few ms each), so
this keeps preparing a run within seconds; the default bucket gives at most 256 at a 1M context."""

SEEN_TABLE_MAX = 1 << 22
"""Reserved lengths up to this are collected in a table of flags (else by sorting each slice)."""



def clock_overflow(scn: Scenario, request: int, admit_ns: int) -> BadInput:
    """Request ``request``'s release (admission + hold) would pass the int64 clock.

    Under the refuse policy that cannot happen (an arrival and each part of a hold are at most
    MAX_SIM_NS); under queue a request is admitted at an earlier release, so release times add
    up along the queue. Both decision loops (and the ledger replay) stop at the first such
    request: bad input, never a wrapped time."""
    hold = int(scn.hold_ns[request])
    return BadInput(scn.source, f"request {request + 1:,}",
                    f"admitted at {admit_ns / NS_PER_S:,.0f} s (after queueing), it would be released "
                    f"{hold / NS_PER_S:,.0f} s later, past the int64 nanosecond clock (about 292 years, "
                    "MAX_CLOCK_NS): shorten the trace, its token counts or --tpot-ms / --prefill-tok-s")


def _ns(seconds_ns: "np.ndarray", option: str, workload: "Workload | None" = None, role: int = 0) -> "np.ndarray":
    """Round float nanoseconds to int64, refusing (never wrapping) times beyond the clock.

    When one request's token count (``role`` 1 prompt, 2 output) is what pushes its time past
    the clock, the message names that request and the workload's field, not the option."""
    import numpy as np

    if seconds_ns.size and not float(np.max(seconds_ns)) <= MAX_SIM_NS:  # also catches inf and NaN
        if workload is not None and role:
            tokens = workload.prompt_tokens if role == 1 else workload.output_tokens
            i = int(np.argmax(tokens))
            field = (workload.trace.fields[role] if workload.trace is not None
                     else ("prompt tokens", "output tokens")[role - 1])
            if int(tokens[i]) >= 1 << 32:  # no realistic option value makes a sane count overflow
                raise BadInput(workload.source, field, f"request {i + 1:,} has {int(tokens[i]):,} tokens: its "
                               f"time at {option} would exceed the int64 nanosecond clock (~73 years)")
    refuse_past(seconds_ns, option)
    return np.rint(seconds_ns, out=seconds_ns).astype(np.int64) if seconds_ns.dtype == np.float64 else \
        np.rint(seconds_ns).astype(np.int64)


def tier_dtype(ntiers: int) -> "np.dtype":
    """The narrowest signed integer that holds every tier index and -1."""
    import numpy as np

    return np.dtype(np.int8 if ntiers <= 127 else np.int16 if ntiers <= 32767 else np.int32)


def reserved_tokens(total_tokens: int, reserve: Reserve, bucket: int, window: int, max_seq_len: int) -> int:
    """Tokens one request reserves; ``fit`` is capped at max_seq_len (longer requests are refused)."""
    if reserve is Reserve.MAX:
        return max_seq_len
    return min(max(window, round_up(total_tokens, bucket)), max_seq_len)


def prepare(spec: "ModelSpec", workload: "Workload", config: SimConfig) -> Scenario:
    """Size every reservation tier once (plans are cached per reserved length) and time every request."""
    import numpy as np

    from csa_plan.planner.plan import PlanOptions, plan_model

    placement = config.placement
    split = split_stages(spec.num_main_layers, spec.num_mtp_layers, placement.pp)
    if len(spec.layers) != spec.num_main_layers + spec.num_mtp_layers:
        raise BadInput(spec.source, "layers", "layer count does not match main + MTP layers")
    max_seq_len = config.max_seq_len or max(d.max_seq_len for d in spec.layers)
    window = max(d.window for d in spec.layers)
    # Clipping at 2^40 tokens keeps the sums exact; anything that long is refused as too long anyway.
    # Requests are prepared a slice at a time into arrays allocated once (hold int64, tier as
    # narrow as the tier count allows, upfront int8): no temporary grows with the trace.
    n = len(workload)
    time = config.time
    per_prompt, per_output = NS_PER_S / time.prefill_tok_s, time.tpot_ms * 1_000_000.0
    if n:  # the largest time of each kind first (x -> x * f is monotone): refused before any work
        with np.errstate(over="ignore", invalid="ignore"):
            for role, tokens, f, option in ((1, workload.prompt_tokens, per_prompt, "--prefill-tok-s"),
                                            (2, workload.output_tokens, per_output, "--tpot-ms")):
                _ns(np.array([min(int(tokens.max()), TOKEN_CLIP)], dtype=np.int64) * f, option, workload, role)
    hold = np.empty(n, dtype=np.int64)
    fit = config.reserve is Reserve.FIT
    seen = np.zeros(max_seq_len + 1 if max_seq_len <= SEEN_TABLE_MAX else 0, dtype=bool)
    seen_sets: list["np.ndarray"] = []
    any_fits = False

    def lengths(lo: int, hi: int) -> tuple["np.ndarray", "np.ndarray"]:
        """(reserved tokens, exceeds max_seq_len) of requests lo..hi (``fit``; under ``max`` the totals)."""
        total = workload.prompt_tokens[lo:hi].astype(np.int64)
        np.minimum(total, TOKEN_CLIP, out=total)
        out = workload.output_tokens[lo:hi].astype(np.int64)
        np.minimum(out, TOKEN_CLIP, out=out)
        total += out
        exceeds = total > max_seq_len
        if fit:  # ceil(total / bucket) x bucket, at least the window, at most max_seq_len, in place
            np.negative(total, out=total)
            np.floor_divide(total, config.bucket, out=total)
            np.negative(total, out=total)
            total *= config.bucket
            np.maximum(total, window, out=total)
            np.minimum(total, max_seq_len, out=total)
        return total, exceeds

    with np.errstate(over="ignore", invalid="ignore"):
        for lo in range(0, n, SLICE):
            hi = min(n, lo + SLICE)
            h = hold[lo:hi]
            p = workload.prompt_tokens[lo:hi].astype(np.int64)
            np.minimum(p, TOKEN_CLIP, out=p)
            h[:] = np.rint(p * per_prompt)
            p = workload.output_tokens[lo:hi].astype(np.int64)
            np.minimum(p, TOKEN_CLIP, out=p)
            h += np.rint(p * per_output).astype(np.int64)
            np.maximum(h, 1, out=h)  # a request holds its groups for at least 1 ns
            wanted, exceeds = lengths(lo, hi)
            if fit:
                kept = wanted[~exceeds]
                if len(seen):
                    seen[kept] = True
                elif len(kept):
                    seen_sets.append(np.unique(kept))
            any_fits = any_fits or not bool(exceeds.all())
    if not fit:
        tokens = np.array([max_seq_len] if any_fits else [], dtype=np.int64)
    elif len(seen):
        tokens = np.flatnonzero(seen).astype(np.int64)
    else:
        tokens = np.unique(np.concatenate(seen_sets)) if seen_sets else np.zeros(0, dtype=np.int64)
    del seen, seen_sets
    if len(tokens) > MAX_RESERVE_TIERS:  # each tier is a plan of every layer: bounded before any is made
        raise BadInput("options", "--bucket", f"{len(tokens):,} distinct reserved lengths under --reserve fit "
                       f"--bucket {config.bucket:,} (at most {MAX_RESERVE_TIERS:,}, MAX_RESERVE_TIERS): use a larger "
                       "--bucket")
    bundles = []
    if config.engine is not None:
        limit, cap, bundles = config.engine.prepare(spec, placement.pp, config.limit_bytes, max_seq_len,
                                                    [int(t) for t in tokens.tolist()])
        config = replace(config, limit_bytes=limit, max_running=cap)
    for t in tokens.tolist() if config.engine is None else ():
        plan = plan_model(spec, PlanOptions(max_seq_len=int(t), tp=placement.tp, layout=config.layout))
        bundles.append(stage_bundles(plan, split))
    limit = config.limit_bytes
    never = np.zeros(len(tokens), dtype=bool)
    if limit:
        never = np.array([any(b.total_bytes > limit for b in stages) for stages in bundles], dtype=bool)
    tier = np.empty(n, dtype=tier_dtype(len(tokens)))
    upfront = np.empty(n, dtype=np.int8)
    for lo in range(0, n, SLICE):
        hi = min(n, lo + SLICE)
        wanted, exceeds = lengths(lo, hi)
        t = np.searchsorted(tokens, wanted) if fit else np.zeros(hi - lo, dtype=np.int64)
        t[exceeds] = -1
        tier[lo:hi] = t
        u = upfront[lo:hi]
        u[:] = Outcome.ADMITTED.value
        u[exceeds] = Outcome.EXCEEDS_CAPACITY.value
        if never.any():
            u[(t >= 0) & never[np.maximum(t, 0)]] = Outcome.NEVER_FITS.value
    scn = Scenario(config, split, max_seq_len, window, tuple(int(t) for t in tokens.tolist()),
                   tuple(bundles), workload.arrival_ns, workload.arrival_ns, hold, tier, upfront,
                   workload.class_ids, workload.class_names, workload.source)
    return scn.with_rate_scale(time.rate_scale)

