"""The deployment options every command shares, and the budget they give when a device is named."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from csa_plan.planner.errors import BadInput
from csa_plan.planner.record import record

if TYPE_CHECKING:  # the budget modules load only when a device is named (start-up: docs/architecture.md)
    from csa_plan.planner.budget.device import Budget, ModelFacts
    from csa_plan.planner.budget.stage import StartupSettings
    from csa_plan.planner.memory import DeviceBudget
    from csa_plan.planner.placement import Placement, Router


@record
class Deployment:
    """``--tp --pp --dp --ep --weights --reserved``; None: the command's (or engine's) default."""

    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    ep: int | None = None
    weights_bytes: int | None = None
    reserved_bytes: int | None = None
    from_log: str | None = None    # --from-log FILE: calibrate the start-up terms on a real log
    host_memory_bytes: int | None = None  # --host-memory: a node's host memory (Engram tables on the host)
    engram_host_table: bool | None = None  # SGLang's SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=1
    engram_config: str | None = None  # vLLM's --engram-config JSON
    engram_engine: str | None = None  # the release whose Engram placement applies when its pool is not modelled

    def engram_choice(self):
        from csa_plan.planner.weights.engram import EngramChoice

        return EngramChoice(self.engram_host_table, self.engram_config, self.engram_engine)

    def require_one_stage(self, why: str) -> None:
        """Bad input when ``--pp`` asks for more than one pipeline stage where only one is modelled."""
        if self.pp is not None and self.pp > 1:
            raise BadInput("options", "--pp", f"{self.pp} pipeline stages: {why}")

    def placement(self, router: Router | None = None) -> Placement:
        from csa_plan.planner.placement import Placement, Router

        router = Router.ROUND_ROBIN if router is None else router
        one = lambda v: 1 if v is None else v  # noqa: E731  (0 stays 0: Placement refuses it)
        return Placement(tp=one(self.tp), pp=one(self.pp), dp=one(self.dp), router=router, ep=self.ep)


def engine_settings_for(engine: str | None, engine_settings: Any, deployment: Deployment) -> Any:
    """The engine's settings with what the deployment decides for it: SGLang's DP-attention size is csa-plan's
    --dp (SGLang divides --max-running-requests by it per worker)."""
    if engine is None or engine_settings is None or not engine.startswith("sglang"):
        return engine_settings
    from dataclasses import replace

    dp = deployment.dp if deployment.dp is not None else 1
    if dp > 1 and getattr(engine_settings, "dp_attention_size", None) != dp:
        engine_settings = replace(engine_settings, dp_attention_size=dp)
    tp = deployment.tp if deployment.tp is not None else 1
    if tp > 1 and getattr(engine_settings, "tensor_parallel_size", None) != tp:  # V4.1's backend reads tp // dp
        engine_settings = replace(engine_settings, tensor_parallel_size=tp)
    return engine_settings


def startup_settings(engine_settings: Any) -> StartupSettings:
    """The start-up settings an engine's settings (EngineSettings, duck-typed) carry."""
    from csa_plan.planner.budget.stage import StartupSettings

    if engine_settings is None:
        return StartupSettings()
    get = lambda name: getattr(engine_settings, name, None)  # noqa: E731
    return StartupSettings(max_num_batched_tokens=get("max_num_batched_tokens"), usage=get("usage"),
                           gpu_memory_utilization=get("gpu_memory_utilization"),
                           chunked_prefill_size=get("chunked_prefill_size"),
                           mem_fraction_static=get("mem_fraction_static"),
                           speculative_tokens=get("num_speculative_tokens") or get("speculative_num_steps")
                           or get("speculative_num_draft_tokens") or 0,  # the last: SGLang's DSpark (V4.1)
                           moe_runner_backend=get("moe_runner_backend"), gpu=get("gpu"),
                           shared_expert_tp1=bool(get("shared_expert_tp1")), max_num_seqs=get("max_num_seqs"),
                           cudagraph_capture_sizes=get("cudagraph_capture_sizes"),
                           max_cudagraph_capture_size=get("max_cudagraph_capture_size"),
                           enforce_eager=bool(get("enforce_eager")), cudagraph_mode=_cudagraph_mode(get("compilation_config")),
                           estimate_cudagraphs=get("estimate_cudagraphs"), moe_backend=get("moe_backend"),
                           all2all_backend=get("all2all_backend"),
                           cuda_graph_max_bs=get("cuda_graph_max_bs"),
                           disable_cuda_graph=bool(get("disable_cuda_graph")),
                           moe_a2a_backend=get("moe_a2a_backend"))


