"""The config dialects the loader accepts beyond the presets, each with an exact answer."""

from __future__ import annotations

import json

import pytest

from csa_plan.planner.descriptor import StateEdge
from csa_plan.planner.errors import BadInput
from csa_plan.planner.loaders.model_files import from_hf_config, from_yaml_spec, load_model
from csa_plan.planner.plan import PlanOptions, plan_model

from helpers import ROOT

PRO_TOTAL = 5_473_376_512  # CONTRACT §2 worked example
INFERENCE_DIR = ROOT / "tests" / "fixtures" / "inference_config_pro"


def test_inference_config_directory_matches_the_preset():
    spec = load_model(str(INFERENCE_DIR), max_seq_len=1 << 20)
    assert (spec.num_main_layers, spec.num_mtp_layers) == (61, 1)
    assert plan_model(spec).per_request_per_device_bytes == PRO_TOTAL
    assert any("MTP" in n for n in spec.notes) and any("--max-seq-len" in n for n in spec.notes)


def test_inference_config_needs_a_max_seq_len():
    with pytest.raises(BadInput, match="max_position_embeddings: missing .or pass --max-seq-len."):
        load_model(str(INFERENCE_DIR))


def test_nested_text_config(tmp_path):
    preset = json.loads((ROOT / "planner" / "presets" / "deepseek-v4-pro.json").read_text())
    wrapped = {"architectures": ["SomeVLM"], "vision_config": {"hidden_size": 1}, "text_config": preset}
    spec = from_hf_config(wrapped, source="config.json", name="vlm")
    assert plan_model(spec).per_request_per_device_bytes == PRO_TOTAL
    assert spec.notes == ("read the language-model config under 'text_config'",)


BASE = {"num_heads": 16, "max_seq_len": 65536, "index_num_heads": 64, "index_head_dim": 128, "index_topk": 512}


def test_yaml_layer_ids_and_defaults_block():
    spec = from_yaml_spec({"defaults": BASE, "layers": [
        {"compression_ratio": 4, "layer_id": 10}, {"compression_ratio": 128, "layer_id": 3},
        {"compression_ratio": 0, "is_mtp": True}]}, source="m.yaml")
    assert [d.layer_id for d in spec.layers] == [10, 3, 2]
    assert [d.is_mtp for d in spec.layers] == [False, False, True]
    assert spec.layers[0].index_topk == 512 and spec.layers[1].index_topk == 0


def test_yaml_duplicate_layer_id():
    with pytest.raises(BadInput, match=r"layers\[1\].layer_id: layer id 0 is also used by layers\[0\]"):
        from_yaml_spec({**BASE, "layers": [{"compression_ratio": 128}, {"compression_ratio": 128, "layer_id": 0}]},
                       source="m.yaml")


@pytest.mark.parametrize("edges,missing", [
    ({"carry": False}, {StateEdge.CARRY}),
    (["compressed", "carry"], {StateEdge.INDEX_KEY, StateEdge.INDEX_CARRY}),
    ({"past_index_key": ""}, {StateEdge.INDEX_KEY}),
    ({18: None}, {StateEdge.INDEX_CARRY}),
    ({"past_compressed_kv": "past_key_values.0.compressed"}, set()),
])
def test_yaml_state_edge_forms(edges, missing):
    spec = from_yaml_spec({**BASE, "layers": [{"compression_ratio": 4, "state_edges": edges}]}, source="m.yaml")
    assert set(StateEdge) - spec.layers[0].present_edges == missing
    refusals = plan_model(spec).refusals
    assert [r.type.value for r in refusals] == (["MissingStateEdge"] if missing else [])


def test_yaml_model_wide_state_edges_and_override():
    spec = from_yaml_spec({**BASE, "state_edges": {"carry": False},
                           "layers": [{"compression_ratio": 128}, {"compression_ratio": 128, "state_edges": {"carry": True}}]},
                          source="m.yaml")
    assert [StateEdge.CARRY in d.present_edges for d in spec.layers] == [False, True]


def test_yaml_unknown_edge_is_bad_input():
    with pytest.raises(BadInput, match="unknown state edge"):
        from_yaml_spec({**BASE, "layers": [{"compression_ratio": 4, "state_edges": {"kv": False}}]}, source="m.yaml")


def test_yaml_max_seq_len_from_the_command_line():
    spec = from_yaml_spec({"num_heads": 8, "layers": [{"compression_ratio": 128}]}, source="m.yaml", max_seq_len=4096)
    assert spec.layers[0].max_seq_len == 4096
    with pytest.raises(BadInput, match="max_seq_len"):
        from_yaml_spec({"num_heads": 8, "layers": [{"compression_ratio": 128}]}, source="m.yaml")
