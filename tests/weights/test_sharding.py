"""Per-device weights under TP, EP, PP and DP attention, against a closed-form count written here
from each engine's sharding rules (ENGINES.md §2 and the release code), not from the inventory."""

from __future__ import annotations

import json

import pytest

from csa_plan.planner.errors import BadInput
from csa_plan.planner.placement import Placement
from csa_plan.planner.weights.config import read_model_config
from csa_plan.planner.weights.registry import inventory_for
from csa_plan.planner.weights.rules import RULES
from csa_plan.planner.weights.sharding import Part, shard

from helpers import ROOT


def cfg(name):
    return json.loads((ROOT / "planner" / "presets" / f"{name}.json").read_text())


def cdiv(a, b):
    return -(-a // b)


def fp8(o, i, scale_b):
    return o * i + cdiv(o, 128) * cdiv(i, 128) * scale_b


def fp4(o, i):
    return o * i // 2 + o * i // 32


def expected(name, engine, tp=1, dp=1, pp=1, ep=None, mtp=False):
    """Bytes per device for each pipeline stage, by the engine's rules, from the config numbers."""
    c = cfg(name)
    D, H, hd, q = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["q_lora_rank"]
    G, R, E, I, V = c["o_groups"], c["o_lora_rank"], c["n_routed_experts"], c["moe_intermediate_size"], c["vocab_size"]
    ih, ihd, k, hc = c["index_n_heads"], c["index_head_dim"], c["num_experts_per_tok"], c["hc_mult"]
    L, ratios = c["num_hidden_layers"], c["compress_ratios"]
    world = tp * dp
    vllm = engine == "vllm-0.33"
    sb = 1 if vllm else 4                        # FP8 block scales: e8m0 in vLLM, fp32 in SGLang
    if vllm:
        ep_on = ep == world and world > 1
        moe_ep, moe_tp = (world, 1) if ep_on else (1, world)
        sp = pp == 1 and ep_on and tp > 1 and dp > 1
        shared_tp = 1 if sp else tp
        embed_split, head_split = tp, tp
        sink_heads = 64 if H // tp <= 64 else 128
        norm_b = 2
    else:
        moe_ep = ep or 1
        moe_tp = world // moe_ep
        shared_tp = world
        embed_split = 1 if dp > 1 else world
        head_split = world
        sink_heads = H
        norm_b = 4                                # compressor norm kept fp32
    local_e = E // moe_ep

    def layer(l):
        r = ratios[l]
        b = sink_heads * 4 + fp8(q, D, sb) + fp8(hd, D, sb) + q * 2 + hd * 2
        b += fp8(H * hd // tp, q, sb) + fp8(G * R // tp, H * hd // G, sb) + fp8(D, G * R // tp, sb)
        if r:
            coff = 2 if r == 4 else 1
            b += r * coff * hd * 4 + 2 * coff * hd * D * 2 + hd * norm_b
        if r == 4:
            b += fp8(ih * ihd, q, sb) + ih * D * 2 + 4 * 2 * ihd * 4 + 2 * 2 * ihd * D * 2 + ihd * norm_b
        b += E * D * 2 + (V * k * 4 if l < c["num_hash_layers"] else E * 4)
        b += local_e * (2 * fp4(I // moe_tp, D) + fp4(D, I // moe_tp))
        inter = I
        if vllm and shared_tp > 1:
            inter = cdiv(I // 128, shared_tp) * 128 * shared_tp
        b += 2 * fp8(inter // shared_tp, D, sb) + fp8(D, inter // shared_tp, sb)
        mix = (2 + hc) * hc
        b += 2 * D * 2 + 2 * (mix * hc * D * 4 + mix * 4 + 3 * 4)
        return b

    if vllm:
        counts = [L // pp] * pp
        for i in range(2, L % pp + 2):
            counts[-i] += 1
    else:
        counts = [L // pp + (1 if s >= pp - L % pp else 0) for s in range(pp)]
    out, start = [], 0
    hc_head = (hc * hc * D + hc + 1) * 4
    for s, n in enumerate(counts):
        b = sum(layer(l) for l in range(start, start + n))
        start += n
        if s == 0:
            b += V * D * 2 // embed_split
        if s == pp - 1:
            b += V * D * 2 // head_split + D * 2 + hc_head
            if mtp:
                b += layer(L) + 2 * fp8(D, D, sb) + 3 * D * 2 + hc_head
                if vllm and pp > 1:
                    b += V * D * 2 // embed_split   # the drafter's own embedding when pp > 1
        elif vllm:
            b += hc_head                            # hc_head on every vLLM stage
        out.append(b)
    return out


CASES = [
    ("deepseek-v4-pro", "vllm-0.33", dict(tp=8)),
    ("deepseek-v4-pro", "vllm-0.33", dict(tp=8, ep=8)),
    ("deepseek-v4-pro", "vllm-0.33", dict(tp=2, dp=4, ep=8)),        # DP attention, EP, shared experts replicated
    ("deepseek-v4-pro", "vllm-0.33", dict(tp=4, pp=2)),
    ("deepseek-v4-pro", "vllm-0.33", dict(tp=16)),                   # shared experts padded to whole blocks
    ("deepseek-v4-flash", "vllm-0.33", dict(tp=4, pp=3, mtp=True)),
    ("deepseek-v4-flash", "vllm-0.33", dict(tp=1, dp=8, ep=8)),
    ("deepseek-v4-flash", "vllm-0.33", dict(tp=2, mtp=True)),
    ("deepseek-v4-pro", "sglang-0.5.23", dict(tp=8)),
    ("deepseek-v4-pro", "sglang-0.5.23", dict(tp=8, ep=8)),
    ("deepseek-v4-pro", "sglang-0.5.23", dict(tp=1, dp=8, ep=8)),   # DP attention: embedding replicated
    ("deepseek-v4-flash", "sglang-0.5.23", dict(tp=2, pp=3, mtp=True)),
    ("deepseek-v4-flash", "sglang-0.5.23", dict(tp=4, dp=2, ep=2)),
]


@pytest.mark.parametrize("name, engine, kw", CASES)
def test_per_device_bytes_follow_the_engine_rules(name, engine, kw):
    config = read_model_config(name)
    inventory = inventory_for(config.data, config.source)
    mtp = kw.pop("mtp", False)
    placement = Placement(**kw)
    got = shard(inventory, RULES[engine], placement, mtp=mtp)
    assert [s.nbytes for s in got.stages] == expected(name, engine, mtp=mtp, **kw)
    assert got.all_devices_bytes == sum(s.nbytes * s.devices for s in got.stages)
    assert all(sum(b for _, b in s.by_part) == s.nbytes for s in got.stages)


def test_tp1_holds_the_whole_checkpoint_but_engine_dtypes():
    """At TP 1 every weight is local: the checkpoint bytes, up to what the engines change at load."""
    config = read_model_config("deepseek-v4-flash")
    inventory = inventory_for(config.data, config.source)
    got = shard(inventory, RULES["reference"], Placement(tp=1), mtp=True)
    assert got.stages[0].nbytes == inventory.nbytes  # reference rules keep the stored dtypes
    vllm = shard(inventory, RULES["vllm-0.33"], Placement(tp=1), mtp=True).stages[0].nbytes
    tid2eid = 3 * 129280 * 6 * 4                    # I64 -> int32 in the three hash layers
    assert vllm == inventory.nbytes - tid2eid


def test_mtp_off_drops_the_mtp_layer_and_parts_add_up():
    config = read_model_config("deepseek-v4-pro")
    inventory = inventory_for(config.data, config.source)
    on = shard(inventory, RULES["vllm-0.33"], Placement(tp=8), mtp=True).stages[0]
    off = shard(inventory, RULES["vllm-0.33"], Placement(tp=8), mtp=False).stages[0]
    assert dict(on.by_part)[Part.MTP] == on.nbytes - off.nbytes > 0 and Part.MTP not in dict(off.by_part)
    assert 61 in on.layers and 61 not in off.layers


@pytest.mark.parametrize("engine, kw, needle", [
    ("vllm-0.33", dict(tp=3), "128 attention heads do not split over 3"),
    ("vllm-0.33", dict(tp=4, dp=2, ep=4), "--ep is 1 or tp x dp = 8"),
    ("sglang-0.5.23", dict(tp=4, ep=3), "does not divide tp x dp = 4"),
    ("sglang-0.5.23", dict(tp=16), "multiple of 128 intermediate columns"),
    ("reference", dict(tp=8, ep=4), "--ep is --tp"),
    ("vllm-0.33", dict(tp=8, pp=70), "every stage needs one"),
])
def test_deployments_an_engine_refuses_are_bad_input_naming_its_rule(engine, kw, needle):
    config = read_model_config("deepseek-v4-pro")
    inventory = inventory_for(config.data, config.source)
    with pytest.raises(BadInput, match=needle):
        shard(inventory, RULES[engine], Placement(**kw), mtp=False)
