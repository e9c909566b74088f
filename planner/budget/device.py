"""The budget of every device of a deployment: card -> engine share -> weights -> reserves -> state pool.

One budget per pipeline stage (stages hold different layers); the stage with the least
left for the state pool binds. Each step carries its source: the tensor inventory or a
checkpoint's headers, an option, or an engine rule's file:line. A deployment whose
weights do not fit is reported as such, with the smallest tensor- or expert-parallel
size that would fit (``smallest_fitting``), never as zero requests.
"""

from __future__ import annotations

from dataclasses import field, replace
from typing import Any, Callable

from csa_plan.planner.budget.startup import sglang_placement, startup_for
from csa_plan.planner.budget.stage import ModelDims, StageContext, StartupSettings, model_dims
from csa_plan.planner.budget.steps import Step, StepKind
from csa_plan.planner.errors import BadInput
from csa_plan.planner.placement import Placement
from csa_plan.planner.record import record
from csa_plan.planner.weights.config import read_model_config
from csa_plan.planner.weights.measured import ModelWeights, WeightsSource, model_weights
from csa_plan.planner.weights.engram import EngramChoice, EngramPlacement, EngramTable, placement as engram_placement
from csa_plan.planner.weights.engram import tables_of as engram_tables
from csa_plan.planner.weights.rules import rules_for
from csa_plan.planner.weights.sharding import DeviceWeights, Part, shard

MAX_SEARCH_TP = 256


@record
class BudgetRequest:
    """Everything a device budget reads; ``None`` overrides mean "compute this step"."""

    model: str
    card_bytes: int
    max_seq_len: int
    engine: str | None = None
    placement: Placement = Placement()
    settings: StartupSettings = StartupSettings()
    mtp: bool | None = None               # None: loaded only with speculative decoding (engines), always (reference)
    weights_bytes: int | None = None      # --weights (per device)
    reserved_bytes: int | None = None     # --reserved (per device: replaces every reserve step)
    kv_memory_bytes: int | None = None    # --kv-memory (per device: the answer itself)
    calibration: tuple[int, str] | None = None  # --from-log: (bytes taken besides the terms, the log's name)
    engram: EngramChoice = EngramChoice()  # the options that move Engram tables (planner/weights/engram.py)


@record(eq=False)
class ModelFacts:
    """What every budget of one model reads whatever the length, card or deployment: the config's
    sizes and the weights, read once; and each deployment's per-device weights, sharded once. A
    bisection over max_seq_len or a search over --tp reuses them (``budget(req, facts=...)``)
    instead of re-reading the config and re-sharding the inventory at every step."""

    model: str
    weights_replaced: bool                # --weights: no inventory read
    weights_required: bool                # no --kv-memory: an unknown architecture is bad input
    dims: ModelDims | None
    weights: ModelWeights | None
    engram_tables: tuple[EngramTable, ...] = ()  # the config's Engram tables (V4.1), where they sit is per engine
    _shards: list[tuple[Any, Placement, bool, DeviceWeights]] = field(default_factory=list, repr=False)

    def serves(self, req: BudgetRequest) -> bool:
        return (self.model, self.weights_replaced, self.weights_required) == _facts_key(req)

    def device_weights(self, rules: Any, placement: Placement, mtp: bool) -> DeviceWeights | None:
        """The inventory sharded under ``rules`` (None without an inventory); once per deployment."""
        if self.weights is None or self.weights.inventory is None:
            return None
        for done_rules, done_placement, done_mtp, done in self._shards:  # rules hold a dict: compared, not hashed
            if (done_placement, done_mtp) == (placement, mtp) and done_rules == rules:
                return done
        done = shard(self.weights.inventory, rules, placement, mtp=mtp)
        self._shards.append((rules, placement, mtp, done))
        return done


def _facts_key(req: BudgetRequest) -> tuple[str, bool, bool]:
    return req.model, req.weights_bytes is not None, req.kv_memory_bytes is None


def model_facts(req: BudgetRequest) -> ModelFacts:
    model, replaced, required = _facts_key(req)
    config = read_model_config(model)
    dims: ModelDims | None = model_dims(config.data, config.source) if config and config.data else None
    # --weights replaces the figure: no inventory to build (nor to refuse, past MAX_INVENTORY_LAYERS)
    weights = None if replaced else model_weights(model, required=required)
    tables = engram_tables(config.data, config.source) if config and config.data else ()
    return ModelFacts(model, replaced, required, dims, weights, tables)


