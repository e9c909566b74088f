"""The event timeline of a run, and running levels read from it a slice at a time.

Every admission and release of a run is one int32 in event order: request ``i``'s admission
is ``i``, its release ``~i`` (``-i - 1``). That is all that is kept (8 bytes per admitted
request); an event's time (the admission time, plus the hold time for a release), its tier
and its replica are read back from the per-request arrays for one slice of events at a
time, so no per-event array of times or levels is ever built for the whole run. The state
is observed at the end of each instant (the last event at one time, of the events looked
at: all of them, or one replica's).

Event order: by time; at one instant every release before every admission; releases at
one instant by request index; admissions in the order they were made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from csa_plan.planner.reserve.decisions import Decisions
from csa_plan.planner.reserve.scenario import Outcome, Scenario

if TYPE_CHECKING:
    import numpy as np

SLICE_EVENTS = 1 << 17
"""Events looked at together: bounds every temporary (a few MiB) whatever the run's length."""

SLICE_REQUESTS = 1 << 20
"""Requests looked at together where a per-request pass needs temporaries."""


@dataclass(frozen=True, eq=False)
class Timeline:
    """Every admission (``i``) and release (``~i``) in event order (int32), and the time of the last event."""

    events: "np.ndarray"
    last_release_ns: int


def admitted_mask(d: "Decisions", lo: int = 0, hi: int | None = None) -> "np.ndarray":
    return d.outcome[lo:hi] == Outcome.ADMITTED.value


def merge(t_out: "np.ndarray", t_in: "np.ndarray") -> tuple["np.ndarray", "np.ndarray", "np.ndarray"] | None:
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

    merged = merge(t_out, t_in)
    if merged is not None:
        o_out, slot_out, slot_in = merged
        order = np.empty(2 * len(t_in), dtype=np.int64)
        order[slot_out] = o_out
        order[slot_in] = np.arange(len(t_in), 2 * len(t_in))
        return order
    key = np.concatenate([t_out * 2, t_in * 2 + 1])
    return np.argsort(key, kind="stable")


def timeline(scn: Scenario, d: "Decisions") -> Timeline:
    """The events of ``d`` (the compiled loop writes them as it runs; otherwise built here with
    numpy, once per Decisions, and kept with it)."""
    import numpy as np

    cached = d.cache.get("timeline")
    if cached is not None:
        return cached
    adm = np.flatnonzero(admitted_mask(d)).astype(np.int32)
    t_in = d.admit_of(adm)
    k = len(adm)
    t_out = t_in + scn.hold_ns[adm]
    merged = merge(t_out, t_in)
    events = np.empty(2 * k, dtype=np.int32)
    if merged is not None:
        o_out, slot_out, slot_in = merged
        events[slot_out], events[slot_in] = ~adm[o_out], adm
    else:
        order = event_order(t_out, t_in)
        ins = order >= k
        events[:] = np.where(ins, adm[np.where(ins, order - k, 0)], ~adm[np.where(ins, 0, order)])
    tl = Timeline(events, int(t_out.max()) if k else 0)
    d.cache["timeline"] = tl
    return tl


def pieces(scn: Scenario, d: "Decisions", tl: Timeline, replica: int | None = None
           ) -> Iterator[tuple["np.ndarray", "np.ndarray", "np.ndarray"]]:
    """``(signed, times, is_end)`` for consecutive slices of the events (one replica's, or all):
    ``signed`` is the tier, plus the number of tiers for an admission (int64, an index into a
    ``[release rows; admission rows]`` table); ``is_end`` marks the last event of each instant.
    A slice's last event is held back until the next event's time says whether it ends its instant."""
    import numpy as np

    ntiers = len(scn.bundles)
    ev = tl.events
    held: tuple["np.ndarray", "np.ndarray"] | None = None
    for a in range(0, len(ev), SLICE_EVENTS):
        e = ev[a:a + SLICE_EVENTS]
        rel = e < 0
        idx = np.where(rel, ~e, e)
        if replica is not None:
            mine = d.replica[idx] == replica
            rel, idx = rel[mine], idx[mine]
        times = d.admit_of(idx)
        out = np.flatnonzero(rel)
        times[out] += scn.hold_ns[idx[out]]  # a release: its admission plus its hold time
        signed = scn.tier[idx].astype(np.int64)
        signed[~rel] += ntiers
        if held is not None:
            signed = np.concatenate([held[0], signed])
            times = np.concatenate([held[1], times])
        if not len(times):
            held = None
            continue
        is_end = times[1:] != times[:-1]
        if len(is_end):
            yield signed[:-1], times[:-1], is_end
        held = (signed[-1:], times[-1:])
    if held is not None:
        yield held[0], held[1], np.ones(1, dtype=bool)


