"""vLLM's start-up memory that is neither weights, the named DeepSeek-V4 buffers nor KV, term by term.

``Worker.determine_available_memory`` (vllm-0.25.0 v1/worker/gpu_worker.py:430-541, 0.26.0 :448-563,
0.33.0 :641-775) takes ``requested - (weights + non-torch increase + torch peak of profile_run)
- CUDA-graph estimate``. Each of those is a step here, with its source and error band:

* **CUDA graphs** follow the engine's own estimator (``profile_cudagraph_memory``, vllm-0.25.0
  v1/worker/gpu_model_runner.py:6498-6600): per cudagraph mode, the largest descriptor's capture
  plus (n - 1) times the second largest's (at least 1 MiB), over the capture list the release
  builds (config/vllm.py ``_set_cudagraph_sizes``, compilation.py
  ``adjust_cudagraph_sizes_for_spec_decode``, v1/cudagraph_dispatcher.py
  ``initialize_cudagraph_keys``) — exact counts; the bytes of one capture are csa-plan's
  per-token activation bytes times a factor fitted on a posted log. Subtracted only when the
  release subtracts it (cudagraph mode not NONE, ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``
  on: envs.py, default 1 in 0.25, 0.26 and 0.33).
* **Other activations of the profile run** at max_num_batched_tokens: the residual hc stream per
  token (``hc_stream_token_bytes``), counted, not fitted; the MoE intermediates are a request in the
  shared workspace (budget/vllm_workspace.py), charged once with FlashMLA's and the indexer's.
* **Non-torch memory** (NCCL's lazily allocated buffers, cuBLAS workspaces) after the
  start-up snapshot: fitted per release and TP > 1 / TP 1.
* **MoE backend workspaces**: ``--moe-backend deep_gemm_mega_moe``'s symmetric buffer (sized in
  DeepGEMM's compiled ``get_symm_buffer_size_for_mega_moe``, not readable here): fitted.

A fit names the log it was fitted on. A release without its own fit uses the nearest fitted
release's figures, says so in the source and doubles the band: never silently.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from csa_plan.planner.budget.steps import Step, StepKind
from csa_plan.planner.errors import BadInput
from csa_plan.planner.record import record
from csa_plan.planner.units import MiB

if TYPE_CHECKING:
    from csa_plan.planner.budget.stage import ModelDims, StageContext

DEFAULT_CUDAGRAPH_MODE = "FULL_AND_PIECEWISE"   # DeepSeek-V4's resolved default (the logs: PIECEWISE + FULL)
MIN_PER_GRAPH_BYTES = 1 << 20  # "at least 1 MiB per graph for driver overhead" (gpu_model_runner.py:6580)

RTX_LOG = ("DeepSeek-V4-Flash on stock vLLM v0.25.0 (SM120 / RTX PRO 6000), a public full start-up log: "
           "2x RTX PRO 6000, TP 2, MTP 2, 0.95 == 0.9334, KV 10.29 GiB")
B200_LOG = "vllm-project/vllm#51454 (vLLM 0.25.0, 8x B200, TP 8 + EP, deep_gemm_mega_moe, 20.43x at 1M)"


@record
class NonKvFit:
    """One release's fitted figures, the log(s) they come from and their bands (+- percent)."""

    release: str
    graph_factor_ppm: int          # one capture = factor x activation bytes of its tokens (parts per million)
    graph_band_pct: int
    non_torch_tp_bytes: int        # TP > 1: NCCL buffers + cuBLAS
    non_torch_tp1_bytes: int       # TP 1: cuBLAS and friends only
    non_torch_band_pct: int
    mega_moe_bytes_per_token_expert_elem_ppm: int  # deep_gemm_mega_moe buffer / (mnbt x topk x hidden), ppm
    mega_moe_band_pct: int
    source: str


