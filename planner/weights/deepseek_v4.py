"""DeepSeek-V4's tensors from its config, as the released checkpoints store them.

The structure is the reference inference code's (DeepSeek-V4 ``inference/model.py``:
``Transformer``, ``Block``, ``Attention``, ``Compressor``, ``Indexer``, ``MoE``, ``Gate``,
``Expert``, ``MTPBlock``, ``ParallelHead``), with the checkpoint's stored dtypes:

* routed experts: FP4 e2m1, two per I8 byte, plus one UE8M0 scale byte per 1x32 block;
* other linears (attention ``wq_a``/``wq_b``/``wkv``/``wo_a``/``wo_b``, indexer ``wq_b``,
  shared experts, MTP ``e_proj``/``h_proj``): FP8 e4m3 plus one UE8M0 byte per 128x128 block;
* BF16: embedding, head, router gate, compressor ``wkv``/``wgate``, indexer ``weights_proj``,
  norms; F32: ``hc_*``, compressor ``ape``, ``attn_sink``, router bias; I64: ``tid2eid``
  (hash layers only).

Compressors sit on every layer with a non-zero ratio (``overlap`` = two halves when the
ratio is 4), indexers on ratio-4 layers only; an MTP layer is a ``Block`` of its own
ratio plus ``e_proj``/``h_proj``, three norms and its own ``hc_head``, and shares the
target's embedding and head.
"""

from __future__ import annotations

from typing import Any, Mapping

from csa_plan.planner.errors import BadInput
from csa_plan.planner.limits import MAX_INVENTORY_LAYERS
from csa_plan.planner.record import record
from csa_plan.planner.values import read_int, read_mapping, read_str
from csa_plan.planner.weights.tensors import (Inventory, Quant, Role, StoredDType, Weight, expert_span, linear,
                                               plain)

SOURCE = "DeepSeek-V4 reference inference code (inference/model.py)"
FP8_BLOCK = 128


@record
class V4Shape:
    """The config fields the tensor shapes depend on."""

    hidden: int
    heads: int
    head_dim: int
    q_lora_rank: int
    o_groups: int
    o_lora_rank: int
    routed_experts: int
    shared_experts: int
    moe_inter: int
    vocab: int
    index_heads: int
    index_head_dim: int
    hash_layers: int
    experts_per_token: int
    hc_mult: int
    num_main: int
    num_mtp: int
    compress_ratios: tuple[int, ...]
    dense: Quant      # non-expert linears
    experts: Quant    # routed experts
    dspark: bool = False          # the draft layers are DSpark's (V4-Flash-0731), not MTP modules
    dspark_markov_rank: int = 0
    dspark_targets: int = 0       # len(dspark_target_layer_ids): main_proj's input is this many hidden states


INT_FIELDS = {
    "hidden": "hidden_size", "heads": "num_attention_heads", "head_dim": "head_dim",
    "q_lora_rank": "q_lora_rank", "o_groups": "o_groups", "o_lora_rank": "o_lora_rank",
    "routed_experts": "n_routed_experts", "moe_inter": "moe_intermediate_size", "vocab": "vocab_size",
    "index_heads": "index_n_heads", "index_head_dim": "index_head_dim", "experts_per_token": "num_experts_per_tok",
    "hc_mult": "hc_mult", "num_main": "num_hidden_layers",
}
OPTIONAL_INT_FIELDS = {"shared_experts": ("n_shared_experts", 1), "hash_layers": ("num_hash_layers", 0),
                       "num_mtp": ("num_nextn_predict_layers", 0)}