class Levels:
    """Running levels of the columns of ``table`` (rows: release rows then admission rows, per
    tier) over the events fed to it, observed at instant ends: each column's maximum, the first
    maximum of each key column (its time and every column there), the levels after the last
    event, and optionally each column's highest level per bucket of time (``edges``: bucket
    starts), counting the level carried into a bucket from before its start.

    With one tier every column is the number of requests in flight times that tier's
    (non-negative) value, so only that count is followed and the columns are scaled from it
    at the end (``finish``): the same integers, one running sum instead of one per column."""

    def __init__(self, table: "np.ndarray", edges: "np.ndarray | None" = None, keys: tuple[int, ...] = (0,)) -> None:
        import numpy as np

        self.scale = None
        self.keys = keys
        if table.shape[0] == 2 and (table[1] >= 0).all() and (table[0] == -table[1]).all():
            self.scale = table[1].copy()
            table = np.array([[-1], [1]], dtype=np.int64)
            keys = (0,)
        self.followed_keys = keys
        self.columns = [np.ascontiguousarray(table[:, c]) for c in range(table.shape[1])]
        k = len(self.columns)
        self.level = np.zeros(k, dtype=np.int64)  # after the events fed so far
        self.maxima = np.zeros(k, dtype=np.int64)
        self.observed = False
        self.best: dict[int, tuple[int, "np.ndarray"]] = {}  # key column -> (first time at its maximum, row there)
        self.edges = edges
        if edges is not None:
            self.carried = np.zeros((len(edges), k), dtype=np.int64)
            self.inside = np.full((len(edges), k), np.iinfo(np.int64).min, dtype=np.int64)

    def feed(self, signed: "np.ndarray", times: "np.ndarray", is_end: "np.ndarray") -> None:
        import numpy as np

        ends = np.flatnonzero(is_end)
        if not len(ends):  # cannot happen (a slice's last event ends its instant), kept for safety
            for c, col in enumerate(self.columns):
                self.level[c] += int(col[signed].sum())
            return
        at = times[ends]
        obs = np.empty((len(ends), len(self.columns)), dtype=np.int64)
        for c, col in enumerate(self.columns):
            lv = np.take(col, signed)
            np.cumsum(lv, out=lv)
            lv += self.level[c]
            self.level[c] = lv[-1]
            obs[:, c] = lv[ends]
        for key in self.followed_keys:
            j = int(obs[:, key].argmax())
            if key not in self.best or obs[j, key] > self.best[key][1][key]:
                self.best[key] = (int(at[j]), obs[j].copy())
        self.maxima = np.maximum(self.maxima, obs.max(axis=0)) if self.observed else obs.max(axis=0)
        self.observed = True
        if self.edges is not None:
            before = np.searchsorted(at, self.edges, side="left")  # observations before each edge
            some = before > 0
            self.carried[some] = obs[before[some] - 1]  # later slices are later in time: they override
            bucket = np.searchsorted(self.edges, at, side="right") - 1
            starts = np.flatnonzero(np.concatenate([[True], bucket[1:] != bucket[:-1]]))
            top = np.maximum.reduceat(obs, starts, axis=0)
            b = bucket[starts]
            self.inside[b] = np.maximum(self.inside[b], top)

    def finish(self) -> "Levels":
        """Scale the followed count to every column (one tier); nothing to do otherwise."""
        if self.scale is not None:
            v = self.scale
            self.level, self.maxima = self.level[0] * v, self.maxima[0] * v
            if 0 in self.best:
                t, row = self.best.pop(0)
                self.best = {key: (t, row[0] * v) for key in self.keys}
            if self.edges is not None:
                self.carried, self.inside = self.carried[:, :1] * v, self._scaled_inside(v)
            self.scale = None
        return self

    def peak(self, key: int = 0) -> tuple[int, int, "np.ndarray | None"]:
        """(the key column's first maximum, its time, every column there); (0, 0, None) when no
        observation was positive."""
        if not self.observed or key not in self.best or int(self.best[key][1][key]) <= 0:
            return 0, 0, None
        t, row = self.best[key]
        return int(row[key]), t, row

    def _scaled_inside(self, v: "np.ndarray") -> "np.ndarray":
        import numpy as np

        empty = self.inside[:, 0] == np.iinfo(np.int64).min  # no observation in the bucket
        out = np.maximum(self.inside[:, :1], 0) * v  # counts in flight are never negative
        out[empty] = np.iinfo(np.int64).min
        return out

    def buckets(self) -> "np.ndarray":
        """(buckets, columns): the highest level in each bucket or carried into it (0 before any event)."""
        import numpy as np

        return np.maximum(self.carried, self.inside)


def series_edges(scn: Scenario, tl: Timeline, buckets: int) -> "np.ndarray":
    """Bucket starts for a residency series: ``buckets`` equal spans from 0 to the last event or arrival."""
    import numpy as np

    end = int(max(tl.last_release_ns, scn.arrival_ns[-1] if scn.requests else 0, 1))
    return np.linspace(0, end, buckets, endpoint=False).astype(np.int64)


def scan(scn: Scenario, d: "Decisions", tl: Timeline, table: "np.ndarray", replica: int | None = None,
         edges: "np.ndarray | None" = None, keys: tuple[int, ...] = (0,)) -> Levels:
    """``Levels`` of ``table``'s columns over the events (of one replica, or all)."""
    levels = Levels(table, edges, keys)
    for signed, times, is_end in pieces(scn, d, tl, replica):
        levels.feed(signed, times, is_end)
    return levels.finish()
