"""vLLM 0.27.0 and 0.28.0 at start-up: every figure below is what that release's own planning code computed.

The numbers come from ``tools/crosscheck_engines.py`` run in a virtualenv holding each release (``pip install
--no-deps vllm==0.27.1`` / ``vllm==0.28.0``): its ``get_kv_cache_groups``, ``get_kv_cache_configs``,
``_pool_bytes_per_block`` (``_get_packed_kv_cache_layout``), ``get_max_concurrency_for_kv_cache_config`` and log
lines on the DeepSeek-V4 specs built with that release's classes (docs/engine-releases.md, "vLLM 0.27 and 0.28").
What tells the two releases from their neighbours: unpadded layer tuples (0.26 pads the window pages: 1,039,680 B
a Flash block against 1,002,240 B), the 68 B MXFP4 index key, 0.28's >= 160 GiB batch tier (a B200 defaults to
16,384 batched tokens), its extra retained tokens under multi-module MTP and its one log line.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from csa_plan.planner.engines.engine import EngineRefused
from csa_plan.planner.engines.registry import get_engine
from csa_plan.planner.engines.settings import EngineSettings
from csa_plan.planner.units import GiB

ONE_M = 1 << 20
KV = 60 * GiB

# (model, card, settings) -> (bytes per block, num_blocks, tokens, concurrency as logged), per release
CASES = [
    # H200: both releases take 8,192 batched tokens by default (141 GB is below 0.28's 160 GiB tier)
    ("flash", "h200", {"num_speculative_tokens": 1}, {
        "vllm-0.27": (1_002_240, 64_280, 6_253_708, "5.96"), "vllm-0.28": (1_002_240, 64_280, 6_253_708, "5.96")}),
    ("pro", "h200", {"num_speculative_tokens": 1}, {
        "vllm-0.27": (1_435_968, 44_864, 4_364_753, "4.16"), "vllm-0.28": (1_435_968, 44_864, 4_364_753, "4.16")}),
    # B200 (180 GB): 0.28 defaults to 16,384 batched tokens, so its windows are budgeted for twice the tokens
    ("flash", "b200", {"num_speculative_tokens": 1}, {
        "vllm-0.27": (1_002_240, 64_280, 6_253_708, "5.96"), "vllm-0.28": (1_002_240, 64_280, 3_866_150, "3.69")}),
    ("pro", "b200", {"num_speculative_tokens": 1}, {
        "vllm-0.27": (1_435_968, 44_864, 4_364_753, "4.16"), "vllm-0.28": (1_435_968, 44_864, 2_698_366, "2.57")}),
    # B200 with the MXFP4 indexer cache: 68 B a key from 0.27.0 (0.26.0 still allocated FP8's 132 B)
    ("flash", "b200", {"indexer_kv_dtype": "mxfp4", "max_num_batched_tokens": 16384}, {
        "vllm-0.27": (917_568, 70_212, 4_222_933, "4.03"), "vllm-0.28": (917_568, 70_212, 4_222_933, "4.03")}),
    ("pro", "b200", {"indexer_kv_dtype": "mxfp4", "max_num_batched_tokens": 16384}, {
        "vllm-0.27": (1_315_008, 48_991, 2_946_586, "2.81"), "vllm-0.28": (1_315_008, 48_991, 2_946_586, "2.81")}),
]


@pytest.mark.parametrize("release", ["vllm-0.27", "vllm-0.28"])
@pytest.mark.parametrize("model_name, gpu, options, expected", CASES)
def test_the_pool_is_what_the_release_computes(request, release, model_name, gpu, options, expected):
    model = request.getfixturevalue(model_name)
    plan = get_engine(release).configure(model, EngineSettings(gpu=gpu, **options), ONE_M)
    sizing = plan.size_pool(KV)
    block, blocks, tokens, conc = expected[release]
    assert (plan.block_bytes, sizing.total_units, sizing.tokens) == (block, blocks, tokens)
    size = f"GPU KV cache size: {tokens:,} tokens"
    line = f"Maximum concurrency for 1,048,576 tokens per request: {conc}x"
    # 0.27.0 logs two lines (kv_cache_utils.py:2235-2240); 0.28.0 one (update_kv_cache_capacity, :1861-1875)
    assert sizing.log_lines == ((size, line) if release == "vllm-0.27" else (f"{size}, {line}",))


def test_0_26_pads_the_window_pages_and_sizes_fp4_keys_as_fp8(flash):
    """The two rules 0.27.0 changed, on the same deployment: 0.26's padded tuples and 132 B MXFP4 keys."""
    settings = EngineSettings(gpu="b200", indexer_kv_dtype="mxfp4", max_num_batched_tokens=16384)
    old = get_engine("vllm-0.26").configure(flash, settings, ONE_M)
    new = get_engine("vllm-0.27").configure(flash, settings, ONE_M)
    assert new.block_bytes == 917_568 and old.block_bytes != new.block_bytes
    assert {s.page_bytes for s in old.specs if s.role == "C4 indexer keys"} != \
        {s.page_bytes for s in new.specs if s.role == "C4 indexer keys"}


def _two_mtp_modules(model):
    mtp = next(d for d in model.layers if d.is_mtp)
    return replace(model, num_mtp_layers=2, layers=model.layers + (replace(mtp, layer_id=mtp.layer_id + 1),))


def test_0_28_keeps_the_extra_retained_tokens_of_multi_module_mtp(flash):
    """With two MTP modules and 3 drafts, 0.28.0 extends every window by 2 tokens (kv_cache_utils.py:2134-2147);
    0.27.0 does not. The presets have one MTP module, so the test gives the model a second."""
    model = _two_mtp_modules(flash)
    settings = EngineSettings(gpu="h200", num_speculative_tokens=3)
    a = get_engine("vllm-0.27").configure(model, settings, ONE_M).size_pool(40 * GiB)
    b = get_engine("vllm-0.28").configure(model, settings, ONE_M).size_pool(40 * GiB)
    assert (a.total_units, a.tokens) == (42_853, 4_169_106)
    assert (b.total_units, b.tokens) == (42_853, 4_167_559)  # vLLM 0.28.0's own figure: 3.97x


@pytest.mark.parametrize("release", ["vllm-0.27", "vllm-0.28"])
def test_block_sizes_as_the_release_decides_them(flash, release):
    engine = get_engine(release)
    with pytest.raises(EngineRefused, match="ZeroDivisionError"):  # a C128 page of 64 // 128 = 0 records
        engine.configure(flash, EngineSettings(gpu="h200", block_size=64), 65_536)
    # no padding assertion any more: 128 plans, and 512 sums the pages (no 256-token block stride as in 0.33)
    assert engine.configure(flash, EngineSettings(gpu="h200", block_size=128), 65_536).block_bytes == 870_912
    assert engine.configure(flash, EngineSettings(gpu="h200", block_size=512), 65_536).block_bytes == 1_992_960