def read_shape(config: Mapping[str, Any], source: str) -> V4Shape:
    values: dict[str, Any] = {}
    for attr, key in INT_FIELDS.items():
        if key not in config:
            raise BadInput(source, key, "missing (needed for the tensor inventory)")
        values[attr] = read_int(source, key, config[key])
    for attr, (key, default) in OPTIONAL_INT_FIELDS.items():
        values[attr] = read_int(source, key, config.get(key, default))
    from csa_plan.planner.dspark import dspark_draft_layers

    drafts = dspark_draft_layers(config, source)
    values["dspark"] = drafts is not None
    if drafts is not None:
        values["num_mtp"] = drafts
        values["dspark_markov_rank"] = read_int(source, "dspark_markov_rank", config.get("dspark_markov_rank"))
        values["dspark_targets"] = len(config["dspark_target_layer_ids"]) \
            if isinstance(config["dspark_target_layer_ids"], list) else 0
    layers = values["num_main"] + values["num_mtp"]
    if layers > MAX_INVENTORY_LAYERS:
        raise BadInput(source, "num_hidden_layers", f"{layers:,} layers (main + MTP): the tensor inventory is built "
                                                    f"for at most {MAX_INVENTORY_LAYERS:,} (limit MAX_INVENTORY_LAYERS); "
                                                    "give the weights per device with --weights SIZE")
    ratios = config.get("compress_ratios")
    if not isinstance(ratios, list):
        raise BadInput(source, "compress_ratios", "missing or not a list (needed for the tensor inventory)")
    n = values["num_main"] + values["num_mtp"]
    if len(ratios) != n:
        raise BadInput(source, "compress_ratios", f"has {len(ratios)} entries, expected {n} (main + MTP layers)")
    values["compress_ratios"] = tuple(read_int(source, f"compress_ratios[{i}]", r) for i, r in enumerate(ratios))
    values["dense"], values["experts"] = _quant(config, source)
    shape = V4Shape(**values)
    _check_divisible(shape, source)
    return shape


def _quant(config: Mapping[str, Any], source: str) -> tuple[Quant, Quant]:
    """FP8 block 128x128 from ``quantization_config``; experts FP4 unless ``expert_dtype`` says otherwise
    (vLLM reads ``getattr(config, "expert_dtype", "fp4")``, models/deepseek_v4/nvidia/model.py)."""
    raw = config.get("quantization_config")
    if raw is None:
        dense = Quant.NONE
    else:
        q = read_mapping(source, "quantization_config", raw)
        method = read_str(source, "quantization_config.quant_method", q.get("quant_method"))
        fmt = q.get("fmt", "e4m3")
        block = q.get("weight_block_size")
        if method != "fp8" or fmt != "e4m3" or block != [FP8_BLOCK, FP8_BLOCK]:
            raise BadInput(source, "quantization_config",
                           f"only fp8 e4m3 with 128x128 blocks is inventoried, got {method!r} {fmt!r} {block!r}")
        dense = Quant.FP8_BLOCK128
    default_expert = "fp4" if dense is Quant.FP8_BLOCK128 else "bf16"
    expert = config.get("expert_dtype", default_expert)
    table = {"fp4": Quant.FP4_BLOCK32, "fp8": Quant.FP8_BLOCK128, "bf16": Quant.NONE}
    if expert not in table:
        raise BadInput(source, "expert_dtype", f"unknown expert dtype {expert!r} (known: {', '.join(table)})")
    return dense, table[expert]


def _check_divisible(s: V4Shape, source: str) -> None:
    if s.o_groups == 0 or (s.heads * s.head_dim) % s.o_groups:
        raise BadInput(source, "o_groups", f"{s.o_groups} does not divide heads x head_dim")
    if s.experts is Quant.FP4_BLOCK32 and (s.hidden % 32 or s.moe_inter % 32):
        raise BadInput(source, "moe_intermediate_size", "FP4 experts need hidden and moe sizes divisible by 32")


