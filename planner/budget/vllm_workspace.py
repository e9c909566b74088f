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

The MoE request is csa-plan's count of the top-k intermediates (gate/up, activation, expert output in
bf16), not a backend's own ``workspace_shapes`` (Marlin, DeepGEMM and TRT-LLM differ): it is marked
an estimate when it is the largest request.
"""

from __future__ import annotations

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


def moe_request(release: str, d: ModelDims, moe_tp: int, mnbt: int) -> WorkspaceRequest:
    """The MoE modular kernel's intermediates at max_num_batched_tokens (csa-plan's count, one part)."""
    from csa_plan.planner.budget.vllm_nonkv import moe_token_bytes

    per = moe_token_bytes(d, moe_tp)
    return WorkspaceRequest(f"MoE intermediates ({mnbt:,} tokens x {per:,} B)", (mnbt * per,),
                            MOE_SRC[_release(release)] + " (csa-plan's count of the top-k intermediates)",
                            estimate=True)


def shared_workspace_step(release: str, requests: tuple[WorkspaceRequest, ...], lane: str = "") -> Step:
    """One step: the largest request, the others named beside it with their bytes."""
    largest = max(requests, key=lambda q: q.bytes)
    listed = "; ".join(f"{q.name} {q.bytes:,} B" for q in requests)
    label = f"shared workspace{lane}: the largest of {len(requests)} requests ({listed})"
    src = (f"{WORKSPACE_SRC[_release(release)]}; largest: {largest.name}, {largest.source}; "
           + "; ".join(q.source for q in requests if q is not largest))
    return Step(StepKind.RESERVE, label, largest.bytes, src, estimate=largest.estimate,
                band_pct=MOE_BAND_PCT if largest.estimate else None)


def draft_lane_step(release: str, d: ModelDims, moe_tp: int, mnbt: int) -> Step:
    """The DSpark drafter's own lane under 0.33's Model Runner V2: its sliding-window FlashMLA gather
    (ratio 0: M = window + mnbt) and its MoE intermediates, the larger kept."""
    swa = flashmla_request(release, 128 + mnbt, mnbt, 0, v41=True)
    step = shared_workspace_step(release, (swa, moe_request(release, d, moe_tp, mnbt)), lane=" (DSpark draft lane)")
    return Step(step.kind, step.label, step.bytes, f"{DRAFT_LANE_SRC}; {step.source}", step.estimate, step.band_pct)
