"""Issue 47, class 4: what the engine itself refuses or rewrites is refused or rewritten here too, before
any pool is sized from it (each release's own check, cited in the refusal's rule).

* vLLM's SchedulerConfig raises when max_num_batched_tokens < max_num_seqs (given or defaulted);
* vLLM caps a defaulted max_num_seqs at max_num_batched_tokens (engine/arg_utils.py);
* vLLM raises when --max-cudagraph-capture-size is not the largest of --cudagraph-capture-sizes;
* --kv-memory is a pool in one GPU: never at or above the card's memory."""

from __future__ import annotations

import pytest

BASE = ("check", "deepseek-v4-flash", "--device-memory", "h200", "--tp", "2", "--brief")
VLLM = ("vllm-0.33", "vllm-0.26", "vllm-0.25")


def refused(r, setting: str, *needles: str) -> None:
    assert r.code == 3, (r.code, r.out, r.err)
    text = " ".join((r.out + r.err).split())
    assert f"({setting})" in text and "config/" in text, text
    for n in needles:
        assert n in text, text


@pytest.mark.parametrize("engine", VLLM)
@pytest.mark.parametrize("tokens, seqs", [(64, 128), (1, 2), (255, 256)])
def test_batched_tokens_below_max_num_seqs_is_the_engines_refusal(csa, engine, tokens, seqs):
    r = csa(*BASE, "--engine", engine, "--max-num-batched-tokens", str(tokens), "--max-num-seqs", str(seqs))
    refused(r, "--max-num-batched-tokens", f"max_num_batched_tokens ({tokens}) must be greater than or equal to "
                                           f"max_num_seqs ({seqs})", "SchedulerConfig")


@pytest.mark.parametrize("engine", VLLM)
@pytest.mark.parametrize("tokens", [8, 64, 100])
def test_a_defaulted_max_num_seqs_is_capped_by_batched_tokens(csa, engine, tokens):
    d = csa(*BASE[:-1], "--engine", engine, "--max-num-batched-tokens", str(tokens), "--json").json()
    (seqs,) = [s for s in d["engine"]["settings"] if s["option"] == "--max-num-seqs"]
    assert seqs["value"] == tokens and "capped at max_num_batched_tokens" in seqs["source"]
    steps = d["budget"]["resolved_settings"] if d.get("budget") else {}
    assert "max_num_seqs" not in steps or steps["max_num_seqs"]["value"] <= tokens


@pytest.mark.parametrize("engine", VLLM)
@pytest.mark.parametrize("sizes, top", [("1,2,4,8", "16"), ("8,16,32", "8"), ("512", "256")])
def test_capture_sizes_must_end_at_the_max_capture_size(csa, engine, sizes, top):
    r = csa(*BASE, "--engine", engine, "--cudagraph-capture-sizes", sizes, "--max-cudagraph-capture-size", top)
    refused(r, "--max-cudagraph-capture-size", "should be consistent with the max value of cudagraph_capture_sizes")
    ok = csa(*BASE, "--engine", engine, "--cudagraph-capture-sizes", sizes,
             "--max-cudagraph-capture-size", str(max(int(s) for s in sizes.split(","))))
    assert ok.code in (0, 3) and "should be consistent" not in ok.out + ok.err


@pytest.mark.parametrize("engine", ("vllm-0.33", "sglang-0.5.23"))
@pytest.mark.parametrize("where", [("--device-memory", "h200"), ("--gpu", "h200"), ("--device-memory", "80GiB")])
def test_kv_memory_at_or_above_the_card_is_bad_input(csa, engine, where):
    r = csa("check", "deepseek-v4-flash", "--engine", engine, *where, "--kv-memory", "931GiB")
    assert r.code == 2 and "--kv-memory" in r.err and "one GPU" in r.err and len(r.err.splitlines()) == 1, r.err


@pytest.mark.parametrize("args", [("--max-num-batched-tokens", "64", "--max-num-seqs", "128"),
                                  ("--cudagraph-capture-sizes", "1,2,4,8", "--max-cudagraph-capture-size", "16")])
def test_no_budget_is_sized_from_arguments_the_engine_refuses(csa, args):
    d = csa(*BASE[:-1], "--engine", "vllm-0.33", *args, "--json").json()
    assert d["budget"] is None and any(r["type"] == "EngineRefused" for r in d["all_refusals"])