@record
class StageBudget:
    """One pipeline stage's budget: the steps from card to state pool."""

    stage: int
    layers: tuple[int, ...]
    steps: tuple[Step, ...]
    usable_bytes: int
    weights_bytes: int
    reserve_bytes: int
    kv_memory_bytes: int                   # may be <= 0: the weights (and reserves) do not fit

    @property
    def fits(self) -> bool:
        return self.kv_memory_bytes > 0

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "layers": [min(self.layers), max(self.layers)] if self.layers else [],
                "usable_bytes": self.usable_bytes, "weights_bytes": self.weights_bytes,
                "reserve_bytes": self.reserve_bytes, "kv_memory_bytes": self.kv_memory_bytes,
                "fits": self.fits, "steps": [s.as_dict() for s in self.steps]}


@record
class Budget:
    """The budget of every stage of a deployment; the stage with the least state pool binds."""

    request: BudgetRequest
    engine: str
    mtp: bool
    weights: ModelWeights | None
    device_weights: DeviceWeights | None
    stages: tuple[StageBudget, ...]
    resolved: dict[str, Any] = field(default_factory=dict)
    smallest_fitting: tuple[dict[str, int], ...] = ()
    searched: bool = False   # whether smallest_fitting was searched (not with --weights / --kv-memory)
    searched_max_tp: int = MAX_SEARCH_TP  # the widest tp that search tried (the model's heads)
    replicas: dict[str, int] | None = None  # none passes: data-parallel replicas that serve the requests in all
    facts: ModelFacts | None = field(default=None, repr=False, compare=False)  # for the next budget of this model
    calibration: Any = None   # --from-log: the log's implied terms beside csa-plan's (from_log.Calibration)
    engram: EngramPlacement | None = None  # where the engine keeps the Engram tables (GPU per rank, host per node)
    host: Any = None  # check: the host-memory line (planner/weights/engram.py HostLine)

    @property
    def binding(self) -> StageBudget:
        return min(self.stages, key=lambda s: s.kv_memory_bytes)

    @property
    def kv_memory_bytes(self) -> int:
        return self.binding.kv_memory_bytes

    @property
    def fits(self) -> bool:
        return self.binding.fits

    @property
    def card_bytes(self) -> int:
        return self.request.card_bytes


def budget(req: BudgetRequest, *, search: bool = True, facts: ModelFacts | None = None) -> Budget:
    """The budget of ``req``; when the weights do not fit and ``search`` is on, also the smallest
    --tp (engine-default EP) and --tp with full EP that would. ``facts``: what an earlier budget of
    this model read (``Budget.facts``); read here when None or read for other options."""
    if req.card_bytes <= 0:
        raise BadInput("options", "--device-memory", "must be positive")
    rules = _rules(req)
    startup = startup_for(req.engine)
    engine = startup.name
    mtp = req.mtp if req.mtp is not None else (engine == "reference" or req.settings.speculative_tokens > 0)
    if facts is None or not facts.serves(req):
        facts = model_facts(req)
    dims, weights = facts.dims, facts.weights
    device_weights = facts.device_weights(rules, req.placement, mtp)
    engram = _engram(req, facts, dims)
    stages = tuple(_stage(req, s, engine, mtp, dims, weights, device_weights, facts.engram_tables)
                   for s in range(req.placement.pp))
    resolved = startup.resolved(_context(req, 0, _layers(device_weights, 0, dims), dims))
    result = Budget(req, engine, mtp, weights, device_weights, stages, resolved, facts=facts, engram=engram)
    if search and not result.fits and req.weights_bytes is None and req.kv_memory_bytes is None:
        result = replace(result, smallest_fitting=smallest_fitting(req, weights, facts=facts), searched=True)
    return result


def _engram(req: BudgetRequest, facts: ModelFacts, dims: ModelDims | None,
            tables: tuple[EngramTable, ...] | None = None) -> EngramPlacement | None:
    """The Engram tables (all, or ``tables``) where the engine keeps them; vLLM's staging buffer is sized
    by its max_num_batched_tokens (the option or the release's default for the card)."""
    tables = facts.engram_tables if tables is None else tables
    if not tables and req.engram == EngramChoice():
        return None
    mnbt = 0
    engine = req.engram.engine or req.engine
    if engine is not None and engine.startswith("vllm"):
        from csa_plan.planner.budget.startup import vllm_batched_tokens

        mnbt = vllm_batched_tokens(_context(req, 0, tuple(range(dims.num_main)) if dims else (), dims), engine)
    p = req.placement
    return engram_placement(tables, req.engine, p.tp, p.dp, req.engram, mnbt)