def _cudagraph_mode(compilation_config: str | None) -> str | None:
    if compilation_config is None:
        return None
    from csa_plan.planner.engines.settings import cudagraph_mode

    return cudagraph_mode(compilation_config)


def deployment_budget(model: str, device_memory_bytes: int | None, deployment: Deployment, max_seq_len: int,
                      engine: str | None = None, engine_settings: Any = None,
                      kv_memory_bytes: int | None = None, placement: Placement | None = None,
                      search: bool = True, facts: ModelFacts | None = None) -> Budget | None:
    """The device budget, or None when no device is named (then nothing changes: everything is
    accounted, nothing refused). ``facts``: an earlier budget's ``facts`` for this model (a
    bisection over max_seq_len reads the model and shards its weights once)."""
    if device_memory_bytes is None:
        if deployment.weights_bytes is not None:
            raise BadInput("options", "--weights", "needs --device-memory to subtract from")
        if deployment.reserved_bytes:
            raise BadInput("options", "--reserved", "needs --device-memory to subtract from")
        return None
    if device_memory_bytes <= 0:
        raise BadInput("options", "--device-memory", "must be positive")
    for name, value in (("--reserved", deployment.reserved_bytes), ("--weights", deployment.weights_bytes)):
        if value is not None and value >= device_memory_bytes:
            raise BadInput("options", name, f"{value} bytes is at or above the device memory "
                           f"({device_memory_bytes} bytes)")
    if kv_memory_bytes is not None and kv_memory_bytes <= 0:
        raise BadInput("options", "--kv-memory", "must be positive")
    from csa_plan.planner.budget.device import BudgetRequest, budget
    from csa_plan.planner.budget.startup import sglang_placement

    req = BudgetRequest(model=model, card_bytes=device_memory_bytes, max_seq_len=max_seq_len, engine=engine,
                        placement=sglang_placement(placement or deployment.placement(), engine,
                                                    getattr(engine_settings, "moe_a2a_backend", None)),
                        settings=startup_settings(engine_settings),
                        weights_bytes=deployment.weights_bytes, reserved_bytes=deployment.reserved_bytes,
                        kv_memory_bytes=kv_memory_bytes, engram=deployment.engram_choice())
    if deployment.from_log is None:
        return budget(req, search=search, facts=facts)
    return _calibrated(req, deployment.from_log, engine_settings, search, facts)


_CALIBRATIONS: dict[Any, Any] = {}  # one calibration per log and command (a bisection over lengths reuses it)


def _calibrated(req: Any, path: str, engine_settings: Any, search: bool, facts: Any) -> Budget:
    """--from-log: the budget with one calibration step, the difference the log implies at its own flags."""
    from dataclasses import replace

    from csa_plan.planner.budget.device import budget

    from csa_plan.planner.budget.from_log import MAX_LOG_BYTES
    from csa_plan.planner.files import hash_file

    try:  # keyed by the log's bytes: a log rewritten within one timestamp tick at the same size is another log
        digest = hash_file(path, MAX_LOG_BYTES, "MAX_LOG_BYTES").hexdigest()
    except BadInput as e:
        raise BadInput(e.source, "--from-log", e.problem) from None
    try:
        key = (path, digest, replace(req, max_seq_len=0), engine_settings)
        hash(key)
    except TypeError:
        key = None
    if key is None or key not in _CALIBRATIONS:
        cal, facts = _calibration(req, path, engine_settings, facts)
        if key is not None:
            _CALIBRATIONS[key] = cal
    else:
        cal = _CALIBRATIONS[key]
    out = budget(replace(req, calibration=(cal.offset_bytes, path)), search=search, facts=facts)
    logged = cal.log_flags.get("max_model_len")
    if logged and req.max_seq_len and logged != req.max_seq_len:  # said, not calibrated silently
        cal = replace(cal, notes=(*cal.notes, f"the log ran max_model_len {logged:,}, the command asks "
                                  f"{req.max_seq_len:,}: the terms are compared at the log's length and the "
                                  f"calibration ({cal.offset_bytes:+,} B) is carried to the command's"))
    return replace(out, calibration=cal)


