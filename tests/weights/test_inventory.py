"""The tensor inventory from the config alone equals the published checkpoint totals exactly."""

from __future__ import annotations

from collections import Counter

import pytest

from csa_plan.planner.errors import BadInput
from csa_plan.planner.weights.config import read_model_config
from csa_plan.planner.weights.measured import WeightsSource, model_weights
from csa_plan.planner.weights.registry import ARCHITECTURES, inventory_for
from csa_plan.planner.weights.tensors import Quant, Role, StoredDType

from helpers import ROOT

# Published: the released checkpoints' safetensors headers (tensor count, stored elements, data bytes).
PUBLISHED = {
    "deepseek-v4-flash": (69_187, 158_069_433_298, 159_609_485_896),
    "deepseek-v4-pro": (145_116, 861_608_274_846, None),
}


def inv(ref: str):
    config = read_model_config(ref)
    return inventory_for(config.data, config.source)


@pytest.mark.parametrize("ref", sorted(PUBLISHED))
def test_totals_equal_the_published_checkpoints(ref):
    tensors, elements, nbytes = PUBLISHED[ref]
    inventory = inv(ref)
    assert inventory.tensor_count == tensors
    assert inventory.element_count == elements
    if nbytes is not None:
        assert inventory.nbytes == nbytes


def test_pro_bytes_are_consistent_with_its_shard_files():
    # 64 shards total 864,721,029,744 B; the rest is headers (Flash: 7,663,144 B of headers for 69,187 tensors).
    data = inv("deepseek-v4-pro").nbytes
    headers = 864_721_029_744 - data
    assert 0 < headers and 100 < headers / 145_116 < 125


def test_reference_inference_config_gives_the_same_inventory():
    for name in ("deepseek-v4-flash", "deepseek-v4-pro"):
        a = inv(name)
        b = inv(str(ROOT / "planner" / "presets" / f"{name}.json"))
        assert (a.tensor_count, a.nbytes) == (b.tensor_count, b.nbytes)


def test_structure_follows_the_reference_code():
    inventory = inv("deepseek-v4-flash")
    names = [t.name for w in inventory.weights for t in w.stored_tensors()]
    assert len(names) == len(set(names)) == inventory.tensor_count  # each expert under its own name
    assert "layers.3.ffn.experts.255.w2.weight" in names and len(inventory.weights) < 2_000
    by_layer = Counter(w.layer for w in inventory.weights if w.role is Role.COMPRESSOR_APE)
    ratios = read_model_config("deepseek-v4-flash").data["compress_ratios"]
    for layer, ratio in enumerate(ratios):
        # an attention compressor on ratio 4 and 128, plus the indexer's own on ratio 4; none on ratio 0
        assert by_layer.get(layer, 0) == {0: 0, 4: 2, 128: 1}[ratio]
    assert sum(w.role is Role.TID2EID for w in inventory.weights) == 3
    assert all(w.tensor.dtype is StoredDType.I64 for w in inventory.weights if w.role is Role.TID2EID)
    assert not [n for n in names if n.startswith("mtp.") and ("embed" in n or n.endswith("head.weight"))]
    expert = next(w for w in inventory.weights if w.role is Role.EXPERT_W13)
    assert expert.quant is Quant.FP4_BLOCK32 and expert.tensor.dtype is StoredDType.I8
    assert expert.tensor.shape == (2048, 2048) and expert.scales[0].shape == (2048, 128)
    wo_a = next(w for w in inventory.weights if w.role is Role.WO_A)
    assert wo_a.tensor.dtype is StoredDType.F8_E4M3 and wo_a.scales[0].shape == (64, 32)


def test_logical_parameters_match_the_model_cards():
    """284B / 13B active (Flash) and 1.6T / 49B (Pro): an FP4 byte is two, scales and MTP excluded."""
    def logical(inventory):
        total = 0
        for w in inventory.without_mtp().weights:
            n = w.copies  # an entry stands for its identical routed experts
            for s in w.logical:
                n *= s
            total += n
        return total

    assert round(logical(inv("deepseek-v4-flash")) / 1e9) == 284
    assert round(logical(inv("deepseek-v4-pro")) / 1e11) == 16


def test_without_mtp_drops_exactly_the_mtp_layer():
    inventory = inv("deepseek-v4-pro")
    mtp = [w for w in inventory.weights if w.is_mtp]
    assert {w.layer for w in mtp} == {61}
    assert inventory.without_mtp().nbytes == inventory.nbytes - sum(w.nbytes for w in mtp)


def test_unknown_architecture_is_bad_input():
    with pytest.raises(BadInput, match="no tensor inventory for 'LlamaForCausalLM'"):
        inventory_for({"architectures": ["LlamaForCausalLM"]}, "x.json")
    assert "DeepseekV4ForCausalLM" in ARCHITECTURES


@pytest.mark.parametrize("change, field", [
    ({"compress_ratios": [0, 4]}, "compress_ratios"),
    ({"hidden_size": 4096.0}, "hidden_size"),
    ({"quantization_config": {"quant_method": "awq"}}, "quantization_config"),
    ({"expert_dtype": "int3"}, "expert_dtype"),
])
def test_bad_config_fields_are_named(change, field):
    data = dict(read_model_config("deepseek-v4-flash").data, **change)
    with pytest.raises(BadInput) as err:
        inventory_for(data, "cfg.json")
    assert err.value.field == field


def test_presets_use_the_inventory_and_say_so():
    w = model_weights("deepseek-v4-flash")
    assert w.source is WeightsSource.INVENTORY and w.total_bytes == 159_609_485_896
    assert w.checkpoint is None and "inventory" in w.note
    assert model_weights(str(ROOT / "examples" / "configs" / "refusals" / "UnsupportedRatio.yaml")) is None


@pytest.mark.parametrize("change", [{}, {"num_hash_layers": 0}, {"compress_ratios": None}])
def test_blocks_built_once_per_distinct_layer_equal_blocks_built_per_layer(change):
    """The inventory builds one block per distinct layer (ratio, hash routing) and copies it under each
    layer's names (start-up): the result equals building every layer's block itself."""
    from csa_plan.planner.weights import deepseek_v4

    data = dict(read_model_config("deepseek-v4-flash").data)
    if change.get("compress_ratios", 0) is None:  # another interleaving: every kind, in a new order
        n = data["num_hidden_layers"] + data.get("num_nextn_predict_layers", 0)
        data["compress_ratios"] = [(0, 4, 128, 4)[i % 4] for i in range(n)]
    elif change:
        data.update(change)
    shape = deepseek_v4.read_shape(data, "test")
    per_layer = [w for i in range(shape.num_main)
                 for w in deepseek_v4._block(shape, f"layers.{i}", i, is_mtp=False)]  # noqa: SLF001
    built = [w for w in deepseek_v4.build(data, "test").weights if w.layer is not None and not w.is_mtp]
    assert built == per_layer
    assert [(w.tensor.name, [t.name for t in w.scales], w.layer) for w in built] == \
        [(w.tensor.name, [t.name for t in w.scales], w.layer) for w in per_layer]
