"""The compiled vLLM 0.33.0 replay (the optional ``cvllm`` extension, ``cvllm.c``) behind ``VllmRuntime``.

``loop.replay`` over a ``VllmRuntime`` steps the Python scheduler (``scheduler``) once per
engine step; V4-Flash's 4-token block group makes block work every few steps, so a trace of
tens of thousands of requests takes seconds in Python. ``cvllm.run`` is the whole replay — the
loop's clock, arrivals, pipeline depth and step time, the scheduler, the block pool, the
per-group managers and prefix caching — in C, returning the same ``RuntimeResult``; the Python
loop is its checked twin (``tests/simulate/test_vllm_compiled.py``: equal under Hypothesis).

``compiled_replay(rt)`` hands it out only when it applies: the extension is built with this
module's ABI, and the settings keep every count inside the C loop's integer types (``refusal``
says which setting does not, and the Python loop runs instead).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from csa_plan.planner.extensions import OptionalExtension, reporting

if TYPE_CHECKING:
    from csa_plan.planner.engines.vllm.scheduler import VllmRuntime
    from csa_plan.planner.replay.protocol import CompiledReplay, RuntimeTrace
    from csa_plan.planner.replay.result import RuntimeResult
    from csa_plan.planner.steptime.model import StepTime

CVLLM_ABI = 8  # cvllm.c's CVLLM_ABI: the calling convention used below

CVLLM = OptionalExtension("csa_plan.planner.engines.vllm.cvllm", CVLLM_ABI)


def compiled_module():
    """The ``cvllm`` extension, or None: not built, or a stale build (``planner/extensions.py``)."""
    return CVLLM.load()


def refusal(rt: "VllmRuntime") -> str | None:
    """Why the C loop cannot take this runtime's settings (its integer types, as the built module states
    them: ``INT32_COUNT``, ``MTP_MAX``, ... in cvllm.c), or None when it can."""
    mod = compiled_module()
    if mod is None:
        return "the cvllm extension is not built (or is stale)"
    INT32_COUNT, MTP_MAX, BUDGET_MAX = mod.INT32_COUNT, mod.MTP_MAX, mod.BUDGET_MAX
    GROUPS_MAX, BLOCK_MAX, WINDOW_MAX = mod.GROUPS_MAX, mod.BLOCK_MAX, mod.WINDOW_MAX
    kv = rt.kv
    if not kv.fast:
        return "a step-by-step twin (KvCacheManager(fast=False)) runs in Python by design"
    if rt.max_model_len > INT32_COUNT:
        return f"max_model_len above {INT32_COUNT:,} (per-request token counts are int32 in the C loop)"
    if len(rt.trace) >= INT32_COUNT or kv.pool.num_blocks >= INT32_COUNT:
        return f"more than {INT32_COUNT:,} requests or blocks (int32 indexes in the C loop)"
    if rt.budget > BUDGET_MAX:
        return f"max_num_batched_tokens above {BUDGET_MAX:,} (prefill tokens x 1e9 ns must stay in int64)"
    hash_lookahead = rt.prefix.lookahead if rt.prefix is not None else 0
    if max(rt.num_spec, rt.lookahead, rt.prefill_lookahead, hash_lookahead) > MTP_MAX:
        return f"more than {MTP_MAX:,} speculative / lookahead tokens"
    if rt.replay_tokens or any(g.spec.ring or not g.spec.cacheable for g in kv.groups):
        return ("DeepSeek-V4.1's carry rings, uncached windows and bounded replay are not in the C loop "
                "(the Python replay runs them)")
    if not 1 <= len(kv.groups) <= GROUPS_MAX:
        return f"more than {GROUPS_MAX} KV cache groups"
    for g in kv.groups:
        s = g.spec
        if not 1 <= s.block_size <= BLOCK_MAX or (s.window is not None and not 0 <= s.window <= WINDOW_MAX) \
                or not 0 <= s.extra_retained <= WINDOW_MAX:
            return f"a KV cache group of block size {s.block_size} / window {s.window} outside the C loop's range"
    t = rt.trace
    if t.id_block_tokens < 1:
        return "id_block_tokens below 1"
    return None


def compiled_replay(rt: "VllmRuntime") -> "CompiledReplay | None":
    """The compiled replay of ``rt``'s settings, or None (not built, or ``refusal`` names a setting)."""
    mod = compiled_module()
    if mod is None or refusal(rt) is not None:
        return None
    from csa_plan.planner.errors import ReplayInputError

    return lambda trace, time, progress=None, max_concurrency=None, stop=None: reporting(
        mod, progress if stop is None else stop.ticker(progress),
        lambda: ReplayInputError.guard(lambda: _run(mod, rt, trace, time, max_concurrency, stop), "cvllm"))


