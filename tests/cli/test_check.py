"""`csa-plan check` end to end: JSON schema, exit codes, memory answers."""

from __future__ import annotations

import pytest

from helpers import EXAMPLES

H200 = 143771 << 20


def test_json_schema_and_exact_totals(csa):
    r = csa("check", "deepseek-v4-pro", "--json")
    assert r.code == 0
    doc = r.json()
    assert doc["schema"] == "csa-plan/check/v2"
    assert doc["verdict"] == "admitted" and doc["exit_code"] == 0
    assert doc["counts"] == {"csa": 30, "hca": 31, "swa": 1, "unsupported": 0}
    assert doc["totals"]["per_request_per_device"]["total"] == 5_473_376_512
    assert doc["options"]["max_seq_len"] == 1_048_576
    kinds = {(g["kind"], g["is_mtp"]): g for g in doc["groups"]}
    assert kinds[("CSA", False)]["count"] == 30
    assert kinds[("CSA", False)]["bytes_per_group"]["total"] == 172_487_552
    assert kinds[("HCA", False)]["bytes_all"]["total"] == 31 * 9_634_688
    assert kinds[("SWA", True)]["layer_ids"] == [61]
    assert len(doc["layers"]) == 62
    assert doc["layers"][2]["descriptor"]["index_topk"] == 1024


def test_c1_gate_exit_3_with_all_fields(csa):
    r = csa("check", "deepseek-v4-pro", "--gate", "c1", "--json")
    assert r.code == 3
    doc = r.json()
    assert len(doc["refusals"]) == 30
    assert doc["refusals"][0] == {
        "type": "UnsupportedC1Ratio", "layer": 2, "field": "compression_ratio", "expected": "128", "actual": "4",
        "message": "layer 2: UnsupportedC1Ratio: ratio 4 (CSA) is op-supported but outside the C1 runtime slice",
    }
    assert doc["totals"]["refused_layers_excluded"] == list(range(2, 61, 2))


def test_tp_and_batch_in_json(csa):
    doc = csa("check", "deepseek-v4-flash", "--tp", "8", "--batch", "2", "--json").json()
    assert doc["options"]["tp"] == 8 and doc["options"]["batch"] == 2
    per = doc["totals"]["per_request_per_device"]["total"]
    assert doc["totals"]["per_request_all_devices_bytes"] == 8 * per


def test_memory_fit_and_longest_context(csa):
    doc = csa("check", "deepseek-v4-pro", "--device-memory", "h200", "--weights", "0", "--reserved", "100GiB",
              "--json").json()
    mem = doc["fit"]  # v2: one capacity answer (v1's "memory" is gone, issue 23)
    limit = H200 - 100 * (1 << 30)
    assert mem["kv_memory_bytes"] == limit and mem["authority"] == "layout: exact"
    assert mem["requests_that_fit"] == limit // 5_473_376_512
    assert mem["fits"] is True and mem["longest_context"] == 1_048_576


def test_does_not_fit_says_what_would(csa):
    r = csa("check", "deepseek-v4-pro", "--device-memory", "80GiB", "--weights", "0", "--reserved", "78GiB", "--json")
    assert r.code == 3
    mem = r.json()["fit"]
    assert mem["fits"] is False and mem["requests_that_fit"] == 0
    limit = 2 * (1 << 30)
    longest = mem["longest_context"]
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.plan import PlanOptions, plan_model

    spec = load_model("deepseek-v4-pro")
    assert plan_model(spec, PlanOptions(max_seq_len=longest)).per_request_per_device_bytes <= limit
    assert plan_model(spec, PlanOptions(max_seq_len=longest + 1)).per_request_per_device_bytes > limit
    text = csa("check", "deepseek-v4-pro", "--device-memory", "80GiB", "--weights", "0", "--reserved", "78GiB")
    assert "DOES NOT FIT" in text.out and f"longest max_seq_len for 1 is {longest:,}" in text.out


def test_concurrency_inverse_question(csa):
    doc = csa("check", "deepseek-v4-flash", "--device-memory", "141GB", "--weights", "0", "--concurrency", "64",
              "--json").json()
    n = doc["fit"]["longest_context"]
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.plan import PlanOptions, plan_model

    spec = load_model("deepseek-v4-flash")
    assert 64 * plan_model(spec, PlanOptions(max_seq_len=n)).per_request_per_device_bytes <= 141 * 10**9
    if n < 1 << 20:
        assert 64 * plan_model(spec, PlanOptions(max_seq_len=n + 1)).per_request_per_device_bytes > 141 * 10**9


def test_table_output_mentions_groups_and_totals(csa):
    r = csa("check", "deepseek-v4-pro")
    assert r.code == 0
    assert "30 CSA, 31 HCA, 1 SWA-only" in r.out
    assert "5,473,376,512" in r.out and "ADMITTED" in r.out


def test_per_layer_lists_every_layer(csa):
    r = csa("check", str(EXAMPLES / "configs" / "tiny-interleaved.yaml"), "--per-layer")
    assert r.code == 0
    for layer in range(6):
        assert f"\n│ {layer:>5} │" in r.out or f"│     {layer} │" in r.out


def test_refusal_table_output(csa):
    r = csa("check", str(EXAMPLES / "configs" / "refusals" / "MissingStateEdge.yaml"))
    assert r.code == 3
    assert "MissingStateEdge" in r.out and "REFUSED" in r.out


def test_yaml_query_len_changes_scratch_only(csa):
    one = csa("check", "deepseek-v4-pro", "--json").json()["totals"]["per_request_per_device"]
    many = csa("check", "deepseek-v4-pro", "--query-len", "4", "--json").json()["totals"]["per_request_per_device"]
    assert many["compressed"] == one["compressed"] and many["scratch"] > one["scratch"]


def test_kv_format_override_is_gated(csa):
    r = csa("check", "deepseek-v4-pro", "--kv-format", "f32", "--json")
    assert r.code == 3
    assert {x["type"] for x in r.json()["refusals"]} == {"Ratio4RequiresFp8Cache"}


def test_hf_directory_and_file(csa, tmp_path):
    import shutil

    from csa_plan.planner.loaders.model_files import PRESETS
    from importlib import resources

    src = resources.files("csa_plan.planner.presets").joinpath(PRESETS["deepseek-v4-flash"])
    (tmp_path / "config.json").write_text(src.read_text())
    by_dir = csa("check", str(tmp_path), "--json").json()
    by_file = csa("check", str(tmp_path / "config.json"), "--json").json()
    preset = csa("check", "deepseek-v4-flash", "--json").json()
    assert by_dir["totals"] == by_file["totals"] == preset["totals"]


def test_help_lists_exit_codes(csa):
    r = csa("check", "--help")
    assert r.code == 0 and "Exit codes" in r.out and "bad input" in r.out
    top = csa("--help")
    assert "check" in top.out and "Exit codes" in top.out
