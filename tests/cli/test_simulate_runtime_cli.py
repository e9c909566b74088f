"""``simulate --engine sglang-0.5.23``: SGLang's scheduler replayed, through the real entry point."""

from __future__ import annotations

from helpers import EXAMPLES

MOONCAKE = str(EXAMPLES / "traces" / "mooncake_conversation_head200.jsonl")
SAMPLE = str(EXAMPLES / "traces" / "azure_conv_sample_200.csv")
BASE = ("--model", "deepseek-v4-flash", "--device-memory", "h200", "--tp", "4", "--engine", "sglang-0.5.23")


def test_runtime_report_json(csa):
    r = csa("simulate", MOONCAKE, *BASE, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["schema"] == "csa-plan/simulate-runtime/v1"
    (run,) = doc["runs"]
    assert run["engine"]["release"] == "SGLang 0.5.23" and run["engine"]["preemption_word"] == "retract"
    assert run["finished"] == 200 and run["refused"] == 0
    assert run["prefix_cache"]["hit_tokens"] > 0  # Mooncake's hash_ids share pages
    full, swa = run["pools"]
    assert full["usable_units"] == run["engine"]["pool"]["total_units"]
    assert 0 < full["peak_units"] <= full["usable_units"] and 0 < swa["peak_units"] <= swa["usable_units"]
    assert run["running"]["max"] <= 256 and len(run["series"]["end_s"]) <= 60
    for key in ("queue_wait", "ttft", "e2e"):
        assert run[key]["count"] == 200 and run[key]["p50_s"] <= run[key]["p99_s"] <= run[key]["max_s"]


def test_disable_radix_cache_shares_nothing(csa):
    r = csa("simulate", MOONCAKE, *BASE, "--disable-radix-cache", "--json")
    assert r.code == 0, r.err
    (run,) = r.json()["runs"]
    assert run["prefix_caching"] is False and run["prefix_cache"]["hit_tokens"] == 0
    assert "--disable-radix-cache" in run["engine"]["label"]


def test_human_output_leads_with_retractions(csa):
    r = csa("simulate", SAMPLE, *BASE, "--max-running-requests", "16")
    assert r.code == 0, r.err
    text = " ".join(r.out.split())  # unwrapped
    head = text[:text.index("time model")]
    assert "sglang-0.5.23 (radix cache) would retract" in head and "recomputed" in head


def test_side_by_side_gives_each_engine_its_settings(csa):
    r = csa("simulate", SAMPLE, "--model", "deepseek-v4-flash", "--device-memory", "h200", "--tp", "4",
            "--engine", "sglang-0.5.23", "--engine", "sglang-0.5.23", "--max-running-requests", "8", "--json")
    assert r.code == 0, r.err
    runs = r.json()["runs"]
    assert len(runs) == 2 and runs[0]["finished"] == runs[1]["finished"] == 200


def test_reserve_and_policy_are_refused_for_a_runtime_engine(csa):
    for option, value in (("--reserve", "fit"), ("--policy", "queue")):
        r = csa("simulate", SAMPLE, *BASE, option, value)
        assert r.code == 2 and option in r.err and "step by step" in r.err


def test_disable_radix_cache_needs_a_runtime_engine(csa):
    r = csa("simulate", SAMPLE, "--model", "deepseek-v4-flash", "--disable-radix-cache")
    assert r.code == 2 and "--disable-radix-cache" in r.err


def test_runtime_needs_a_pool(csa):
    r = csa("simulate", SAMPLE, "--model", "deepseek-v4-flash", "--engine", "sglang-0.5.23")
    assert r.code == 2 and "--device-memory" in r.err
