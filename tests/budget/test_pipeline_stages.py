"""Pipeline stages end to end: the per-stage ledger answer, and a clean refusal wherever only one
stage is modelled (engines, compare) — never a crash, never one stage's pool against every layer."""

from __future__ import annotations

import pickle
import shutil

from helpers import EXAMPLES

from csa_plan.planner.errors import BadInput

PRO = ["deepseek-v4-pro", "--device-memory", "h200"]


def test_check_with_stages_gives_the_tightest_stage_answer(csa):
    one = csa("check", *PRO, "--tp", "8", "--json").json()["budget"]
    two = csa("check", *PRO, "--tp", "4", "--pp", "2", "--json")
    assert two.code == 0, two.err
    fit = two.json()["budget"]["requests_that_fit"]
    stages = two.json()["budget"]["stages"]
    assert len(stages) == 2 and fit["count"] >= 1
    # each stage holds about half the layers' state: a request costs less per device than at pp 1
    assert fit["per_request_bytes"] < one["requests_that_fit"]["per_request_bytes"]
    assert fit["count"] <= min(s["kv_memory_bytes"] for s in stages) // fit["per_request_bytes"]


def test_an_engine_with_stages_is_one_line_bad_input(csa):
    for engine in ("vllm-0.33", "sglang-0.5.23"):
        r = csa("check", *PRO, "--tp", "4", "--pp", "2", "--engine", engine)
        assert r.code == 2 and "--pp" in r.err and "one stage" in r.err and len(r.err.strip().splitlines()) == 1


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


def test_sweep_skips_engine_points_with_stages_in_a_worker_pool(csa, tmp_path):
    spec = (EXAMPLES / "sweeps" / "engines.yaml").read_text().replace("dp: [1, 2, 4]", "dp: [1]\n  pp: [1, 2]")
    shutil.copy(EXAMPLES / "traces" / "azure_conv_sample_200.csv", tmp_path / "azure_conv_sample_200.csv")
    path = tmp_path / "s.yaml"
    path.write_text(spec.replace("../traces/azure_conv_sample_200.csv", "azure_conv_sample_200.csv"))
    r = csa("sweep", str(path), "--jobs", "2", "--json")
    assert r.code in (0, 3), r.err
    skipped = [s for s in r.json()["skipped"]["points"] if "pipeline stage" in s["detail"]]
    assert {s["key"].split("engine=")[1] for s in skipped} == {"vllm-0.33", "sglang-0.5.23"}
    assert all(s["reason"] == "BadDeployment" and "pp=2" in s["key"] for s in skipped)
