"""Pipeline stages end to end: the per-stage ledger answer, each engine's per-stage pools (``check --engine
E --pp N``), and a clean refusal wherever only one stage is modelled (compare) — never a crash, never one
stage's pool against every layer."""

from __future__ import annotations

import pickle
import shutil

import pytest

from helpers import EXAMPLES

from csa_plan.planner.errors import BadInput

PRO = ["deepseek-v4-pro", "--device-memory", "h200"]


def test_check_with_stages_gives_the_tightest_stage_answer(csa):
    one = csa("check", *PRO, "--tp", "8", "--json").json()["fit"]  # v2: the one capacity answer
    two = csa("check", *PRO, "--tp", "4", "--pp", "2", "--json")
    assert two.code == 0, two.err
    fit = two.json()["fit"]
    stages = two.json()["budget"]["stages"]
    assert len(stages) == 2 and fit["requests_that_fit"] >= 1
    # each stage holds about half the layers' state: a request costs less per device than at pp 1
    assert fit["per_request_bytes"] < one["per_request_bytes"]
    assert fit["requests_that_fit"] <= min(s["kv_memory_bytes"] for s in stages) // fit["per_request_bytes"]


H20 = ["deepseek-v4-pro", "--gpu", "h20", "--tp", "8", "--pp", "2", "--max-seq-len", "131072"]


