"""Pipeline stages (``--pp`` above 1) with an engine: each stage's pool from its own layers, the pool
the scheduler sees, and the step clock through the stages (issue 46, item 2).

The layer split is the device budget's (``planner/budget``: the engine's own partition rule per stage,
``StageBudget.layers``; the MTP layers sit on the last stage, as the contract and both engines keep
them), and each stage's KV memory is that stage's budget (its own weights and start-up reserves).
Then, as each release sizes it:

* **vLLM 0.33/0.34** — every PP worker profiles its own memory and plans the *global* KV cache groups
  projected onto its layers (``v1/core/kv_cache_planning.py`` ``get_kv_cache_configs`` :1461-1604,
  ``_project_kv_cache_groups_to_worker`` :1413-1458): ``num_blocks = memory // bytes_per_block`` of its
  own layers (:1560-1568); then every worker takes the smallest block count (:1581-1594, "Change the
  num_blocks of each rank to the smallest among all ranks") and the scheduler is built from worker 0's
  config with that count (``v1/core/kv_cache_utils.py`` ``generate_scheduler_kv_cache_config`` :1096-1117,
  which asserts every worker's count is equal).
* **SGLang 0.5.23** — every rank measures the free memory as the minimum over all GPUs
  (``srt/mem_cache/kv_cache_configurator.py`` ``_profile_available_bytes`` :2990-3004 with
  ``distributed=True``; ``srt/utils/common.py`` ``get_available_gpu_memory`` :569-573, an all-reduce MIN),
  and sizes its pool from its own layers (``srt/model_executor/pool_configurator.py`` :1115-1125, the
  DeepSeek-V4 pool's ``stage_compress_ratios`` slice ``[start_layer, end_layer)``). Every rank then has the
  same bytes and its own token count; the replay's scheduler takes the stage with the fewest units
  (csa-plan's reading: no code reconciling the ranks' counts was found, so the smallest binds).

Time (``replay/pipeline.py``): the clock's per-layer terms scaled to the slowest stage's share of the
decoder layers (the constant per-step term kept whole on every stage), and at each stage boundary the
batch's activations over the link: DeepSeek-V4 sends its ``hc_mult`` hidden-state streams
(``models/deepseek_v4/nvidia/model.py`` make_empty_intermediate_tensors :930-946: ``(tokens, hc_mult,
hidden_size)`` in the activation dtype), each TP rank its 1/TP slice (``v1/worker/gpu_worker.py``
:1384-1387, ``isend_tensor_dict(..., all_gather_group=tp_group)``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from csa_plan.planner.errors import BadInput

# sglang-0.5.23 srt/arg_groups/fields/parallel.py:69-72 (--pp-async-batch-depth, default 0; not a csa-plan option)
SGLANG_PP_ASYNC_BATCH_DEPTH = 0
ACTIVATION_BYTES = 2  # bf16 activations (the checkpoints' torch_dtype; both engines run V4 in bf16 between layers)

VLLM_RULE = ("vllm-0.33.0 v1/core/kv_cache_planning.py get_kv_cache_configs :1560-1594 (each worker's blocks from "
             "its projected groups, then the smallest block count on every worker)")
SGLANG_RULE = ("sglang-0.5.23 srt/mem_cache/kv_cache_configurator.py :2990-3004 (free memory: the minimum over all "
               "GPUs) and srt/model_executor/pool_configurator.py :1115-1125 (each rank's pool from its layers)")


@dataclass(frozen=True)
class StagePool:
    """One pipeline stage's pool as its engine workers size it."""

    stage: int
    layers: tuple[int, ...]  # decoder layer ids on this stage (MTP layers on the last)
    kv_memory_bytes: int  # the KV memory this stage's GPUs size their pool from
    sizing: Any  # engines.engine.PoolSizing of this stage's own layers
    plan: Any  # the engine plan as this stage holds it

    def as_dict(self) -> dict[str, Any]:
        s = self.sizing
        return {"stage": self.stage, "layers": [self.layers[0], self.layers[-1]], "num_layers": len(self.layers),
                "kv_memory_bytes": self.kv_memory_bytes, "unit": s.unit_name, "unit_bytes": s.unit_bytes,
                "total_units": s.total_units, "usable_units": s.usable_units, "usable_bytes": s.usable_bytes,
                "pools": [p.as_dict() for p in s.pools], "log_lines": list(s.log_lines)}


