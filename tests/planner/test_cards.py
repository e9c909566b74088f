"""The GPU card table (planner/cards.py): one entry per card, named once, used everywhere."""

from __future__ import annotations

import pickle

import pytest

from csa_plan.planner.cards import CARDS, CardBytes, card, card_of, find_card, resolve_target
from csa_plan.planner.engines.settings import EngineSettings, GpuTarget, target_of
from csa_plan.planner.errors import BadInput
from csa_plan.planner.memory import GPU_MEMORY_MIB, parse_size

MIB = 1 << 20


def test_table_entries_have_sources_and_driver_memory():
    for c in CARDS.values():
        assert c.memory_mib > 0 and c.memory_source and c.capability_source and c.device_name
        assert c.vendor in ("nvidia", "amd")
    # the driver's figures (MiB), not the marketing GB
    assert {n: CARDS[n].memory_mib for n in ("h200", "h100", "h20", "b200", "l40s", "rtx-pro-6000", "gh200",
                                               "mi300x")} == {
        "h200": 143771, "h100": 81559, "h20": 97871, "b200": 183359, "l40s": 46068, "rtx-pro-6000": 97887,
        "gh200": 97871, "mi300x": 196288}
    assert CARDS["rtx-pro-6000"].sm == "sm_120" and CARDS["b200"].sm == "sm_100" and CARDS["h20"].sm == "sm_90"
    assert GPU_MEMORY_MIB == {n: c.memory_mib for n, c in CARDS.items()}


def test_card_names_parse_as_sizes_that_carry_the_card():
    size = parse_size("H100", "--device-memory")
    assert size == 81559 * MIB and card_of(size).name == "h100"
    assert card_of(parse_size("80GiB", "--device-memory")) is None
    assert find_card("RTX-PRO-6000-Blackwell").name == "rtx-pro-6000"
    again = pickle.loads(pickle.dumps(CardBytes(CARDS["h20"])))
    assert again == 97871 * MIB and again.card.name == "h20"


def test_unknown_gpu_is_bad_input_with_a_suggestion():
    with pytest.raises(BadInput, match="unknown GPU 'h2O'.*did you mean"):
        card("h2O")


def test_one_target_from_either_option():
    memory, c = resolve_target(parse_size("h100", "x"), None)
    assert c.name == "h100" and memory == 81559 * MIB
    memory, c = resolve_target(None, "b200")
    assert c.name == "b200" and memory == 183359 * MIB and card_of(memory).name == "b200"
    memory, c = resolve_target(70 << 30, "h100")  # a part of the card (MIG, another process)
    assert c.name == "h100" and memory == 70 << 30
    assert resolve_target(70 << 30, None) == (70 << 30, None)
    with pytest.raises(BadInput, match="--gpu: names h100 but --device-memory names h200"):
        resolve_target(parse_size("h200", "x"), "h100")
    with pytest.raises(BadInput, match="--device-memory.*more than the h100"):
        resolve_target(141 * 10**9, "h100")


def test_engine_target_follows_the_budgeted_memory():
    gpu, source = target_of(EngineSettings(gpu="h100", gpu_memory_bytes=81559 * MIB))
    assert gpu == GpuTarget("h100", (9, 0), 81559 * MIB, "NVIDIA H100 80GB HBM3", "nvidia")
    assert source.startswith("given")
    gpu, source = target_of(EngineSettings())
    assert gpu.name == "h200" and gpu.memory_bytes == 143771 * MIB and "default" in source
    assert EngineSettings(gpu_memory_bytes=1).given() == ()  # derived, not an option


def test_device_memory_names_the_engine_gpu(csa):
    h100 = csa("check", "deepseek-v4-flash", "--device-memory", "h100", "--tp", "4", "--engine", "vllm-0.33",
               "--json").json()
    settings = {s["option"]: s for s in h100["engine"]["settings"]}
    assert settings["--gpu"]["value"] == "h100"
    b200 = csa("check", "deepseek-v4-flash", "--device-memory", "b200", "--tp", "4", "--engine", "vllm-0.33",
               "--indexer-kv-dtype", "mxfp4")
    assert "sm_90" not in b200.out and "(h200)" not in b200.out


def test_gpu_alone_budgets_its_card(csa):
    r = csa("check", "deepseek-v4-flash", "--gpu", "h100", "--tp", "4", "--engine", "vllm-0.33", "--json")
    assert r.json()["budget"]["card_bytes"] == 81559 * MIB


def test_contradicting_gpu_and_device_memory_is_bad_input(csa):
    r = csa("check", "deepseek-v4-flash", "--gpu", "h100", "--device-memory", "b200", "--engine", "vllm-0.33")
    assert r.code == 2 and "--gpu" in r.err and "b200" in r.err and "Traceback" not in r.err


def test_amd_card_is_a_typed_engine_refusal(csa):
    r = csa("check", "deepseek-v4-flash", "--device-memory", "mi300x", "--tp", "4", "--engine", "vllm-0.33",
            "--json")
    assert r.code == 3
    assert r.json()["engine"]["refusal"]["setting"] == "--gpu"
