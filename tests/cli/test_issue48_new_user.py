"""What a new user still tripped over (issue 48): each test is one item, as the user saw it before and
as it reads now."""

from __future__ import annotations

import pytest

FLASH = ("check", "deepseek-v4-flash", "--device-memory", "h200")


def _deployment(r) -> str:
    return next(line for line in r.out.splitlines() if line.startswith("Deployment:"))


# -- item 2: the engines' own flag spellings ----------------------------------------------------------

@pytest.mark.parametrize("spelled", [("--tensor-parallel-size", "4"), ("-tp", "4"), ("-tp=4",)])
def test_vllm_tensor_parallel_spellings_are_tp(csa, spelled):
    """Before: `--tensor-parallel-size 4` -> "Did you mean '--page-size'?"; `-tp 4` -> "No such option '-t'"."""
    r = csa(*FLASH, "--engine", "vllm-0.33", *spelled, "--brief")
    assert r.code == 0, r.err
    assert _deployment(r).startswith("Deployment: tp 4 pp 1 dp 1 ep 1: 4 x h200")
    assert _deployment(r) == _deployment(csa(*FLASH, "--engine", "vllm-0.33", "--tp", "4", "--brief"))


def test_vllm_expert_parallel_switch_is_ep_over_every_gpu(csa):
    """Before: `--enable-expert-parallel` -> "Did you mean '--shared-expert-tp1'?"."""
    for switch in ("--enable-expert-parallel", "-ep"):
        r = csa(*FLASH, "--engine", "vllm-0.33", "-tp", "4", "-dp", "2", switch, "--brief")
        assert r.code == 0, r.err
        assert _deployment(r).startswith("Deployment: tp 4 pp 1 dp 2 ep 8: 8 x h200")
        assert "note: --enable-expert-parallel read as --ep 8 (tp x dp)" in r.err


def test_sglang_dp_attention_is_read_as_sglang_means_it(csa):
    r = csa(*FLASH, "--engine", "sglang-0.5.23", "--tp-size", "8", "--dp-size", "8", "--enable-dp-attention",
            "--brief")
    assert r.code == 0, r.err
    assert _deployment(r).startswith("Deployment: tp 1 pp 1 dp 8 ep 1: 8 x h200")
    assert "read as --tp 1 --dp 8 (8 GPUs)" in r.err
    ep = csa(*FLASH, "--engine", "sglang-0.5.23", "--tp-size", "8", "--ep-size", "8", "--brief")
    assert ep.code == 0 and _deployment(ep).startswith("Deployment: tp 8 pp 1 dp 1 ep 8")


@pytest.mark.parametrize("engine, words, said", [
    ("sglang-0.5.23", ("-tp", "8"), "-tp: is vLLM's spelling; sglang-0.5.23 spells it --tp-size"),
    ("sglang-0.5.23", ("--enable-expert-parallel",), "sglang-0.5.23 spells it --ep-size N"),
    ("vllm-0.33", ("--tp-size", "8"), "--tp-size: is SGLang's spelling; vllm-0.33 spells it --tensor-parallel-size"),
    ("vllm-0.33", ("--enable-dp-attention",), "data-parallel attention already: --data-parallel-size"),
    ("sglang-0.5.23", ("--tp-size", "8", "--dp-size", "2"), "2 without --enable-dp-attention runs 2 separate"),
    ("sglang-0.5.23", ("--tp", "8", "--dp", "8", "--enable-dp-attention"), "SGLang reads --tp as --tp-size"),
    ("vllm-0.33", ("--tp", "8", "-tp", "4"), "given twice with different values: --tp 8 and -tp 4"),
])
def test_another_engines_spelling_names_this_engines(csa, engine, words, said):
    r = csa(*FLASH, "--engine", engine, *words, "--brief")
    assert r.code == 2 and said in r.err, r.err
    assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err


def test_an_engine_spelling_without_an_engine_says_what_to_write(csa):
    r = csa(*FLASH, "-tp", "8", "--brief")
    assert r.code == 2 and "-tp: is vLLM's spelling of --tp: name the engine with --engine" in r.err


def test_unknown_options_get_a_close_spelling_or_none(csa):
    """Before: an unrelated option was offered ('--page-size' for '--tensor-parallel-size')."""
    typo = csa(*FLASH, "--engine", "vllm-0.33", "--tensor-paralel-size", "8")
    assert typo.code == 2 and "Did you mean '--tensor-parallel-size'?" in typo.err
    unrelated = csa(*FLASH, "--engine", "vllm-0.33", "--trust-remote-code")
    assert unrelated.code == 2 and "mean" not in unrelated.err
    # SGLang's --page-size is not offered on vLLM, nor vLLM's --block-size on SGLang
    assert "mean" not in csa(*FLASH, "--engine", "vllm-0.33", "--page-sze", "256").err
    assert "Did you mean '--page-size'?" in csa(*FLASH, "--engine", "sglang-0.5.23", "--page-sze", "256").err


def test_no_card_of_another_vendor_is_suggested(csa):
    """Before: `--device-memory b300` -> "did you mean 'mi300x'?"."""
    r = csa(*FLASH, "--brief", "--device-memory", "b300")
    assert r.code == 2 and "mi300x'?" not in r.err and "cannot read size 'b300'" in r.err
    assert "did you mean 'h200'?" in csa(*FLASH[:2], "--device-memory", "H-200x").err
