"""Every engine option has a range (issue 24): outside it, bad input naming the option and the range;
inside it, a value the engine accepts but will not serve for this model stays a typed refusal."""

from __future__ import annotations

import pytest

from csa_plan.planner.engines.settings import SETTING_RANGES, EngineSettings, OPTION_SPELLING
from csa_plan.planner.errors import BadInput

PRO = "deepseek-v4-pro"


@pytest.mark.parametrize("name", sorted(SETTING_RANGES))
def test_each_count_setting_has_a_range(name):
    low, high, limit = SETTING_RANGES[name]
    EngineSettings(**{name: low})
    EngineSettings(**{name: high})
    for bad in (low - 1, high + 1, -5, 10 ** 18):
        with pytest.raises(BadInput, match=rf"{OPTION_SPELLING[name]}: .*outside its range .*{limit.split(';')[0]}"):
            EngineSettings(**{name: bad})


@pytest.mark.parametrize("name", ["gpu_memory_utilization", "mem_fraction_static"])
@pytest.mark.parametrize("value", [0.0, -0.1, 1.0000001, float("nan"), float("inf")])
def test_fractions_are_in_zero_one(name, value):
    with pytest.raises(BadInput, match=r"0 < x <= 1"):
        EngineSettings(**{name: value})
    assert EngineSettings(**{name: 1.0}).given() == (name,)


@pytest.mark.parametrize("engine, option, value, code", [
    ("vllm-0.33", "--kv-cache-dtype", "fp9", 2),         # not a vLLM cache dtype at all
    ("vllm-0.33", "--kv-cache-dtype", "bfloat16", 3),    # vLLM's, but not the fp8_ds_mla layout: refused
    ("vllm-0.33", "--indexer-kv-dtype", "int3", 2),
    ("vllm-0.33", "--indexer-kv-dtype", "nvfp4", 3),     # vLLM's IndexerKVDType, not the sparse indexer's
    ("vllm-0.33", "--block-size", "0", 2),
    ("vllm-0.33", "--max-num-batched-tokens", "0", 2),
    ("vllm-0.33", "--num-speculative-tokens", "1000000", 2),
    ("sglang-0.5.23", "--kv-cache-dtype", "fp9", 2),
    ("sglang-0.5.23", "--kv-cache-dtype", "bfloat16", 3),
    ("sglang-0.5.23", "--page-size", "0", 2),
    ("sglang-0.5.23", "--page-size", "128", 3),
    ("sglang-0.5.23", "--indexer-kv-dtype", "int3", 2),
])
def test_bad_input_versus_refusal(csa, engine, option, value, code):
    r = csa("check", PRO, "--engine", engine, option, value)
    assert r.code == code, (r.code, r.err)
    if code == 2:
        lines = r.err.strip().splitlines()
        assert len(lines) == 1 and option in lines[0]
