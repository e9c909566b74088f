"""SGLang 0.5.23's DeepSeek-V4.1 pools, and the Engram tables where each engine keeps them.

Every pool figure below is what SGLang 0.5.23's own code computes on CPU: ``DSV4PoolConfigurator``
(``calculate_pool_sizes`` + ``finalize_with_max_running_requests``) and the helpers its pool classes
size with (``KVLayout.page_bytes``, ``_num_dsv4_physical_kv_pages``, ``DSV41_INDEX_PAGE_SIZE``), run by

    PYTHONPATH=<sglang-0.5.23 wheel, unpacked> python tools/crosscheck_engines.py --engine sglang

(``sglang_v41_case``: 62 GiB = 66,571,993,088 B of KV memory, 1M tokens, --max-running-requests 256,
--chunked-prefill-size 8192; its output lines are quoted beside each case).
"""

from __future__ import annotations

import json

import pytest

from csa_plan.planner.engines.engine import EngineRefused
from helpers import ROOT

from csa_plan.planner.engines.registry import get_engine
from csa_plan.planner.engines.settings import EngineSettings
from csa_plan.planner.errors import BadInput
from csa_plan.planner.units import GiB
from csa_plan.planner.weights.engram import (EngramChoice, HostMemoryRefused, host_line, pinned_bytes, placement,
                                             tables_of)

SGLANG = get_engine("sglang-0.5.23")
KV = 62 * GiB
CONFIG = ROOT / "planner" / "presets" / "deepseek-v4.1-flash.json"  # the bundled copy of the published config


@pytest.fixture(scope="module")
def v41():
    from csa_plan.planner.loaders.model_files import load_model

    return load_model("deepseek-v4.1-flash")


@pytest.fixture(scope="module")
def tables():
    from csa_plan.planner.weights.config import read_model_config

    return tables_of(read_model_config("deepseek-v4.1-flash").data)


def plan_of(model, gpu: str, tp: int, **kw):
    return SGLANG.configure(model, EngineSettings(gpu=gpu, max_running_requests=256, chunked_prefill_size=8192,
                                                  tensor_parallel_size=tp, **kw), 1 << 20)


def test_sglang_models_v41_and_the_earlier_releases_stay_refused():
    from csa_plan.planner.refusals import RefusalType
    from csa_plan.planner.shared_engines import engine_refusal

    assert SGLANG.models_shared_state is True
    assert engine_refusal("sglang-0.5.20").type is RefusalType.ENGINE_RELEASE_UNSUPPORTED
    assert engine_refusal("sglang-0.5.21").type is RefusalType.LAYOUT_NOT_MODELLED


