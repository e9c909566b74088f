"""DeepSeek-V4.1-Flash's weights from its config: what the config determines, and the published rest.

The text backbone follows V4's structure (``deepseek_v4.py``: attention, MoE, hyper-connection
mixes, embedding and head), with V4.1's ownership as the checkpoint's tensor counts show it
(DEEPSEEK_V41.md §2): a compressor (``wkv``, plus ``wgate`` on ratio 2; ratio 1 has no gate) and
index keys (``indexer.wk``) on the ``kv_source_layer_ids`` only, an indexer query
(``indexer.wq_b``, ``weights_proj``) on the ``index_source_layer_ids``, the Engram tables
(``engram.embed``, rows x row dim FP8 + one UE8M0 per 32: 264 B per row at 256) on
``engram_layer_ids``, dense linears FP8 with 32x32 UE8M0 blocks, experts FP4. The DSpark draft
layers hold their routed experts (``dspark_n_routed_experts``, V4's expert shape).

What the config does not determine — the vision tower, DSpark's non-expert weights, anything
else the checkpoint stores — is one ``UNATTRIBUTED`` entry: the published checkpoint size
(48 shards, 510,296,708,312 B; DEEPSEEK_V41.md §8) less every inventoried byte, kept whole on
every device (no split assumed), so a budget errs toward less room, never more. The source
line says so, and its size.
"""

from __future__ import annotations

from typing import Any, Mapping

from csa_plan.planner.errors import BadInput
from csa_plan.planner.values import read_int
from csa_plan.planner.weights.deepseek_v4 import (attention_projections, block_tail, hc_head, read_shape,
                                                  routed_experts)
from csa_plan.planner.weights.tensors import (Inventory, Quant, Role, StoredDType, Weight, expert_span, linear,
                                               plain)

ARCHITECTURE = "DeepseekV41ForCausalLM"
PUBLISHED_CHECKPOINT_BYTES = 510_296_708_312  # 48 safetensors shards (aik8s.run V4.1 day-0 report)
SOURCE = ("DeepSeek-V4.1 config and checkpoint tensor counts (DEEPSEEK_V41.md §2); the vision tower and "
          "DSpark's non-expert weights as the rest of the published checkpoint (510,296,708,312 B)")
FP8_BLOCK = 32
ENGRAM_SCALE_BLOCK = 32


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    nested = config.get("text_config")
    if isinstance(nested, dict):
        return {**{k: config[k] for k in ("architectures", "quantization_config") if k in config}, **nested}
    return config


def _ids(t: Mapping[str, Any], source: str, key: str) -> tuple[int, ...]:
    value = t.get(key, [])
    if not isinstance(value, list):
        raise BadInput(source, key, "expected a list of layer ids (needed for the tensor inventory)")
    return tuple(read_int(source, f"{key}[{i}]", v) for i, v in enumerate(value))


def build(config: Mapping[str, Any], source: str) -> Inventory:
    t = dict(text_config(config))
    q = t.get("quantization_config")
    if not isinstance(q, dict) or q.get("quant_method") != "fp8" or q.get("weight_block_size") != [FP8_BLOCK, FP8_BLOCK]:
        raise BadInput(source, "quantization_config", f"only fp8 with {FP8_BLOCK}x{FP8_BLOCK} blocks is inventoried "
                                                      "for DeepseekV41ForCausalLM")
    t["quantization_config"] = {**q, "weight_block_size": [128, 128], "fmt": "e4m3"}  # read_shape's fp8 check
    s = read_shape(t, source)
    dense = Quant.FP8_BLOCK32
    kv_sources = set(_ids(t, source, "kv_source_layer_ids"))
    index_sources = set(_ids(t, source, "index_source_layer_ids"))
    engram = dict(zip(_ids(t, source, "engram_layer_ids"), _ids(t, source, "engram_num_embeddings")))
    engram_dim = read_int(source, "engram_head_dim", t.get("engram_head_dim", 0))
    dspark_experts = read_int(source, "dspark_n_routed_experts", t.get("dspark_n_routed_experts", 0))

    blocks: list[tuple[Weight, ...]] = [(plain("embed.weight", Role.EMBED, (s.vocab, s.hidden), StoredDType.BF16),)]
    layout: list[tuple[int, int | None, str]] = [(0, None, "")]
    built: dict[tuple[object, ...], int] = {}
    for i in range(s.num_main):
        prefix = f"layers.{i}"
        kind = (s.compress_ratios[i], i in kv_sources, i in index_sources, engram.get(i))
        if kind not in built:
            built[kind] = len(blocks)
            blocks.append(tuple(_block(s, dense, prefix, i, i in kv_sources, i in index_sources, engram.get(i),
                                       engram_dim)))
        layout.append((built[kind], i, prefix))
    layout.append((len(blocks), None, ""))
    blocks.append((plain("norm.weight", Role.FINAL_NORM, (s.hidden,), StoredDType.BF16),
                   plain("head.weight", Role.HEAD, (s.vocab, s.hidden), StoredDType.BF16),
                   *hc_head(s, "", None, False)))
    for j in range(s.num_mtp):
        layer = s.num_main + j
        prefix = f"mtp.{j}"  # the checkpoint names the DSpark blocks mtp.{M} (96,085-tensor index)
        where = {"layer": layer, "is_mtp": True}
        layout.append((len(blocks), layer, prefix))
        x = f"{prefix}.ffn.experts.{expert_span(0, dspark_experts)}"
        ew = {**where, "expert": 0, "copies": dspark_experts}
        blocks.append((
            linear(f"{prefix}.ffn.gate", Role.ROUTER_GATE, dspark_experts, s.hidden, Quant.NONE, **where),
            linear(f"{x}.w1", Role.EXPERT_W13, s.moe_inter, s.hidden, s.experts, **ew),
            linear(f"{x}.w2", Role.EXPERT_W2, s.hidden, s.moe_inter, s.experts, **ew),
            linear(f"{x}.w3", Role.EXPERT_W13, s.moe_inter, s.hidden, s.experts, **ew),
        ) if dspark_experts else ())
    dims = (("heads", s.heads), ("o_groups", s.o_groups), ("vocab", s.vocab), ("hidden", s.hidden),
            ("moe_inter", s.moe_inter), ("routed_experts", s.routed_experts))
    inv = Inventory(ARCHITECTURE, SOURCE, tuple(blocks), tuple(layout), s.num_main, s.num_mtp, dims)
    rest = PUBLISHED_CHECKPOINT_BYTES - inv.nbytes
    if rest < 0:  # the config describes more than the published checkpoint holds: not this checkpoint
        raise BadInput(source, "num_hidden_layers", f"the config's weights ({inv.nbytes:,} B) exceed the published "
                       f"DeepSeek-V4.1 checkpoint ({PUBLISHED_CHECKPOINT_BYTES:,} B); give --weights SIZE")
    blocks.append((plain("unattributed", Role.UNATTRIBUTED, (rest,), StoredDType.U8),))
    layout.append((len(blocks) - 1, None, ""))
    return Inventory(ARCHITECTURE, f"{SOURCE}; rest {rest:,} B kept whole on every device", tuple(blocks),
                     tuple(layout), s.num_main, s.num_mtp, dims)


