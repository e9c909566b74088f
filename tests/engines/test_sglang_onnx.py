"""sglang-0.5.23 and onnx-genai: pools, start-up reservations, per-request bytes, refusals.

Expected numbers are rebuilt from the releases' arithmetic; the pool sizes are also checked
against SGLang's own DSV4PoolConfigurator by tools/crosscheck_engines.py.
"""

from __future__ import annotations

import pytest

from csa_plan.planner.engines.engine import EngineRefused, Phase
from csa_plan.planner.engines.registry import get_engine
from csa_plan.planner.engines.settings import EngineSettings
from csa_plan.planner.loaders.model_files import load_model
from csa_plan.planner.units import GiB, ceil_div, round_up

ONE_M = 1 << 20
SGL = get_engine("sglang-0.5.23")
SWA_PAGE = 149_760  # 256 x 584 -> 260 x 576


def plan(model, length=ONE_M, **settings):
    return SGL.configure(model, EngineSettings(**settings), length)


LAYERS = {"deepseek-v4-flash": (43, 21, 20), "deepseek-v4-pro": (61, 30, 31)}


@pytest.mark.parametrize("name", sorted(LAYERS))
@pytest.mark.parametrize("length", [ONE_M, 65_536, 1_000])
def test_steady_decode_bytes(name, length):
    main, c4, c128 = LAYERS[name]
    p = plan(load_model(name), length)
    pages = ceil_div(length, 256)
    swa = min(pages, 2)  # 2 SWA pages held after eviction
    expected = (main * swa * SWA_PAGE + c4 * swa * 8 * 8_192 + c4 * swa * 8 * 2_048 + c128 * 524_288
                + pages * (c4 * 37_440 + c128 * 1_728 + c4 * 8_448))
    assert p.footprint(length, Phase.DECODE).total_bytes == expected


def test_startup_budget_is_768_swa_tokens(pro):
    p = plan(pro)
    assert p.swa_budget_tokens() == 128 + 128 + 256 + 256
    assert p.startup_budget().uses[1].units == 3


@pytest.mark.parametrize("name, per_swa_token, per_full_token", [
    ("deepseek-v4-flash", 31_875.0, 21 * (585 / 4 + 132 / 4) + 20 * (1_728 / 2 / 128)),
    ("deepseek-v4-pro", 45_285.0, 30 * (585 / 4 + 132 / 4) + 31 * (1_728 / 2 / 128)),
])
def test_pool_sizing_cap_mode(name, per_swa_token, per_full_token):
    p = plan(load_model(name))
    kv = 60 * GiB
    cfg = p.pool_config(kv)
    assert cfg["bytes_per_swa_token"] == per_swa_token
    assert cfg["bytes_per_full_token"] == pytest.approx(per_full_token, rel=1e-15)
    swa = round_up(768 * 256 + 2 * 8192 + 256 + 4 * 256 * (128 + 256), 256)
    assert cfg["swa"] == swa == 606_464
    c128 = LAYERS[name][2]
    c128_fixed = round_up(257 * 128 + 128 + 1, 128) * 1024 * 4 * c128
    assert cfg["c128_state_fixed"] == c128_fixed
    full = int((kv - (c128_fixed + swa * per_swa_token)) / cfg["bytes_per_full_token"]) // 256 * 256
    assert cfg["full"] == full and cfg["c4"] == full // 4 and cfg["c128"] == full // 128
    assert cfg["c4_state"] == swa // 256 * 8 and cfg["c128_state"] == 257 * 128
    sizing = p.size_pool(kv)
    assert dict(sizing.extra)["max_total_num_tokens"] == sizing.tokens == full
    assert f"max_total_num_tokens={full}, chunked_prefill_size=8192" in sizing.log_lines[1]
    pools = {pool.name: pool for pool in sizing.pools}
    assert pools["SWA KV (every main layer)"].units == ceil_div(swa + 256, 256)
    assert pools["c128 state (per request slot)"].bytes == c128_fixed


def test_flash_startup_reservations_about_19_gb_swa_and_2_7_gb_c128(flash):
    sizing = plan(flash).size_pool(60 * GiB)
    pools = {pool.name: pool.bytes for pool in sizing.pools}
    swa_and_state = (pools["SWA KV (every main layer)"] + pools["c4 state (per SWA page)"]
                     + pools["c4 indexer state (per SWA page)"])
    assert 19.3e9 < swa_and_state < 19.4e9
    assert pools["c128 state (per request slot)"] == 2_715_811_840


def test_fewer_running_requests_shrink_the_fixed_pools(pro):
    small = plan(pro, max_running_requests=64).pool_config(60 * GiB)
    big = plan(pro).pool_config(60 * GiB)
    assert small["swa"] < big["swa"] and small["full"] > big["full"]