@dataclass(frozen=True)
class PipelinePools:
    """Every stage's pool, the binding stage and what the scheduler sees."""

    engine: str
    stages: tuple[StagePool, ...]
    binding: int  # the stage whose pool is smallest (in the engine's units)
    plan: Any  # the plan the scheduler runs (vLLM: worker 0's; SGLang: the binding stage's)
    sizing: Any  # the pool the scheduler sees
    rule: str
    num_main_layers: int = 0  # the model's decoder layers (ids below it; MTP layers above)

    def as_dict(self) -> dict[str, Any]:
        return {"stages": [s.as_dict() for s in self.stages], "binding_stage": self.binding,
                "scheduler_units": self.sizing.total_units, "scheduler_usable_units": self.sizing.usable_units,
                "unit": self.sizing.unit_name, "rule": self.rule}


def stage_layers(spec: Any, budget: Any) -> list[tuple[int, ...]]:
    """The decoder layer ids on each stage (the budget's split), the MTP layers added to the last."""
    mtp = tuple(d.layer_id for d in spec.layers if d.is_mtp)
    out = [tuple(st.layers) for st in budget.stages]
    out[-1] = out[-1] + mtp
    return out


def stage_spec(spec: Any, layers: tuple[int, ...]) -> Any:
    """``spec`` restricted to ``layers`` (the layers one stage's GPUs hold)."""
    keep = set(layers)
    kept = tuple(d for d in spec.layers if d.layer_id in keep)
    mtp = sum(1 for d in kept if d.is_mtp)
    return replace(spec, layers=kept, num_main_layers=len(kept) - mtp, num_mtp_layers=mtp)


def require_whole_sharing_groups(spec: Any, layers: list[tuple[int, ...]]) -> None:
    """A stage boundary inside a DeepSeek-V4.1 sharing group is refused (the readers need the owner's state
    on their own GPU): the rule the ledger check already applies (``planner/sharing.py``)."""
    if any(d.sharing is not None for d in spec.layers):
        from csa_plan.planner.sharing import require_whole_groups

        require_whole_groups(spec.layers, [tuple(i for i in s if i < spec.num_main_layers) for s in layers])


def pipeline_pools(spec: Any, engine: str, settings: Any, length: int, budget: Any) -> PipelinePools:
    """Each stage's pool from its layers and its KV memory, and the scheduler's pool (module docstring).
    EngineRefused passes to the caller (a stage whose memory the engine refuses)."""
    from csa_plan.planner.engines.registry import get_engine

    model = get_engine(engine)
    layers = stage_layers(spec, budget)
    require_whole_sharing_groups(spec, layers)
    if engine.startswith("sglang") and any(d.sharing is not None for d in spec.layers):
        from csa_plan.planner.engines.engine import EngineRefusal, EngineRefused

        rule = "sglang-0.5.23 srt/arg_groups/deepseek_v4_hook.py:333-353"  # its own refusal of V4.1 with PP
        raise EngineRefused(EngineRefusal(engine, rule, "--pp-size", "1", str(len(layers)),
                                          f"{engine}: DeepSeek-V4.1 does not support pipeline parallelism yet; disable "
                                          f"it to serve this model. ({rule})"))
    kv = [st.kv_memory_bytes for st in budget.stages]
    full = model.configure(spec, settings, length)
    stages = []
    if hasattr(full, "on_stage"):  # vLLM: the global groups projected onto each worker
        if getattr(full.release, "layer_tuples", False):
            raise BadInput("options", "--pp", f"{engine}: pipeline stages are modelled for vLLM 0.33/0.34's packed "
                                              "KV cache groups, not this release's layer tuples")
        # the windows are budgeted for max_in_flight_tokens = max_concurrent_batches x the token budget, and
        # max_concurrent_batches counts the stages (config/vllm.py :588-610)
        full = replace(full, resolved=replace(full.resolved, pp=len(layers)))
        for i, (ls, mem) in enumerate(zip(layers, kv)):
            plan = full.on_stage(frozenset(ls))
            stages.append(StagePool(i, ls, mem, plan.size_pool(mem), plan))
        binding = min(range(len(stages)), key=lambda i: stages[i].sizing.total_units)
        blocks = stages[binding].sizing.total_units
        first = stages[0].plan
        sizing = first.size_pool(blocks * first.block_bytes)  # worker 0's config with the smallest count
        return PipelinePools(engine, tuple(stages), binding, first, sizing, VLLM_RULE, spec.num_main_layers)
    if not engine.startswith("sglang"):
        raise BadInput("options", "--pp", f"--engine {engine} is modelled with one pipeline stage (pp 1)")
    mem = min(kv)  # every rank sizes from the least free memory over all GPUs
    for i, ls in enumerate(layers):
        plan = model.configure(stage_spec(spec, ls), settings, length)
        stages.append(StagePool(i, ls, mem, plan.size_pool(mem), plan))
    binding = min(range(len(stages)), key=lambda i: stages[i].sizing.total_units)
    return PipelinePools(engine, tuple(stages), binding, stages[binding].plan, stages[binding].sizing, SGLANG_RULE,
                         spec.num_main_layers)