def _run(mod, rt: "VllmRuntime", trace: "RuntimeTrace", time: "StepTime",
         max_concurrency: int | None = None, stop=None) -> "RuntimeResult":
    import numpy as np

    from csa_plan.planner.engines.vllm.prefix_caching import ALIGN, HASH_BLOCK
    from csa_plan.planner.errors import BadInput
    from csa_plan.planner.replay.loop import STRANDED
    from csa_plan.planner.replay.result import FrozenSeries, RuntimeResult, step_buckets
    from csa_plan.planner.clock import MAX_CLOCK_NS
    from csa_plan.planner.units import NS_PER_S

    kv = rt.kv
    n = len(trace)
    specs = np.array([[g.spec.block_size, -1 if g.spec.window is None else g.spec.window, g.spec.extra_retained,
                       -1 if g.spec.admission_cap is None else g.spec.admission_cap] for g in kv.groups],
                     dtype=np.int64).reshape(-1)
    lookup, starts = _lookup_groups(rt)
    i64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)
    ids = offs = None
    if rt.prefix is not None and trace.block_ids is not None and trace.block_offsets is not None:
        ids, offs = i64(trace.block_ids), i64(trace.block_offsets)
    admitted, first, finished, preempt = (np.empty(n, dtype=np.int64) for _ in range(4))
    refused = np.empty(n, dtype=np.int8)
    cols = [bytearray() for _ in range(6)]  # end_ns, running, waiting, tokens, prefill, meta
    used, stranded = bytearray(), bytearray()
    hash_lookahead = rt.prefix.lookahead if rt.prefix is not None else 0
    closed = 0 if max_concurrency is None else int(max_concurrency)
    sent = np.empty(n, dtype=np.int64) if closed else None
    if stop is not None:  # the loop's tick reads these as the loop writes them (replay/early_exit.py)
        stop.watch(trace.arrival_ns, trace.output_tokens, admitted, first, finished, refused)
    status, recomputed, hit, query, at = mod.run(
        arrival=i64(trace.arrival_ns), prompt=i64(trace.prompt_tokens), output=i64(trace.output_tokens),
        block_ids=ids, block_offsets=offs, id_block_tokens=int(trace.id_block_tokens), specs=specs, lookup=lookup,
        lookup_start=starts, num_blocks=kv.pool.num_blocks, max_model_len=rt.max_model_len,
        max_num_batched_tokens=rt.budget, max_num_seqs=rt.max_seqs, num_spec=rt.num_spec, lookahead=rt.lookahead,
        prefill_lookahead=rt.prefill_lookahead, align=ALIGN, hash_block=HASH_BLOCK, hash_lookahead=hash_lookahead,
        decode_ns=time.decode_ns, max_clock_ns=MAX_CLOCK_NS, async_scheduling=bool(rt.async_on),
        caching=rt.prefix is not None, series_cap=step_buckets(), prefill_tok_s=float(time.prefill_tok_s),
        admitted=admitted, first_token=first, finished=finished, preemptions=preempt, refused=refused, series=cols,
        used=used, stranded=stranded, step_model=time.linear, max_concurrency=closed, sent=sent,
        acceptance_milli=rt.accept_milli)
    if status == 1:  # the Python loop's words (loop.replay)
        raise BadInput("options", "--tpot-ms / --prefill-tok-s",
                       f"the engine step starting at {at / NS_PER_S:,.0f} s would end past the int64 "
                       "nanosecond clock (about 292 years, MAX_CLOCK_NS): shorten the trace, its token "
                       "counts or the step times")
    arr = lambda b: np.frombuffer(b, dtype=np.int64) if len(b) else np.zeros(0, dtype=np.int64)
    end_ns, running, waiting, tokens, prefill, meta = cols
    series = FrozenSeries.from_buffers(end_ns, used, running, waiting, tokens, prefill, meta, len(kv.groups))
    reasons: dict[int, str] = {}
    for r in np.flatnonzero(refused == 1).tolist():  # at arrival, in arrival order (as the loop records them)
        reasons[r] = rt.refuse(r) or ""
    for r in arr(stranded).tolist():
        reasons[r] = STRANDED
    return RuntimeResult(label=rt.label, pools=rt.pools, usable_units=rt.usable_units,
                         arrival_ns=trace.arrival_ns if sent is None else sent,
                         admitted_ns=admitted, first_token_ns=first, finished_ns=finished, preemptions=preempt,
                         refused=reasons, series=series, recomputed_tokens=int(recomputed),
                         prefix_hit_tokens=int(hit), prefix_query_tokens=int(query), notes=rt.notes(),
                         pool_units=tuple(rt.pool_units), preemption_word=rt.preemption_word)


def _lookup_groups(rt: "VllmRuntime"):
    """PrefixCache.lookup_groups as index arrays: groups in lookup order, and where each spec's run starts."""
    import numpy as np

    if rt.prefix is not None:
        order = rt.prefix.lookup_groups
    else:
        order = [(g.spec, [i]) for i, g in enumerate(rt.kv.groups)]
    lookup = [i for _, ids in order for i in ids]
    starts = [0]
    for _, ids in order:
        starts.append(starts[-1] + len(ids))
    return np.array(lookup, dtype=np.int64), np.array(starts, dtype=np.int64)
