"""The device budget: each step by the engine's rule (recomputed here), overrides, and the CLI answers."""

from __future__ import annotations

import math
import shutil

import pytest

from csa_plan.planner.budget.device import BudgetRequest, budget
from csa_plan.planner.budget.stage import StartupSettings
from csa_plan.planner.budget.steps import StepKind
from csa_plan.planner.placement import Placement
from csa_plan.planner.weights.config import read_model_config
from csa_plan.planner.weights.registry import inventory_for
from csa_plan.planner.weights.rules import RULES
from csa_plan.planner.weights.sharding import shard

from helpers import ROOT
from helpers.safetensors_files import write_shard

MIB, GIB = 1 << 20, 1 << 30
H200 = 143771 * MIB
H100 = 81559 * MIB
PRO, FLASH = "deepseek-v4-pro", "deepseek-v4-flash"


def weights_of(name, engine, **kw):
    c = read_model_config(name)
    mtp = kw.pop("mtp", False)
    return [s.nbytes for s in shard(inventory_for(c.data, c.source), RULES[engine], Placement(**kw), mtp=mtp).stages]


def test_vllm_usable_share_is_ceil_total_times_utilisation():
    b = budget(BudgetRequest(PRO, H200, 1 << 20, "vllm-0.33", Placement(tp=8)))
    assert b.binding.usable_bytes == math.ceil(H200 * 92 / 100)
    b = budget(BudgetRequest(PRO, H200, 1 << 20, "vllm-0.33", Placement(tp=8),
                             StartupSettings(gpu_memory_utilization=0.95)))
    assert b.binding.usable_bytes == math.ceil(H200 * 95 / 100)


@pytest.mark.parametrize("model, placement, chunk, fraction", [
    (PRO, Placement(tp=8), None, 0.897),             # reserved 512 + 8192 x 1.5 + 1024 + 512 x 2 = 14,848 MiB
    (PRO, Placement(tp=8, ep=8), None, 0.897),
    (PRO, Placement(tp=1, dp=8, ep=8), None, 0.769),  # DP attention: + 512 x 8 x 3 + 512 x 8 x 1.5 -> 33,280 MiB
    (FLASH, Placement(tp=2), None, 0.906),            # max_bs 256 below tp 4: 512 + 12,288 + 256 + 512 = 13,568
    (FLASH, Placement(tp=2), 2048, 0.929),            # 512 + 3,072 + 256 + 512 = 4,352 -> the 10 GiB floor
])
def test_sglang_mem_fraction_static_formula(model, placement, chunk, fraction):
    b = budget(BudgetRequest(model, H200, 1 << 20, "sglang-0.5.23", placement,
                             StartupSettings(chunked_prefill_size=chunk)))
    assert b.resolved["mem_fraction_static"]["value"] == fraction
    assert b.binding.usable_bytes == H200 * int(round(fraction * 1000)) // 1000


def test_each_step_adds_up_and_names_its_source():
    b = budget(BudgetRequest(PRO, H200, 1 << 20, "vllm-0.33", Placement(tp=8)))
    s = b.binding
    assert s.weights_bytes == weights_of(PRO, "vllm-0.33", tp=8)[0]
    assert s.kv_memory_bytes == s.usable_bytes - s.weights_bytes - s.reserve_bytes
    kinds = [step.kind for step in s.steps]
    assert kinds[:3] == [StepKind.CARD, StepKind.USABLE, StepKind.WEIGHTS] and kinds[-1] is StepKind.KV
    assert all(step.source for step in s.steps)
    reserves = {step.label.split(" [")[0].split(" (")[0]: step.bytes for step in s.steps
                if step.kind is StepKind.RESERVE}
    mnbt, topk, L = 8192, 1024, 1 << 20
    assert reserves["top-k index buffer"] == mnbt * topk * 4
    assert reserves["RoPE cos/sin tables, 1 x fp32"] == (1 << 20) * 64 * 4  # Pro: no sliding-window-only layer
    m = L // 4 + 128 + mnbt
    flashmla = 4 * m * 512 * 2 + mnbt * 1152 * 4 + mnbt * 4  # 0.33: bf16 gather + top-k rows + lengths, one request
    t = L * 8 * 2 // 4
    indexer = t * 128 + t * 4 + MIB                             # FP8 K + fp32 scales + radix top-k, one request
    ws = next(step for step in s.steps if step.label.startswith("shared workspace"))
    # one buffer, the largest request (v1/worker/workspace.py), not the sum
    assert ws.bytes == max(flashmla, indexer) == flashmla and not ws.estimate
    assert f"{flashmla:,} B" in ws.label and f"{indexer:,} B" in ws.label and "workspace.py:181-207" in ws.source
    estimates = [step for step in s.steps if step.estimate]
    assert [e.label.split(" (")[0].split(":")[0] for e in estimates] == \
        ["other profile-run activations", "non-torch memory", "CUDA graph estimate"]  # each with its band
    assert all(e.band_pct is not None and e.source for e in estimates)


