"""The fast path: admission decisions from integer totals, observables with numpy."""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

from csa_plan.planner.layout import STATE_CLASSES, GroupBytes
from csa_plan.planner.placement import Router

if TYPE_CHECKING:
    import numpy as np


from csa_plan.planner.simulate.scenario import (REASONS, Outcome, Policy, Scenario)


# -- results ------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Decisions:
    """Per request: outcome, replica (-1 if refused) and admission time (-1 if refused)."""

    outcome: "np.ndarray"
    replica: "np.ndarray"
    admit_ns: "np.ndarray"
    cache: dict = field(default_factory=dict, compare=False, repr=False)  # derived views (the event timeline)

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


def nearest_rank(sorted_values: "Sequence[int] | np.ndarray", pct: int) -> int:
    """The nearest-rank percentile: an exact member of the data, no interpolation."""
    rank = max(1, -(-pct * len(sorted_values) // 100))
    return int(sorted_values[rank - 1])


def summarize(scn: Scenario, d: Decisions) -> dict:
    """Counts and waits, shared by both implementations (they derive only from decisions)."""
    import numpy as np

    admitted = d.outcome == Outcome.ADMITTED.value
    waits = np.sort((d.admit_ns - scn.arrival_ns)[admitted])  # stays an array: no object per request
    refusals = tuple((REASONS[o], int((d.outcome == o.value).sum())) for o in REASONS
                     if int((d.outcome == o.value).sum()))
    by_class = []
    for k, name in enumerate(scn.class_names):
        mine = scn.class_ids == k
        by_class.append((name, int((mine & admitted).sum()), int((mine & ~admitted).sum())))
    return dict(
        requests=scn.requests, admitted=int(admitted.sum()), queued=int(np.count_nonzero(waits > 0)),
        refusals=refusals, by_class=tuple(by_class),
        wait_p50_ns=nearest_rank(waits, 50) if len(waits) else None,
        wait_p99_ns=nearest_rank(waits, 99) if len(waits) else None,
        wait_max_ns=int(waits[-1]) if len(waits) else None,
    )


# -- the fast path ------------------------------------------------------------------------


def compiled_loop():
    """The compiled decision loop (the optional ``cdecide`` extension), or None without it."""
    global _COMPILED
    if _COMPILED is False:
        try:
            from csa_plan.planner.simulate import cdecide
        except ImportError:
            cdecide = None
        _COMPILED = cdecide
    return _COMPILED


_COMPILED: object = False
I64_MAX = (1 << 63) - 1


def _fits_int64(scn: Scenario, ok: "np.ndarray", need: list[tuple[int, ...]]) -> bool:
    """Can every per-(replica, stage) total the loop forms stay below 2^63? With a limit a total
    never passes it before a check adds one more bundle; unlimited, it is at most every bundle."""
    import numpy as np

    pp = scn.config.placement.pp
    most = [max(stages[s] for stages in need) for s in range(pp)]
    if scn.config.limit_bytes:
        cap = [scn.config.limit_bytes] * pp
    else:
        counts = np.bincount(scn.tier[ok], minlength=len(need)).tolist()
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
    replica = np.full(n, -1, dtype=np.int64)
    admit = np.full(n, -1, dtype=np.int64)
    ok = outcome == Outcome.ADMITTED.value
    if not ok.any():
        return Decisions(outcome, replica, admit)
    need = [tuple(b.total_bytes for b in stages) for stages in scn.bundles]
    kernel = compiled_loop() if compiled is not False else None
    if compiled and kernel is None:
        raise RuntimeError("the compiled decision loop (csa_plan.planner.simulate.cdecide) is not built")
    cap = config.max_running  # the engine's running-request cap per replica (0: none)
    if kernel is not None and _fits_int64(scn, ok, need):
        if progress:
            progress(0, n)
        flat = np.array([b for stages in need for b in stages], dtype=np.int64)
        per_event = dp > 1  # several replicas: each needs its own instant ends, from per-event times
        ev_signed = np.empty(2 * n, dtype=np.int32)  # pages never written are never resident
        ends = np.empty(2 * n, dtype=np.int32)
        end_times = np.empty(2 * n, dtype=np.int64)
        ev_time = np.empty(2 * n if per_event else 0, dtype=np.int64)
        ev_rep = np.empty(2 * n if per_event else 0, dtype=np.int32)
        nev, nends = kernel.decide(n, np.ascontiguousarray(scn.arrival_ns, dtype=np.int64),
                      np.ascontiguousarray(scn.hold_ns, dtype=np.int64), np.ascontiguousarray(scn.tier, dtype=np.int64),
                      ok.view(np.int8), len(need), flat, dp, pp, limit or I64_MAX, cap,
                      placement.router is Router.ROUND_ROBIN, config.policy is Policy.QUEUE,
                      Outcome.OUT_OF_MEMORY.value, Outcome.RUNNING_CAP.value, outcome, replica, admit,
                      ev_signed, ends, end_times, per_event, ev_time, ev_rep)
        if progress:
            progress(n, n)
        d = Decisions(outcome, replica, admit)
        adm = np.flatnonzero(outcome == Outcome.ADMITTED.value)
        # the loop's own timeline (views: the unwritten tails of the buffers are never resident)
        d.cache["timeline"] = Timeline(adm, int(end_times[nends - 1]) if nends else 0, ev_signed[:nev], ends[:nends],
                                       end_times[:nends], ev_time[:nev] if per_event else None,
                                       ev_rep[:nev] if per_event else None)
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


def _merge(t_out: "np.ndarray", t_in: "np.ndarray") -> tuple["np.ndarray", "np.ndarray", "np.ndarray"] | None:
    """(release order, release slots, admission slots) in the merged event sequence, or None when
    admissions are not in time order. Admission times are non-decreasing in request order
    (arrivals are sorted and the queue is FIFO), so only releases are sorted; at one instant
    every release comes before every admission."""
    import numpy as np

    k = len(t_in)
    if not k or not bool(np.all(t_in[1:] >= t_in[:-1])):
        return None
    o_out = np.argsort(t_out, kind="stable")
    slot_in = np.searchsorted(t_out[o_out], t_in, side="right") + np.arange(k)
    free = np.ones(2 * k, dtype=bool)
    free[slot_in] = False
    return o_out, np.flatnonzero(free), slot_in


def event_order(t_out: "np.ndarray", t_in: "np.ndarray") -> "np.ndarray":
    """Event order: by time, releases before admissions at one instant (each kind by index):
    the stable sort of the keys ``2 t`` (release) and ``2 t + 1`` (admission)."""
    import numpy as np

    merged = _merge(t_out, t_in)
    if merged is not None:
        o_out, slot_out, slot_in = merged
        order = np.empty(2 * len(t_in), dtype=np.int64)
        order[slot_out] = o_out
        order[slot_in] = np.arange(len(t_in), 2 * len(t_in))
        return order
    key = np.concatenate([t_out * 2, t_in * 2 + 1])
    return np.argsort(key, kind="stable")


def _levels(t_out: "np.ndarray", t_in: "np.ndarray", b: "np.ndarray") -> tuple["np.ndarray", "np.ndarray"]:
    import numpy as np

    order = event_order(t_out, t_in)
    delta = np.concatenate([-b, b])[order]
    return order, np.cumsum(delta)


def instant_ends(times: "np.ndarray") -> "np.ndarray":
    """Indices of the last event of each instant: where the state is observed."""
    import numpy as np

    last = np.ones(len(times), dtype=bool)
    if len(times) > 1:
        last[:-1] = times[1:] != times[:-1]
    return np.flatnonzero(last)


@dataclass(frozen=True, eq=False)
class Timeline:
    """Every admission and release in event order, shared by the observables and the series.

    ``signed[e]`` indexes a table of ``[-bytes per tier; +bytes per tier]`` (a release
    subtracts its tier's bytes, an admission adds them). Per-event times and replicas are kept
    only when there are several replicas (each needs its own instant ends)."""

    adm: "np.ndarray"  # the admitted requests
    last_release_ns: int
    signed: "np.ndarray"  # tier + ntiers x (1 if an admission), in order (int32)
    ends: "np.ndarray"  # instant ends of all events
    end_times: "np.ndarray"  # the time of each instant end
    times: "np.ndarray | None"  # event times in order (dp > 1 only)
    replica: "np.ndarray | None"  # replica per event in order (dp > 1 only)


def timeline(scn: Scenario, d: Decisions) -> Timeline:
    """The events of ``d`` (computed once per Decisions and kept with it)."""
    import numpy as np

    cached = d.cache.get("timeline")
    if cached is not None:
        return cached
    adm = np.flatnonzero(d.outcome == Outcome.ADMITTED.value)
    t_in = d.admit_ns[adm]
    k = len(adm)
    ntiers = np.int32(len(scn.bundles))
    t_out = t_in + scn.hold_ns[adm]
    tiers = scn.tier[adm].astype(np.int32)
    rep = d.replica[adm].astype(np.int32) if scn.config.placement.dp > 1 else None
    merged = _merge(t_out, t_in)
    times = np.empty(2 * k, dtype=np.int64)
    signed = np.empty(2 * k, dtype=np.int32)
    replica = np.empty(2 * k, dtype=np.int32) if rep is not None else None
    if merged is not None:
        o_out, slot_out, slot_in = merged
        times[slot_out], times[slot_in] = t_out[o_out], t_in
        signed[slot_out], signed[slot_in] = tiers[o_out], tiers + ntiers
        if replica is not None:
            replica[slot_out], replica[slot_in] = rep[o_out], rep
        del o_out, slot_out, slot_in
    else:
        order = event_order(t_out, t_in)
        ins = order >= k
        idx = np.where(ins, order - k, order)
        times[:] = np.where(ins, t_in[idx], t_out[idx])
        signed[:] = tiers[idx] + ntiers * ins
        if replica is not None:
            replica[:] = rep[idx]
    last = int(t_out.max()) if k else 0
    del t_in, t_out, tiers
    ends = instant_ends(times)
    tl = Timeline(adm, last, signed, ends, times[ends], times if replica is not None else None, replica)
    d.cache["timeline"] = tl
    return tl


def _signed_table(per_tier: "np.ndarray") -> "np.ndarray":
    """[-b; +b]: a release subtracts its tier's bytes, an admission adds them."""
    import numpy as np

    return np.concatenate([-per_tier, per_tier])


def _running(table: "np.ndarray", signed: "np.ndarray", ends: "np.ndarray") -> "np.ndarray":
    """The running sum of ``table[signed]`` observed at ``ends`` (one n-sized buffer, summed in place)."""
    import numpy as np

    level = table[signed]
    np.cumsum(level, out=level)
    return level[ends]


def _replica_events(tl: Timeline, replica: int | None) -> tuple["np.ndarray", "np.ndarray", "np.ndarray"]:
    """(signed tiers, instant ends, end times) of one replica's events (``None``: all events)."""
    import numpy as np

    if replica is None or tl.replica is None:
        return tl.signed, tl.ends, tl.end_times
    sel = np.flatnonzero(tl.replica == replica)
    times = tl.times[sel]
    ends = instant_ends(times)
    return tl.signed[sel], ends, times[ends]


def group_levels(tl: Timeline, replica: int | None, per_tier: "np.ndarray") -> tuple["np.ndarray", "np.ndarray"]:
    """(times, level) at each instant end of one replica's events (``None``: all events)."""
    signed, ends, end_times = _replica_events(tl, replica)
    return end_times, _running(_signed_table(per_tier), signed, ends)


def _group_peak(signed: "np.ndarray", ends: "np.ndarray", end_times: "np.ndarray", class_table: "np.ndarray",
                weight: int, want_max: bool) -> tuple[int, int, GroupBytes, GroupBytes, list[int]]:
    """(peak, peak_ns, at_peak, final, class maxima) of one set of events. The total level is
    observed at instant ends; a class's bytes at the peak and at the end come from counting each
    signed tier's events up to there (no per-class series), and only when ``want_max`` is each
    class followed over time for its own maximum."""
    import numpy as np

    nclass = class_table.shape[1]
    tables = _signed_table(class_table) * weight  # (2 ntiers, classes)
    if not len(signed):
        return 0, 0, GroupBytes(), GroupBytes(), [0] * nclass
    counts = np.bincount(signed, minlength=len(tables))
    final = GroupBytes(*(counts @ tables).tolist())
    maxima = [0] * nclass
    if len(class_table) == 1:  # one tier: every level is the in-flight count times that tier's bytes
        count = _running(np.array([-1, 1], dtype=np.int64), signed, ends)
        j = int(count.argmax())
        most = int(count[j])
        per_class = [int(v) * weight for v in class_table[0].tolist()]
        peak = most * sum(per_class)
        if want_max:
            maxima = [max(most * v, 0) for v in per_class]
        if peak <= 0:
            return 0, 0, GroupBytes(), final, maxima
        return peak, int(end_times[j]), GroupBytes(*(most * v for v in per_class)), final, maxima
    level = _running(tables.sum(axis=1), signed, ends)
    j = int(level.argmax())
    peak = int(level[j])
    del level
    if want_max:
        for c in range(nclass):
            if tables[:, c].any():  # a class no tier holds stays at 0
                maxima[c] = max(int(_running(tables[:, c], signed, ends).max()), 0)
    if peak <= 0:
        return 0, 0, GroupBytes(), final, maxima
    head = np.bincount(signed[:int(ends[j]) + 1], minlength=len(tables))
    return peak, int(end_times[j]), GroupBytes(*(head @ tables).tolist()), final, maxima


def observe(scn: Scenario, d: Decisions) -> SimResult:
    """Every observable from the decisions, vectorized; equal to the ledger replay's."""
    import numpy as np

    placement = scn.config.placement
    tp, pp, dp = placement.tp, placement.pp, placement.dp
    limit = scn.config.limit_bytes
    tl = timeline(scn, d)
    adm = tl.adm
    ntiers = len(scn.bundles)
    class_tables = [np.array([[getattr(stages[s], f"{c.value}_bytes") for c in STATE_CLASSES]
                              for stages in scn.bundles], dtype=np.int64).reshape(ntiers, len(STATE_CLASSES))
                    for s in range(pp)]
    key = scn.tier[adm]  # exact integer sums of hold time per (replica, tier)
    if dp > 1:
        key = key + d.replica[adm] * ntiers
    hold_by_tier = np.zeros(dp * ntiers, dtype=np.int64)
    np.add.at(hold_by_tier, key, scn.hold_ns[adm])
    hold_by_tier = hold_by_tier.reshape(dp, ntiers)
    del key
    devices: list[DevicePeak] = []
    single = None
    for r in range(dp):
        signed, ends, end_times = _replica_events(tl, r)
        for s in range(pp):
            one = dp == 1 and pp == 1  # the only group is every event: its class maxima serve the total
            peak, peak_ns, at_peak, final, maxima = _group_peak(signed, ends, end_times, class_tables[s], 1, one)
            if one:
                single = (peak, peak_ns, at_peak, maxima)
            byte_ns = sum(int(h) * scn.bundles[k][s].total_bytes for k, h in enumerate(hold_by_tier[r].tolist()))
            for rank in range(tp):
                devices.append(DevicePeak(placement.device(r, s, rank), limit, peak, peak_ns, at_peak, byte_ns, final))
    if single is not None:  # one replica, one stage: the total is tp times that group
        peak, peak_ns, at_peak, maxima = single
        peak, at_peak, maxima = peak * tp, GroupBytes(*(v * tp for v in at_peak.by_class().values())), [m * tp for m in maxima]
    else:
        total_table = sum(class_tables)
        peak, peak_ns, at_peak, _, maxima = _group_peak(tl.signed, tl.ends, tl.end_times, total_table, tp, True)
    class_max = GroupBytes(*maxima)
    k = len(adm)
    ones = np.concatenate([np.full(ntiers, -1, dtype=np.int64), np.ones(ntiers, dtype=np.int64)])
    peak_in_flight = int(_running(ones, tl.signed, tl.ends).max()) if k else 0
    last_arrival = int(scn.arrival_ns[-1]) if scn.requests else 0
    span = max(last_arrival, tl.last_release_ns) - (int(scn.arrival_ns[0]) if scn.requests else 0)
    devices.sort(key=lambda x: x.device)
    return SimResult(**summarize(scn, d), devices=tuple(devices), peak_bytes=peak, peak_ns=peak_ns, at_peak=at_peak,
                     class_max=class_max, peak_in_flight=peak_in_flight, span_ns=span, decisions=d)


def simulate(scn: Scenario, progress: Callable[[int, int], None] | None = None) -> SimResult:
    return observe(scn, decide(scn, progress))
