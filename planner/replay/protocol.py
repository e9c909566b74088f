"""What an engine runtime implements for the one replay loop (see the package docstring).

``RuntimeTrace`` is the requests as every engine runtime reads them: parallel integer
arrays (arrival ns after ``--rate-scale``, prompt and output tokens) and, where the trace
names its prefix blocks (Mooncake ``hash_ids``), the ids of each request's token blocks
(``block_ids[block_offsets[i]:block_offsets[i+1]]``, one id per ``id_block_tokens``
prompt tokens). Equal ids are equal tokens; a request without ids shares nothing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from csa_plan.planner.steptime.model import StepBatch

if TYPE_CHECKING:
    import numpy as np

    from csa_plan.planner.replay.result import RuntimeResult
    from csa_plan.planner.steptime.model import StepTime

# An engine's compiled twin of ``loop.replay`` over one runtime: (trace, time, progress, max_concurrency) -> the
# same result; progress (or None) is called with (requests done, requests) as the loop goes; max_concurrency (or
# None) is a closed-loop client, as in ``loop.replay``.
CompiledReplay = Callable[..., "RuntimeResult"]

MOONCAKE_BLOCK_TOKENS = 512  # the published Mooncake trace: one hash id per 512 prompt tokens


@dataclass(frozen=True, eq=False)
class RuntimeTrace:
    arrival_ns: "np.ndarray"  # int64, non-decreasing
    prompt_tokens: "np.ndarray"  # int64
    output_tokens: "np.ndarray"  # int64, >= 1
    block_ids: "np.ndarray | None" = None  # int64 ids, concatenated per request
    block_offsets: "np.ndarray | None" = None  # int64, len(requests) + 1
    id_block_tokens: int = MOONCAKE_BLOCK_TOKENS

    def __len__(self) -> int:
        return len(self.arrival_ns)

    def ids_of(self, i: int) -> "np.ndarray | None":
        if self.block_ids is None or self.block_offsets is None:
            return None
        return self.block_ids[self.block_offsets[i]:self.block_offsets[i + 1]]


@dataclass(frozen=True)
class RuntimeOptions:
    """Runtime settings that are not start-up settings (None: the engine's default)."""

    enable_prefix_caching: bool | None = None
    spec_acceptance: float = 1.0  # vLLM MTP: each draft's acceptance rate (draft_acceptance.py); 1 = all accepted


@dataclass
class Step:
    """One scheduler step, as the engine decided it (filled by ``EngineRuntime.schedule``)."""

    requests: list[int] = field(default_factory=list)  # scheduled requests, in the engine's order
    tokens: list[int] = field(default_factory=list)  # tokens scheduled per request (parallel)
    prefill_tokens: int = 0  # of those, tokens of prompt (or recomputation) chunks
    batch: StepBatch = field(default_factory=StepBatch)  # what the step holds: the step-time input
    admitted: list[int] = field(default_factory=list)  # taken from waiting this step (resumed ones too)
    preempted: list[int] = field(default_factory=list)  # sent back to waiting this step
    recomputed_tokens: int = 0  # tokens scheduled again for preempted requests' earlier progress
    prefix_hit_tokens: int = 0  # tokens admissions took from the prefix cache this step
    prefix_query_tokens: int = 0  # prompt tokens those admissions looked up
    admission_hit: dict[int, int] = field(default_factory=dict)  # each admission's own prefix hit, where reported
    payload: Any = None  # engine-private state carried to ``complete``
    extra_ns: int = 0  # time the step lasts besides its batch (a host KV tier's reload: engines/host_tier.py)

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens)


def admission_hits(step: Step, prompt_tokens: list[int], seen: "set[int] | dict[int, Any]") -> dict[int, int]:
    """Each fresh admission's own prefix-cache hit (tokens not computed) in ``step``, by request; ``seen``: the
    requests admitted before (a resumed one is not fresh). Where the runtime reports each admission's hit
    (``Step.admission_hit``: vLLM, SGLang) those; else from the step's total: vLLM and SGLang chunk only the
    last request a step admits, so an earlier one's hit is its prompt less what it scheduled, and the last
    one's is the step's total less the others' (its prompt less its tokens where a resumed request's hit is in
    the total too). A layer over the runtime that needs a request's own hit (a
    host KV tier, a disaggregated decode side) reads it here."""
    pos = {r: k for k, r in enumerate(step.requests)}
    fresh = [r for r in step.admitted if r not in seen and r in pos]
    exact = step.admission_hit
    if all(r in exact for r in fresh):  # the runtime reported each admission's own hit (vLLM, SGLang)
        return {r: min(max(exact[r], 0), prompt_tokens[r]) for r in fresh}
    resumed = any(r in seen for r in step.admitted)
    hits: dict[int, int] = {}
    for j, r in enumerate(fresh):
        n = step.tokens[pos[r]]
        if j == len(fresh) - 1 and not resumed:
            hits[r] = step.prefix_hit_tokens - sum(hits.values())
        else:
            hits[r] = prompt_tokens[r] - n
        hits[r] = min(max(hits[r], 0), prompt_tokens[r])
    return hits