# vllm-0.25: fitted on the RTX PRO 6000 log (the only 0.25 log printing every term). Its lines:
# "Model loading took 75.64 GiB", "Profiling CUDA graph memory: PIECEWISE=42 (largest=384), FULL=26
# (largest=192)", "--gpu-memory-utilization=0.9500 is equivalent to ... 0.9334" (graphs = 0.0166 x
# 102,641,958,912 B = 1,703,856,517 B), "Available KV cache memory: 10.29 GiB". csa-plan's capture list for
# its flags gives exactly those counts (PIECEWISE 384 + 41 x 369, FULL 192 + 25 x 186 = 20,355 tokens of
# 184,320 activation bytes each): factor 0.454. What is left after weights, named buffers (the shared
# workspace charged once: its largest request, the indexer's 10,485,760 K rows at 1M on 0.25), graphs and the
# counted hc-stream activations (402,653,184 B) is the non-torch figure, 1,209 MiB (614 MiB when the three
# workspace requests were added; the log's KV is rounded to 0.01 GiB: +-5 MiB).
# tests/budget/test_vllm_nonkv.py and tools/heldout_vllm_nonkv.py re-derive both from the log's figures.
# deep_gemm_mega_moe: fitted on #51454 TP 8 + EP (its 20.43x gives the KV memory; DP 8 is held out).
FIT_025 = NonKvFit("vllm-0.25", graph_factor_ppm=454_140, graph_band_pct=35, non_torch_tp_bytes=1209 * MiB,
                   non_torch_tp1_bytes=1209 * MiB, non_torch_band_pct=60,
                   mega_moe_bytes_per_token_expert_elem_ppm=19_756_142,
                   mega_moe_band_pct=50, source=RTX_LOG)

FITS: dict[str, NonKvFit] = {"vllm-0.25": FIT_025}
# 0.27.0 / 0.28.0 take requested - non_kv_cache_memory - the graph estimate as 0.26.0 and 0.33.0 do
# (v1/worker/gpu_worker.py determine_available_memory: 0.27.0 :460, 0.28.0 the same body), non_kv_cache_memory
# from utils/mem_utils.py memory_profiling's total_consumed + transient_peak_headroom as in 0.33.0.
NEAREST_FIT: dict[str, str] = {"vllm-0.26": "vllm-0.25", "vllm-0.27": "vllm-0.25", "vllm-0.28": "vllm-0.25",
                               "vllm-0.33": "vllm-0.25"}


def fit_for(release: str) -> tuple[NonKvFit, str, int]:
    """(the fit, how it applies, the band multiplier): a release's own fit, else the nearest one named."""
    if release in FITS:
        return FITS[release], f"fitted for {release} on: {FITS[release].source}", 1
    other = NEAREST_FIT.get(release)
    if other is None:
        raise BadInput("options", "--engine", f"{release}: csa-plan has no fitted non-KV figures for this release")
    return FITS[other], (f"{release} has no posted log with these lines: {other}'s fit is used "
                         f"(not re-fitted; band doubled), fitted on: {FITS[other].source}"), 2


def hc_stream_token_bytes(d: ModelDims) -> int:
    """Three bf16 copies of one token's residual hc stream [hc_mult, hidden] (csa-plan's count)."""
    return 3 * d.hc_mult * d.hidden * 2


def moe_token_bytes(d: ModelDims, moe_tp: int) -> int:
    """One token's MoE intermediates: for each of the top-k experts, bf16 gate/up [2 x inter / moe_tp],
    the activation [inter / moe_tp] and the expert output [hidden] (csa-plan's count). In the profile run
    vLLM takes them from the shared workspace (budget/vllm_workspace.py)."""
    inter = d.moe_intermediate // max(moe_tp, 1)
    return d.experts_per_token * (3 * inter + d.hidden) * 2


def moe_tp_of(placement: Any) -> int:
    """The MoE layers' tensor-parallel split: 1 under expert parallelism, else tp x dp."""
    return 1 if placement.ep is not None and placement.ep > 1 else placement.tp * placement.dp


def activation_token_bytes(d: ModelDims, moe_tp: int) -> int:
    """Bytes of one token's transients in a forward pass, hc stream and MoE intermediates: the unit a
    CUDA-graph capture is measured in (the graph factor is fitted on it)."""
    return hc_stream_token_bytes(d) + moe_token_bytes(d, moe_tp)


# --- the capture list ------------------------------------------------------------------------------

def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


# The releases whose default capture list tops out at 1024 tokens on sm_100 (512 elsewhere): 0.28.0
# config/vllm.py:1937-1939, 0.33.0 :2463-2465; 0.25-0.27 cap it at 512 on every card (0.27.0 :1832-1835).
CAPTURE_1024_ON_SM100 = ("vllm-0.28", "vllm-0.33")
# The releases that add the uniform decode sizes (n requests x the decode query length): 0.29.0
# config/vllm.py:2002 on (0.33.0 :2459-2550); 0.28.0 and older do not.
UNIFORM_DECODE_SIZES = ("vllm-0.33",)