def _rules(req: BudgetRequest):
    """The engine's weight rules under its settings (SGLang's MoE runner, on the target card)."""
    capability = None
    if req.settings.moe_runner_backend is not None:
        from csa_plan.planner.engines.settings import gpu_target

        capability = gpu_target(req.settings.gpu).capability
    return rules_for(req.engine, req.settings.moe_runner_backend, capability, req.settings.shared_expert_tp1)


def _layers(dw: DeviceWeights | None, stage: int, dims: ModelDims | None) -> tuple[int, ...]:
    if dw is not None:
        return dw.stages[stage].layers
    return tuple(range(dims.num_main)) if dims else ()


def _context(req: BudgetRequest, stage: int, layers: tuple[int, ...], dims: ModelDims | None) -> StageContext:
    return StageContext(req.card_bytes, req.placement, stage, layers, req.max_seq_len, dims, req.settings)


def _stage(req: BudgetRequest, stage: int, engine: str, mtp: bool, dims: ModelDims | None,
           weights: ModelWeights | None, dw: DeviceWeights | None,
           tables: tuple[EngramTable, ...] = ()) -> StageBudget:
    startup = startup_for(engine)
    ctx = _context(req, stage, _layers(dw, stage, dims), dims)
    card = req.card_bytes
    steps = [Step(StepKind.CARD, "card memory", card, "--device-memory")]
    usable = startup.usable(ctx)
    steps.append(Step(StepKind.USABLE, f"{engine} usable share ({usable.fraction})", usable.bytes, usable.source,
                      usable.estimate))
    w_bytes, w_steps = _weights_steps(req, stage, weights, dw, tables, dims)
    steps += w_steps
    if req.reserved_bytes is not None:
        reserves: tuple[Step, ...] = (Step(StepKind.RESERVE, "engine buffers, activations, CUDA graphs",
                                           req.reserved_bytes, "option --reserved"),)
    else:
        reserves = startup.reserves(ctx)
    if req.calibration is not None and req.reserved_bytes is None:
        offset, log = req.calibration
        reserves = (*reserves, Step(StepKind.RESERVE, "calibration to the start-up log (what it implies beyond "
                                    "the terms above)", offset, f"--from-log {log}: predicted - implied KV memory "
                                    "at the log's flags, kept when the flags change"))
    steps += reserves
    r_bytes = sum(s.bytes for s in reserves)
    if req.kv_memory_bytes is not None:
        kv = req.kv_memory_bytes
        steps.append(Step(StepKind.KV, "state pool (KV memory)", kv, "option --kv-memory (replaces the steps above)"))
    else:
        kv = usable.bytes - w_bytes - r_bytes
        steps.append(Step(StepKind.KV, "state pool (KV memory)", kv,
                          "usable - weights - reserves" + (" (estimates included)" if any(s.estimate for s in steps)
                                                           else "")))
    return StageBudget(stage, ctx.layers, tuple(steps), usable.bytes, w_bytes, r_bytes, kv)