def _calibration(req: Any, path: str, engine_settings: Any, facts: Any) -> Any:
    from dataclasses import replace

    from csa_plan.planner.budget.device import budget
    from csa_plan.planner.budget.from_log import calibrate, check_matches, read_startup_log
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings, gpu_target
    from csa_plan.planner.loaders.model_files import load_model

    if req.engine is None:
        raise BadInput("options", "--from-log", "needs --engine (the release whose log it is)")
    if req.kv_memory_bytes is not None or req.reserved_bytes is not None:
        raise BadInput("options", "--from-log", "replaces --kv-memory / --reserved: give one of them")
    log = read_startup_log(path)
    gpu = gpu_target(req.settings.gpu, memory_bytes=req.card_bytes)
    from csa_plan.planner.budget.startup import VLLM_UTIL_DEFAULT

    utilization = (("--gpu-memory-utilization", req.settings.gpu_memory_utilization, VLLM_UTIL_DEFAULT)
                   if req.engine.startswith("vllm") else ("--mem-fraction-static", req.settings.mem_fraction_static, None))
    check_matches(log, model=req.model, engine=req.engine, capability=gpu.capability, card=gpu.name,
                  tp=req.placement.tp, dp=req.placement.dp, pp=req.placement.pp, card_bytes=req.card_bytes,
                  utilization=utilization)
    a = log.args
    flags = {"max_num_batched_tokens": a.get("max_num_batched_tokens"), "max_num_seqs": a.get("max_num_seqs"),
             "gpu_memory_utilization": a.get("gpu_memory_utilization"),
             "max_cudagraph_capture_size": a.get("max_cudagraph_capture_size")}
    flags = {k: v for k, v in flags.items() if v is not None}
    spec = a.get("num_speculative_tokens")
    at_log_settings = replace(req.settings, **flags, **({"speculative_tokens": spec} if spec is not None else {}))
    length = a.get("max_model_len") or req.max_seq_len
    at_log = budget(replace(req, settings=at_log_settings, max_seq_len=length), search=False, facts=facts)
    es = engine_settings or EngineSettings()
    engine_flags = {k: v for k, v in (("max_num_batched_tokens", flags.get("max_num_batched_tokens")),
                                      ("max_num_seqs", flags.get("max_num_seqs")),
                                      ("num_speculative_tokens", spec)) if v is not None}
    if req.engine.startswith("sglang"):
        engine_flags = {}
    plan = get_engine(req.engine).configure(load_model(req.model), replace(es, **engine_flags), length)
    return calibrate(log, at_log, lambda kv: plan.size_pool(kv).tokens if kv > 0 else 0), at_log.facts


def reserve_warnings(b: Budget, model: str, deployment: Deployment, engine: str | None = None,
                     engine_settings: Any = None) -> tuple[str, ...]:
    """A warning when ``--weights`` / ``--reserved`` set aside less than the model's own weights per
    GPU (the tensor inventory's figure for this deployment): the state pool is then overstated."""
    if deployment.weights_bytes is None or b.request.kv_memory_bytes is not None:
        return ()
    from csa_plan.planner.budget.device import BudgetRequest, budget

    try:
        own = budget(BudgetRequest(model=model, card_bytes=b.card_bytes, max_seq_len=b.request.max_seq_len,
                                   engine=engine, placement=b.request.placement,
                                   settings=startup_settings(engine_settings)), search=False)
    except BadInput:
        return ()
    if own.weights is None:
        return ()
    set_aside = deployment.weights_bytes + (deployment.reserved_bytes or 0)
    weights = own.binding.weights_bytes
    if set_aside >= weights:
        return ()
    gib = 1 << 30
    return (f"--weights {deployment.weights_bytes / gib:.2f} GiB + --reserved {(deployment.reserved_bytes or 0) / gib:.2f} GiB "
            f"per GPU is less than the model's own weights per GPU, {weights / gib:.2f} GiB "
            f"({own.weights.source.value}, tp {b.request.placement.tp}): the state pool is overstated by at least "
            f"{(weights - set_aside) / gib:.2f} GiB; drop --weights to count them",)


