"""vLLM 0.33 runtimes for the replay tests: the engine's own plan, a pool of the start-up minimum
plus ``spare`` blocks (``spare`` 0: the tightest pool vLLM starts with), the trace and the options."""

from __future__ import annotations

from csa_plan.planner.engines.registry import get_engine
from csa_plan.planner.engines.settings import EngineSettings
from csa_plan.planner.loaders.model_files import load_model
from csa_plan.planner.runtime.protocol import RuntimeOptions


def vllm_runtime_factory(model, trace, mnbt, seqs, async_on, caching, spec, spare, max_model_len):
    """A function that builds a fresh ``VllmRuntime`` over ``trace`` on each call (twins need two)."""
    m = load_model(model, max_seq_len=max_model_len)
    plan = get_engine("vllm-0.33").configure(m, EngineSettings(max_num_batched_tokens=mnbt, max_num_seqs=seqs,
                                                               async_scheduling=async_on,
                                                               num_speculative_tokens=spec or None),
                                             max_model_len)
    sizing = plan.size_pool(plan.needed_bytes(max_model_len) + (spare + 1) * plan.block_bytes)
    options = RuntimeOptions(enable_prefix_caching=caching)
    return lambda: plan.runtime(sizing, trace, options)