def test_flash_has_two_rope_tables_and_a_64k_indexer_factor_of_5():
    b = budget(BudgetRequest(FLASH, H200, 65536, "vllm-0.33", Placement(tp=4)))
    r = {step.label.split(" (")[0].split(" [")[0]: step.bytes for step in b.binding.steps}
    assert r["RoPE cos/sin tables, 2 x fp32"] == 2 * (1 << 20) * 64 * 4
    t = 65536 * 8 * 5 // 4
    ws = next(step for step in b.binding.steps if step.label.startswith("shared workspace"))
    assert f"indexer K-gather (T = {t:,}) + radix top-k {t * 132 + MIB:,} B" in ws.label
    # at 64K the MoE intermediates (csa-plan's count, 8,192 x 6 x (3 x 512 + 4096) x 2 B) are the largest request
    assert ws.bytes == 8192 * 6 * (3 * 512 + 4096) * 2 and ws.estimate and ws.band_pct == 50


def test_options_replace_their_step():
    b = budget(BudgetRequest(PRO, H200, 1 << 20, "vllm-0.33", Placement(tp=8), weights_bytes=100 * GIB,
                             reserved_bytes=5 * GIB))
    s = b.binding
    assert s.weights_bytes == 100 * GIB and s.reserve_bytes == 5 * GIB
    assert s.kv_memory_bytes == math.ceil(H200 * 92 / 100) - 105 * GIB
    assert {st.source for st in s.steps if st.kind in (StepKind.WEIGHTS, StepKind.RESERVE)} == {
        "option --weights", "option --reserved"}
    b = budget(BudgetRequest(PRO, H200, 1 << 20, "vllm-0.33", Placement(tp=8), kv_memory_bytes=40 * GIB))
    assert b.kv_memory_bytes == 40 * GIB and "option --kv-memory" in b.binding.steps[-1].source


def test_no_engine_is_the_whole_card_and_the_reference_split():
    b = budget(BudgetRequest(FLASH, H100, 131072, None, Placement(tp=8)))
    assert b.engine == "reference" and b.binding.usable_bytes == H100 and b.binding.reserve_bytes == 0
    assert b.binding.weights_bytes == weights_of(FLASH, "reference", tp=8, mtp=True)[0]


def test_pipeline_stages_each_get_a_budget_and_the_tightest_binds():
    b = budget(BudgetRequest(FLASH, H100, 131072, "vllm-0.33", Placement(tp=2, pp=2)))
    assert [s.weights_bytes for s in b.stages] == weights_of(FLASH, "vllm-0.33", tp=2, pp=2)
    assert b.kv_memory_bytes == min(s.kv_memory_bytes for s in b.stages)
    assert [len(s.layers) for s in b.stages] == [22, 21]  # vLLM: the remainder before the last stage


def test_weights_that_do_not_fit_name_the_smallest_fitting_tp():
    b = budget(BudgetRequest(PRO, H200, 1 << 20, "vllm-0.33", Placement(tp=1)))
    assert not b.fits and b.kv_memory_bytes < 0
    assert {f["tp"] for f in b.smallest_fitting} == {8}
    for tp in (1, 2, 4):  # and nothing smaller does
        assert not budget(BudgetRequest(PRO, H200, 1 << 20, "vllm-0.33", Placement(tp=tp)), search=False).fits


