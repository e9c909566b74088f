"""vLLM 0.33 runtimes and drawn traces for the replay tests: the engine's own plan, a pool of the start-up minimum
plus ``spare`` blocks (``spare`` 0: the tightest pool vLLM starts with), the trace and the options."""

from __future__ import annotations

import numpy as np

from csa_plan.planner.engines.registry import get_engine
from csa_plan.planner.engines.settings import EngineSettings
from csa_plan.planner.loaders.model_files import load_model
from csa_plan.planner.replay.protocol import RuntimeOptions, RuntimeTrace


def vllm_runtime_factory(model, trace, mnbt, seqs, async_on, caching, spec, spare, max_model_len, acceptance=1.0):
    """A function that builds a fresh ``VllmRuntime`` over ``trace`` on each call (twins need two)."""
    m = load_model(model, max_seq_len=max_model_len)
    plan = get_engine("vllm-0.33").configure(m, EngineSettings(max_num_batched_tokens=mnbt, max_num_seqs=seqs,
                                                               async_scheduling=async_on,
                                                               num_speculative_tokens=spec or None),
                                             max_model_len)
    sizing = plan.size_pool(plan.needed_bytes(max_model_len) + (spare + 1) * plan.block_bytes)
    options = RuntimeOptions(enable_prefix_caching=caching, spec_acceptance=acceptance)
    return lambda: plan.runtime(sizing, trace, options)


def drawn_trace(draw, gaps, prompts, outputs, *, shared, max_id, chunk=512, partial=False, with_ids=True):
    """A ``RuntimeTrace`` of drawn requests whose prefix ids are drawn too: one id per ``chunk`` prompt
    tokens (``partial``: a drawn number of them, as a trace may name fewer), ids in ``0..max_id``, or
    ``0, 1, 2, …`` for every request when ``shared`` (full prefix reuse)."""
    from hypothesis import strategies as st

    ids, offs = [], [0]
    for p in prompts:
        k = -(-p // chunk)
        if partial:
            k = draw(st.integers(0, k))
        ids.extend(range(k) if shared else draw(st.lists(st.integers(0, max_id), min_size=k, max_size=k)))
        offs.append(len(ids))
    return RuntimeTrace(np.cumsum(gaps).astype(np.int64), np.array(prompts, dtype=np.int64),
                        np.array(outputs, dtype=np.int64), np.array(ids, dtype=np.int64) if with_ids else None,
                        np.array(offs, dtype=np.int64) if with_ids else None, chunk)