# OK sglang deepseek-v4.1-flash h200 tp=8 (v4) L=1048576 kv=66571993088 mrr=256 chunk=8192 drafts=0:
#   max_total_num_tokens 32,081,664, swa 606,464, 1632.5 B/full token, ring2 2, c2 state 6,365,184 B,
#   padding 659,968 B, pools [(2370, 5990400), (125320, 149760), (501281, 4352), (125321, 224640), (250641, 13056)]
# OK ... b200 tp=8 (v4): max_total_num_tokens 32,081,664, ..., padding 677,376 B,
#   pools [(2370, 5990400), (125320, 149760), (250641, 8704), (125321, 224640), (125321, 26112)]
# OK ... b200 tp=1 (v41): max_total_num_tokens 60,400,640, swa 606,464, 890 B/full token, ..., padding 373,248 B,
#   pools [(2370, 5406720), (235941, 73728), (471883, 8704), (235942, 110592), (235942, 26112)]
@pytest.mark.parametrize("gpu, tp, backend, per_token, full, padding, pools", [
    ("h200", 8, "flashmla", 1632.5, 32_081_664, 659_968,
     [(2370, 5_990_400), (125_320, 149_760), (501_281, 4352), (125_321, 224_640), (250_641, 13_056)]),
    ("b200", 8, "flashmla", 1632.5, 32_081_664, 677_376,
     [(2370, 5_990_400), (125_320, 149_760), (250_641, 8704), (125_321, 224_640), (125_321, 26_112)]),
    ("b200", 1, "flashmla_mega", 890.0, 60_400_640, 373_248,
     [(2370, 5_406_720), (235_941, 73_728), (471_883, 8704), (235_942, 110_592), (235_942, 26_112)]),
])
def test_pools_equal_sglangs_own_configurator(v41, gpu, tp, backend, per_token, full, padding, pools):
    plan = plan_of(v41, gpu, tp)
    assert plan.v41.backend == backend
    cfg = plan.pool_config(KV)
    assert (cfg["full"], cfg["swa"], cfg["c4_state"], cfg["c128_state"]) == (full, 606_464, 0, 0)
    assert cfg["bytes_per_full_token"] == per_token
    assert cfg["c2_state_fixed"] == 6_365_184  # 3 sources x round_up(257 x 2 + 3, 2) rows x 4,096 B
    assert cfg["padding"] == padding
    sizing = plan.size_pool(KV)
    assert [(p.units, p.unit_bytes) for p in sizing.pools
            if p.name.startswith(("SWA", "ratio-1 KV", "ratio-1 index", "ratio-2 KV", "ratio-2 index"))] == pools
    assert sizing.log_lines[0] == f"DSV4 pool sizes: full={full}, swa=606464, c4={full // 4}, c128={full // 128}, " \
                                  "c4_state=0, c128_state=0"
    assert sizing.tokens == full
    # SGLang budgets the SWA pool as swa_tokens x bytes per SWA token, but allocates one spare page more
    # (_num_dsv4_physical_kv_pages): its pools may pass the KV memory by up to that page, as here
    swa = sizing.pools[0]
    assert swa.units * swa.unit_bytes - cfg["swa_fixed"] == swa.unit_bytes


def test_a_full_page_is_the_sources_records_and_keys_only(v41):
    """Owners only: 4 kv sources, never the 36 readers (a per-layer sum would be 11.6x)."""
    h200, mega = plan_of(v41, "h200", 8), plan_of(v41, "b200", 1)
    assert h200.full_page_bytes == 417_920  # 1,632.5 B/token x 256 (DEEPSEEK_V41.md §4)
    assert mega.full_page_bytes == 227_840  # 890 B/token x 256
    assert h200.v41.sources == ((1, 1), (2, 3))


def test_dspark_drafts_widen_the_ratio2_ring_and_inflate_per_token_bytes(v41):
    plan = plan_of(v41, "h200", 8, speculative_num_draft_tokens=6)
    cfg = plan.pool_config(KV)
    assert plan.c128_slot_bytes == 8 * 4096 * 3  # 1 << (6 + 1).bit_length() = 8 rows
    assert cfg["bytes_per_full_token"] == 1632.5 * (41 / 40)  # SGLang multiplies by (T + 1) / T


def test_eagle_options_and_the_ratio4_indexer_option_cannot_apply(v41):
    with pytest.raises(EngineRefused, match="DSpark"):
        plan_of(v41, "h200", 8, speculative_num_steps=2)
    with pytest.raises(EngineRefused, match="force_fp4"):
        plan_of(v41, "b200", 8, indexer_kv_dtype="fp4")
    with pytest.raises(EngineRefused, match=">= 2"):
        plan_of(v41, "h200", 8, speculative_num_draft_tokens=1)


def test_encoder_replay_moves_the_windows_into_fixed_rings(v41):
    plan = plan_of(v41, "h200", 8, enable_encoder_swa_bounded_replay=True)
    cfg = plan.pool_config(KV)
    assert (cfg["swa"], cfg["bytes_per_swa_token"]) == (0, 0.0)
    # SGLang's request_window_bytes at --max-running-requests 256, --chunked-prefill-size 8192, no drafts
    assert cfg["request_window_fixed"] == 1_794_195_456


def test_encoder_replay_needs_a_v41_model():
    from csa_plan.planner.loaders.model_files import load_model

    with pytest.raises(EngineRefused, match="V4.1"):
        SGLANG.configure(load_model("deepseek-v4-flash"), EngineSettings(enable_encoder_swa_bounded_replay=True),
                         1 << 20)


# -- Engram ---------------------------------------------------------------------------------------