def test_vllm_sizes_each_stage_from_its_projected_groups_and_takes_the_smallest(csa):
    """vLLM 0.33 get_kv_cache_configs: each worker's blocks = its memory // bytes per block of the global
    groups projected onto its layers; every worker then takes the smallest count (the scheduler's)."""
    from csa_plan.planner.engines.vllm.kv_cache_utils import KvGroup, bytes_per_block

    r = csa("check", *H20, "--engine", "vllm-0.33", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    pipe = doc["pipeline"]
    budget = {s["stage"]: s for s in doc["budget"]["stages"]}
    for st in pipe["stages"]:
        assert st["kv_memory_bytes"] == budget[st["stage"]]["kv_memory_bytes"]
        assert st["total_units"] == st["kv_memory_bytes"] // st["unit_bytes"]
    # the figures of the must-show deployment (16 x H20, TP 8, PP 2, 131,072 tokens), as vLLM's code computes them
    assert [(s["layers"], s["total_units"], s["unit_bytes"]) for s in pipe["stages"]] == [
        ([0, 30], 43_439, 718_848), ([31, 61], 46_025, 717_120)]
    assert pipe["binding_stage"] == 0 and pipe["scheduler_units"] == 43_439
    assert doc["fit"]["requests_that_fit"] == 4 and "stage 0 binds" in doc["fit"]["source"]
    # the projection: the stage's bytes per block from its own layers' pages, the global groups kept
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.loaders.model_files import load_model

    plan = get_engine("vllm-0.33").configure(load_model("deepseek-v4-pro", max_seq_len=131072),
                                             EngineSettings(gpu="h20"), 131072)
    for st in pipe["stages"]:
        keep = set(range(st["layers"][0], st["layers"][1] + 1))
        projected = [KvGroup(g.index, tuple(x for x in g.specs if x.layer_id in keep)) for g in plan.groups]
        assert st["unit_bytes"] == bytes_per_block([g for g in projected if g.specs]) < plan.block_bytes


def test_sglang_sizes_each_rank_from_the_least_free_memory_and_its_own_layers(csa):
    r = csa("check", *H20, "--engine", "sglang-0.5.23", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    pipe = doc["pipeline"]
    least = min(s["kv_memory_bytes"] for s in doc["budget"]["stages"])
    assert {s["kv_memory_bytes"] for s in pipe["stages"]} == {least}  # get_available_gpu_memory: MIN over GPUs
    assert [(s["layers"], s["total_units"], s["unit_bytes"]) for s in pipe["stages"]] == [
        ([0, 29], 18_369, 670_080), ([30, 61], 15_394, 760_128)]
    assert pipe["binding_stage"] == 1 and pipe["scheduler_units"] == 15_394
    assert any("max_total_num_tokens=3940864" in line for line in pipe["stages"][1]["log_lines"])


def test_check_text_names_every_stage_and_the_binding_one(csa):
    out = " ".join(csa("check", *H20, "--engine", "vllm-0.33").out.split())
    assert "Stage 0 (layers 0-30)" in out and "Stage 1 (layers 31-61)" in out
    assert "Binding stage: 0; the scheduler sees 43,439 blocks" in out
    assert out.count("engine log: GPU KV cache size") == 2


def test_an_engine_with_stages_needs_a_device_and_a_projected_release(csa):
    r = csa("check", "deepseek-v4-pro", "--tp", "4", "--pp", "2", "--engine", "vllm-0.33", "--kv-memory", "30GB")
    assert r.code == 2 and "--pp" in r.err and "--device-memory" in r.err and len(r.err.strip().splitlines()) == 1
    r = csa("check", *PRO, "--tp", "4", "--pp", "2", "--engine", "vllm-0.26")
    assert r.code == 2 and "layer tuples" in r.err and len(r.err.strip().splitlines()) == 1


def test_compare_with_stages_is_one_line_bad_input(csa):
    r = csa("compare", *PRO, "--tp", "4", "--pp", "2")
    assert r.code == 2 and "--pp" in r.err and "check --pp" in r.err


def test_compare_says_why_an_engine_admits_nothing(csa):
    """An engine that refuses its own pool at start-up says so, with its own pool's size — not
    another row's limit beside a smaller per-request figure."""
    doc = csa("compare", *PRO, "--tp", "8", "--json").json()
    rows = {r["profile"]: r for r in doc["profiles"]}
    for name, b in doc["engine_budgets"].items():
        assert rows[name]["limit_bytes"] == b["kv_memory_bytes"]
    refused = [r for r in doc["profiles"] if r["requests_that_fit"] == 0]
    text = csa("compare", *PRO, "--tp", "8").out
    for r in refused:
        if r["pool_refused"]:
            assert f"a pool of {r['limit_bytes']:,} B is refused at start-up" in " ".join(text.split())
    assert text.count("state pool per GPU (") == 1 + len(doc["engine_budgets"])


def test_errors_cross_process_boundaries_intact():
    e = pickle.loads(pickle.dumps(BadInput("spec.yaml", "grid.pp", "too many")))
    assert (e.source, e.field, e.problem, str(e)) == ("spec.yaml", "grid.pp", "too many", "spec.yaml: grid.pp: too many")


def test_sweep_evaluates_engine_points_with_stages(csa, tmp_path):
    """An engine point with pipeline stages is replayed from each stage's pool (serving/pipeline.py), as
    ``simulate --engine --pp`` is, not skipped: both engines' pp 2 points are results of their own."""
    spec = (EXAMPLES / "sweeps" / "engines.yaml").read_text().replace("dp: [1, 2, 4]", "dp: [1]\n  pp: [1, 2]")
    head = (EXAMPLES / "traces" / "azure_conv_sample_200.csv").read_text().splitlines()[:31]  # 30 requests
    (tmp_path / "azure_conv_sample_200.csv").write_text("\n".join(head) + "\n")
    path = tmp_path / "s.yaml"
    path.write_text(spec.replace("../traces/azure_conv_sample_200.csv", "azure_conv_sample_200.csv")
                    .replace("max_scale: 64", "max_scale: 2"))
    r = csa("sweep", str(path), "--jobs", "2", "--json")
    assert r.code in (0, 3), r.err
    doc = r.json()
    assert not [s for s in doc["skipped"]["points"] if "pipeline stage" in s["detail"]]
    staged = {x["key"].split("engine=")[1] for x in doc["results"] if ",pp=2," in x["key"]}
    assert staged == {"vllm-0.33", "sglang-0.5.23"}


def _long_config(tmp_path, layers: int):
    import json

    from helpers import ROOT

    config = json.loads((ROOT / "planner" / "presets" / "deepseek-v4-flash.json").read_text())
    mtp = config.get("num_nextn_predict_layers", 0)
    config["num_hidden_layers"] = layers
    config["compress_ratios"] = ([4, 128] * (layers + mtp))[: layers + mtp]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_an_inventory_past_its_layer_limit_is_bad_input_and_weights_replace_it(csa, tmp_path):
    from csa_plan.planner.limits import MAX_INVENTORY_LAYERS

    model = _long_config(tmp_path, MAX_INVENTORY_LAYERS)  # + 1 MTP layer: one past the limit
    r = csa("check", model, "--device-memory", "h200", "--tp", "8")
    assert r.code == 2 and "MAX_INVENTORY_LAYERS" in r.err and "--weights" in r.err
    r = csa("check", model, "--device-memory", "h200", "--tp", "8", "--weights", "20GiB", "--json")
    assert r.code in (0, 3) and r.json()["budget"]["weights_bytes"] == 20 << 30


@pytest.mark.parametrize("card", ["80GiB", "h200", "24GiB"])
def test_the_search_lower_bound_changes_no_answer(monkeypatch, card):
    """Skipping --tp values the weights cannot fit gives the same smallest deployments as trying each."""
    from csa_plan.planner.budget import device
    from csa_plan.planner.memory import parse_size
    from csa_plan.planner.placement import Placement

    for model, engine in (("deepseek-v4-pro", None), ("deepseek-v4-pro", "vllm-0.33"), ("deepseek-v4-flash", None)):
        req = device.BudgetRequest(model, parse_size(card, "test"), 1 << 16, engine, Placement(tp=1))
        weights = device.model_weights(model)
        pruned = device.smallest_fitting(req, weights)
        with monkeypatch.context() as m:
            m.setattr(device, "_weights_floor_bytes", lambda w: 0)
            assert device.smallest_fitting(req, weights) == pruned
        assert pruned or card == "24GiB"