@dataclass
class Completion:
    """What one step's (fabricated) model output did."""

    first_token: list[int] = field(default_factory=list)  # requests that sampled their first output token
    finished: list[int] = field(default_factory=list)  # requests done (memory released)


class EngineRuntime(ABC):
    """One engine release's scheduler and memory manager, stepped by ``loop.replay``."""

    pools: tuple[str, ...]
    usable_units: int
    pool_units: tuple[int, ...] = ()  # usable units per pool (parallel to ``pools``; () when not separate)
    pipeline_depth: int = 1
    label: str = ""  # the engine release, for outputs
    preemption_word: str = "preempt"  # the engine's own word for sending a running request back (SGLang: retract)

    @abstractmethod
    def refuse(self, r: int) -> str | None: ...

    @abstractmethod
    def add(self, r: int) -> None: ...

    @abstractmethod
    def schedule(self) -> Step: ...

    @abstractmethod
    def complete(self, step: Step) -> Completion: ...

    @abstractmethod
    def used_units(self) -> tuple[int, ...]: ...

    @abstractmethod
    def running(self) -> int: ...

    @abstractmethod
    def waiting(self) -> int: ...

    def stranded(self) -> tuple[int, ...]:
        """Requests still waiting when nothing runs, nothing is in flight and nothing arrives."""
        return ()

    def notes(self) -> tuple[str, ...]:
        """What this runtime models and what it does not, in one line each."""
        return ()

    def release_due(self, now_ns: int) -> int | None:
        """Memory the runtime keeps for a set time after a request ends (a disaggregated prefill's blocks until
        their transfer ends: ``serving/transfer_hold.py``): free what is due by ``now_ns`` and say when the
        next is due (None: nothing held). The loop calls it before each step and, with nothing to run,
        waits for it as for an arrival."""
        return None

    def hold_on_finish(self) -> None:
        """From now on keep a finished request's memory until ``free_held`` (vLLM's ``delay_free_blocks``,
        SGLang's inflight queue); an engine runtime that cannot says so."""
        raise RuntimeError(f"{self.label or type(self).__name__}: cannot hold a finished request's memory")

    def free_held(self, r: int) -> None:
        """Free the memory request ``r`` kept since it finished (``hold_on_finish``)."""
        raise RuntimeError(f"{self.label or type(self).__name__}: holds no finished request's memory")

    def compiled_replay(self) -> CompiledReplay | None:
        """The engine's compiled loop for this runtime's settings, or None (not built, or settings it
        does not take): ``loop.replay`` then steps the Python methods above, the compiled loop's
        checked twin. Called before any ``add``: the compiled loop replays the whole trace itself.
        It is called ``(trace, time, progress, max_concurrency)``, and with ``stop`` (``replay/early_exit.py``)
        when it takes that keyword; one that does not leaves an early-exit replay to the Python loop."""
        return None

class WrappedRuntime(EngineRuntime):
    """An engine's runtime (``inner``) with something layered over it (a host KV tier, a decode side whose
    prompts arrive over a link): it answers as the inner runtime does wherever the layer changes nothing,
    so each layer writes only what it changes."""

    def __init__(self, inner: EngineRuntime) -> None:
        self.inner = inner
        self.pools = inner.pools
        self.usable_units = inner.usable_units
        self.pool_units = inner.pool_units
        self.pipeline_depth = inner.pipeline_depth
        self.label = inner.label
        self.preemption_word = inner.preemption_word

    def refuse(self, r: int) -> str | None:
        return self.inner.refuse(r)

    def add(self, r: int) -> None:
        self.inner.add(r)

    def schedule(self) -> Step:
        return self.inner.schedule()

    def complete(self, step: Step) -> Completion:
        return self.inner.complete(step)

    def used_units(self) -> tuple[int, ...]:
        return self.inner.used_units()

    def running(self) -> int:
        return self.inner.running()

    def waiting(self) -> int:
        return self.inner.waiting()

    def stranded(self) -> tuple[int, ...]:
        return self.inner.stranded()

    def notes(self) -> tuple[str, ...]:
        return self.inner.notes()

    def release_due(self, now_ns: int) -> int | None:
        return self.inner.release_due(now_ns)

    def hold_on_finish(self) -> None:
        self.inner.hold_on_finish()

    def free_held(self, r: int) -> None:
        self.inner.free_held(r)

