"""The weight layouts of the engines csa-plan models, by engine name (a new engine is a new entry).

File:line pointers are into the release wheels (vLLM 0.33.0: ``vllm/...``; SGLang 0.5.23:
``sglang/srt/...``), read against the code; ``reference`` is DeepSeek's inference code.
"""

from __future__ import annotations

from dataclasses import replace

from csa_plan.planner.errors import BadInput
from csa_plan.planner.placement import Placement, split_stages
from csa_plan.planner.units import round_up
from csa_plan.planner.weights.sharding import Groups, ShardRules
from csa_plan.planner.weights.tensors import Inventory, Role, StoredDType

VOCAB_PAD = 64  # DEFAULT_VOCAB_PADDING_SIZE in both engines' vocab_parallel_embedding.py


def _ep(placement: Placement) -> int:
    """--ep as given, else 1: neither engine turns expert parallelism on by default."""
    return placement.ep if placement.ep is not None else 1


def _need(cond: bool, field: str, problem: str) -> None:
    if not cond:
        raise BadInput("options", field, problem)


def _common_checks(engine: str, inv: Inventory, p: Placement, g: Groups, where: str) -> None:
    heads, experts = inv.dim("heads"), inv.dim("routed_experts")
    _need(heads % g.attn_tp == 0, "--tp", f"{engine}: {heads} attention heads do not split over {g.attn_tp} ranks "
          f"({where})")
    _need(inv.dim("o_groups") % g.attn_tp == 0, "--tp",
          f"{engine}: {inv.dim('o_groups')} output groups (wo_a) do not split over {g.attn_tp} ranks")
    _need(experts % g.moe_ep == 0, "--ep", f"{engine}: {experts} routed experts do not split over {g.moe_ep} "
          "expert-parallel ranks")
    _need(inv.dim("moe_inter") % g.moe_tp == 0, "--tp",
          f"{engine}: moe_intermediate_size {inv.dim('moe_inter')} does not split over {g.moe_tp} MoE ranks")


# --- vLLM 0.33.0 -----------------------------------------------------------------------------------

