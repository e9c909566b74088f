"""The fast path: admission decisions from integer totals, observables with numpy."""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

from csa_plan.planner.extensions import OptionalExtension
from csa_plan.planner.layout import STATE_CLASSES, GroupBytes
from csa_plan.planner.placement import Router

from csa_plan.planner.clock import MAX_CLOCK_NS
from csa_plan.planner.reserve.decisions import Decisions
from csa_plan.planner.reserve.scenario import REASONS, Outcome, Policy, Scenario, clock_overflow
from csa_plan.planner.reserve.timeline import (SLICE_REQUESTS, Levels, Timeline, admitted_mask, event_order, scan,
                                               series_edges, timeline)

if TYPE_CHECKING:
    import numpy as np


# -- results ------------------------------------------------------------------------------


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


def nearest_rank(sorted_values: "Sequence[int] | np.ndarray", pct: int) -> int:
    """The nearest-rank percentile: an exact member of the data, no interpolation."""
    rank = max(1, -(-pct * len(sorted_values) // 100))
    return int(sorted_values[rank - 1])


def summarize(scn: Scenario, d: Decisions) -> dict:
    """Counts and waits, shared by both implementations (they derive only from decisions).

    Read a slice of requests at a time; only the non-zero waits are kept and sorted (the
    zeros are counted), so a run in which nobody waits builds no per-request array."""
    import numpy as np

    n = scn.requests
    counts = np.zeros(256, dtype=np.int64)
    nclass = len(scn.class_names)
    per_class = np.zeros((2, max(nclass, 1)), dtype=np.int64)  # [admitted, refused] per class
    zero_waits = 0
    waiting: list["np.ndarray"] = []
    for lo in range(0, n, SLICE_REQUESTS):
        hi = lo + SLICE_REQUESTS
        out = d.outcome[lo:hi]
        counts += np.bincount(out.view(np.uint8), minlength=256)
        admitted = out == Outcome.ADMITTED.value
        cls = scn.class_ids[lo:hi]
        per_class[0] += np.bincount(cls[admitted], minlength=per_class.shape[1])[:per_class.shape[1]]
        per_class[1] += np.bincount(cls[~admitted], minlength=per_class.shape[1])[:per_class.shape[1]]
        if d.stored_admit_ns is None:  # admitted on arrival: every wait is 0
            zero_waits += int(np.count_nonzero(admitted))
            continue
        wait = d.stored_admit_ns[lo:hi][admitted] - scn.arrival_ns[lo:hi][admitted]
        positive = wait[wait > 0]
        zero_waits += len(wait) - len(positive)
        if len(positive):
            waiting.append(positive)
    waits = np.sort(np.concatenate(waiting)) if waiting else np.zeros(0, dtype=np.int64)
    total = zero_waits + len(waits)

    def rank(pct: int) -> int | None:
        if not total:
            return None
        r = max(1, -(-pct * total // 100))  # nearest rank: zeros come first in sorted order
        return 0 if r <= zero_waits else int(waits[r - zero_waits - 1])

    refusals = tuple((REASONS[o], int(counts[o.value])) for o in REASONS if int(counts[o.value]))
    by_class = tuple((name, int(per_class[0, k]), int(per_class[1, k])) for k, name in enumerate(scn.class_names))
    return dict(
        requests=n, admitted=int(counts[Outcome.ADMITTED.value]), queued=len(waits),
        refusals=refusals, by_class=by_class,
        wait_p50_ns=rank(50), wait_p99_ns=rank(99),
        wait_max_ns=(int(waits[-1]) if len(waits) else 0) if total else None,
    )


# -- the fast path ------------------------------------------------------------------------


CDECIDE_ABI = 3  # cdecide.c's CDECIDE_ABI: the calling convention this module's caller uses
CDECIDE = OptionalExtension("csa_plan.planner.reserve.cdecide", CDECIDE_ABI)


def compiled_loop():
    """The compiled decision loop (the optional ``cdecide`` extension), or None without it or with a
    stale build (``planner/extensions.py``)."""
    return CDECIDE.load()


I64_MAX = MAX_CLOCK_NS  # int64 (byte totals and nanosecond times alike)


def _fits_int64(scn: Scenario, ok: "np.ndarray", need: list[tuple[int, ...]]) -> bool:
    """Can every per-(replica, stage) total the loop forms stay below 2^63? With a limit a total
    never passes it before a check adds one more bundle; unlimited, it is at most every bundle."""
    import numpy as np

    pp = scn.config.placement.pp
    most = [max(stages[s] for stages in need) for s in range(pp)]
    if scn.config.limit_bytes:
        cap = [scn.config.limit_bytes] * pp
    else:
        total = np.zeros(len(need), dtype=np.int64)
        for lo in range(0, len(ok), SLICE_REQUESTS):
            total += np.bincount(scn.tier[lo:lo + SLICE_REQUESTS][ok[lo:lo + SLICE_REQUESTS]], minlength=len(need))
        counts = total.tolist()
        cap = [sum(c * stages[s] for c, stages in zip(counts, need)) for s in range(pp)]
    return all(c + m <= I64_MAX for c, m in zip(cap, most)) and sum(cap) + sum(most) <= I64_MAX


def compiled_fits(scn: Scenario) -> bool:
    """Would the compiled loop take this scenario (built, and every total within int64)?"""
    if compiled_loop() is None:
        return False
    ok = scn.upfront == Outcome.ADMITTED.value
    return bool(ok.any()) and _fits_int64(scn, ok, [tuple(b.total_bytes for b in st) for st in scn.bundles])


def decide(scn: Scenario, progress: Callable[[int, int], None] | None = None, shortcut: bool = True,
           compiled: bool | None = None) -> Decisions:
    """Admission decisions from integer per-(replica, stage) totals.

    The loop runs compiled (``cdecide``) when the extension is built and every total fits
    int64 (``compiled=False`` forces the Python loop, ``True`` requires the compiled one);
    both take the same decisions. The Python loop takes a shortcut: with ``shortcut``, a run
    in which admitting everything on arrival never passes a limit is decided without the
    event loop (the loop would reach the same answer). The compiled loop needs no shortcut.
    """
    import numpy as np

    n = scn.requests
    placement, config = scn.config.placement, scn.config
    dp, pp = placement.dp, placement.pp
    limit = config.limit_bytes
    outcome = scn.upfront.copy()
    rep_dtype = np.int16 if dp <= 32767 else np.int32  # MAX_DP keeps it int16
    replica = np.full(n, -1, dtype=rep_dtype)
    admit = np.full(n, -1, dtype=np.int64)
    ok = outcome == Outcome.ADMITTED.value
    if not ok.any():
        return Decisions(outcome, replica, admit)
    need = [tuple(b.total_bytes for b in stages) for stages in scn.bundles]
    kernel = compiled_loop() if compiled is not False else None
    if compiled and kernel is None:
        raise RuntimeError("the compiled decision loop (csa_plan.planner.reserve.cdecide) is not built")
    cap = config.max_running  # the engine's running-request cap per replica (0: none)
    if kernel is not None and _fits_int64(scn, ok, need):
        if progress:
            progress(0, n)
        flat = np.array([b for stages in need for b in stages], dtype=np.int64)
        events = np.empty(2 * n, dtype=np.int32)  # pages never written are never resident
        queue = config.policy is Policy.QUEUE
        admit = admit if queue else np.zeros(0, dtype=np.int64)  # refuse: admitted on arrival, not stored
        nev, last, overflow = kernel.decide(n, np.ascontiguousarray(scn.arrival_ns, dtype=np.int64),
                                  np.ascontiguousarray(scn.hold_ns, dtype=np.int64),
                                  np.ascontiguousarray(scn.tier), ok.view(np.int8), len(need), flat,
                                  dp, pp, limit or I64_MAX, cap, placement.router is Router.ROUND_ROBIN,
                                  queue, Outcome.OUT_OF_MEMORY.value,
                                  Outcome.RUNNING_CAP.value, outcome, replica, admit, events)
        if overflow >= 0:
            raise clock_overflow(scn, overflow, int(admit[overflow]) if queue else int(scn.arrival_ns[overflow]))
        if progress:
            progress(n, n)
        d = Decisions(outcome, replica, admit if queue else None, scn.arrival_ns)
        # the loop's own timeline (a view: the unwritten tail of the buffer is never resident)
        d.cache["timeline"] = Timeline(events[:nev], int(last) if nev else 0)
        return d
    if compiled:
        raise RuntimeError("byte totals beyond int64: the compiled decision loop cannot take this run")
    uncontended = shortcut and not cap and (dp == 1 or placement.router is Router.ROUND_ROBIN) and (
        not limit or _optimistic_fits(scn, ok))
    if uncontended:  # nothing ever waits or is refused for memory: admitted on arrival, in rotation
        replica[ok] = np.arange(int(ok.sum())) % dp
        admit[ok] = scn.arrival_ns[ok]
        return Decisions(outcome, replica, admit)

    if not limit:
        limit = 1 << 126  # unlimited: the loop still routes (least-loaded needs the levels)
    res = [[0] * pp for _ in range(dp)]
    running = [0] * dp
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
    capped = Outcome.RUNNING_CAP.value
    last_reason = [oom]
    report_every = max(n // 100, 1)

    def route() -> int:
        if round_robin or dp == 1:
            return pointer
        loads = [sum(r) for r in res]
        return loads.index(min(loads))

    def try_admit(i: int, t: int) -> bool:
        nonlocal pointer
        if t + hold[i] > I64_MAX:
            raise clock_overflow(scn, i, t)
        r = route()
        if cap and running[r] >= cap:
            last_reason[0] = capped
            return False
        last_reason[0] = oom
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
        running[r] += 1
        heapq.heappush(heap, (t + hold[i], i))
        pointer = (r + 1) % dp
        return True

    def release_until(t: int, inclusive: bool) -> bool:
        released = False
        while heap and (heap[0][0] <= t if inclusive else heap[0][0] == t):
            _, j = heapq.heappop(heap)
            mine, needs = res[rep_l[j]], need[tier[j]]
            running[rep_l[j]] -= 1
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
                out_l[i] = last_reason[0]
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
    return Decisions(np.array(out_l, dtype=np.int8), np.array(rep_l, dtype=rep_dtype),
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


def _levels(t_out: "np.ndarray", t_in: "np.ndarray", b: "np.ndarray") -> tuple["np.ndarray", "np.ndarray"]:
    import numpy as np

    order = event_order(t_out, t_in)
    delta = np.concatenate([-b, b])[order]
    return order, np.cumsum(delta)


def signed_table(per_tier: "np.ndarray") -> "np.ndarray":
    """[-b; +b] (rows: a release subtracts its tier's bytes, an admission adds them)."""
    import numpy as np

    return np.concatenate([-per_tier, per_tier])


def _hold_by_tier(scn: Scenario, d: Decisions) -> "np.ndarray":
    """Exact integer sums of hold time per (replica, tier) of the admitted requests, a slice at a time.

    A sum can pass int64 (five holds of 2.3e18 ns), so each hold (below 2^63) is split into its high
    and low 31 bits, each part summed in int64 (at most 10^7 x 2^32 per key) and the parts joined
    as Python integers: exact, never wrapped (a wrapped sum gave a mean utilisation of -35.5%)."""
    import numpy as np

    dp, ntiers = scn.config.placement.dp, len(scn.bundles)
    high = np.zeros(dp * ntiers, dtype=np.int64)
    low = np.zeros(dp * ntiers, dtype=np.int64)
    for lo in range(0, scn.requests, SLICE_REQUESTS):
        hi = lo + SLICE_REQUESTS
        ok = admitted_mask(d, lo, hi)
        key = scn.tier[lo:hi][ok].astype(np.int64)
        if dp > 1:
            key += d.replica[lo:hi][ok].astype(np.int64) * ntiers
        hold = scn.hold_ns[lo:hi][ok]
        np.add.at(high, key, hold >> 31)
        np.add.at(low, key, hold & ((1 << 31) - 1))
    exact = [(h << 31) + l for h, l in zip(high.tolist(), low.tolist())]
    return np.array(exact, dtype=object).reshape(dp, ntiers)


def observe(scn: Scenario, d: Decisions, series_buckets: int | None = None) -> SimResult:
    """Every observable from the decisions, a slice of events at a time; equal to the ledger replay's.

    Per (replica, stage) group: the running level of its total and of each state class over
    that replica's events, observed at its instant ends (the peak, its first instant, every
    class there, and after the last event); all devices together over all events, with the
    requests in flight. One pass over the events with one replica (every group, the total and
    the requests in flight as columns of one scan), else one per replica and one for the total.
    With ``series_buckets`` the same passes also bucket the residency series (kept with the
    decisions for ``series.residency_series``)."""
    import numpy as np

    placement = scn.config.placement
    tp, pp, dp = placement.tp, placement.pp, placement.dp
    limit = scn.config.limit_bytes
    tl = timeline(scn, d)
    ntiers = len(scn.bundles)
    nclass = len(STATE_CLASSES)
    width = 1 + nclass  # a block of columns: the total, then each class
    class_tables = [np.array([[getattr(stages[s], f"{c.value}_bytes") for c in STATE_CLASSES]
                              for stages in scn.bundles], dtype=np.int64).reshape(ntiers, nclass)
                    for s in range(pp)]
    blocks = [np.column_stack([t.sum(axis=1), t]) for t in class_tables]
    every = np.column_stack([sum(class_tables).sum(axis=1), sum(class_tables)]) * tp  # all devices together
    flight = np.ones((ntiers, 1), dtype=np.int64)
    edges = series_edges(scn, tl, series_buckets) if series_buckets else None

    def at(lv: Levels, first: int) -> tuple[int, int, GroupBytes]:
        """(peak, peak_ns, at_peak) of the block starting at column ``first``."""
        peak, peak_ns, row = lv.peak(first)
        return (peak, peak_ns, GroupBytes(*row[first + 1:first + width].tolist())) if row is not None else \
            (0, 0, GroupBytes())

    hold_by_tier = _hold_by_tier(scn, d)
    devices: list[DevicePeak] = []
    group_series: list["np.ndarray"] = []
    whole: Levels | None = None
    single = dp == 1 and pp == 1  # the one group is every event: all devices together are tp times it
    for r in range(dp):
        cols = blocks + ([flight] if single else [every, flight] if dp == 1 else [])
        lv = scan(scn, d, tl, signed_table(np.concatenate(cols, axis=1)), None if dp == 1 else r, edges,
                  keys=tuple(width * k for k in range(pp + (dp == 1 and not single))))
        top = lv.buckets() if edges is not None else None
        for s in range(pp):
            peak, peak_ns, at_peak = at(lv, width * s)
            final = GroupBytes(*lv.level[width * s + 1:width * (s + 1)].tolist())
            byte_ns = sum(int(h) * scn.bundles[k][s].total_bytes for k, h in enumerate(hold_by_tier[r].tolist()))
            for rank in range(tp):
                devices.append(DevicePeak(placement.device(r, s, rank), limit, peak, peak_ns, at_peak, byte_ns, final))
            if top is not None:
                group_series.append(top[:, width * s].copy())
        if dp == 1:
            whole = lv
    first = 0 if single or dp > 1 else width * pp
    if whole is None:
        whole = scan(scn, d, tl, signed_table(np.concatenate([every, flight], axis=1)), edges=edges)
    peak, peak_ns, at_peak = at(whole, first)
    class_max = GroupBytes(*(max(int(v), 0) for v in whole.maxima[first + 1:first + width].tolist()))
    if single:  # tp ranks with identical bundles
        peak, at_peak, class_max = peak * tp, at_peak.scaled(tp), class_max.scaled(tp)
    peak_in_flight = max(int(whole.maxima[-1]), 0) if whole.observed else 0
    if edges is not None:
        d.cache[("series", series_buckets)] = (edges, tuple(group_series), whole.buckets()[:, -1].copy())
    last_arrival = int(scn.arrival_ns[-1]) if scn.requests else 0
    span = max(last_arrival, tl.last_release_ns) - (int(scn.arrival_ns[0]) if scn.requests else 0)
    devices.sort(key=lambda x: x.device)
    return SimResult(**summarize(scn, d), devices=tuple(devices), peak_bytes=peak, peak_ns=peak_ns, at_peak=at_peak,
                     class_max=class_max, peak_in_flight=peak_in_flight, span_ns=span, decisions=d)


def simulate(scn: Scenario, progress: Callable[[int, int], None] | None = None,
             series_buckets: int | None = None) -> SimResult:
    """Decide, then observe (``series_buckets``: bucket the residency series in the same passes)."""
    return observe(scn, decide(scn, progress), series_buckets)