def test_the_tables_hash_columns_are_the_engines_primes(tables):
    assert [t.layer_id for t in tables] == [1, 14]
    assert [t.rows for t in tables] == [384_006_168, 384_016_682]  # the config's, equal to the primes' sums
    assert [len(t.columns) for t in tables] == [24, 24]
    assert sum(t.nbytes for t in tables) == 202_758_032_400  # 188.83 GiB at 264 B per row


def test_sglang_keeps_the_tables_on_the_gpus_split_over_tp(tables):
    p = placement(tables, "sglang-0.5.23", 8, 1, EngramChoice())
    assert (p.where, p.gpu_bytes_per_rank, p.host_bytes_per_node) == ("gpu", 25_345_046_496, 0)  # 23.60 GiB
    # DP attention: SGLang's TP group is tp x dp, so the same split
    assert placement(tables, "sglang-0.5.23", 1, 8, EngramChoice()).gpu_bytes_per_rank == 25_345_046_496
    host = placement(tables, "sglang-0.5.23", 8, 1, EngramChoice(host_table=True))
    assert (host.where, host.gpu_bytes_per_rank, host.host_bytes_per_node) == ("host", 0, 202_758_032_400)


def test_vllm_pins_each_ranks_columns_rounded_to_a_power_of_two(tables):
    p = placement(tables, "vllm-0.33", 8, 1, EngramChoice(), 8192)
    assert p.where == "host" and p.gpu_bytes_per_rank == 0
    assert p.staging_bytes_per_rank == 2 * 8192 * 3 * 256 * 2  # bf16 [8192, ceil(24/8), 256] per Engram layer
    # each rank: 3 columns ~ 48M rows: 12.3 GB of FP8 -> 16 GiB pinned, 384 MB of scales -> 512 MiB, per table
    assert p.host_bytes_per_node == 8 * 2 * (16 * GiB + 512 * (1 << 20)) == 283_467_841_536
    shared = placement(tables, "vllm-0.33", 1, 8, EngramChoice(), 8192)  # DP > 1: one /dev/shm copy per node
    assert shared.host_bytes_per_node == 202_758_032_400
    gpu = placement(tables, "vllm-0.33", 8, 1, EngramChoice(engram_config='{"cpu_offload": false}'), 8192)
    assert (gpu.where, gpu.gpu_bytes_per_rank, gpu.host_bytes_per_node) == ("gpu", 25_345_046_496, 0)
    assert pinned_bytes(12_000_000_000) == 16 * GiB


def test_the_host_line_and_its_refusal(tables):
    host = placement(tables, "sglang-0.5.23", 8, 1, EngramChoice(host_table=True))
    line = host_line(host, None, "h200")
    assert (line.host_bytes_per_node, line.capacity_bytes) == (202_758_032_400, 2048 * GiB)
    with pytest.raises(HostMemoryRefused) as err:
        host_line(host, 128 * GiB, "h200")
    assert err.value.refusal.type.value == "HostMemoryShort"
    assert "202,758,032,400" in err.value.refusal.message
    with pytest.raises(BadInput, match="must be positive"):
        host_line(host, 0, "h200")
    with pytest.raises(BadInput, match="no Engram tables"):
        host_line(None, 64 * GiB, "h200")


@pytest.mark.parametrize("engine, choice, problem", [
    ("sglang-0.5.23", EngramChoice(engram_config='{"cpu_offload": false}'), "vLLM's option"),
    ("vllm-0.33", EngramChoice(host_table=True), "SGLang's switch"),
    ("vllm-0.33", EngramChoice(engram_config="{cpu_offload: false"), "not JSON"),
    ("vllm-0.33", EngramChoice(engram_config='{"offload": false}'), "unknown field"),
    ("vllm-0.33", EngramChoice(engram_config='{"dp_shared_memory": true, "cpu_offload": false}'), "requires"),
])
def test_an_engram_option_that_cannot_apply_is_refused(tables, engine, choice, problem):
    with pytest.raises(BadInput, match=problem):
        placement(tables, engine, 8, 1, choice, 8192)
    with pytest.raises(BadInput, match="no Engram tables"):  # on a model without Engram, any of them
        placement((), engine, 8, 1, choice, 8192)


