"""``simulate --engine sglang-0.5.23``: SGLang's scheduler replayed, through the real entry point; side by side."""

from __future__ import annotations

from helpers import EXAMPLES

MOONCAKE = str(EXAMPLES / "traces" / "mooncake_conversation_head200.jsonl")
SAMPLE = str(EXAMPLES / "traces" / "azure_conv_sample_200.csv")
DEPLOY = ("--model", "deepseek-v4-flash", "--device-memory", "h200", "--tp", "4")
BASE = (*DEPLOY, "--engine", "sglang-0.5.23")


def test_runtime_document(csa):
    r = csa("simulate", MOONCAKE, *BASE, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    rt = doc["runtime"]
    assert rt["headline"].startswith("sglang-0.5.23 (radix cache) would retract")
    assert rt["requests"] == rt["served"] == 200 and rt["prefix_cache"]["enabled"]
    assert rt["prefix_cache"]["hit_tokens"] > 0  # Mooncake's hash_ids share pages
    occ = rt["occupancy"]
    assert occ["unit"] == "page" and len(occ["pools"]) == 2
    full, swa = occ["pools"]
    assert full["usable"] == doc["engine"]["pool"]["total_units"]
    assert 0 < full["peak"] <= full["usable"] and 0 < swa["peak"] <= swa["usable"]
    assert occ["peak_running"] <= 256
    for key in ("queue_wait", "ttft", "e2e"):
        assert rt[key]["count"] == 200 and rt[key]["p50_s"] <= rt[key]["p99_s"] <= rt[key]["max_s"]


def test_disable_radix_cache_shares_nothing(csa):
    r = csa("simulate", MOONCAKE, *BASE, "--disable-radix-cache", "--json")
    assert r.code == 0, r.err
    rt = r.json()["runtime"]
    assert not rt["prefix_cache"]["enabled"] and rt["prefix_cache"]["hit_tokens"] == 0
    assert "--disable-radix-cache" in rt["engine"]


def test_human_output_leads_with_retractions(csa):
    r = csa("simulate", SAMPLE, *BASE, "--max-running-requests", "16")
    assert r.code == 0, r.err
    text = " ".join(r.out.split())  # unwrapped
    assert "would retract" in text[:text.index("engine:")]


def test_side_by_side_one_table(csa):
    r = csa("simulate", SAMPLE, *DEPLOY, "--engine", "vllm-0.33", "--engine", "sglang-0.5.23",
            "--max-running-requests", "32", "--max-num-seqs", "64", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    vllm, sglang = doc["side_by_side"]
    assert vllm["engine"]["name"] == "vllm-0.33" and sglang["engine"]["name"] == "sglang-0.5.23"
    # each engine got the setting it has
    assert {s["option"]: s["value"] for s in vllm["engine"]["settings"]}["--max-num-seqs"] == 64
    assert {s["option"]: s["value"] for s in sglang["engine"]["settings"]}["--max-running-requests"] == 32
    assert vllm["runtime"]["served"] == sglang["runtime"]["served"] == 200
    text = csa("simulate", SAMPLE, *DEPLOY, "--engine", "vllm-0.33", "--engine", "sglang-0.5.23")
    assert text.code == 0 and "side by side" in text.out and "would retract" in text.out and "would preempt" in text.out


def test_side_by_side_refuses_a_reserving_engine(csa):
    r = csa("simulate", SAMPLE, *DEPLOY, "--engine", "sglang-0.5.23", "--engine", "onnx-genai")
    assert r.code == 2 and "step by step" in r.err and "Traceback" not in r.err


def test_reserve_and_policy_are_refused_for_sglang(csa):
    for option, value in (("--reserve", "fit"), ("--policy", "queue")):
        r = csa("simulate", SAMPLE, *BASE, option, value)
        assert r.code == 2 and option in r.err and "reserves nothing per request" in r.err


def test_disable_radix_cache_needs_a_runtime_engine(csa):
    r = csa("simulate", SAMPLE, "--model", "deepseek-v4-flash", "--disable-radix-cache")
    assert r.code == 2 and "--disable-radix-cache" in r.err


def test_side_by_side_says_which_engine_would_not_start(csa):
    r = csa("simulate", SAMPLE, "--model", "deepseek-v4-pro", "--kv-memory", "8GiB", "--tp", "8",
            "--engine", "vllm-0.33", "--engine", "sglang-0.5.23", "--max-running-requests", "64", "--json")
    assert r.code == 3, r.err
    vllm, sglang = r.json()["side_by_side"]
    assert vllm["runtime"] is None and "max seq len" in vllm["engine_refusal"]["message"]
    assert sglang["runtime"]["served"] == 200