def build(config: Mapping[str, Any], source: str) -> Inventory:
    s = read_shape(config, source)
    blocks: list[tuple[Weight, ...]] = [(plain("embed.weight", Role.EMBED, (s.vocab, s.hidden), StoredDType.BF16),)]
    layout: list[tuple[int, int | None, str]] = [(0, None, "")]
    # Every main layer's ``Block``, built once per distinct layer (its compress ratio, and whether it
    # routes by hash: all that _block reads of the layer id) and used at each layer of that kind.
    built: dict[tuple[int, bool], int] = {}
    for i in range(s.num_main):
        prefix = f"layers.{i}"
        kind = (s.compress_ratios[i], i < s.hash_layers)
        if kind not in built:
            built[kind] = len(blocks)
            blocks.append(tuple(_block(s, prefix, i, is_mtp=False)))
        layout.append((built[kind], i, prefix))
    layout.append((len(blocks), None, ""))
    blocks.append((plain("norm.weight", Role.FINAL_NORM, (s.hidden,), StoredDType.BF16),
                   plain("head.weight", Role.HEAD, (s.vocab, s.hidden), StoredDType.BF16),
                   *hc_head(s, "", None, False)))
    for j in range(s.num_mtp if not s.dspark else 0):
        layer = s.num_main + j
        prefix = f"mtp.{j}"
        where = {"layer": layer, "is_mtp": True}
        layout.append((len(blocks), layer, prefix))
        blocks.append((
            *_block(s, prefix, layer, is_mtp=True),
            linear(f"{prefix}.e_proj", Role.MTP_PROJ, s.hidden, s.hidden, s.dense, **where),
            linear(f"{prefix}.h_proj", Role.MTP_PROJ, s.hidden, s.hidden, s.dense, **where),
            plain(f"{prefix}.enorm.weight", Role.MTP_NORM, (s.hidden,), StoredDType.BF16, **where),
            plain(f"{prefix}.hnorm.weight", Role.MTP_NORM, (s.hidden,), StoredDType.BF16, **where),
            plain(f"{prefix}.norm.weight", Role.MTP_NORM, (s.hidden,), StoredDType.BF16, **where),
            *hc_head(s, f"{prefix}.", layer, True),
        ))
    if s.dspark:
        _dspark_blocks(s, blocks, layout)
    dims = (("heads", s.heads), ("o_groups", s.o_groups), ("vocab", s.vocab), ("hidden", s.hidden),
            ("moe_inter", s.moe_inter), ("routed_experts", s.routed_experts))
    return Inventory("DeepseekV4ForCausalLM", SOURCE if not s.dspark else f"{SOURCE}; {DSPARK_SOURCE}", tuple(blocks), tuple(layout), s.num_main, s.num_mtp, dims)


DSPARK_SOURCE = ("DSpark drafter: per stage a V4 block (attention without compressor, MoE, hc mixes); once: "
                 "main_proj [hidden, hidden x targets] FP8 128x128, main_norm, norm, hc_head, markov_w1/w2 BF16 "
                 "[vocab, markov_rank], confidence_head.proj BF16 [1, hidden + markov_rank] (vllm-0.34.0 "
                 "models/deepseek_v4/nvidia/dspark.py:89-169)")