def _weights_steps(req: BudgetRequest, stage: int, weights: ModelWeights | None,
                   dw: DeviceWeights | None, tables: tuple[EngramTable, ...] = (),
                   dims: ModelDims | None = None) -> tuple[int, list[Step]]:
    if req.weights_bytes is not None:
        return req.weights_bytes, [Step(StepKind.WEIGHTS, "weights on this device", req.weights_bytes,
                                        "option --weights")]
    if weights is None:
        if req.kv_memory_bytes is not None:
            return 0, []
        return 0, [Step(StepKind.WEIGHTS, "weights unknown: counted as 0", 0,
                        "no weight figure for this model (a YAML spec or ONNX graph: no tensor inventory, no "
                        "safetensors files); give --weights SIZE per device", estimate=True)]
    p = req.placement
    if dw is None:  # a checkpoint of an architecture with no inventory: split evenly
        devices = p.tp * p.dp * p.pp
        per = -(-weights.total_bytes // devices)
        return per, [Step(StepKind.WEIGHTS, f"weights: {weights.total_bytes:,} B / {devices} devices", per,
                          f"{weights.note}; even split (no sharding rules without an inventory)", estimate=True)]
    s = dw.stages[stage]
    rules = _rules(req)
    first, last = (min(s.layers), max(s.layers)) if s.layers else (0, 0)
    source = f"{'inventory' if weights.source is WeightsSource.INVENTORY else weights.source.value}; " \
             f"{rules.name} sharding (layers {first}-{last}, ep {dw.ep}, moe tp {dw.moe_tp})"
    total = s.nbytes
    steps = [Step(StepKind.WEIGHTS, "weights on this device", s.nbytes, source)]
    inventory_engram = dict(s.by_part).get(Part.ENGRAM, 0)
    here = tuple(t for t in tables if t.layer_id in s.layers)
    if inventory_engram and here:  # the Engram tables where the engine keeps them, not the inventory's even split
        e = _engram(req, _NO_FACTS, dims, here)
        total = s.nbytes - inventory_engram + e.total_gpu_bytes_per_rank
        steps = [Step(StepKind.WEIGHTS, "weights on this device (Engram tables apart)", s.nbytes - inventory_engram,
                      source),
                 Step(StepKind.WEIGHTS, f"Engram tables: {'device memory' if e.where == 'gpu' else 'host memory'} "
                      f"({e.engine})", e.gpu_bytes_per_rank, e.source)]
        if e.staging_bytes_per_rank:
            steps.append(Step(StepKind.WEIGHTS, "Engram staging buffers (bf16, on the GPU)", e.staging_bytes_per_rank,
                              e.source.rpartition("; ")[2]))
    delta = weights.inventory_delta_bytes
    if delta is not None and delta < 0:
        steps.append(Step(StepKind.WEIGHTS, "checkpoint bytes the inventory does not place", -delta,
                          f"{weights.note}; counted on every device (an upper bound)", estimate=True))
        total += -delta
    return total, steps


_NO_FACTS = ModelFacts("", False, False, None, None)  # _engram with its tables given


def smallest_fitting(req: BudgetRequest, weights: ModelWeights | None,
                     passes: "Callable[[Budget], bool] | None" = None, *,
                     facts: ModelFacts | None = None, max_tp: int = MAX_SEARCH_TP) -> tuple[dict[str, int], ...]:
    """The smallest --tp that fits with the engine's default EP, and the smallest with full EP
    (ep = tp x dp), keeping --pp and --dp; tp values the engine refuses are skipped. ``weights``
    is the model's figure, already read by the caller. ``passes``: every other check a suggested
    deployment must pass (the engine's admission of the requests asked for); a deployment that
    fails it is not suggested. ``facts``: the model as the caller's budget read it. ``max_tp``: the
    widest tp the model allows (its attention heads), never above MAX_SEARCH_TP."""
    found: list[dict[str, int]] = []
    p = req.placement
    floor_bytes = _weights_floor_bytes(weights)
    for full_ep in (False, True):
        tp = 1
        while tp <= min(max_tp, MAX_SEARCH_TP):
            if floor_bytes > req.card_bytes * tp * p.dp * p.pp:  # cannot fit: skip without building it
                tp += 1
                continue
            ep = tp * p.dp if full_ep else None
            trial = replace(req, placement=sglang_placement(Placement(tp=tp, pp=p.pp, dp=p.dp, router=p.router, ep=ep),
                                                            req.engine, req.settings.moe_a2a_backend))
            try:
                result = budget(trial, search=False, facts=facts)
            except BadInput:
                result = None
            if result is not None and result.fits and (passes is None or passes(result)):
                found.append({"tp": tp, "pp": p.pp, "dp": p.dp, "ep": result.device_weights.ep
                              if result.device_weights else (ep or 1), "gpus": tp * p.dp * p.pp,
                              "weights_bytes": result.binding.weights_bytes,
                              "kv_memory_bytes": result.kv_memory_bytes})
                break
            tp += 1
    unique = []
    for f in found:
        if f not in unique:
            unique.append(f)
    return tuple(unique)


def _weights_floor_bytes(weights: ModelWeights | None) -> int:
    """A lower bound on the weights of all ``tp x dp x pp`` devices together: no rule splits a
    weight over more than a stage's ``tp x dp`` ranks, so some device holds at least this over
    the device count (the MTP layer left out: it may not be loaded). Lets the search skip the
    small --tp values of a model far larger than the card without sharding it for each."""
    if weights is None:
        return 0
    if weights.inventory is not None:
        return weights.inventory.without_mtp().nbytes
    return weights.total_bytes