def _block(s, dense: Quant, prefix: str, layer: int, kv_source: bool, index_source: bool, engram_rows: int | None,
           engram_dim: int) -> list[Weight]:
    where = {"layer": layer, "is_mtp": False}
    a = f"{prefix}.attn"
    ratio = s.compress_ratios[layer]
    out = attention_projections(s, a, dense, where)
    if kv_source and ratio:
        c = f"{a}.compressor"
        out += [
            plain(f"{c}.ape", Role.COMPRESSOR_APE, (ratio, s.head_dim), StoredDType.F32, **where),
            linear(f"{c}.wkv", Role.COMPRESSOR_LINEAR, s.head_dim, s.hidden, Quant.NONE, **where),
            *([linear(f"{c}.wgate", Role.COMPRESSOR_LINEAR, s.head_dim, s.hidden, Quant.NONE, **where)]
              if ratio > 1 else []),  # ratio 1 keeps every token: no gate
            plain(f"{c}.norm.weight", Role.COMPRESSOR_NORM, (s.head_dim,), StoredDType.BF16, **where),
            linear(f"{a}.indexer.wk", Role.INDEXER_WK, s.index_head_dim, s.head_dim, Quant.NONE, **where),
            plain(f"{a}.indexer.k_norm.weight", Role.COMPRESSOR_NORM, (s.index_head_dim,), StoredDType.BF16,
                  **where),
        ]
    if index_source and ratio:
        i = f"{a}.indexer"
        out += [
            linear(f"{i}.wq_b", Role.INDEXER_WQ_B, s.index_heads * s.index_head_dim, s.q_lora_rank, dense, **where),
            linear(f"{i}.weights_proj", Role.INDEXER_WEIGHTS_PROJ, s.index_heads, s.hidden, Quant.NONE, **where),
        ]
    if engram_rows:
        e = f"{prefix}.engram.embed"
        out.append(Weight(Role.ENGRAM, (engram_rows, engram_dim), Quant.NONE,
                          _tensor(f"{e}.weight", (engram_rows, engram_dim), StoredDType.F8_E4M3),
                          (_tensor(f"{e}.scale", (engram_rows, engram_dim // ENGRAM_SCALE_BLOCK),
                                   StoredDType.F8_E8M0),), layer=layer))
    f = f"{prefix}.ffn"
    out += [linear(f"{f}.gate", Role.ROUTER_GATE, s.routed_experts, s.hidden, Quant.NONE, **where),
            plain(f"{f}.gate.bias", Role.ROUTER_BIAS, (s.routed_experts,), StoredDType.F32, **where)]
    return out + routed_experts(s, f, where) + block_tail(s, prefix, dense, where)


def _tensor(name: str, shape: tuple[int, ...], dtype: StoredDType):
    from csa_plan.planner.weights.tensors import TensorSpec

    return TensorSpec(name, shape, dtype)
