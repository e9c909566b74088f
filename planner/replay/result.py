"""What one runtime replay observed: per step and per request, as integer arrays."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


STEP_BUCKETS = 1 << 15  # docs/limits.md: a replay keeps at most this many buckets of steps, whatever its length


class StepSeries:
    """Per executed step: its end (ns), units in use per pool, running, waiting, tokens; bounded.

    At most ``cap`` buckets of ``width`` consecutive steps are kept (width 1 until ``cap`` steps,
    then pairs merged and the width doubled, as often as needed): memory is O(cap x pools) however
    many steps a replay runs (a 1M-token output is 1M steps). A bucket keeps its last step's end,
    the units per pool at its peak step (the first with the largest total), the largest running
    and waiting counts and its tokens summed; the step count, per-pool peaks and the sums behind
    the means are exact over every step. ``stepseries.h`` is the compiled loops' twin, rule for rule.
    """

    __slots__ = ("end_ns", "used", "running", "waiting", "tokens", "prefill_tokens", "total", "n_pools", "cap",
                 "width", "fill", "steps", "pool_peak", "used_sum", "running_sum", "waiting_sum")

    def __init__(self, n_pools: int, cap: int | None = None) -> None:
        from array import array

        self.n_pools = n_pools
        self.cap = step_buckets() if cap is None else cap
        self.end_ns, self.used, self.running = array("q"), array("q"), array("q")
        self.waiting, self.tokens, self.prefill_tokens, self.total = array("q"), array("q"), array("q"), array("q")
        self.width, self.fill, self.steps = 1, 0, 0
        self.pool_peak = [0] * n_pools
        self.used_sum = self.running_sum = self.waiting_sum = 0.0

    @classmethod
    def empty(cls, n_pools: int) -> "StepSeries":
        return cls(n_pools)

    def __len__(self) -> int:
        return self.steps

    def _halve(self) -> None:
        """Every bucket full: bucket i takes buckets 2i and 2i + 1 (stepseries.h, ss_add)."""
        from array import array
        from operator import add

        g, tot, used = self.n_pools, self.total, array("q")
        for i in range(len(tot) // 2):
            j = 2 * i + 1 if tot[2 * i + 1] > tot[2 * i] else 2 * i
            used.extend(self.used[j * g:(j + 1) * g])
        pair = lambda col, f: array("q", map(f, col[0::2], col[1::2]))
        self.used, self.end_ns = used, self.end_ns[1::2]
        self.total, self.running, self.waiting = pair(tot, max), pair(self.running, max), pair(self.waiting, max)
        self.tokens, self.prefill_tokens = pair(self.tokens, add), pair(self.prefill_tokens, add)
        self.width *= 2

    def add(self, end: int, used: tuple[int, ...], running: int, waiting: int, tokens: int, prefill: int) -> None:
        total = sum(used)
        peak = self.pool_peak
        for i, u in enumerate(used):
            if u > peak[i]:
                peak[i] = u
        self.steps += 1
        self.used_sum += float(total)
        self.running_sum += float(running)
        self.waiting_sum += float(waiting)
        if not self.end_ns or self.fill == self.width:  # a new bucket
            if len(self.end_ns) == self.cap:
                self._halve()
            self.end_ns.append(end)
            self.used.extend(used)
            self.running.append(running)
            self.waiting.append(waiting)
            self.tokens.append(tokens)
            self.prefill_tokens.append(prefill)
            self.total.append(total)
            self.fill = 1
            return
        self.fill += 1
        self.end_ns[-1] = end
        if total > self.total[-1]:
            self.total[-1] = total
            self.used[-self.n_pools:] = type(self.used)("q", used)
        if running > self.running[-1]:
            self.running[-1] = running
        if waiting > self.waiting[-1]:
            self.waiting[-1] = waiting
        self.tokens[-1] += tokens
        self.prefill_tokens[-1] += prefill

    def freeze(self) -> "FrozenSeries":
        import numpy as np

        a = lambda x: np.frombuffer(x, dtype=np.int64).copy() if len(x) else np.zeros(0, dtype=np.int64)
        used = a(self.used).reshape(len(self.end_ns), self.n_pools)
        return FrozenSeries(a(self.end_ns), used, a(self.running), a(self.waiting), a(self.tokens),
                            a(self.prefill_tokens), width=self.width, n_steps=self.steps,
                            pool_peak=tuple(self.pool_peak),
                            sums=(self.used_sum, self.running_sum, self.waiting_sum))


def step_buckets() -> int:
    """The bucket cap replays use now (a module attribute, so a test can make it small)."""
    return STEP_BUCKETS


@dataclass(frozen=True, eq=False)
class FrozenSeries:
    """The step series as arrays: one row per bucket of ``width`` steps (``StepSeries``); a series
    built from plain per-step arrays (``width`` 1) derives its exact figures from them."""

    end_ns: "np.ndarray"
    used: "np.ndarray"  # buckets x pools, at each bucket's peak step
    running: "np.ndarray"  # the largest in each bucket
    waiting: "np.ndarray"  # the largest in each bucket
    tokens: "np.ndarray"  # summed over each bucket
    prefill_tokens: "np.ndarray"  # summed over each bucket
    width: int = 1  # steps per bucket (the last may hold fewer)
    n_steps: int | None = None  # steps recorded (None: one per row)
    pool_peak: tuple[int, ...] | None = None  # exact per-pool peaks over every step
    sums: tuple[float, float, float] | None = None  # exact sums of total used, running, waiting over every step

    def __post_init__(self) -> None:
        rows = len(self.end_ns)
        if self.n_steps is None:
            object.__setattr__(self, "n_steps", rows)
        if self.pool_peak is None:
            object.__setattr__(self, "pool_peak", tuple(int(self.used[:, i].max()) if rows else 0
                                                        for i in range(self.used.shape[1])))
        if self.sums is None:
            s = lambda x: float(sum(float(v) for v in x.tolist()))
            object.__setattr__(self, "sums", (s(self.used.sum(axis=1)), s(self.running), s(self.waiting)))

    @classmethod
    def from_buffers(cls, end, used, running, waiting, tokens, prefill, meta, n_pools: int) -> "FrozenSeries":
        """A compiled loop's series (stepseries.h, ss_write): int64 bytearrays, and ``meta``."""
        import numpy as np

        col = lambda b: np.frombuffer(b, dtype=np.int64) if len(b) else np.zeros(0, dtype=np.int64)
        head = np.frombuffer(meta, dtype=np.int64, count=2 + n_pools)
        sums = np.frombuffer(meta, dtype=np.float64, count=3, offset=(2 + n_pools) * 8)
        e = col(end)
        return cls(e, col(used).reshape(len(e), n_pools), col(running), col(waiting), col(tokens), col(prefill),
                   width=int(head[0]), n_steps=int(head[1]), pool_peak=tuple(int(x) for x in head[2:]),
                   sums=(float(sums[0]), float(sums[1]), float(sums[2])))

    @property
    def steps(self) -> int:
        return self.n_steps

    @property
    def buckets(self) -> int:
        return len(self.end_ns)

    @property
    def total_used(self) -> "np.ndarray":
        """Total units in use per bucket, at its peak step."""
        return self.used.sum(axis=1)

    def means(self) -> tuple[float, float, float]:
        """Mean total units in use, running and waiting over every step."""
        n = self.n_steps or 1
        return self.sums[0] / n, self.sums[1] / n, self.sums[2] / n