def _dspark_blocks(s: V4Shape, blocks: list[tuple[Weight, ...]], layout: list[tuple[int, int | None, str]]) -> None:
    """DeepSeek-V4-Flash-0731's drafter, stored as ``mtp.{j}`` in the target checkpoint: each stage a V4
    ``Block`` (its compress ratio, 0 in the published config: no compressor), the shared heads on the
    last stage (vLLM: "Loaded from the 'final' MTP layer weights"), ``main_proj`` on the first."""
    last = s.num_mtp - 1
    for j in range(s.num_mtp):
        layer = s.num_main + j
        prefix = f"mtp.{j}"
        where = {"layer": layer, "is_mtp": True}
        layout.append((len(blocks), layer, prefix))
        extra: list[Weight] = []
        if j == 0:
            extra += [linear(f"{prefix}.main_proj", Role.MTP_PROJ, s.hidden, s.hidden * s.dspark_targets, s.dense,
                             **where),
                      plain(f"{prefix}.main_norm.weight", Role.MTP_NORM, (s.hidden,), StoredDType.BF16, **where)]
        if j == last:
            r = s.dspark_markov_rank
            extra += [plain(f"{prefix}.norm.weight", Role.MTP_NORM, (s.hidden,), StoredDType.BF16, **where),
                      *hc_head(s, f"{prefix}.", layer, True),
                      plain(f"{prefix}.markov_w1.weight", Role.MTP_PROJ, (s.vocab, r), StoredDType.BF16, **where),
                      plain(f"{prefix}.markov_w2.weight", Role.MTP_PROJ, (s.vocab, r), StoredDType.BF16, **where),
                      plain(f"{prefix}.confidence_head.proj.weight", Role.MTP_PROJ, (1, s.hidden + r),
                            StoredDType.BF16, **where)]
        blocks.append((*_block(s, prefix, layer, is_mtp=True), *extra))


def hc_head(s: V4Shape, prefix: str, layer: int | None, is_mtp: bool) -> list[Weight]:
    where = {"layer": layer, "is_mtp": is_mtp}
    return [
        plain(f"{prefix}hc_head_fn", Role.HC_HEAD, (s.hc_mult, s.hc_mult * s.hidden), StoredDType.F32, **where),
        plain(f"{prefix}hc_head_base", Role.HC_HEAD, (s.hc_mult,), StoredDType.F32, **where),
        plain(f"{prefix}hc_head_scale", Role.HC_HEAD, (1,), StoredDType.F32, **where),
    ]


def _block(s: V4Shape, prefix: str, layer: int, *, is_mtp: bool) -> list[Weight]:
    """``Block``: attention (with its compressor and indexer), MoE, two norms, hyper-connection mixes."""
    where = {"layer": layer, "is_mtp": is_mtp}
    a = f"{prefix}.attn"
    ratio = s.compress_ratios[layer]
    out = attention_projections(s, a, s.dense, where)
    if ratio:
        out += _compressor(s, f"{a}.compressor", ratio, s.head_dim, where)
        if ratio == 4:
            i = f"{a}.indexer"
            out += [
                linear(f"{i}.wq_b", Role.INDEXER_WQ_B, s.index_heads * s.index_head_dim, s.q_lora_rank, s.dense,
                       **where),
                linear(f"{i}.weights_proj", Role.INDEXER_WEIGHTS_PROJ, s.index_heads, s.hidden, Quant.NONE, **where),
                *_compressor(s, f"{i}.compressor", ratio, s.index_head_dim, where),
            ]
    f = f"{prefix}.ffn"
    out.append(linear(f"{f}.gate", Role.ROUTER_GATE, s.routed_experts, s.hidden, Quant.NONE, **where))
    if layer < s.hash_layers:
        out.append(plain(f"{f}.gate.tid2eid", Role.TID2EID, (s.vocab, s.experts_per_token), StoredDType.I64, **where))
    else:
        out.append(plain(f"{f}.gate.bias", Role.ROUTER_BIAS, (s.routed_experts,), StoredDType.F32, **where))
    if s.routed_experts:
        out += routed_experts(s, f, where)
    return out + block_tail(s, prefix, s.dense, where)