def stage_peaks(pools: PipelinePools, peak_units: int) -> list[dict[str, Any]]:
    """Each stage's peak under the replay: the scheduler's peak units at that stage's unit bytes, beside
    that stage's usable units (vLLM: every stage holds the same block count, each block its own layers'
    bytes; SGLang: each rank's own pool, the same tokens held on every rank)."""
    out = []
    for st in pools.stages:
        usable = st.sizing.usable_units if pools.engine.startswith("sglang") else pools.sizing.usable_units
        out.append({"stage": st.stage, "layers": [st.layers[0], st.layers[-1]], "peak_units": peak_units,
                    "usable_units": usable, "unit_bytes": st.sizing.unit_bytes,
                    "peak_bytes": peak_units * st.sizing.unit_bytes, "usable_bytes": usable * st.sizing.unit_bytes,
                    "within_pool": peak_units <= usable})
    return out


def pipeline_section(pools: PipelinePools, timing: Any, link: Any, occupancy: Any) -> dict[str, Any]:
    """``runtime.pipeline`` in ``simulate --json``: the stages' pools and peaks, the link and the clock.
    The peak compared is the pool each stage sizes per its layers: vLLM's one block pool; SGLang's full
    pages (its unit; the SWA pool is sized for the running requests, the same on every stage)."""
    peak_units = occupancy.peak_units
    if pools.engine.startswith("sglang"):
        peak_units = occupancy.pools[0].peak  # full pages (c4 KV + indexer + c128 KV): engines/sglang/runtime.py POOLS[0]
    return {**pools.as_dict(), **timing.as_dict(), "link": link.name, "link_source": link.source,
            "stage_share": stage_share(pools), "stage_time": timing.stage_time.label,
            "in_flight_rule": IN_FLIGHT_RULE["sglang" if pools.engine.startswith("sglang") else "vllm"],
            "peaks": stage_peaks(pools, peak_units),
            "not_modelled": [line for family, line in NOT_MODELLED if pools.engine.startswith(family)]}


IN_FLIGHT_RULE = {
    "vllm": "vllm-0.33.0 config/vllm.py max_concurrent_batches :588-598 (pp + 1 with async scheduling on Model "
            "Runner V2, else pp)",
    "sglang": "sglang-0.5.23 srt/managers/scheduler_pp_mixin.py event_loop_pp :104-215 and init_pp_loop_state "
              ":561-570 (pp_loop_size = pp_size + pp_async_batch_depth micro-batches, each its own running batch, "
              "scheduled in turn; a micro-batch's result processed one turn before its next turn)",
}


def stage_share(pools: PipelinePools) -> float:
    """The largest stage's share of the decoder layers (the stage clock's scale; MTP layers not counted)."""
    main = pools.num_main_layers
    return max(sum(1 for i in st.layers if i < main) for st in pools.stages) / max(1, main)


