"""The compiled replay of SGLang 0.5.23's scheduler (``csglang.c``), the Python model's twin.

``csglang.replay`` runs the whole of ``loop.replay`` over one ``SglangRuntime`` — clock, arrivals,
refusals, the step time, the scheduler, the adder, the ratio, the radix cache, the SWA window frees,
retraction — and returns the same ``RuntimeResult`` (per-request int64 arrays). The Python methods
stay the checked twin: ``tests/simulate/test_sglang_compiled.py`` asserts ``same_as`` on random traces
and settings under Hypothesis, and ``tools/crosscheck_sglang_runtime.py`` checks the compiled run
equals the Python run it compares with SGLang's own code.

The compiled loop is offered (``SglangRuntime.compiled_replay``) when the extension is built with
this module's ABI and every setting is within its range (``takes``): page and window counts, pool
pages and token limits below 2^40, so no int64 sum it forms can overflow and every float it forms
is the Python model's exactly. A trace outside the range (a token count at or past 2^40, arrivals
not sorted, a non-positive prefill rate) runs the Python twin instead; so does a step that would end
past the int64 clock, so that the twin raises its own error.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from csa_plan.planner.extensions import OptionalExtension, reporting

if TYPE_CHECKING:
    from csa_plan.planner.engines.sglang.runtime import SglangRuntime
    from csa_plan.planner.replay.protocol import CompiledReplay, RuntimeTrace
    from csa_plan.planner.replay.result import RuntimeResult
    from csa_plan.planner.steptime.model import StepTime

CSGLANG_ABI = 6  # csglang.c's CSGLANG_ABI: the calling convention used below
# CPython 3.12 made sum() of floats compensated (Neumaier); the adder's running offset is a sum()
COMPENSATED_SUM = sys.version_info >= (3, 12)

CSGLANG = OptionalExtension("csa_plan.planner.engines.sglang.csglang", CSGLANG_ABI)


def compiled_module():
    """The ``csglang`` extension, or None: not built, or a stale build (``planner/extensions.py``)."""
    return CSGLANG.load()


def takes(rt: "SglangRuntime", bound: int) -> bool:
    """Settings the compiled loop takes: a page of at least one token; every count below ``bound`` (the
    built module's ``BOUND``, 2^40 in csglang.c)."""
    import math

    c = rt.cfg
    counts = (c.full_pages, c.swa_pages, c.page, c.window, c.chunked_prefill_size, c.max_prefill_tokens, rt.capacity)
    signed = (c.max_running_requests, rt.max_req_len, rt.max_input)
    return (c.page >= 1 and all(0 <= int(x) < bound for x in counts) and all(abs(int(x)) < bound for x in signed)
            and math.isfinite(c.schedule_conservativeness))


def _trace_taken(trace: "RuntimeTrace", time: "StepTime", bound: int) -> bool:
    import numpy as np

    if not (time.prefill_tok_s > 0) or time.decode_ns < 1 or trace.id_block_tokens < 1:
        return False
    n = len(trace)
    if n == 0:
        return True
    cols = (trace.arrival_ns, trace.prompt_tokens, trace.output_tokens)
    if any(int(np.min(a)) < 0 for a in cols) or int(np.max(trace.prompt_tokens)) >= bound \
            or int(np.max(trace.output_tokens)) >= bound:
        return False
    return bool(np.all(np.diff(trace.arrival_ns) >= 0)) if n > 1 else True


def replay_for(rt: "SglangRuntime") -> "CompiledReplay | None":
    """The compiled replay over ``rt``'s settings, or None (not built, or settings it does not take)."""
    mod = compiled_module()
    if mod is None or not takes(rt, mod.BOUND):
        return None

    def run(trace: "RuntimeTrace", time: "StepTime", progress=None, max_concurrency: int | None = None,
            stop=None) -> "RuntimeResult":
        from csa_plan.planner.errors import ReplayInputError
        from csa_plan.planner.replay.loop import replay

        if not _trace_taken(trace, time, mod.BOUND):
            return replay(rt, trace, time, progress, compiled=False, max_concurrency=max_concurrency, stop=stop)
        out = reporting(mod, progress if stop is None else stop.ticker(progress),
                        lambda: ReplayInputError.guard(lambda: _run(mod, rt, trace, time, max_concurrency, stop),
                                                       "csglang"))
        return replay(rt, trace, time, progress, compiled=False, max_concurrency=max_concurrency, stop=stop) \
            if out is None else out

    return run


def _run(mod, rt: "SglangRuntime", trace: "RuntimeTrace", time: "StepTime",
         max_concurrency: int | None = None, stop=None) -> "RuntimeResult | None":
    import numpy as np

    from csa_plan.planner.engines.sglang.ratio import RatioRule
    from csa_plan.planner.replay.loop import STRANDED
    from csa_plan.planner.replay.result import FrozenSeries, RuntimeResult, step_buckets
    from csa_plan.planner.clock import MAX_CLOCK_NS

    c = rt.cfg
    n = len(trace)
    i64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)
    arrival, prompt, output = i64(trace.arrival_ns), i64(trace.prompt_tokens), i64(trace.output_tokens)
    ids = offs = None
    n_ids = 0
    if c.radix_cache and trace.block_ids is not None and trace.block_offsets is not None:
        ids, offs = i64(trace.block_ids), i64(trace.block_offsets)
        n_ids = len(ids)
    admitted, first, finished = (np.full(n, -1, dtype=np.int64) for _ in range(3))
    preempt = np.zeros(n, dtype=np.int64)
    refused_code = np.zeros(n, dtype=np.int8)
    rule = RatioRule.from_config(c.schedule_conservativeness)
    closed = 0 if max_concurrency is None else int(max_concurrency)
    sent = np.empty(n, dtype=np.int64) if closed else None
    if stop is not None:  # the loop's tick reads these as the loop writes them (replay/early_exit.py)
        stop.watch(trace.arrival_ns, trace.output_tokens, admitted, first, finished, refused_code)
    got = mod.replay(
        full_pages=c.full_pages, swa_pages=c.swa_pages, page=c.page, window=c.window,
        max_running_requests=c.max_running_requests, chunked_prefill_size=c.chunked_prefill_size,
        max_prefill_tokens=c.max_prefill_tokens, max_req_len=rt.max_req_len, max_input=rt.max_input,
        capacity=rt.capacity, radix_cache=c.radix_cache, compensated_sum=COMPENSATED_SUM, ratio_init=rule.init,
        ratio_min=rule.min, ratio_decay=rule.decay, n=n, arrival=arrival, prompt=prompt, output=output, n_ids=n_ids,
        block_ids=ids, block_offsets=offs, id_block_tokens=trace.id_block_tokens, decode_ns=time.decode_ns,
        max_clock_ns=MAX_CLOCK_NS, prefill_tok_s=float(time.prefill_tok_s), admitted=admitted, first_token=first,
        finished=finished, preemptions=preempt, refused=refused_code, series_cap=step_buckets(),
        step_model=time.linear, max_concurrency=closed, sent=sent)
    if got[0] != 0:  # a step would end past the int64 clock: the twin raises its own error
        return None
    _, _, recomputed, hit, query, aborted, stranded, *cols = got
    series = FrozenSeries.from_buffers(*cols, len(rt.pools))
    refused: dict[int, str] = {}
    for r in np.flatnonzero(refused_code == 1).tolist():
        refused[r] = rt.refuse(r)
    for r in stranded:
        refused[r] = STRANDED
    rt.retractions = int(preempt.sum())
    rt.retracted_requests = set(np.flatnonzero(preempt).tolist())
    rt.aborted = list(aborted)
    return RuntimeResult(label=rt.label, pools=rt.pools, usable_units=rt.usable_units,
                         arrival_ns=trace.arrival_ns if sent is None else sent,
                         admitted_ns=admitted, first_token_ns=first, finished_ns=finished, preemptions=preempt,
                         refused=refused, series=series, recomputed_tokens=recomputed, prefix_hit_tokens=hit,
                         prefix_query_tokens=query, notes=rt.notes(), pool_units=tuple(rt.pool_units),
                         preemption_word=rt.preemption_word)