def attention_projections(s: Any, a: str, dense: Quant, where: dict[str, Any]) -> list[Weight]:
    """The attention projections and norms every V4-family layer holds (``a``: its ``.attn`` prefix), owner
    of compressed state or not (DeepSeek-V4.1's readers hold them too)."""
    return [
        plain(f"{a}.attn_sink", Role.ATTN_SINK, (s.heads,), StoredDType.F32, **where),
        linear(f"{a}.wq_a", Role.WQ_A, s.q_lora_rank, s.hidden, dense, **where),
        plain(f"{a}.q_norm.weight", Role.Q_NORM, (s.q_lora_rank,), StoredDType.BF16, **where),
        linear(f"{a}.wq_b", Role.WQ_B, s.heads * s.head_dim, s.q_lora_rank, dense, **where),
        linear(f"{a}.wkv", Role.WKV, s.head_dim, s.hidden, dense, **where),
        plain(f"{a}.kv_norm.weight", Role.KV_NORM, (s.head_dim,), StoredDType.BF16, **where),
        linear(f"{a}.wo_a", Role.WO_A, s.o_groups * s.o_lora_rank, s.heads * s.head_dim // s.o_groups, dense,
               **where),
        linear(f"{a}.wo_b", Role.WO_B, s.hidden, s.o_groups * s.o_lora_rank, dense, **where),
    ]


def routed_experts(s: Any, f: str, where: dict[str, Any]) -> list[Weight]:
    """The routed experts of one MoE layer (``f``: its ``.ffn`` prefix). One entry per linear stands for all
    routed experts (identical shapes); names use the checkpoint's pattern with the expert range in brackets."""
    x = f"{f}.experts.{expert_span(0, s.routed_experts)}"
    ew = {**where, "expert": 0, "copies": s.routed_experts}
    return [
        linear(f"{x}.w1", Role.EXPERT_W13, s.moe_inter, s.hidden, s.experts, **ew),
        linear(f"{x}.w2", Role.EXPERT_W2, s.hidden, s.moe_inter, s.experts, **ew),
        linear(f"{x}.w3", Role.EXPERT_W13, s.moe_inter, s.hidden, s.experts, **ew),
    ]


def block_tail(s: Any, prefix: str, dense: Quant, where: dict[str, Any]) -> list[Weight]:
    """What closes every V4-family block: the shared experts, the two norms and the hyper-connection mixes."""
    out: list[Weight] = []
    shared = s.moe_inter * s.shared_experts
    if shared:
        x = f"{prefix}.ffn.shared_experts"
        out += [
            linear(f"{x}.w1", Role.SHARED_W13, shared, s.hidden, dense, **where),
            linear(f"{x}.w2", Role.SHARED_W2, s.hidden, shared, dense, **where),
            linear(f"{x}.w3", Role.SHARED_W13, shared, s.hidden, dense, **where),
        ]
    mix = (2 + s.hc_mult) * s.hc_mult
    out += [
        plain(f"{prefix}.attn_norm.weight", Role.LAYER_NORM, (s.hidden,), StoredDType.BF16, **where),
        plain(f"{prefix}.ffn_norm.weight", Role.LAYER_NORM, (s.hidden,), StoredDType.BF16, **where),
    ]
    for part in ("attn", "ffn"):
        out += [
            plain(f"{prefix}.hc_{part}_fn", Role.HC, (mix, s.hc_mult * s.hidden), StoredDType.F32, **where),
            plain(f"{prefix}.hc_{part}_base", Role.HC, (mix,), StoredDType.F32, **where),
            plain(f"{prefix}.hc_{part}_scale", Role.HC, (3,), StoredDType.F32, **where),
        ]
    return out


def _compressor(s: V4Shape, prefix: str, ratio: int, dim: int, where: dict[str, Any]) -> list[Weight]:
    coff = 2 if ratio == 4 else 1  # overlapping halves on ratio 4 (Compressor.overlap)
    return [
        plain(f"{prefix}.ape", Role.COMPRESSOR_APE, (ratio, coff * dim), StoredDType.F32, **where),
        linear(f"{prefix}.wkv", Role.COMPRESSOR_LINEAR, coff * dim, s.hidden, Quant.NONE, **where),
        linear(f"{prefix}.wgate", Role.COMPRESSOR_LINEAR, coff * dim, s.hidden, Quant.NONE, **where),
        plain(f"{prefix}.norm.weight", Role.COMPRESSOR_NORM, (dim,), StoredDType.BF16, **where),
    ]
