"""The fast path: admission decisions from integer totals, observables with numpy."""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from csa_plan.planner.layout import STATE_CLASSES, GroupBytes
from csa_plan.planner.placement import Router

if TYPE_CHECKING:
    import numpy as np


from csa_plan.planner.simulate.scenario import REASONS, Outcome, Policy, Scenario
from csa_plan.planner.units import ceil_div


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
    rank = max(1, ceil_div(pct * len(sorted_values), 100))
    return sorted_values[rank - 1]


def summarize(scn: Scenario, d: Decisions) -> dict:
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
    cap = config.max_running  # the engine's running-request cap per replica (0: none)
    uncontended = shortcut and not cap and (dp == 1 or placement.router is Router.ROUND_ROBIN) and (
        not limit or _optimistic_fits(scn, ok))
    if uncontended:  # nothing ever waits or is refused for memory: admitted on arrival, in rotation
        replica[ok] = np.arange(int(ok.sum())) % dp
        admit[ok] = scn.arrival_ns[ok]
        return Decisions(outcome, replica, admit)

    if not limit:
        limit = 1 << 126  # unlimited: the loop still routes (least-loaded needs the levels)
    need = [tuple(b.total_bytes for b in stages) for stages in scn.bundles]
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


def event_order(t_out: "np.ndarray", t_in: "np.ndarray") -> "np.ndarray":
    """Event order: by time, releases before admissions at one instant."""
    import numpy as np

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


def group_series(t_out, t_in, per_class_b, weight: int):
    """Per-class state at each instant end: (times, level_total, levels_by_class list)."""
    import numpy as np

    order = event_order(t_out, t_in)
    times = np.concatenate([t_out, t_in])[order]
    ends = instant_ends(times)
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
            times, total, by_class = group_series(t_out[m], t_in[m], cols, 1)
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
        times, total, by_class = group_series(np.concatenate(all_out), np.concatenate(all_in), cols, tp)
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
    return SimResult(**summarize(scn, d), devices=tuple(devices), peak_bytes=peak, peak_ns=peak_ns, at_peak=at_peak,
                     class_max=class_max, peak_in_flight=peak_in_flight, span_ns=span, decisions=d)


def simulate(scn: Scenario, progress: Callable[[int, int], None] | None = None) -> SimResult:
    return observe(scn, decide(scn, progress))
