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

import heapq
import math
from collections import deque
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Callable

from .errors import BadInput
from .layout import STATE_CLASSES, GroupBytes
from .placement import Placement, Router, StageSplit, split_stages, stage_bundles
from .refusals import RefusalType

if TYPE_CHECKING:
    import numpy as np

    from .model import ModelSpec
    from .workloads import Workload

NS_PER_S = 1_000_000_000
TOKEN_CLIP = 1 << 40


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


REASONS: dict[Outcome, str] = {
    Outcome.EXCEEDS_CAPACITY: RefusalType.REQUEST_EXCEEDS_CAPACITY.value,
    Outcome.NEVER_FITS: "NeverFits",
    Outcome.OUT_OF_MEMORY: RefusalType.OUT_OF_MEMORY.value,
}


@dataclass(frozen=True)
class TimeModel:
    prefill_tok_s: float = 10_000.0
    tpot_ms: float = 20.0
    rate_scale: float = 1.0  # > 1 compresses arrivals (a faster arrival rate)

    def __post_init__(self) -> None:
        for name, value, positive in (("--prefill-tok-s", self.prefill_tok_s, True),
                                      ("--tpot-ms", self.tpot_ms, False),
                                      ("--rate-scale", self.rate_scale, True)):
            if not math.isfinite(value) or value < 0 or (positive and value == 0):
                raise BadInput("options", name, f"must be {'positive' if positive else 'non-negative'}, got {value}")


@dataclass(frozen=True)
class SimConfig:
    placement: Placement = Placement()
    limit_bytes: int = 0  # per device; 0 = unlimited (accounts, never refuses)
    reserve: Reserve = Reserve.MAX
    bucket: int = 4096
    policy: Policy = Policy.REFUSE
    time: TimeModel = TimeModel()
    layout: str = "exact"
    max_seq_len: int | None = None  # None: the model's own

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

    @property
    def requests(self) -> int:
        return int(self.arrival_ns.shape[0])

    def with_rate_scale(self, rate_scale: float) -> "Scenario":
        import numpy as np

        time = replace(self.config.time, rate_scale=rate_scale)
        with np.errstate(over="ignore", invalid="ignore"):  # _ns refuses what overflowed
            arrival = _ns(self.base_arrival_ns / rate_scale, "--rate-scale")
        return replace(self, config=replace(self.config, time=time), arrival_ns=arrival)


MAX_SIM_NS = 1 << 61  # about 73 years: arrival + hold then always fits the int64 clock


def _ns(seconds_ns: "np.ndarray", option: str) -> "np.ndarray":
    """Round float nanoseconds to int64, refusing (never wrapping) times beyond the clock."""
    import numpy as np

    if seconds_ns.size and not float(np.max(seconds_ns)) <= MAX_SIM_NS:  # also catches inf and NaN
        raise BadInput("options", option, "makes simulated times exceed the int64 nanosecond clock (~73 years)")
    return np.rint(seconds_ns).astype(np.int64)