def test_speculative_rings_and_inflation(pro):
    p = plan(pro, speculative_num_steps=1)  # SGLang: 1 draft step = 2 draft tokens at top-k 1
    assert p.rings == (16, 256)
    assert p.swa_budget_tokens() == 128 + 128 * 2 + 256 + 2 * 2
    assert ("--speculative-num-draft-tokens", 2) in {(s.option, s.value) for s in p.settings}
    with pytest.raises(EngineRefused, match="exceeds what the c4 compress state ring"):
        plan(pro, speculative_num_steps=10)


@pytest.mark.parametrize("settings, option, problem", [
    ({"speculative_eagle_topk": 2, "speculative_num_steps": 3}, "--speculative-eagle-topk", "topk == 1"),
    ({"speculative_num_draft_tokens": 4}, "--speculative-num-draft-tokens", "needs --speculative-num-steps"),
])
def test_speculative_options_refused_as_sglang_refuses(pro, settings, option, problem):
    with pytest.raises(EngineRefused) as exc:
        plan(pro, **settings)
    assert exc.value.refusal.setting == option and problem in exc.value.refusal.message


def test_draft_tokens_follow_the_steps_at_topk_1(pro):
    """SGLang adjusts --speculative-num-draft-tokens to steps + 1 at top-k 1 (speculative_hook.py:1255-1266)."""
    given = plan(pro, speculative_num_steps=3, speculative_num_draft_tokens=8)
    assert given.resolved.draft_tokens == 4 == plan(pro, speculative_num_steps=3).resolved.draft_tokens


@pytest.mark.parametrize("engine, args, spelling", [
    ("sglang-0.5.23", ("--num-speculative-tokens", "3"), "spells it --speculative-num-steps"),
    ("vllm-0.33", ("--speculative-num-steps", "3"), "spells it --num-speculative-tokens"),
    ("vllm-0.26", ("--speculative-num-draft-tokens", "4"), "spells it --num-speculative-tokens"),
    ("vllm-0.33", ("--speculative-eagle-topk", "1"), "spells it --num-speculative-tokens"),
])
def test_other_engines_speculative_spelling_is_bad_input(csa, engine, args, spelling):
    r = csa("check", "deepseek-v4-pro", "--engine", engine, *args)
    assert r.code == 2 and spelling in r.err and "Traceback" not in r.err


@pytest.mark.parametrize("settings, setting", [
    ({"indexer_kv_dtype": "fp4"}, "--indexer-kv-dtype"),
    ({"page_size": 128}, "--page-size"),
    ({"kv_cache_dtype": "bfloat16"}, "--kv-cache-dtype"),
])
def test_sglang_refusals(pro, settings, setting):
    with pytest.raises(EngineRefused) as exc:
        plan(pro, **settings)
    assert exc.value.refusal.setting == setting


def test_fp4_indexer_on_b200_uses_68_byte_keys_but_the_fp8_estimate(pro):
    p = plan(pro, gpu="b200", indexer_kv_dtype="fp4")
    assert p.full_page_bytes == 30 * (37_440 + 64 * 68) + 31 * 1_728
    assert p.pool_config(60 * GiB)["bytes_per_full_token"] == plan(pro).pool_config(60 * GiB)["bytes_per_full_token"]


def test_sglang_admission(pro):
    p = plan(pro, max_running_requests=2)
    sizing = p.size_pool(60 * GiB)
    assert p.admits(sizing, 0, 0, ONE_M) and not p.admits(sizing, 0, 2, 10)
    assert not p.admits(sizing, sizing.usable_units - 10, 0, ONE_M)


def test_sglang_cli(csa):
    r = csa("check", "deepseek-v4-flash", "--engine", "sglang-0.5.23", "--kv-memory", "60GiB", "--json")
    assert r.code == 0, r.err
    pool = r.json()["engine"]["pool"]
    assert pool["swa_tokens"] == 606_464 and pool["max_total_num_tokens"] == pool["tokens"]
    assert csa("check", "deepseek-v4-flash", "--engine", "sglang-0.5.23", "--block-size", "256").code == 2


# --- onnx-genai --------------------------------------------------------------------------

def test_onnx_genai_reserves_the_b6_layout_per_request(pro):
    from csa_plan.planner.plan import PlanOptions, plan_model

    p = get_engine("onnx-genai").configure(pro, EngineSettings(), 65_536)
    b6 = plan_model(pro, PlanOptions(layout="onnx-genai-b6", max_seq_len=65_536)).per_request_per_device_bytes
    assert p.footprint(100, Phase.DECODE).total_bytes == p.footprint(65_536, Phase.PREFILL).total_bytes == b6
    sizing = p.size_pool(40 * GiB)
    assert sizing.total_units == 40 * GiB // b6


def test_onnx_genai_window_defaults_to_max_seq_len():
    from csa_plan.planner.engines.onnx_genai import window_from_default

    assert window_from_default(("window 128 from the default (no sliding_window / window_size node attribute or "
                                "metadata_props entry)",))
    assert not window_from_default(("window 128 from metadata_props 'sliding_window'",))