def test_a_config_whose_rows_disagree_with_its_primes_is_bad_input():
    data = json.loads(CONFIG.read_text())
    data["text_config"]["engram_num_embeddings"] = [384_006_168, 384_016_683]
    with pytest.raises(BadInput, match="sum to 384,016,682"):
        tables_of(data)


# -- check, end to end ----------------------------------------------------------------------------


def test_check_shows_the_engram_placement_and_the_host_line(csa):
    r = csa("check", "deepseek-v4.1-flash", "--max-seq-len", "1M", "--device-memory", "h200", "--tp", "8", "--ep", "8",
            "--engine", "sglang-0.5.23", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["budget"]["engram"]["gpu_bytes_per_rank"] == 25_345_046_496
    assert doc["budget"]["host"] == {"host_bytes_per_node": 0, "capacity_bytes": 2048 * GiB, "fits": True,
                                     "capacity_source": "NVIDIA DGX H200 datasheet: 2 TB system memory per 8-GPU node"}


def test_check_refuses_when_the_host_cannot_hold_the_tables(csa):
    r = csa("check", "deepseek-v4.1-flash", "--max-seq-len", "1M", "--device-memory", "h200", "--tp", "8", "--ep", "8",
            "--engine", "sglang-0.5.23", "--enable-dsv41-engram-host-table", "--host-memory", "150GiB")
    assert r.code == 3
    assert "HostMemoryShort" in r.out + r.err


@pytest.mark.parametrize("args, field", [
    (("--host-memory", "lots"), "--host-memory"),
    (("--host-memory", "0"), "--host-memory"),
    (("--engram-config", '{"cpu_offload": false}'), "--engram-config"),  # an SGLang check: vLLM's option
])
def test_bad_host_memory_and_engram_input_is_exit_2(csa, args, field):
    r = csa("check", "deepseek-v4.1-flash", "--max-seq-len", "1M", "--device-memory", "h200", "--tp", "8", "--ep", "8",
            "--engine", "sglang-0.5.23", *args)
    assert r.code == 2, (r.out, r.err)
    assert field in r.err
    assert "Traceback" not in r.err


def test_host_memory_on_a_model_without_engram_is_refused(csa):
    r = csa("check", "deepseek-v4-flash", "--device-memory", "h200", "--tp", "8", "--host-memory", "1TiB")
    assert r.code == 2 and "no Engram tables" in r.err


def test_the_device_budget_charges_engram_where_the_engine_keeps_it():
    """vLLM 0.33's default keeps the tables off the GPU (only its staging buffers stay); SGLang's on it."""
    from csa_plan.planner.budget.deployment import Deployment, deployment_budget
    from csa_plan.planner.cards import CARDS

    def steps(engine):
        b = deployment_budget("deepseek-v4.1-flash", CARDS["h200"].memory_bytes, Deployment(tp=8, ep=8), 1 << 20,
                              engine, EngineSettings(gpu="h200"), search=False)
        return {s.label: s.bytes for s in b.binding.steps if s.kind.value == "weights"}

    vllm, sglang = steps("vllm-0.33"), steps("sglang-0.5.23")
    assert vllm["Engram tables: host memory (vllm-0.33)"] == 0
    assert vllm["Engram staging buffers (bf16, on the GPU)"] == 2 * 8192 * 3 * 256 * 2
    assert sglang["Engram tables: device memory (sglang-0.5.23)"] == 25_345_046_496


def test_vllms_default_host_tables_are_refused_on_a_small_host(csa):
    """vLLM 0.33 pins 264 GiB per 8-GPU node (power-of-two rounding): a 256 GiB host cannot hold them."""
    args = ("check", "deepseek-v4.1-flash", "--max-seq-len", "1M", "--device-memory", "h200", "--tp", "8",
            "--engine", "vllm-0.33")
    r = csa(*args, "--host-memory", "256GiB")
    assert r.code == 3 and "HostMemoryShort" in r.out + r.err and "283,467,841,536" in r.out + r.err
    doc = json.loads(csa(*args, "--host-memory", "300GiB", "--json").out)
    assert doc["budget"]["host"]["host_bytes_per_node"] == 283_467_841_536 and doc["budget"]["host"]["fits"]