def reserved_tokens(total_tokens: int, reserve: Reserve, bucket: int, window: int, max_seq_len: int) -> int:
    """Tokens one request reserves; ``fit`` is capped at max_seq_len (longer requests are refused)."""
    if reserve is Reserve.MAX:
        return max_seq_len
    return min(max(window, -(-total_tokens // bucket) * bucket), max_seq_len)


def prepare(spec: "ModelSpec", workload: "Workload", config: SimConfig) -> Scenario:
    """Size every reservation tier once (plans are cached per reserved length) and time every request."""
    import numpy as np

    from .plan import PlanOptions, plan_model

    placement = config.placement
    split = split_stages(spec.num_main_layers, spec.num_mtp_layers, placement.pp)
    if len(spec.layers) != spec.num_main_layers + spec.num_mtp_layers:
        raise BadInput(spec.source, "layers", "layer count does not match main + MTP layers")
    max_seq_len = config.max_seq_len or max(d.max_seq_len for d in spec.layers)
    window = max(d.window for d in spec.layers)
    # Clipping at 2^40 tokens keeps the sums exact; anything that long is refused as too long anyway.
    prompt = np.minimum(workload.prompt_tokens, TOKEN_CLIP)
    output = np.minimum(workload.output_tokens, TOKEN_CLIP)
    total = prompt + output
    exceeds = total > max_seq_len
    if config.reserve is Reserve.MAX:
        wanted = np.full(len(total), max_seq_len, dtype=np.int64)
    else:
        wanted = np.minimum(np.maximum(window, -(-total // config.bucket) * config.bucket), max_seq_len)
    tokens, inverse = np.unique(wanted[~exceeds], return_inverse=True)
    tier = np.full(len(total), -1, dtype=np.int64)
    tier[~exceeds] = inverse
    bundles = []
    for t in tokens.tolist():
        plan = plan_model(spec, PlanOptions(max_seq_len=int(t), tp=placement.tp, layout=config.layout))
        bundles.append(stage_bundles(plan, split))
    limit = config.limit_bytes
    never = np.zeros(len(tokens), dtype=bool)
    if limit:
        never = np.array([any(b.total_bytes > limit for b in stages) for stages in bundles], dtype=bool)
    upfront = np.full(len(total), Outcome.ADMITTED.value, dtype=np.int8)
    upfront[exceeds] = Outcome.EXCEEDS_CAPACITY.value
    if never.any():
        upfront[(tier >= 0) & never[np.maximum(tier, 0)]] = Outcome.NEVER_FITS.value
    time = config.time
    with np.errstate(over="ignore", invalid="ignore"):  # _ns refuses what overflowed
        prefill = _ns(prompt * (NS_PER_S / time.prefill_tok_s), "--prefill-tok-s")
        decode = _ns(output * (time.tpot_ms * 1_000_000.0), "--tpot-ms")
    hold = np.maximum(prefill + decode, 1)  # a request holds its groups for at least 1 ns
    scn = Scenario(config, split, max_seq_len, window, tuple(int(t) for t in tokens.tolist()),
                   tuple(bundles), workload.arrival_ns, workload.arrival_ns, hold, tier, upfront,
                   workload.class_ids, workload.class_names)
    return scn.with_rate_scale(time.rate_scale)


# -- results ------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Decisions:
    """Per request: outcome, replica (-1 if refused) and admission time (-1 if refused)."""

    outcome: "np.ndarray"
    replica: "np.ndarray"
    admit_ns: "np.ndarray"

    def same_as(self, other: "Decisions") -> bool:
        import numpy as np

        return all(np.array_equal(getattr(self, k), getattr(other, k)) for k in ("outcome", "replica", "admit_ns"))


@dataclass(frozen=True)
class DevicePeak:
    device: int
    limit_bytes: int
    peak_bytes: int
    peak_ns: int  # first instant at which the peak was reached
    at_peak: GroupBytes  # per class at that instant
    byte_ns: int  # integral of resident bytes over time (exact)
    final: GroupBytes  # residency after the last event: must be zero (baseline)


@dataclass(frozen=True)
class SimResult:
    requests: int
    admitted: int
    queued: int  # admitted after waiting
    refusals: tuple[tuple[str, int], ...]  # (reason, count), reasons with a count only
    by_class: tuple[tuple[str, int, int], ...]  # (request class, admitted, refused)
    wait_p50_ns: int | None
    wait_p99_ns: int | None
    wait_max_ns: int | None
    devices: tuple[DevicePeak, ...]
    peak_bytes: int  # all devices together
    peak_ns: int
    at_peak: GroupBytes  # per class at the moment of the total peak
    class_max: GroupBytes  # each class's own maximum over time (all devices together)
    peak_in_flight: int
    span_ns: int  # from the first arrival to the last release (or arrival)
    decisions: Decisions = field(compare=False, repr=False)

    @property
    def refused(self) -> int:
        return sum(count for _, count in self.refusals)

    @property
    def baseline_ok(self) -> bool:
        return all(d.final == GroupBytes() for d in self.devices)

    def refusal_count(self, reason: Outcome) -> int:
        return dict(self.refusals).get(REASONS[reason], 0)

    def utilization(self, device: DevicePeak) -> tuple[float | None, float | None]:
        """(mean, peak) resident / limit; None when the device is unlimited."""
        if not device.limit_bytes:
            return None, None
        mean = device.byte_ns / (device.limit_bytes * self.span_ns) if self.span_ns else 0.0
        return mean, device.peak_bytes / device.limit_bytes


def nearest_rank(sorted_values: list[int], pct: int) -> int:
    """The nearest-rank percentile: an exact member of the data, no interpolation."""
    rank = max(1, -(-pct * len(sorted_values) // 100))
    return sorted_values[rank - 1]


def _summary(scn: Scenario, d: Decisions) -> dict:
    """Counts and waits, shared by both implementations (they derive only from decisions)."""
    import numpy as np

    admitted = d.outcome == Outcome.ADMITTED.value
    waits = np.sort((d.admit_ns - scn.arrival_ns)[admitted]).tolist()
    refusals = tuple((REASONS[o], int((d.outcome == o.value).sum())) for o in REASONS
                     if int((d.outcome == o.value).sum()))
    by_class = []
    for k, name in enumerate(scn.class_names):
        mine = scn.class_ids == k
        by_class.append((name, int((mine & admitted).sum()), int((mine & ~admitted).sum())))
    return dict(
        requests=scn.requests, admitted=int(admitted.sum()), queued=sum(1 for w in waits if w > 0),
        refusals=refusals, by_class=tuple(by_class),
        wait_p50_ns=nearest_rank(waits, 50) if waits else None,
        wait_p99_ns=nearest_rank(waits, 99) if waits else None,
        wait_max_ns=waits[-1] if waits else None,
    )


# -- the fast path ------------------------------------------------------------------------


def decide(scn: Scenario, progress: Callable[[int, int], None] | None = None, shortcut: bool = True) -> Decisions:
    """Admission decisions from integer per-(replica, stage) totals.

    With ``shortcut``, a run in which admitting everything on arrival never passes a
    limit is decided without the event loop (the loop would reach the same answer).
    """
    import numpy as np

    n = scn.requests
    placement, config = scn.config.placement, scn.config
    dp, pp = placement.dp, placement.pp
    limit = config.limit_bytes
    outcome = scn.upfront.copy()
    replica = np.full(n, -1, dtype=np.int64)
    admit = np.full(n, -1, dtype=np.int64)
    ok = outcome == Outcome.ADMITTED.value
    if not ok.any():
        return Decisions(outcome, replica, admit)
    uncontended = shortcut and (dp == 1 or placement.router is Router.ROUND_ROBIN) and (
        not limit or _optimistic_fits(scn, ok))
    if uncontended:  # nothing ever waits or is refused for memory: admitted on arrival, in rotation
        replica[ok] = np.arange(int(ok.sum())) % dp
        admit[ok] = scn.arrival_ns[ok]
        return Decisions(outcome, replica, admit)

    if not limit:
        limit = 1 << 126  # unlimited: the loop still routes (least-loaded needs the levels)
    need = [tuple(b.total_bytes for b in stages) for stages in scn.bundles]
    res = [[0] * pp for _ in range(dp)]
    arr = scn.arrival_ns.tolist()
    hold = scn.hold_ns.tolist()
    tier = scn.tier.tolist()
    up = ok.tolist()
    out_l = outcome.tolist()
    rep_l = [-1] * n
    adm_l = [-1] * n
    heap: list[tuple[int, int]] = []
    pointer = 0
    round_robin = placement.router is Router.ROUND_ROBIN
    stages = range(pp)
    queue_policy = config.policy is Policy.QUEUE
    queue: deque[int] = deque()
    oom = Outcome.OUT_OF_MEMORY.value
    report_every = max(n // 100, 1)

    def route() -> int:
        if round_robin or dp == 1:
            return pointer
        loads = [sum(r) for r in res]
        return loads.index(min(loads))

    def try_admit(i: int, t: int) -> bool:
        nonlocal pointer
        r = route()
        mine, needs = res[r], need[tier[i]]
        if pp == 1:
            if mine[0] + needs[0] > limit:
                return False
            mine[0] += needs[0]
        else:
            for s in stages:
                if mine[s] + needs[s] > limit:
                    return False
            for s in stages:
                mine[s] += needs[s]
        rep_l[i] = r
        adm_l[i] = t
        heapq.heappush(heap, (t + hold[i], i))
        pointer = (r + 1) % dp
        return True

    def release_until(t: int, inclusive: bool) -> bool:
        released = False
        while heap and (heap[0][0] <= t if inclusive else heap[0][0] == t):
            _, j = heapq.heappop(heap)
            mine, needs = res[rep_l[j]], need[tier[j]]
            for s in stages:
                mine[s] -= needs[s]
            released = True
        return released

    if not queue_policy:
        for i in range(n):
            if progress and i % report_every == 0:
                progress(i, n)
            t = arr[i]
            if heap and heap[0][0] <= t:
                release_until(t, True)
            if up[i] and not try_admit(i, t):
                out_l[i] = oom
    else:
        i = 0
        while i < n or heap:
            if progress and i % report_every == 0:
                progress(i, n)
            t = arr[i] if i < n else heap[0][0]
            if heap and heap[0][0] < t:
                t = heap[0][0]
            if release_until(t, False) and queue:
                while queue and try_admit(queue[0], t):
                    queue.popleft()
            while i < n and arr[i] == t:
                if up[i]:
                    if queue or not try_admit(i, t):
                        queue.append(i)
                i += 1
        if queue:  # cannot happen: every queued request fits an empty replica
            raise RuntimeError("simulation ended with requests still queued")
    if progress:
        progress(n, n)
    return Decisions(np.array(out_l, dtype=np.int8), np.array(rep_l, dtype=np.int64),
                     np.array(adm_l, dtype=np.int64))


def _optimistic_fits(scn: Scenario, ok: "np.ndarray") -> bool:
    """Would admitting every request on arrival (round-robin) stay within the limit everywhere?"""
    import numpy as np

    dp = scn.config.placement.dp
    idx = np.flatnonzero(ok)
    rep = np.arange(len(idx)) % dp
    t_in = scn.arrival_ns[idx]
    t_out = t_in + scn.hold_ns[idx]
    for s in range(scn.config.placement.pp):
        per_tier = np.array([stages[s].total_bytes for stages in scn.bundles], dtype=np.int64)
        b = per_tier[scn.tier[idx]]
        for r in range(dp):
            m = rep == r
            if not m.any():
                continue
            level = _levels(t_out[m], t_in[m], b[m])[1]
            if level.max() > scn.config.limit_bytes:
                return False
    return True


def _order(t_out: "np.ndarray", t_in: "np.ndarray") -> "np.ndarray":
    """Event order: by time, releases before admissions at one instant."""
    import numpy as np

    key = np.concatenate([t_out * 2, t_in * 2 + 1])
    return np.argsort(key, kind="stable")


def _levels(t_out: "np.ndarray", t_in: "np.ndarray", b: "np.ndarray") -> tuple["np.ndarray", "np.ndarray"]:
    import numpy as np

    order = _order(t_out, t_in)
    delta = np.concatenate([-b, b])[order]
    return order, np.cumsum(delta)


def _instant_ends(times: "np.ndarray") -> "np.ndarray":
    """Indices of the last event of each instant: where the state is observed."""
    import numpy as np

    last = np.ones(len(times), dtype=bool)
    if len(times) > 1:
        last[:-1] = times[1:] != times[:-1]
    return np.flatnonzero(last)


def _group_series(t_out, t_in, per_class_b, weight: int):
    """Per-class state at each instant end: (times, level_total, levels_by_class list)."""
    import numpy as np

    order = _order(t_out, t_in)
    times = np.concatenate([t_out, t_in])[order]
    ends = _instant_ends(times)
    by_class = []
    for col in per_class_b:
        delta = np.concatenate([-col, col])[order] * weight
        by_class.append(np.cumsum(delta)[ends])
    total = by_class[0].copy()
    for lv in by_class[1:]:
        total += lv
    return times[ends], total, by_class


def _peak(times, total, by_class) -> tuple[int, int, GroupBytes]:
    if len(total) == 0:
        return 0, 0, GroupBytes()
    j = int(total.argmax())
    if int(total[j]) <= 0:
        return 0, 0, GroupBytes()
    return int(total[j]), int(times[j]), GroupBytes(*(int(lv[j]) for lv in by_class))


def observe(scn: Scenario, d: Decisions) -> SimResult:
    """Every observable from the decisions, vectorized; equal to the ledger replay's."""
    import numpy as np

    placement = scn.config.placement
    tp, pp, dp = placement.tp, placement.pp, placement.dp
    limit = scn.config.limit_bytes
    adm = np.flatnonzero(d.outcome == Outcome.ADMITTED.value)
    t_in = d.admit_ns[adm]
    t_out = t_in + scn.hold_ns[adm]
    rep = d.replica[adm]
    tiers = scn.tier[adm]
    ntiers = len(scn.bundles)
    class_tables = [np.array([[getattr(stages[s], f"{c.value}_bytes") for c in STATE_CLASSES]
                              for stages in scn.bundles], dtype=np.int64).reshape(ntiers, len(STATE_CLASSES))
                    for s in range(pp)]
    devices: list[DevicePeak] = []
    all_out, all_in, all_cols = [], [], []
    for r in range(dp):
        m = rep == r
        for s in range(pp):
            table = class_tables[s]
            cols = [table[tiers[m], c] for c in range(len(STATE_CLASSES))]
            times, total, by_class = _group_series(t_out[m], t_in[m], cols, 1)
            peak, peak_ns, at_peak = _peak(times, total, by_class)
            final = GroupBytes(*(int(lv[-1]) if len(lv) else 0 for lv in by_class))
            hold_by_tier = np.zeros(ntiers, dtype=np.int64)
            np.add.at(hold_by_tier, tiers[m], scn.hold_ns[adm][m])
            byte_ns = sum(int(h) * scn.bundles[k][s].total_bytes for k, h in enumerate(hold_by_tier.tolist()))
            for rank in range(tp):
                devices.append(DevicePeak(placement.device(r, s, rank), limit, peak, peak_ns, at_peak, byte_ns, final))
            all_out.append(t_out[m])
            all_in.append(t_in[m])
            all_cols.append(cols)
    if all_out:
        cols = [np.concatenate([g[c] for g in all_cols]) for c in range(len(STATE_CLASSES))]
        times, total, by_class = _group_series(np.concatenate(all_out), np.concatenate(all_in), cols, tp)
    else:
        times = total = np.zeros(0, dtype=np.int64)
        by_class = [total] * len(STATE_CLASSES)
    peak, peak_ns, at_peak = _peak(times, total, by_class)
    class_max = GroupBytes(*(max(int(lv.max()), 0) if len(lv) else 0 for lv in by_class))
    ones = np.ones(len(adm), dtype=np.int64)
    in_flight = _levels(t_out, t_in, ones)[1]
    peak_in_flight = int(in_flight.max()) if len(in_flight) else 0
    last_arrival = int(scn.arrival_ns[-1]) if scn.requests else 0
    span = max(last_arrival, int(t_out.max()) if len(t_out) else 0) - (int(scn.arrival_ns[0]) if scn.requests else 0)
    devices.sort(key=lambda x: x.device)
    return SimResult(**_summary(scn, d), devices=tuple(devices), peak_bytes=peak, peak_ns=peak_ns, at_peak=at_peak,
                     class_max=class_max, peak_in_flight=peak_in_flight, span_ns=span, decisions=d)


def simulate(scn: Scenario, progress: Callable[[int, int], None] | None = None) -> SimResult:
    return observe(scn, decide(scn, progress))