NOT_MODELLED = (  # (the engine family it is said for, the line)
    ("sglang", "SGLang's micro-batches at their defaults only (pp_async_batch_depth 0, pp_max_micro_batch_size = "
               "max_running_requests // pp); the stage-boundary send is charged on the latency path only; "
               "SGLang's dynamic chunking under PP (off by default) is not modelled"),
    ("vllm", "the stage-boundary send is charged on the latency path only (vLLM's isend overlaps the next step's "
             "compute); a staggered request's next batch may enter stage 0 before its previous token is back by "
             "up to one boundary transfer"),
    ("", "each stage's step time: the clock's per-layer terms scaled to the largest stage's share of the decoder "
         "layers; the embedding and lm_head sit on the first and last stage but are spread here"),
    ("", "the compiled replay loops do not take pipeline stages: the Python loop (their twin) replays them"),
)


def activation_bytes_per_token(spec: Any, tp: int) -> int:
    """Bytes one GPU sends per token across a stage boundary: the hidden-state streams (``hc_mult`` x
    ``hidden_size`` for DeepSeek-V4; 1 x hidden_size otherwise) in bf16, split over the TP ranks."""
    from csa_plan.planner.weights.config import read_model_config

    data: dict[str, Any] = {}
    for ref in (spec.source, spec.name):
        config = read_model_config(ref) if isinstance(ref, str) else None
        if config is not None and config.data:
            data = dict(config.data)
            break
    hidden = data.get("hidden_size")
    if not hidden:
        raise BadInput("options", "--pp", f"{spec.name}: the stage-boundary transfer needs the model's hidden_size "
                                          "(a preset or config.json)")
    streams = int(data.get("hc_mult") or 1)
    from csa_plan.planner.units import ceil_div

    return ceil_div(streams * int(hidden) * ACTIVATION_BYTES, tp)


def stage_clock(spec: Any, config: Any, pools: PipelinePools, time: Any, link_name: str | None = None) -> Any:
    """The ``PipelineTiming`` the replay loop runs under: the slowest stage's clock, the boundary link
    (NVLink when every GPU of the replica sits in one NVLink domain, else the NIC per GPU, ib-ndr: the
    disaggregation's default and card table), and the batches in flight as the engine runs them."""
    from csa_plan.planner.cards import card, default_link, link
    from csa_plan.planner.engines.settings import target_of
    from csa_plan.planner.replay.pipeline import PipelineTiming

    p = config.placement
    share = stage_share(pools)
    gpu = card(target_of(config.engine.settings)[0].name)
    gpus = p.tp * p.pp
    name = link_name or default_link(gpus, gpu.perf.link_domain if gpu.perf is not None else 1)
    found, bytes_s = link(name, gpu, gpus, field="--pp")
    sglang = pools.engine.startswith("sglang")
    if sglang:  # pp_loop_size = pp_size + pp_async_batch_depth (0 by default) micro-batches (replay/pipeline.py)
        in_flight = p.pp + SGLANG_PP_ASYNC_BATCH_DEPTH
    else:  # config/vllm.py max_concurrent_batches :588-598 (model runner V2: pp + 1 with async scheduling)
        in_flight = p.pp + 1 if pools.plan.resolved.async_scheduling else p.pp
    return PipelineTiming(stages=p.pp, stage_time=scaled_time(time, share),
                          activation_bytes_per_token=activation_bytes_per_token(spec, p.tp), link_bytes_s=bytes_s,
                          in_flight=in_flight, micro_batch_turns=sglang), found


def scaled_time(time: Any, share: float) -> Any:
    """The step clock for a stage holding ``share`` of the decoder layers: every per-layer term scaled,
    the constant term (launch, sampling, scheduling: once a step on every stage) kept whole."""
    if time.linear is None:
        return replace(time, tpot_ms=time.tpot_ms * share, prefill_tok_s=time.prefill_tok_s / share)
    c = time.linear
    return replace(time, linear=(c[0],) + tuple(x * share for x in c[1:7]) + (c[7],))