def capture_sizes(release: str, *, max_num_seqs: int, mnbt: int, spec_tokens: int, sm100: bool,
                  sizes: tuple[int, ...] | None, max_size: int | None) -> tuple[int, ...]:
    """compilation_config.cudagraph_capture_sizes as the release builds them: vllm-0.25.0
    config/vllm.py:1714-1790 (0.26.0 :1786-1860, 0.27.0 :1822-1880); 0.28.0 config/vllm.py:1937-1939 raises the
    ceiling to 1024 on sm_100 (``CAPTURE_1024_ON_SM100``); 0.33.0 config/vllm.py:2455-2600 also adds the uniform
    decode sizes (``UNIFORM_DECODE_SIZES``)."""
    dq = 1 + spec_tokens
    extra: list[int] = []
    if max_size is None:
        ceiling = 1024 if release in CAPTURE_1024_ON_SM100 and sm100 else 512
        max_size = min(max_num_seqs * dq * 2, ceiling)
        if release in UNIFORM_DECODE_SIZES:
            if dq > 1:
                reqs = min(max_num_seqs, ceiling)
                counts = [n for n in (1, 2, 4) if n <= reqs] + list(range(8, min(reqs + 1, 256), 8)) \
                    + list(range(256, reqs + 1, 16))
                extra = sorted({n * dq for n in set(counts + [reqs]) if n * dq <= max_size})
            elif max_num_seqs <= max_size:
                extra = [max_num_seqs]
    max_size = min(mnbt, max_size)
    if sizes is not None:
        out = sorted({s for s in sizes if s <= mnbt})
    else:
        out = [i for i in (1, 2, 4) if i <= max_size]
        if max_size >= 8:
            out += list(range(8, min(max_size + 1, 256), 8))
        if max_size >= 256:
            out += list(range(256, max_size + 1, 16))
        if mnbt <= max_size and mnbt not in out:
            out.append(mnbt)
        out = sorted(set(out + [s for s in extra if s <= mnbt]))
    return tuple(out)