def ledger_budget(b: Budget) -> DeviceBudget | None:
    """The ledger limit a budget leaves (card minus everything but the state pool); None when the
    weights do not fit (there is no pool to admit into)."""
    if not b.fits:
        return None
    from csa_plan.planner.memory import DeviceBudget

    return DeviceBudget(b.card_bytes, b.card_bytes - b.kv_memory_bytes)


def card_settings(engine_settings: Any, device_memory_bytes: int | None, engine: str | None = None) -> Any:
    """Engine settings whose target GPU is the card the device memory names (``--device-memory h100``,
    a mix's ``memory.device: h100``), with the budgeted memory for size tiers."""
    from dataclasses import replace

    from csa_plan.planner.cards import card_of
    from csa_plan.planner.engines.settings import EngineSettings

    settings = engine_settings or EngineSettings()
    card = card_of(device_memory_bytes)
    accepts = True
    if engine is not None:
        from csa_plan.planner.engines.registry import get_engine

        accepts = "gpu" in get_engine(engine).options
    if card is not None and settings.gpu is None and accepts:
        settings = replace(settings, gpu=card.name)
    if device_memory_bytes is not None and settings.gpu_memory_bytes is None:
        settings = replace(settings, gpu_memory_bytes=int(device_memory_bytes))
    return settings


@lru_cache(maxsize=1024)
def budget_reserved_bytes(model: str, memory_bytes: int, tp: int, pp: int, dp: int, max_seq_len: int | None,
                          engine: str | None = None, reserved_bytes: int | None = None,
                          settings: Any = None, ep: int | None = None) -> int:
    """What the device budget sets aside on each device (card minus the state pool of the tightest
    stage): a sweep point's ``reserved: budget``. The same budget as check and simulate: with an
    engine, its usable share (gpu_memory_utilization / mem_fraction_static), its weight sharding and
    start-up reserves (``reserved_bytes``, as ``--reserved``: None for the rules'), at this tp x dp. A
    deployment the rules refuse, or whose weights do not fit, sets aside the whole card (the point is
    skipped: no memory left)."""
    from csa_plan.planner.loaders.model_files import load_model

    length = max_seq_len or max(d.max_seq_len for d in load_model(model).layers)
    try:
        b = deployment_budget(model, memory_bytes, Deployment(tp=tp, pp=pp, dp=dp, ep=ep, reserved_bytes=reserved_bytes),
                              length, engine,
                              card_settings(settings, memory_bytes), search=False)
    except BadInput:
        return memory_bytes
    return memory_bytes - b.kv_memory_bytes if b is not None and b.fits else memory_bytes


def budget_shortfall(model: str, memory_bytes: int, tp: int, pp: int, dp: int, max_seq_len: int | None,
                     engine: str | None = None, reserved_bytes: int | None = None, settings: Any = None,
                     ep: int | None = None) -> str:
    """Why ``budget_reserved_bytes`` sets aside the whole card, in words: the weights and start-up
    reserves per device against what is usable, or the problem the engine's rules name."""
    from csa_plan.planner.loaders.model_files import load_model

    length = max_seq_len or max(d.max_seq_len for d in load_model(model).layers)
    try:
        b = deployment_budget(model, memory_bytes, Deployment(tp=tp, pp=pp, dp=dp, ep=ep, reserved_bytes=reserved_bytes),
                              length, engine, card_settings(settings, memory_bytes), search=False)
    except BadInput as exc:
        return f"{exc.field}: {exc.problem}"
    if b is None or b.fits:
        return f"device memory {memory_bytes:,} B leaves no state pool"
    s = b.binding
    return (f"the weights ({s.weights_bytes:,} B per device) and start-up reserves ({s.reserve_bytes:,} B) exceed "
            f"the {s.usable_bytes:,} B usable of device memory {memory_bytes:,} B")