def test_a_checkpoint_directory_is_measured_and_the_gap_is_shown(tmp_path, csa):
    shutil.copy(ROOT / "planner" / "presets" / "deepseek-v4-flash.json", tmp_path / "config.json")
    c = read_model_config(FLASH)
    inv = inventory_for(c.data, c.source)
    # a checkpoint that is the inventory plus one extra tensor of 1 MiB
    tensors = {t.name: (t.dtype.value, t.shape) for w in inv.weights for t in w.stored_tensors()}
    tensors["extra.weight"] = ("U8", (1 << 20,))
    write_shard(tmp_path / "model-00001-of-00001.safetensors", tensors)
    doc = csa("check", str(tmp_path), "--device-memory", "h200", "--tp", "8", "--engine", "vllm-0.33",
              "--max-seq-len", "65536", "--json").json()
    w = doc["budget"]["model_weights"]
    assert w["source"] == "safetensors headers" and w["total_bytes"] == inv.nbytes + (1 << 20)
    assert w["tensors"] == inv.tensor_count + 1 and w["inventory_delta_bytes"] == -(1 << 20)
    steps = doc["budget"]["stages"][0]["steps"]
    extra = [s for s in steps if s["label"] == "checkpoint bytes the inventory does not place"]
    assert extra and extra[0]["bytes"] == 1 << 20 and extra[0]["estimate"] is True


# --- the CLI ------------------------------------------------------------------------------------

def test_must_show_pro_1m_h200_tp8_vllm(csa):
    args = ("check", PRO, "--max-seq-len", "1048576", "--device-memory", "h200", "--tp", "8", "--engine", "vllm-0.33")
    r = csa(*args)
    assert r.code == 0, r.err
    for needle in ("Waterfall", "card memory", "usable share", "weights on this device", "top-k index buffer",
                   "state pool (KV memory)", "Requests of 1,048,576 tokens admitted at once", "[engine: vllm-0.33]"):
        assert needle in r.out, needle
    doc = csa(*args, "--json").json()
    b = doc["budget"]
    steps = b["stages"][0]["steps"]
    assert all(s["source"] for s in steps) and "v1/worker/utils.py:716-726" in steps[1]["source"]
    flat = " ".join(r.out.split())
    for s in steps:  # every step's source is printed (rich folds long cells; compare without line breaks)
        assert s["source"].split()[0] in flat, s["source"]
    assert b["model_weights"]["total_bytes"] == 864_704_792_696
    assert b["model_weights"]["tensors"] == 145_116 and b["model_weights"]["elements"] == 861_608_274_846
    assert b["per_device_weights_bytes"] == weights_of(PRO, "vllm-0.33", tp=8)
    assert b["device_weights"]["per_stage"][0]["devices"] == 8
    assert doc["engine"]["pool"]["kv_memory_bytes"] == b["kv_memory_bytes"]
    assert doc["fit"]["requests_that_fit"] >= 1 and doc["fit"]["authority"] == "engine: vllm-0.33"
    assert "requests_that_fit" not in b  # v2: one count, in "fit" (issue 23)


def test_pro_tp1_on_h200_says_the_weights_do_not_fit_first(csa):
    r = csa("check", PRO, "--device-memory", "h200", "--engine", "vllm-0.33")
    assert r.code == 3
    assert r.out.startswith("DOES NOT FIT") and "WeightsDoNotFit" in r.out  # the answer first (issue 23)
    assert "smallest that passes every check: --tp 8" in r.out
    doc = csa("check", PRO, "--device-memory", "h200", "--json").json()
    assert doc["verdict"] == "does_not_fit" and doc["budget"]["weights_fit"] is False
    assert doc["fit"]["requests_that_fit"] is None and "memory" not in doc
    assert [f["tp"] for f in doc["budget"]["smallest_fitting"]] == [8]


def test_without_a_device_nothing_changes(csa):
    doc = csa("check", PRO, "--tp", "8", "--json").json()
    assert doc["budget"] is None and doc["fit"]["answered"] is False and doc["verdict"] == "admitted"


