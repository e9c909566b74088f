"""What one runtime replay observed: per step and per request, as integer arrays."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


class StepSeries:
    """Per executed step: its end (ns), units in use per pool, running, waiting, tokens (compact int64 arrays)."""

    __slots__ = ("end_ns", "used", "running", "waiting", "tokens", "prefill_tokens", "n_pools")

    def __init__(self, n_pools: int) -> None:
        from array import array

        self.n_pools = n_pools
        self.end_ns, self.used, self.running = array("q"), array("q"), array("q")
        self.waiting, self.tokens, self.prefill_tokens = array("q"), array("q"), array("q")

    @classmethod
    def empty(cls, n_pools: int) -> "StepSeries":
        return cls(n_pools)

    def __len__(self) -> int:
        return len(self.end_ns)

    def add(self, end: int, used: tuple[int, ...], running: int, waiting: int, tokens: int, prefill: int) -> None:
        self.end_ns.append(end)
        self.used.extend(used)
        self.running.append(running)
        self.waiting.append(waiting)
        self.tokens.append(tokens)
        self.prefill_tokens.append(prefill)

    def freeze(self) -> "FrozenSeries":
        import numpy as np

        a = lambda x: np.frombuffer(x, dtype=np.int64).copy() if len(x) else np.zeros(0, dtype=np.int64)
        used = a(self.used).reshape(len(self.end_ns), self.n_pools)
        return FrozenSeries(a(self.end_ns), used, a(self.running), a(self.waiting), a(self.tokens),
                            a(self.prefill_tokens))


@dataclass(frozen=True, eq=False)
class FrozenSeries:
    end_ns: "np.ndarray"
    used: "np.ndarray"  # steps x pools
    running: "np.ndarray"
    waiting: "np.ndarray"
    tokens: "np.ndarray"
    prefill_tokens: "np.ndarray"

    @property
    def steps(self) -> int:
        return len(self.end_ns)

    @property
    def total_used(self) -> "np.ndarray":
        return self.used.sum(axis=1)


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
                                                           (a.tokens, b.tokens))))
