"""``simulate --engine vllm-0.33``: the runtime replay through the CLI (document, refusals, options)."""

from __future__ import annotations

import json

import pytest

TRACE = "examples/traces/mooncake_conversation_head200.jsonl"
BASE = ("simulate", TRACE, "--model", "deepseek-v4-flash", "--device-memory", "h200", "--tp", "4",
        "--engine", "vllm-0.33")


@pytest.mark.parametrize("option", [("--reserve", "fit"), ("--policy", "queue"), ("--bucket", "4096"),
                                    ("--verify",)])
def test_reservation_options_refused_with_the_reason(csa, option):
    r = csa(*BASE, *option)
    assert r.code == 2
    assert option[0] in r.err and "reserves nothing per request" in r.err or "ledger replay" in r.err
    assert "Traceback" not in r.err


def test_prefix_caching_option_needs_a_runtime_engine(csa):
    r = csa("simulate", TRACE, "--model", "deepseek-v4-flash", "--no-enable-prefix-caching")
    assert r.code == 2 and "--no-enable-prefix-caching" in r.err


def test_runtime_document_and_text(csa):
    r = csa(*BASE, "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    rt = doc["runtime"]
    assert rt["engine"] == "vLLM 0.33.0" and rt["headline"].startswith("vLLM 0.33.0 would preempt")
    assert rt["requests"] == rt["served"] == 200 and rt["prefix_cache"]["enabled"]
    assert rt["prefix_cache"]["hit_tokens"] > 0  # Mooncake's shared ids
    assert 0 < rt["occupancy"]["peak_units"] <= rt["occupancy"]["usable_units"]
    assert doc["reserve"] is None and doc["policy"] is None
    off = json.loads(csa(*BASE, "--json", "--no-enable-prefix-caching").out)["runtime"]
    assert off["prefix_cache"]["hit_tokens"] == 0 and not off["prefix_cache"]["enabled"]
    text = csa(*BASE)
    assert text.code == 0 and "would preempt" in text.out[:text.out.index("engine:")]  # the first lines


def test_find_capacity_uses_the_same_replay(csa):
    args = ("simulate", "examples/traces/azure_conv_sample_200.csv", "--model", "deepseek-v4-flash", "--kv-memory",
            "8GiB", "--max-seq-len", "65536", "--engine", "vllm-0.33", "--find-capacity")
    assert csa(*args).code == 2  # the engine queues: a wait bound is the capacity criterion
    doc = json.loads(csa(*args, "--max-wait", "1", "--json").out)
    cap = doc["capacity"]
    assert cap["max_wait_s"] == 1 and cap["rate_scale"] > 0
    assert doc["time"]["rate_scale"] == cap["rate_scale"] and doc["runtime"]["queue_wait"]["p99_s"] <= 1


def test_data_parallel_replicas_split_round_robin(csa):
    one = json.loads(csa(*BASE, "--json").out)["runtime"]
    two = json.loads(csa(*BASE[:-2], "--dp", "2", "--engine", "vllm-0.33", "--json").out)["runtime"]
    assert two["served"] == one["served"] == 200
    assert two["occupancy"]["usable_units"] > one["occupancy"]["usable_units"]
    assert csa(*BASE, "--dp", "2", "--router", "least-loaded").code == 2


def test_mtp_runs_with_prefix_caching_on_by_default(csa):
    """vLLM's default for DeepSeek-V4 MTP: prefix caching on, lookahead block hashes (no refusal)."""
    r = csa(*BASE, "--num-speculative-tokens", "2", "--json")
    assert r.code == 0, r.err
    rt = json.loads(r.out)["runtime"]
    assert rt["prefix_cache"]["enabled"] and rt["prefix_cache"]["hit_tokens"] > 0
    assert rt["requests"] == rt["served"] == 200
    assert any("MTP lookahead" in n for n in rt["modelled"])
    off = json.loads(csa(*BASE, "--num-speculative-tokens", "2", "--json", "--no-enable-prefix-caching").out)
    assert off["runtime"]["prefix_cache"]["hit_tokens"] == 0