@pytest.mark.parametrize("args, needle", [
    (("--weights", "10GiB"), "--weights: needs --device-memory"),
    (("--reserved", "10GiB"), "--reserved: needs --device-memory"),
    (("--device-memory", "80GiB", "--weights", "80GiB"), "at or above the device memory"),
    (("--device-memory", "h200", "--tp", "3"), "not divisible by tp 3"),
    (("--device-memory", "h200", "--tp", "8", "--engine", "vllm-0.33", "--ep", "4"), "--ep is 1 or tp x dp = 8"),
    (("--device-memory", "h200", "--ep", "0"), "--ep: must be a positive integer"),
])
def test_bad_deployment_options(csa, args, needle):
    r = csa("check", PRO, *args)
    assert r.code == 2 and needle in r.err, r.err


def test_yaml_spec_with_a_device_counts_unknown_weights_as_a_labelled_zero(csa):
    spec = str(ROOT / "examples" / "configs" / "refusals" / "MissingStateEdge.yaml")
    doc = csa("check", spec, "--device-memory", "h200", "--json").json()
    step = [s for s in doc["budget"]["stages"][0]["steps"] if s["kind"] == "weights"][0]
    assert step["bytes"] == 0 and step["estimate"] is True and "--weights SIZE" in step["source"]
    assert doc["budget"]["model_weights"] is None and doc["budget"]["estimates"] is True
    r = csa("check", spec, "--device-memory", "h200", "--weights", "10GiB", "--json")
    assert r.json()["budget"]["weights_bytes"] == 10 * GIB


def test_budget_plot(csa, tmp_path):
    path = tmp_path / "budget.png"
    r = csa("check", PRO, "--device-memory", "h200", "--tp", "8", "--budget-plot", str(path))
    assert r.code == 0 and path.stat().st_size > 1000 and "budget chart written" in r.out


# --- simulate and sweep --------------------------------------------------------------------------

SAMPLE = ROOT / "examples" / "traces" / "azure_conv_sample_200.csv"


def test_simulate_limit_is_the_budgets_state_pool(csa):
    r = csa("simulate", str(SAMPLE), "--model", PRO, "--tp", "8", "--device-memory", "h200", "--max-seq-len",
            "65536", "--json")
    doc = r.json()
    b = budget(BudgetRequest(PRO, H200, 65536, None, Placement(tp=8)))
    assert doc["memory"]["limit_bytes"] == b.kv_memory_bytes == doc["budget"]["kv_memory_bytes"]
    assert doc["budget"]["weights_bytes"] == weights_of(PRO, "reference", tp=8, mtp=True)[0]


def test_simulate_weights_that_do_not_fit_run_nothing(csa):
    r = csa("simulate", str(SAMPLE), "--model", PRO, "--tp", "4", "--device-memory", "h200")
    assert r.code == 3 and r.out.startswith("WEIGHTS DO NOT FIT") and "smallest that fits: --tp 8" in r.out
    doc = csa("simulate", str(SAMPLE), "--model", PRO, "--tp", "4", "--device-memory", "h200", "--json").json()
    assert doc["budget"]["weights_fit"] is False and "requests" not in doc


def test_sweep_points_without_reserved_use_the_budget(csa, tmp_path):
    shutil.copy(SAMPLE, tmp_path / "trace.csv")
    spec = tmp_path / "s.yaml"
    spec.write_text("workload: trace.csv\ngrid: {model: deepseek-v4-pro, device: h200, tp: [4, 8], "
                    "max_seq_len: 65536, reserve: fit}\n")
    doc = csa("sweep", str(spec), "-j", "1", "--json").json()
    skipped = {s["key"].split("tp=")[1].split(",")[0]: s["reason"] for s in doc["skipped"]["points"]}
    assert skipped == {"4": "NoMemoryLeft"}
    ran = [row["point"] for row in doc["results"]]
    b = budget(BudgetRequest(PRO, H200, 65536, None, Placement(tp=8)), search=False)
    assert [p["limit_bytes"] for p in ran] == [b.kv_memory_bytes] and ran[0]["reserved"] == "budget"
    over = csa("sweep", str(spec), "-j", "1", "--tp", "8", "--weights", "0", "--reserved", "100GiB", "--json").json()
    assert [row["point"]["limit_bytes"] for row in over["results"]] == [H200 - 100 * GIB]