def _vllm_groups(p: Placement, experts: int) -> Groups:
    world = p.tp * p.dp
    ep = _ep(p)
    _need(ep in (1, world), "--ep", f"vllm-0.33: expert parallelism is on or off (--enable-expert-parallel): "
          f"--ep is 1 or tp x dp = {world}, got {ep} (model_executor/layers/fused_moe/config.py:1198-1245)")
    ep_on = ep == world and world > 1
    sequence_parallel = p.pp == 1 and ep_on and p.tp > 1 and p.dp > 1  # nvidia/model.py _use_sequence_parallel
    return Groups(attn_tp=p.tp, dense_tp=1 if sequence_parallel else p.tp, embed=p.tp, head=p.tp,
                  moe_ep=world if ep_on else 1, moe_tp=1 if ep_on else world,
                  local_experts=experts // (world if ep_on else 1), indexer=1, sink=p.tp)


def _vllm_stages(num_layers: int, pp: int) -> tuple[int, ...]:
    """distributed/utils.py get_pp_indices: the remainder goes to the stages before the last,
    from the second-to-last backwards."""
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return tuple(parts)


def _vllm_vocab(vocab: int, group: int) -> int:
    padded = round_up(vocab, VOCAB_PAD)
    _need(padded % group == 0, "--tp", f"vllm-0.33: the vocabulary padded to {padded} does not divide over "
          f"{group} ranks (vocab_parallel_embedding.py:304 divide())")
    return padded


def _vllm_check(inv: Inventory, p: Placement, g: Groups) -> None:
    _common_checks("vllm-0.33", inv, p, g, "models/deepseek_v4/attention.py:218 asserts n_heads % tp == 0")
    _vllm_vocab(inv.dim("vocab"), p.tp)
    local = inv.dim("moe_inter") // g.moe_tp
    _need(local % 32 == 0, "--tp", f"vllm-0.33: {local} MoE intermediate columns per rank are not whole MXFP4 "
          "blocks of 32 (quantization/mxfp4.py:661-744)")


def _vllm_sink_heads(local_heads: int) -> int:
    """FlashMLA's FP8 decode kernel takes 64 or 128 query heads (nvidia/flashmla.py:78-85)."""
    return 64 if local_heads <= 64 else 128


VLLM = ShardRules(
    name="vllm-0.33",
    description="vLLM 0.33.0 (DeepseekV4ForCausalLM, models/deepseek_v4/nvidia)",
    groups=_vllm_groups,
    stage_counts=_vllm_stages,
    scale_dtype=StoredDType.F8_E8M0,
    dtypes={Role.TID2EID: StoredDType.I32},
    sink_heads=_vllm_sink_heads,
    shared_pad=True,
    hc_head_every_stage=True,
    mtp_embed_when_pp=True,
    vocab_pad=_vllm_vocab,
    check=_vllm_check,
    sources=(
        "embedding vocab-split over TP on the first PP rank, lm_head on the last (nvidia/model.py:854-862, 1344-1351)",
        "fused wq_a+wkv, norms, compressors, indexers, hc_* and the router replicated; wq_b, wo_a by columns "
        "and wo_b by rows over TP (attention.py:247-288, 990-1003; compressor.py:262-280)",
        "attn_sink padded to 64 or 128 heads (attention.py:247-250, nvidia/flashmla.py:78-85)",
        "shared experts over TP, padded to whole 128-blocks per rank; replicated under pp=1, EP, tp>1, dp>1 "
        "(nvidia/model.py:148-160, 571-582)",
        "routed experts: EP = tp x dp with MoE TP 1, else MoE TP = tp x dp (fused_moe/config.py:1198-1245); "
        "MXFP4 uint8 [E, 2I, D/2] + scales [.., D/32] (quantization/mxfp4.py:661-744)",
        "FP8 block scales as float8_e8m0fnu (quantization/fp8.py:336); tid2eid int32 (nvidia/model.py:284-300)",
        "pipeline: remainder to the stages before the last (distributed/utils.py:198-240); hc_head on every "
        "stage (nvidia/model.py:883-901); MTP drafter on the last stage, sharing embedding (pp=1) and head "
        "(v1/spec_decode/llm_base_proposer.py:1418-1575)",
    ),
)


# --- SGLang 0.5.23 ---------------------------------------------------------------------------------

def _sglang_groups(p: Placement, experts: int) -> Groups:
    world = p.tp * p.dp  # SGLang's tp_size; dp-attention splits it into dp groups of attn_tp = tp
    ep = _ep(p)
    _need(ep >= 1 and world % ep == 0, "--ep", f"sglang-0.5.23: --ep {ep} does not divide tp x dp = {world} "
          "(moe_ep_setup.py:154, moe_tp = tp / ep)")
    return Groups(attn_tp=p.tp, dense_tp=world, embed=1 if p.dp > 1 else world, head=world,
                  moe_ep=ep, moe_tp=world // ep, local_experts=experts // ep, indexer=1, sink=1)


def _sglang_stages(num_layers: int, pp: int) -> tuple[int, ...]:
    """srt/distributed/utils.py get_pp_indices: the last ``remainder`` stages get one extra layer."""
    base, extra = divmod(num_layers, pp)
    return tuple(base + (1 if s >= pp - extra else 0) for s in range(pp))


def _sglang_vocab(vocab: int, group: int) -> int:
    """layers/vocab_parallel_embedding.py:273-275: pad to 64, or to 64 x tp when that does not divide."""
    pad = VOCAB_PAD if round_up(vocab, VOCAB_PAD) % group == 0 else VOCAB_PAD * group
    return round_up(vocab, pad)


def _sglang_check(inv: Inventory, p: Placement, g: Groups) -> None:
    _common_checks("sglang-0.5.23", inv, p, g, "models/deepseek_v4.py:1118-1167 splits heads over attn_tp")
    local = inv.dim("moe_inter") // g.moe_tp
    _need(local % 128 == 0 and inv.dim("hidden") % 128 == 0, "--ep",
          f"sglang-0.5.23: the flashinfer_mxfp4 MoE runner needs a multiple of 128 intermediate columns per rank, "
          f"got {local} (layers/quantization/mxfp4_flashinfer_cutlass_moe.py:66-73); raise --ep")


SGLANG = ShardRules(
    name="sglang-0.5.23",
    description="SGLang 0.5.23 (models/deepseek_v4.py)",
    groups=_sglang_groups,
    stage_counts=_sglang_stages,
    scale_dtype=StoredDType.F32,
    dtypes={Role.TID2EID: StoredDType.I32, Role.COMPRESSOR_NORM: StoredDType.F32},
    vocab_pad=_sglang_vocab,
    check=_sglang_check,
    sources=(
        "embedding vocab-split over TP, replicated under DP attention; lm_head over the whole TP group "
        "(models/deepseek_v4.py:3764-3778, 4706-4718)",
        "attn_sink full and replicated; fused wqkv_a replicated; wq_b, wo_a by columns and wo_b by rows over "
        "attn_tp = tp / dp (models/deepseek_v4.py:1092-1167)",
        "compressor ape fp32, wkv_gate BF16 replicated, norm fp32 (layers/attention/dsv4/compressor.py:63-78); "
        "indexer wq_b FP8 and weights_proj BF16 replicated (layers/attention/dsv4/indexer.py:1178-1210)",
        "shared experts over the whole TP group (models/deepseek_v2.py:864-897)",
        "routed experts: E / ep per rank, intermediate / (tp / ep) (layers/moe/fused_moe_triton/layer.py:390-428); "
        "I8 FP4 + E8M0 scales (layers/quantization/fp8.py:1603-1719, mxfp4_flashinfer_cutlass_moe.py:58-83)",
        "FP8 block scales kept as float32 (layers/quantization/fp8.py:674-689); tid2eid int32 "
        "(layers/moe/hash_topk.py:66-69)",
        "pipeline: remainder to the last stages (distributed/utils.py:110-150); norm and hc_head on the last "
        "(models/deepseek_v4.py:3836-3851); the MTP draft shares the target's embedding and head "
        "(models/deepseek_v4_nextn.py:56-122)",
    ),
)


# --- the reference inference code ------------------------------------------------------------------

def _reference_groups(p: Placement, experts: int) -> Groups:
    ep = p.ep if p.ep is not None else p.tp
    _need(ep == p.tp, "--ep", f"reference: the inference code puts E / world_size experts on each rank, so --ep "
          f"is --tp ({p.tp}), got {ep} (inference/model.py MoE); name an engine for other layouts")
    return Groups(attn_tp=p.tp, dense_tp=1, embed=p.tp, head=p.tp, moe_ep=p.tp, moe_tp=1,
                  local_experts=experts // p.tp, indexer=p.tp, sink=p.tp)


def _reference_check(inv: Inventory, p: Placement, g: Groups) -> None:
    _common_checks("reference", inv, p, g, "inference/model.py asserts divisibility by world_size")
    _need(inv.dim("vocab") % p.tp == 0, "--tp", f"reference: vocab {inv.dim('vocab')} does not split over {p.tp}")


REFERENCE = ShardRules(
    name="reference",
    description="no engine named: stored dtypes, split as DeepSeek's reference inference code splits them",
    groups=_reference_groups,
    stage_counts=lambda n, pp: split_stages(n, 0, pp).main_counts,
    scale_dtype=StoredDType.F8_E8M0,
    check=_reference_check,
    sources=(
        "inference/model.py: embedding and head vocab-split, wq_b / wo_a / indexer by columns, wo_b by rows, "
        "attn_sink per local head, E / world_size routed experts per rank, shared experts replicated",
        "pipeline stages as csa-plan's placement splits them (extra layers first); stored checkpoint dtypes",
    ),
)

# 0.25.0 / 0.26.0 shard DeepSeek-V4's weights as 0.33.0 does (the same rules, read against those wheels'
# models/deepseek_v4; what differs between the releases is the KV cache planning, planner/engines).
VLLM_026 = replace(VLLM, name="vllm-0.26", description="vLLM 0.26.0 (the rules of 0.33.0's DeepseekV4ForCausalLM)")
VLLM_025 = replace(VLLM, name="vllm-0.25", description="vLLM 0.25.0 (the rules of 0.33.0's DeepseekV4ForCausalLM)")
# 0.27.0 / 0.28.0: read against 0.26.0, models/deepseek_v4/nvidia/model.py and attention.py change no layer's TP/EP
# split (the diffs move the MoE construction and comments; the heads stay num_attention_heads // TP world size).
VLLM_027 = replace(VLLM, name="vllm-0.27", description="vLLM 0.27.0 (the rules of 0.33.0's DeepseekV4ForCausalLM)")
VLLM_028 = replace(VLLM, name="vllm-0.28", description="vLLM 0.28.0 (the rules of 0.33.0's DeepseekV4ForCausalLM)")
# 0.34.0: nvidia/model.py and attention.py change no TP/EP split against 0.33.0 (attention.py:219 the same assert)
VLLM_034 = replace(VLLM, name="vllm-0.34", description="vLLM 0.34.0 (the rules of 0.33.0's DeepseekV4ForCausalLM)")

RULES: dict[str, ShardRules] = {r.name: r for r in (REFERENCE, VLLM, VLLM_034, VLLM_028, VLLM_027, VLLM_026, VLLM_025,
                                                    SGLANG)}


# --- SGLang's MoE runners (--moe-runner-backend) ----------------------------------------------------
# "auto" is flashinfer_mxfp4 for DeepSeek-V4's FP4 experts on sm_90 / sm_100 / sm_120 with no all-to-all
# backend (arg_groups/model_overrides/deepseek_v4.py:66-88): the rules above. Marlin
# (layers/quantization/mxfp4_marlin_moe.py, marlin_utils.py, marlin_utils_fp4.py) keeps a rank's
# intermediate width whole groups of 32 and pads it for its tiles: to 128 at create_weights off sm_90
# (:83-89), to 64 when repacking with hidden % 128 == 0 (marlin_utils_fp4.py:366-374); E8M0 scales.
SGLANG_MOE_RUNNERS = ("auto", "flashinfer_mxfp4", "marlin")
MARLIN_GROUP = 32


FP8_BLOCK_N = 128  # the checkpoints' quantization_config weight_block_size[0]


def _marlin_check(inv: Inventory, p: Placement, g: Groups) -> None:
    _common_checks("sglang-0.5.23", inv, p, g, "models/deepseek_v4.py:1118-1167 splits heads over attn_tp")
    local = inv.dim("moe_inter") // g.moe_tp
    _need(local % MARLIN_GROUP == 0 and inv.dim("hidden") % 64 == 0, "--tp",
          f"sglang-0.5.23: the marlin MoE runner needs whole groups of {MARLIN_GROUP} intermediate columns per rank, "
          f"got {local} (layers/quantization/marlin_utils.py check_moe_marlin_supports_layer)")
    _block_check(inv, g)


def _block_check(inv: Inventory, g: Groups) -> None:
    """model_runner.py:500 -> moe_ep_setup.py:134-176 check_quantized_moe_compatibility: with FP8 block
    scales, moe_intermediate_size / moe_tp must be whole 128-blocks (the shared expert's scales split over
    TP) unless SGLANG_SHARED_EXPERT_TP1=1 replicates the shared expert (g.dense_tp == 1)."""
    local = inv.dim("moe_inter") // g.moe_tp
    _need(g.dense_tp == 1 or local % FP8_BLOCK_N == 0, "--tp",
          f"sglang-0.5.23: For quantized MoE models, (moe_intermediate_size={inv.dim('moe_inter')} / "
          f"moe_tp_size={g.moe_tp}) % weight_block_size_n={FP8_BLOCK_N} must be 0, got {local} "
          f"(model_executor/model_runner_components/moe_ep_setup.py:167-176); raise --ep, or run with "
          f"SGLANG_SHARED_EXPERT_TP1=1 (--shared-expert-tp1)")


def sglang_runner_rules(runner: str, capability: tuple[int, int] | None, shared_expert_tp1: bool = False) -> ShardRules:
    """SGLang 0.5.23's weight rules under one MoE runner on a card of ``capability`` (None: sm_90);
    ``shared_expert_tp1``: run with SGLANG_SHARED_EXPERT_TP1=1 (the shared expert replicated)."""
    if shared_expert_tp1:
        return _shared_expert_tp1(sglang_runner_rules(runner, capability))
    if runner in ("auto", "flashinfer_mxfp4"):
        return SGLANG
    sm90 = capability is None or capability[0] == 9
    multiple = 64 if sm90 else 128  # marlin_utils_fp4.py:366-374 (hidden % 128 == 0); mxfp4_marlin_moe.py:83-89

    def groups(p: Placement, experts: int) -> Groups:
        return replace(_sglang_groups(p, experts), expert_inter_multiple=multiple)

    return replace(SGLANG, description=f"SGLang 0.5.23 (models/deepseek_v4.py), --moe-runner-backend marlin "
                   f"(a rank's expert width padded to {multiple})", groups=groups, check=_marlin_check,
                   sources=SGLANG.sources + (
                       "marlin MoE runner: intermediate per rank whole groups of 32, padded to 64 on sm_90 / 128 "
                       "elsewhere (layers/quantization/mxfp4_marlin_moe.py:83-89, marlin_utils_fp4.py:366-374)",))


def _shared_expert_tp1(rules: ShardRules) -> ShardRules:
    """SGLANG_SHARED_EXPERT_TP1=1: DeepseekV2MoE builds the shared expert with parallel_group="replicated"
    (models/deepseek_v2.py:874-896), so every rank holds it whole and the 128-block rule is lifted."""
    base = rules.groups

    def groups(p: Placement, experts: int) -> Groups:
        return replace(base(p, experts), dense_tp=1)

    return replace(rules, description=rules.description + ", SGLANG_SHARED_EXPERT_TP1=1 (shared expert replicated)",
                   groups=groups, sources=tuple(s for s in rules.sources if not s.startswith("shared experts over"))
                   + ("shared experts replicated on every rank under SGLANG_SHARED_EXPERT_TP1=1 "
                      "(models/deepseek_v2.py:874-896)",))


def rules_for(engine: str | None, moe_runner: str | None = None,
              capability: tuple[int, int] | None = None, shared_expert_tp1: bool = False) -> ShardRules:
    """The rules of ``engine``; None (no engine named) or an engine without its own entry: the reference.
    ``moe_runner``: SGLang's --moe-runner-backend (its engine model has refused any other engine's);
    ``shared_expert_tp1``: SGLang's SGLANG_SHARED_EXPERT_TP1=1."""
    rules = RULES.get(engine or "reference", REFERENCE)
    if (moe_runner is not None or shared_expert_tp1) and rules is SGLANG:
        return sglang_runner_rules(moe_runner or "auto", capability, shared_expert_tp1)
    return rules