def capture_descs(mode: str, sizes: tuple[int, ...], max_num_seqs: int, spec_tokens: int,
                  v2: bool = False) -> dict[str, list[int]]:
    """Token counts per runtime mode, largest first (v1/cudagraph_dispatcher.py initialize_cudagraph_keys,
    get_capture_descs); with spec decoding and FULL decode graphs the sizes are first rounded up to a
    multiple of the decode query length (compilation.py adjust_cudagraph_sizes_for_spec_decode). ``v2``:
    vllm-0.33's Model Runner V2 (v1/worker/gpu/cudagraph_utils.py:256-379): no such rounding; the FULL
    decode graphs are each size rounded up to the query length, up to max_num_seqs requests."""
    dq = 1 + spec_tokens
    mixed = {"PIECEWISE": "PIECEWISE", "FULL": "FULL", "FULL_AND_PIECEWISE": "PIECEWISE"}.get(mode)
    full_decode = mode in ("FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
    if mode == "NONE" or not sizes:
        return {}
    if v2:
        out = {mixed: sorted(sizes, reverse=True)} if mixed is not None else {}
        if full_decode:
            top = max(sizes)
            decode = {_round_up(s, dq) for s in sizes}
            out["FULL"] = sorted({t for t in decode if t <= min(dq * max_num_seqs, top)} | set(out.get("FULL", [])),
                                 reverse=True)
        return {m: d for m, d in out.items() if d}
    if (full_decode or mode == "FULL") and dq > 1:
        top = max(sizes)
        rounded = sorted({_round_up(s, dq) for s in sizes if _round_up(s, dq) <= top})
        sizes = tuple(rounded) if rounded else ((dq,) if dq <= top else ())
    out: dict[str, list[int]] = {}
    if mixed is not None:
        out[mixed] = sorted(sizes, reverse=True)
    if full_decode:
        decode = sorted((s for s in sizes if dq <= s <= dq * max_num_seqs), reverse=True)
        out.setdefault("FULL", [])
        out["FULL"] = sorted(set(out["FULL"]) | set(decode), reverse=True)
    return {m: d for m, d in out.items() if d}


def graph_estimate_bytes(descs: dict[str, list[int]], token_bytes: int, factor_ppm: int,
                         piecewise_measured: bool = False) -> int:
    """Sum over modes of first capture + (n - 1) x max(second capture, 1 MiB) (gpu_model_runner.py:6560-6590).
    ``piecewise_measured``: vllm-0.33's Model Runner V2 captures every PIECEWISE graph into one shared pool and
    measures it (cudagraph_utils.py:922-1010): csa-plan takes the largest capture plus 1 MiB a further graph."""
    total = 0
    for mode, d in descs.items():
        first = d[0] * token_bytes * factor_ppm // 1_000_000
        if piecewise_measured and mode == "PIECEWISE":
            per = MIN_PER_GRAPH_BYTES
        else:
            per = max(d[1] * token_bytes * factor_ppm // 1_000_000, MIN_PER_GRAPH_BYTES) if len(d) > 1 else 0
        total += first + (len(d) - 1) * per
    return total


# --- the steps -------------------------------------------------------------------------------------

NODE_GPUS = 8  # vLLM's all2all manager asks for RDMA across nodes (base_device_communicator.py:57-63): 8 a node


def _all2all_steps(c: StageContext, mnbt: int) -> tuple[Step, ...]:
    """DeepEP's buffers when ``--all2all-backend`` names a DeepEP backend (their sizes: budget/deepep.py);
    a backend whose buffers are not modelled is refused where vLLM would use it, never passed over."""
    backend = c.settings.all2all_backend
    if backend is None or backend == "allgather_reducescatter":
        return ()
    from csa_plan.planner.budget.deepep import VLLM_SIZED_A2A, vllm_deepep_buffers

    d = c.dims
    assert d is not None
    p = c.placement
    ep, dp = p.ep or 1, p.dp
    if backend not in VLLM_SIZED_A2A:
        if ep > 1 and dp > 1:
            raise BadInput("options", "--all2all-backend", f"{backend}: its buffers are not modelled (csa-plan sizes "
                                                           f"{', '.join(VLLM_SIZED_A2A)})")
        return (Step(StepKind.RESERVE, f"all-to-all {backend}: not used (ep {ep}, dp {dp})", 0,
                     "vLLM runs its all-to-all kernels only with expert parallelism and DP > 1 (vllm-0.26.0 "
                     "fused_moe/config.py:1052-1055)"),)
    if not d.routed_experts:
        raise BadInput("options", "--all2all-backend", "the model config has no n_routed_experts: DeepEP's buffers "
                                                       "cannot be sized")
    b = vllm_deepep_buffers(backend, ep=ep, dp=dp, internode=ep > NODE_GPUS, max_num_batched_tokens=mnbt,
                            hidden=d.hidden, num_experts=d.routed_experts)
    assert b is not None
    label = (f"DeepEP buffers ({backend}): NVLink {b.nvl_bytes:,} B + RDMA {b.rdma_bytes:,} B" if b.allocated
             else f"DeepEP buffers ({backend}): none allocated (ep {ep}, dp {dp})")
    return (Step(StepKind.RESERVE, label, b.total_bytes, b.why),)


@record
class GraphPlan:
    """The resolved CUDA-graph settings and what the release's estimator will capture."""

    mode: str
    mode_source: str
    estimated: bool          # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS
    sizes: tuple[int, ...]
    descs: dict[str, list[int]]


def graph_plan(c: StageContext, release: str, max_num_seqs: int, mnbt: int) -> GraphPlan:
    s = c.settings
    if s.enforce_eager:
        mode, source = "NONE", "--enforce-eager (config/vllm.py: cudagraph_mode = NONE under eager mode)"
    elif s.cudagraph_mode is not None:
        mode, source = s.cudagraph_mode, "--compilation-config cudagraph_mode"
    else:
        mode, source = DEFAULT_CUDAGRAPH_MODE, "DeepSeek-V4's default (FULL_AND_PIECEWISE)"
    estimated = True if s.estimate_cudagraphs is None else s.estimate_cudagraphs
    if mode == "NONE":
        return GraphPlan(mode, source, estimated, (), {})
    from csa_plan.planner.engines.settings import gpu_target

    sm100 = gpu_target(s.gpu, memory_bytes=c.card_bytes).capability[0] == 10
    sizes = capture_sizes(release, max_num_seqs=max_num_seqs, mnbt=mnbt, spec_tokens=s.speculative_tokens,
                          sm100=sm100, sizes=s.cudagraph_capture_sizes, max_size=s.max_cudagraph_capture_size)
    return GraphPlan(mode, source, estimated, sizes,
                     capture_descs(mode, sizes, max_num_seqs, s.speculative_tokens, v2=release in V2_RUNNER))


# Releases whose default model runner for DeepSeek-V4 is Model Runner V2 (vllm-0.33.0 config/vllm.py:731-767:
# on unless VLLM_USE_V2_MODEL_RUNNER=0 or an unsupported feature; MTP is supported). 0.28.0 first lists
# DeepseekV4ForCausalLM among DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES (config/vllm.py:69-93, :691-712); 0.25-0.27
# do not (a MoE model off that list stays on the V1 runner: 0.27.0 config/vllm.py:637-658).
V2_RUNNER = ("vllm-0.28", "vllm-0.33")
# Releases whose Model Runner V2 estimates no CUDA-graph memory before the KV cache is sized: 0.28.0
# v1/worker/gpu/model_runner.py:843-845 ``profile_cudagraph_memory`` returns 0 ("TBD whether we keep this API"),
# so determine_available_memory subtracts nothing for graphs and they are captured afterwards, outside the
# budget (capture_model :847-901); 0.33.0 measures them (v1/worker/gpu/cudagraph_utils.py:922-1039).
GRAPHS_NOT_ESTIMATED = ("vllm-0.28",)


def vllm_nonkv_steps(c: StageContext, release: str, mnbt: int, max_num_seqs: int) -> tuple[Step, ...]:
    """The non-KV steps beyond the named buffers, each with its source and band."""
    d = c.dims
    assert d is not None
    fit, how, widen = fit_for(release)
    p = c.placement
    moe_tp = moe_tp_of(p)
    token_bytes = activation_token_bytes(d, moe_tp)
    steps: list[Step] = []
    hc = hc_stream_token_bytes(d)
    steps.append(Step(StepKind.RESERVE, f"other profile-run activations ({mnbt:,} tokens x {hc:,} B)", mnbt * hc,
                      "profile_run at max_num_batched_tokens (gpu_model_runner.py profile_run; torch peak, "
                      "gpu_worker.py determine_available_memory): residual hc stream x 3, csa-plan's count (the "
                      "top-k MoE intermediates are a request in the shared workspace)", estimate=True, band_pct=50))
    tp_many = p.tp * p.dp > 1
    nt = fit.non_torch_tp_bytes if tp_many else fit.non_torch_tp1_bytes
    nt_note = "" if tp_many else "; TP 1: no TP-1 log, the TP > 1 figure is used (an upper bound)"
    steps.append(Step(StepKind.RESERVE, f"non-torch memory (NCCL buffers, cuBLAS){' at TP > 1' if tp_many else ''}",
                      nt, f"non_torch_increase (utils/mem_utils.py memory_profiling); {how}{nt_note}", estimate=True,
                      band_pct=fit.non_torch_band_pct * widen * (1 if tp_many else 2)))
    steps.extend(_all2all_steps(c, mnbt))
    if c.settings.moe_backend == "deep_gemm_mega_moe":
        mega = mnbt * d.experts_per_token * d.hidden * fit.mega_moe_bytes_per_token_expert_elem_ppm // 1_000_000
        steps.append(Step(StepKind.RESERVE, "deep_gemm_mega_moe symmetric buffer", mega,
                          f"--moe-backend deep_gemm_mega_moe (deep_gemm get_symm_buffer_for_mega_moe, sized in its "
                          f"compiled library): fitted on {B200_LOG}", estimate=True,
                          band_pct=fit.mega_moe_band_pct * widen))
    g = graph_plan(c, release, max_num_seqs, mnbt)
    if g.mode == "NONE":
        steps.append(Step(StepKind.RESERVE, "CUDA graphs: none captured", 0, g.mode_source))
    else:
        counts = ", ".join(f"{m}={len(v)} (largest={v[0]})" for m, v in g.descs.items())
        v2 = release in V2_RUNNER
        est = graph_estimate_bytes(g.descs, token_bytes, fit.graph_factor_ppm, piecewise_measured=v2)
        shape = ("Model Runner V2 (v1/worker/gpu/cudagraph_utils.py:922-1039): PIECEWISE measured in one pool "
                 "(largest + 1 MiB a graph), FULL first + (n-1) x second" if v2 else
                 "profile_cudagraph_memory (v1/worker/gpu_model_runner.py): first + (n-1) x second capture")
        if g.estimated and release in GRAPHS_NOT_ESTIMATED:
            steps.append(Step(StepKind.RESERVE, f"CUDA graphs: {counts}, not subtracted", 0,
                              f"{release}: Model Runner V2's profile_cudagraph_memory returns 0 (vllm-0.28.0 "
                              "v1/worker/gpu/model_runner.py:843-845): the graphs are captured after the KV cache "
                              f"is sized, outside its budget (about {est:,} B)"))
        elif g.estimated:
            steps.append(Step(StepKind.RESERVE, f"CUDA graph estimate: {counts}", est,
                              f"{shape} (subtracted: gpu_worker.py "
                              f"determine_available_memory, VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1); mode "
                              f"{g.mode} ({g.mode_source}); one capture = "
                              f"{fit.graph_factor_ppm / 1e6:.3f} x its tokens' activation bytes; {how}",
                              estimate=True, band_pct=fit.graph_band_pct * widen))
        else:
            steps.append(Step(StepKind.RESERVE, f"CUDA graphs: {counts}, not subtracted", 0,
                              "--no-estimate-cudagraphs (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0): vLLM "
                              f"captures them after sizing the KV cache, outside its budget (about {est:,} B)"))
    return tuple(steps)