@dataclass(frozen=True, eq=False)
class RuntimeResult:
    label: str
    pools: tuple[str, ...]
    usable_units: int
    arrival_ns: Any
    # per request: lists (the Python loop) or int64 arrays (a compiled loop); read them through np.asarray
    admitted_ns: "list[int] | np.ndarray"  # first admission (the queue wait ends), -1 never
    first_token_ns: "list[int] | np.ndarray"  # -1 never
    finished_ns: "list[int] | np.ndarray"  # -1 never (refused)
    preemptions: "list[int] | np.ndarray"
    refused: dict[int, str]  # request -> reason (refused at arrival or stranded)
    series: FrozenSeries
    recomputed_tokens: int
    prefix_hit_tokens: int
    prefix_query_tokens: int
    notes: tuple[str, ...] = ()
    pool_units: tuple[int, ...] = ()  # usable units per pool, as the runtime declares them
    preemption_word: str = "preempt"  # the engine's own word (SGLang: retract)
    host_tier: Any = None  # a host KV tier's counters (engines/host_tier.py), summed over replicas; None: no tier

    def same_as(self, other: "RuntimeResult") -> bool:
        """Every per-request outcome and every per-step count equal (twins, cross-checks)."""
        import numpy as np

        a, b = self.series, other.series
        eq = lambda x, y: np.array_equal(np.asarray(x, dtype=np.int64), np.asarray(y, dtype=np.int64))
        return (eq(self.admitted_ns, other.admitted_ns) and eq(self.first_token_ns, other.first_token_ns)
                and eq(self.finished_ns, other.finished_ns) and eq(self.preemptions, other.preemptions)
                and self.refused == other.refused and self.recomputed_tokens == other.recomputed_tokens
                and self.prefix_hit_tokens == other.prefix_hit_tokens
                and all(np.array_equal(x, y) for x, y in ((a.end_ns, b.end_ns), (a.used, b.used),
                                                           (a.running, b.running), (a.waiting, b.waiting),
                                                           (a.tokens, b.tokens)))
                and (a.width, a.steps, a.pool_peak, a.sums) == (b.width, b.steps, b.pool_peak, b.sums))
