"""vLLM's shared workspace: one buffer per worker, sized by the largest request, not by their sum.

DeepSeek-V4's FlashMLA sparse-prefill gather, the sparse indexer's K-gather and the fused-MoE
modular kernel's intermediates do not allocate their own buffers: each asks the worker's
``WorkspaceManager`` for views into one shared ``uint8`` tensor (``get_simultaneous``), which
grows to the largest single request and is kept (``_ensure_workspace_size``). Within one request
each part is rounded up to 256 bytes and the parts are summed; across requests the buffer is the
maximum. A budget that adds the three over-reserves by all but the largest.

Where each release has it (the unpacked wheels):

* vllm-0.25.0 and 0.26.0: ``v1/worker/workspace.py:92-117`` (``get_simultaneous``, 256-byte parts),
  ``:119-191`` (``_ensure_workspace_size``: free, then one larger ``torch.empty``); the FlashMLA
  warm-up request ``models/deepseek_v4/nvidia/flashmla.py:86-101`` (only the bf16 gather, chunk 4 x M x
  head_dim); the indexer's ``model_executor/layers/sparse_attn_indexer.py:324-335`` (0.25.0) /
  ``:326-334`` (0.26.0); the MoE kernel's ``fused_moe/modular_kernel.py:1096`` (0.25.0) / ``:1105``
  (0.26.0). The manager is made once a worker (``gpu_worker.py:381`` / ``:399``) and locked after
  warm-up (``gpu_model_runner.py:6701`` / ``:6838``).
* vllm-0.33.0: ``v1/worker/workspace.py:181-207``, ``:209-280``; FlashMLA ``nvidia/flashmla.py:105-131``
  adds the combined top-k index rows and their lengths (int32) to the same request (V4.1:
  ``models/deepseek_v41/nvidia/flashmla.py:108-131``); the indexer ``sparse_attn_indexer.py:481-499``;
  the MoE kernel ``modular_kernel.py:1207``. Model Runner V2 with a DSpark drafter gives the drafter
  its own lane, a second buffer (``gpu_worker.py:122-128``, ``v1/worker/gpu/model_runner.py:205-211``).
* vllm-0.27.0 and 0.28.0 mix the two: FlashMLA's request already carries the top-k rows and lengths
  (0.27.0 ``nvidia/flashmla.py:89-106``, 0.28.0 ``:107-128``), but the indexer's rows are still the flat
  ``40 x max_model_len`` (0.27.0 ``v1/attention/backends/mla/indexer.py:442-452``, 0.28.0 ``:475-485``);
  0.27's manager is 0.26's one buffer (``v1/worker/workspace.py:92-117``), 0.28's has 0.33's lanes
  (``:116-142``, ``:143``).
* The manager first appears in vllm-0.22.0 (``v1/worker/workspace.py``); every release csa-plan models
  (0.25-0.28, 0.33) routes all three requests through it.

The MoE request is the modular kernel's, for the experts class the release's MoE oracle picks
(``moe_experts``): ``_allocate_buffers`` asks for ``max(workspace13, output)`` and ``workspace2`` of that
class's ``workspace_shapes`` at ``M = M_full`` (no chunking in any modelled release: both M arguments are
the tokens reaching the experts), in the activations' dtype (bf16). For DeepSeek-V4's MXFP4 experts
(``select_deepseek_v4_mxfp4_moe_backend``, priority TRT-LLM MXFP8, DeepGEMM FP4, Marlin, batched Marlin):

* sm_90 on 0.25-0.28 (and ``--moe-backend marlin`` anywhere): ``MarlinExperts`` -- [M x top-k, max(N, K)] and
  [M x top-k x max(2N, K)], output [M, K]; N the per-rank intermediate rounded up to 128, K the hidden size
  rounded up to 256 (``mxfp4_round_up_hidden_size_and_intermediate_size``).
* sm_100 (and ``--moe-backend flashinfer_trtllm``): ``TrtLlmMxfp4ExpertsModular`` -- FlashInfer keeps its own
  scratch: workspaces (0,), output [M, hidden]. The monolithic TRT-LLM kernel is passed over because it
  routes Renormalize / DeepSeekV3 only, not ``RoutingMethodType.DeepseekV4``.
* sm_90 on 0.33: the Humming experts (``humming-kernels`` is a wheel requirement; 0.33's priority list puts
  HUMMING ahead of Marlin on sm_90): their workspaces come from the humming package's GEMM configs, not
  readable here -- csa-plan's count, an estimate.
* sm_120 (and ``--moe-backend deep_gemm`` on sm_100/120): ``DeepGemmFP4Experts`` (DeepGEMM is vendored in
  the wheel): its M alignment comes from DeepGEMM's compiled library
  (``get_mk_alignment_for_contiguous_layout``), not readable here -- csa-plan's count, an estimate.
* ``--moe-backend deep_gemm_mega_moe``: the experts are an ``nn.Module`` outside the modular kernel; no
  workspace request (its symmetric buffer is budget/vllm_nonkv.py's fitted step).
* FP8 experts, DP > 1 (the tokens after the DP dispatch) and other backends: not resolved -- csa-plan's
  count of the top-k intermediates, marked an estimate with a band. A backend vLLM's oracle refuses on the
  GPU (triton; TRT-LLM off sm_100; DeepGEMM on sm_90) is named so in the step's source.

``tools/crosscheck_moe_workspace.py`` runs each release's own oracle and ``_allocate_buffers`` on CPU and
``tests/fixtures/vllm_moe_workspace.json`` holds what it printed; ``tests/budget/test_vllm_moe_workspace.py``
compares csa-plan's requests with it byte for byte.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from csa_plan.planner.budget.steps import Step, StepKind
from csa_plan.planner.record import record
from csa_plan.planner.units import MiB, round_up

if TYPE_CHECKING:
    from csa_plan.planner.budget.stage import ModelDims

PART_ALIGN_BYTES = 256          # workspace.py get_simultaneous: round_up(actual, 256) per part
PREFILL_CHUNK_SIZE = 4          # models/deepseek_v4/attention.py (0.25.0 :123, 0.33.0 :156); deepseek_v41 :209
GATHER_HEAD_DIM = 512           # q.shape[-1]: the MLA head_dim the FlashMLA gather is sized by
RADIX_TOPK_WORKSPACE_BYTES = 1 * MiB  # sparse_attn_indexer.py RADIX_TOPK_WORKSPACE_SIZE
MOE_BAND_PCT = 50

WORKSPACE_SRC = {
    "vllm-0.25": "vllm-0.25.0 v1/worker/workspace.py:92-117, :119-191 (one buffer, grown to the largest request)",
    "vllm-0.26": "vllm-0.26.0 v1/worker/workspace.py:92-117, :119-191 (one buffer, grown to the largest request)",
    "vllm-0.27": "vllm-0.27.0 v1/worker/workspace.py:92-117, :119-191 (one buffer, grown to the largest request)",
    "vllm-0.28": "vllm-0.28.0 v1/worker/workspace.py:116-142, :143 (one buffer a lane, grown to the largest "
                 "request)",
    "vllm-0.33": "vllm-0.33.0 v1/worker/workspace.py:181-207, :209-280 (one buffer a lane, grown to the largest "
                 "request)",
}
FLASHMLA_SRC = {
    "vllm-0.25": "models/deepseek_v4/nvidia/flashmla.py:86-101 (chunk 4 x M x 512 bf16)",
    "vllm-0.26": "models/deepseek_v4/nvidia/flashmla.py:86-101 (chunk 4 x M x 512 bf16)",
    "vllm-0.27": "models/deepseek_v4/nvidia/flashmla.py:89-106 (chunk 4 x M x 512 bf16 + top-k rows + lengths)",
    "vllm-0.28": "models/deepseek_v4/nvidia/flashmla.py:107-128 (chunk 4 x M x 512 bf16 + top-k rows + lengths)",
    "vllm-0.33": "models/deepseek_v4/nvidia/flashmla.py:105-131 (chunk 4 x M x 512 bf16 + top-k rows + lengths)",
}
V41_FLASHMLA_SRC = "models/deepseek_v41/nvidia/flashmla.py:108-131 (chunk 4 x M x 512 bf16 + top-k rows + lengths)"
INDEXER_SRC = {
    "vllm-0.25": "model_executor/layers/sparse_attn_indexer.py:324-335",
    "vllm-0.26": "model_executor/layers/sparse_attn_indexer.py:326-334",
    "vllm-0.27": "model_executor/layers/sparse_attn_indexer.py:326-336",
    "vllm-0.28": "model_executor/layers/sparse_attn_indexer.py:326-336",
    "vllm-0.33": "model_executor/layers/sparse_attn_indexer.py:481-499",
}
MOE_SRC = {"vllm-0.25": "fused_moe/modular_kernel.py:1096", "vllm-0.26": "fused_moe/modular_kernel.py:1105",
           "vllm-0.27": "fused_moe/modular_kernel.py:1167", "vllm-0.28": "fused_moe/modular_kernel.py:1167",
           "vllm-0.33": "fused_moe/modular_kernel.py:1207"}
# the releases whose FlashMLA warm-up request carries the top-k index rows and lengths (0.27+), and those
# whose indexer rows take the workspace factor (0.32+; 0.33 among those modelled)
TOPK_IN_FLASHMLA = frozenset({"vllm-0.27", "vllm-0.28", "vllm-0.33"})
FACTOR_ROWS = frozenset({"vllm-0.33"})
DRAFT_LANE_SRC = ("Model Runner V2 gives a DSpark drafter its own workspace lane (vllm-0.33.0 gpu_worker.py:122-128, "
                  "v1/worker/gpu/model_runner.py:205-211)")


def _release(release: str) -> str:
    """The modelled release whose workspace code applies (0.33's for later names mapped to it)."""
    return release if release in WORKSPACE_SRC else "vllm-0.33"


@record
class WorkspaceRequest:
    """One ``get_simultaneous`` call: its parts' bytes (before the 256-byte rounding) and where it is."""

    name: str
    parts_bytes: tuple[int, ...]
    source: str
    estimate: bool = False

    @property
    def bytes(self) -> int:
        return sum(round_up(p, PART_ALIGN_BYTES) for p in self.parts_bytes)


def flashmla_request(release: str, m_rows: int, mnbt: int, top_k: int, window: int = 128,
                     v41: bool = False) -> WorkspaceRequest:
    """FlashMLA's warm-up request for M gathered rows: 0.25/0.26 ask for the bf16 gather only; 0.27 on add
    [mnbt, round_up(top_k + window, 128)] and [mnbt] int32 in the same call."""
    r = _release(release)
    parts = [PREFILL_CHUNK_SIZE * m_rows * GATHER_HEAD_DIM * 2]
    if r in TOPK_IN_FLASHMLA:
        parts += [mnbt * round_up(top_k + window, 128) * 4, mnbt * 4]
    return WorkspaceRequest(f"FlashMLA sparse-prefill gather (M = {m_rows:,})", tuple(parts),
                            V41_FLASHMLA_SRC if v41 else FLASHMLA_SRC[r])


INDEXER_ROWS_SRC = {
    "vllm-0.25": "T = max_model_len x 40 // ratio: vllm-0.25.0 v1/attention/backends/mla/indexer.py:227-237, "
                 "models/deepseek_v4/attention.py:725-727",
    "vllm-0.26": "T = max_model_len x 40 // ratio: vllm-0.26.0 v1/attention/backends/mla/indexer.py:231-241, "
                 "models/deepseek_v4/attention.py:725-727",
    "vllm-0.27": "T = max_model_len x 40 // ratio: vllm-0.27.0 v1/attention/backends/mla/indexer.py:442-452, "
                 "models/deepseek_v4/attention.py:777-779",
    "vllm-0.28": "T = max_model_len x 40 // ratio: vllm-0.28.0 v1/attention/backends/mla/indexer.py:475-485, "
                 "models/deepseek_v4/attention.py:841-842",
    "vllm-0.33": "T = max_model_len x (1152 // 132) x factor // ratio, factor 5 up to 256K else 2: vllm-0.33.0 "
                 "v1/attention/backends/mla/indexer.py:916-927, config/vllm.py:1866-1874, "
                 "models/deepseek_v4/attention.py:1015-1017",
}


def indexer_rows(release: str, max_model_len: int, ratio: int) -> int:
    """The indexer's K-gather rows T (``get_max_prefill_buffer_size // compress_ratio``): 0.25-0.28 take
    a flat 40 x max_model_len; the workspace factor (5 up to 256K tokens, else 2) arrives with 0.32."""
    if _release(release) in FACTOR_ROWS:
        factor = 5 if max_model_len <= 256 * 1024 else 2
        return max_model_len * (576 * 2 // 132) * factor // ratio
    return max_model_len * 40 // ratio


def indexer_request(release: str, t_rows: int) -> WorkspaceRequest:
    """The sparse indexer's profile-run request: FP8 K [T, 128] + fp32 scales [T, 4] + the radix top-k
    scratch, one call (``_gather_workspace_shapes``)."""
    r = _release(release)
    return WorkspaceRequest(f"indexer K-gather (T = {t_rows:,}) + radix top-k",
                            (t_rows * 128, t_rows * 4, RADIX_TOPK_WORKSPACE_BYTES),
                            f"{INDEXER_SRC[r]}; {INDEXER_ROWS_SRC[r]}")


class MoeExperts(Enum):
    """The experts classes the release's MXFP4 oracle can pick for DeepSeek-V4 (their vLLM names)."""

    MARLIN = "MarlinExperts"
    TRTLLM = "TrtLlmMxfp4ExpertsModular"
    DEEPGEMM_FP4 = "DeepGemmFP4Experts"
    HUMMING = "Humming experts"
    MEGA_MOE = "DeepGEMM MegaMoE experts"


# Per release, where the pick and each class's workspace_shapes are (fused_moe/ unless named):
# (oracle select_deepseek_v4_mxfp4_moe_backend, its priority list, the size rounding, Marlin's, TRT-LLM
# modular's, DeepGEMM FP4's workspace_shapes, modular_kernel _allocate_buffers with its max(ws13, out), the M it
# is passed, the mega-MoE experts)
MOE_ORACLE_SRC = {
    "vllm-0.25": ("oracle/mxfp4.py:563-628", "oracle/mxfp4.py:327-346 (priority)",
                  "oracle/mxfp4.py:632-670 (size rounding)", "experts/marlin_moe.py:711-741",
                  "experts/trtllm_mxfp4_moe.py:221-262 (monolithic :141-144: Renormalize only)",
                  "experts/deep_gemm_moe.py:470", "modular_kernel.py:1042-1104 (max(ws13, output) at :1095)",
                  "modular_kernel.py:1252-1256 (M_full, M_full)",
                  "models/deepseek_v4/nvidia/model.py:160, :523"),
    "vllm-0.26": ("oracle/mxfp4.py:566-631", "oracle/mxfp4.py:330-349 (priority)",
                  "oracle/mxfp4.py:635-673 (size rounding)", "experts/marlin_moe.py:720-750",
                  "experts/trtllm_mxfp4_moe.py:221-262 (monolithic :141-144: Renormalize only)",
                  "experts/deep_gemm_moe.py:470", "modular_kernel.py:1051-1113 (max(ws13, output) at :1104)",
                  "modular_kernel.py:1261-1265 (M_full, M_full)",
                  "models/deepseek_v4/nvidia/model.py:161, :524"),
    "vllm-0.27": ("oracle/mxfp4.py:567-632", "oracle/mxfp4.py:333-355 (priority)",
                  "oracle/mxfp4.py:636-674 (size rounding)", "experts/marlin_moe.py:735-765",
                  "experts/trtllm_mxfp4_moe.py:276-317 (monolithic :187-191: DeepSeekV3 / Renormalize)",
                  "experts/deep_gemm_moe.py:477", "modular_kernel.py:1113-1175 (max(ws13, output) at :1166)",
                  "modular_kernel.py:1308-1312 (M_full, M_full)",
                  "models/deepseek_v4/nvidia/model.py:168, :533"),
    "vllm-0.28": ("oracle/mxfp4.py:563-628", "oracle/mxfp4.py:329-351 (priority)",
                  "oracle/mxfp4.py:632-670 (size rounding)", "experts/marlin_moe.py:704-734",
                  "experts/trtllm_mxfp4_moe.py:277-318 (monolithic :188-192: DeepSeekV3 / Renormalize)",
                  "experts/deep_gemm_moe.py:477", "modular_kernel.py:1113-1175 (max(ws13, output) at :1166)",
                  "modular_kernel.py:1308-1312 (M_full, M_full)",
                  "models/deepseek_v4/nvidia/model.py:168, :541"),
    "vllm-0.33": ("oracle/mxfp4.py:763-833", "oracle/mxfp4.py:438-462 (priority)",
                  "oracle/mxfp4.py:837-880 (size rounding)", "experts/marlin_moe.py:691-721",
                  "experts/trtllm_mxfp4_moe.py:285-337 (monolithic :191-195: DeepSeekV3 / Renormalize)",
                  "experts/deep_gemm_moe.py:528", "modular_kernel.py:1124-1215 (max(ws13, output) at :1188)",
                  "modular_kernel.py:1355-1360 (M_full, M_full)",
                  "models/deepseek_v4/nvidia/model.py:227; fused_moe/deep_gemm_mega_moe.py:235"),
}
MARLIN_ROUND_N, MARLIN_ROUND_K = 128, 256   # mxfp4_round_up_hidden_size_and_intermediate_size (MARLIN)
MOE_ACT_BYTES = 2                            # workspace_dtype(bf16 activations): the base class's identity
# capability major -> the class the auto priority list lands on. vLLM's wheels vendor DeepGEMM
# (vllm/third_party/deep_gemm) and require flashinfer-python and humming-kernels (METADATA Requires-Dist), so
# all three are present. 0.33 lists HUMMING and moves it ahead of Marlin on sm_90
# (quantization/utils/humming/priority.py:11-36 prioritize_humming; oracle/mxfp4.py:453-462); 0.25-0.28 do not.
AUTO_PICK = {9: MoeExperts.MARLIN, 10: MoeExperts.TRTLLM, 12: MoeExperts.DEEPGEMM_FP4}
AUTO_PICK_033 = {**AUTO_PICK, 9: MoeExperts.HUMMING}
# --moe-backend -> (the class, the capability majors vLLM's oracle accepts it on; triton: none, its TRITON
# experts take neither DeepseekV4 routing nor this activation)
NAMED_PICK = {"marlin": (MoeExperts.MARLIN, (8, 9, 10, 11, 12)), "flashinfer_trtllm": (MoeExperts.TRTLLM, (10,)),
              "flashinfer_trtllm_afp8": (MoeExperts.TRTLLM, (10,)),
              "deep_gemm": (MoeExperts.DEEPGEMM_FP4, (10, 12)), "humming": (MoeExperts.HUMMING, (8, 9, 10, 11, 12)),
              "triton": (None, ())}


@record
class MoePick:
    """The experts class vLLM picks (None: not resolved here) and why, with the release's file:line."""

    experts: MoeExperts | None
    why: str
    refused: bool = False   # vLLM's oracle raises for this --moe-backend on this GPU


def moe_experts(release: str, capability_major: int, moe_backend: str | None, expert_dtype: str,
                dp: int) -> MoePick:
    """The experts class ``select_deepseek_v4_mxfp4_moe_backend`` picks for DeepSeek-V4's routed experts."""
    r = _release(release)
    sel, prio = MOE_ORACLE_SRC[r][0], MOE_ORACLE_SRC[r][1]
    backend = moe_backend or "auto"
    if backend == "deep_gemm_mega_moe":
        return MoePick(MoeExperts.MEGA_MOE, f"--moe-backend deep_gemm_mega_moe: {MOE_ORACLE_SRC[r][8]} (an "
                       "nn.Module outside the modular kernel: no workspace request)")
    if expert_dtype != "fp4":
        return MoePick(None, f"{expert_dtype} experts: the FP8 oracle's pick (oracle/fp8.py) is not resolved here")
    if backend in NAMED_PICK and capability_major not in NAMED_PICK[backend][1]:
        return MoePick(None, f"--moe-backend {backend}: vLLM's oracle refuses it for DeepSeek-V4's MXFP4 experts "
                       f"on sm_{capability_major}x ({sel}: the engine does not start)", refused=True)
    if dp > 1:
        return MoePick(None, "DP > 1: the tokens reaching the experts after the DP dispatch are not resolved here")
    if backend == "auto":
        pick = (AUTO_PICK_033 if r == "vllm-0.33" else AUTO_PICK).get(capability_major)
        where = f"{sel} auto, {prio} on sm_{capability_major}x"
        return MoePick(pick, where if pick else f"sm_{capability_major}x: not resolved ({where})")
    if backend not in NAMED_PICK:
        return MoePick(None, f"--moe-backend {backend}: its experts class is not resolved here ({sel})")
    return MoePick(NAMED_PICK[backend][0], f"--moe-backend {backend} ({sel})")


def moe_request(release: str, d: ModelDims, moe_tp: int, mnbt: int,
                pick: MoePick | None = None) -> WorkspaceRequest | None:
    """The MoE modular kernel's request at M = max_num_batched_tokens (the profile run): the picked class's
    ``workspace_shapes`` where it is closed-form here, else csa-plan's count of the top-k intermediates
    (an estimate); None for the mega-MoE experts, which ask for none."""
    from csa_plan.planner.budget.vllm_nonkv import moe_token_bytes

    r = _release(release)
    src = MOE_ORACLE_SRC[r]
    experts = pick.experts if pick else None
    if experts is MoeExperts.MEGA_MOE:
        return None
    m, topk = mnbt, d.experts_per_token
    if experts is MoeExperts.MARLIN:
        n = round_up(d.moe_intermediate // max(moe_tp, 1), MARLIN_ROUND_N)
        k = round_up(d.hidden, MARLIN_ROUND_K)
        ws13, ws2, out = m * topk * max(n, k), m * topk * max(2 * n, k), m * k
        return WorkspaceRequest(f"MoE workspace, MarlinExperts (M = {m:,}, N = {n:,}, K = {k:,})",
                                (max(ws13, out) * MOE_ACT_BYTES, ws2 * MOE_ACT_BYTES),
                                f"{MOE_SRC[r]}; {src[6]}; {src[7]}; {src[3]}; {src[2]}; {pick.why}")
    if experts is MoeExperts.TRTLLM:
        return WorkspaceRequest(f"MoE workspace, TrtLlmMxfp4ExpertsModular (output M = {m:,} x {d.hidden:,})",
                                (m * d.hidden * MOE_ACT_BYTES, 0),
                                f"{MOE_SRC[r]}; {src[6]}; {src[7]}; {src[4]}; {pick.why}")
    per = moe_token_bytes(d, moe_tp)
    why = pick.why if pick else "experts class not resolved"
    if experts is MoeExperts.DEEPGEMM_FP4:
        why += (f"; DeepGemmFP4Experts ({src[5]}) aligns M with DeepGEMM's compiled "
                "get_mk_alignment_for_contiguous_layout, not readable here")
    elif experts is MoeExperts.HUMMING:
        why += ("; the Humming experts (fused_moe/experts/fused_humming_moe.py) size their workspaces from the "
                "humming package's GEMM configs, not readable here")
    return WorkspaceRequest(f"MoE intermediates ({mnbt:,} tokens x {per:,} B)", (mnbt * per,),
                            MOE_SRC[r] + f" (csa-plan's count of the top-k intermediates; {why})", estimate=True)


def shared_workspace_step(release: str, requests: tuple[WorkspaceRequest, ...], lane: str = "") -> Step:
    """One step: the largest request, the others named beside it with their bytes."""
    largest = max(requests, key=lambda q: q.bytes)
    listed = "; ".join(f"{q.name} {q.bytes:,} B" for q in requests)
    label = f"shared workspace{lane}: the largest of {len(requests)} requests ({listed})"
    src = (f"{WORKSPACE_SRC[_release(release)]}; largest: {largest.name}, {largest.source}; "
           + "; ".join(q.source for q in requests if q is not largest))
    return Step(StepKind.RESERVE, label, largest.bytes, src, estimate=largest.estimate,
                band_pct=MOE_BAND_PCT if largest.estimate else None)


def draft_lane_step(release: str, d: ModelDims, moe_tp: int, mnbt: int, pick: MoePick | None = None) -> Step:
    """The DSpark drafter's own lane under 0.33's Model Runner V2: its sliding-window FlashMLA gather
    (ratio 0: M = window + mnbt) and its MoE request, the larger kept."""
    swa = flashmla_request(release, 128 + mnbt, mnbt, 0, v41=True)
    moe = moe_request(release, d, moe_tp, mnbt, pick)
    step = shared_workspace_step(release, (swa,) if moe is None else (swa, moe), lane=" (DSpark draft lane)")
    return Step(step.kind, step.label, step.bytes, f"{DRAFT_LANE_SRC}; {step.source}", step.estimate, step.band_pct)
