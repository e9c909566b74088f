"""vLLM's MoE workspace request (planner/budget/vllm_workspace.py ``moe_experts`` / ``moe_request``) against
what each release's own code computes.

tests/fixtures/vllm_moe_workspace.json was printed by ``tools/crosscheck_moe_workspace.py``, run once per
release in a virtualenv importing it: vLLM's ``select_deepseek_v4_mxfp4_moe_backend`` picked the experts class
for DeepSeek-V4's MXFP4 experts per GPU architecture and ``--moe-backend``, and the modular kernel's own
``_allocate_buffers`` recorded the ``get_simultaneous`` parts of that class's ``workspace_shapes`` at M = mnbt.
No engine is imported here: the bytes are compared exactly with the recorded ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from csa_plan.planner.budget.stage import model_dims
from csa_plan.planner.budget.vllm_workspace import MoeExperts, moe_experts, moe_request
from csa_plan.planner.presets import read_preset

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "vllm_moe_workspace.json").read_text(encoding="utf-8"))
MAJOR = {"sm90": 9, "sm100": 10, "sm120": 12}
CLASS = {"MarlinExperts": MoeExperts.MARLIN, "TrtLlmMxfp4ExpertsModular": MoeExperts.TRTLLM,
         "DeepGemmFP4Experts": MoeExperts.DEEPGEMM_FP4, "Humming": MoeExperts.HUMMING}
CASES = [(r["release"], c) for r in FIXTURE["releases"] for c in r["cases"]]


def _dims(model: str):
    return model_dims(json.loads(read_preset(f"{model}.json")), model)


@pytest.mark.parametrize("release, case", CASES,
                         ids=[f"{r}-{c['model'][12:]}-{c['arch']}-{c['moe_backend']}-tp{c['tp']}{'ep' if c['ep'] else ''}"
                              for r, c in CASES])
def test_moe_request_equals_the_release_s_own(release, case):
    d = _dims(case["model"])
    moe_tp = 1 if case["ep"] else case["tp"] * case["dp"]
    pick = moe_experts(release, MAJOR[case["arch"]], case["moe_backend"], d.expert_dtype, case["dp"])
    if "refused" in case:  # vLLM's oracle raises: the engine would not start
        assert pick.refused and pick.experts is None, pick
        return
    assert pick.experts is CLASS[case["experts_class"]], (pick, case)
    req = moe_request(release, d, moe_tp, case["mnbt"], pick)
    if "unresolved" in case:  # the class's sizes need a compiled library: csa-plan's count, an estimate
        assert req.estimate and "not readable here" in req.source
        return
    assert req.parts_bytes == tuple(case["parts_bytes"]) and not req.estimate, (req, case)


def test_the_fixture_covers_every_modelled_release_and_each_resolved_class():
    from csa_plan.planner.budget.vllm_workspace import WORKSPACE_SRC

    assert {r["release"] for r in FIXTURE["releases"]} == set(WORKSPACE_SRC)
    seen = {c.get("experts_class") for _, c in CASES if "parts_bytes" in c}
    assert seen == {"MarlinExperts", "TrtLlmMxfp4ExpertsModular"}


def test_v4_flash_tp2_marlin_and_trtllm_figures():
    """The figures the docs quote: V4-Flash TP 2, 8,192 tokens on sm_90 (Marlin: 2 x 8,192 x 6 x 4,096 x 2 B)
    and sm_100 (TRT-LLM: the [8,192, 4,096] bf16 output only)."""
    d = _dims("deepseek-v4-flash")
    h100 = moe_request("vllm-0.26", d, 2, 8192, moe_experts("vllm-0.26", 9, None, "fp4", 1))
    b200 = moe_request("vllm-0.26", d, 2, 8192, moe_experts("vllm-0.26", 10, None, "fp4", 1))
    assert h100.bytes == 805_306_368 and "marlin_moe.py:720-750" in h100.source
    assert b200.bytes == 67_108_864 and "trtllm_mxfp4_moe.py:221-262" in b200.source


def test_what_stays_an_estimate_and_why():
    """0.33 on sm_90 picks the Humming experts (their sizes are the humming package's); FP8 experts and DP > 1
    are not resolved; the mega-MoE experts ask for no workspace at all."""
    d = _dims("deepseek-v4-flash")
    hum = moe_experts("vllm-0.33", 9, None, "fp4", 1)
    assert hum.experts is MoeExperts.HUMMING
    assert moe_request("vllm-0.33", d, 2, 8192, hum).estimate
    for pick in (moe_experts("vllm-0.26", 9, None, "fp8", 1), moe_experts("vllm-0.26", 9, None, "fp4", 2)):
        assert pick.experts is None and moe_request("vllm-0.26", d, 2, 8192, pick).estimate
    assert moe_request("vllm-0.26", d, 1, 8192, moe_experts("vllm-0.26", 10, "deep_gemm_mega_moe", "fp4", 1)) is None
    refused = moe_experts("vllm-0.26", 9, "flashinfer_trtllm", "fp4", 1)
    assert refused.refused and "does not start" in refused.why
    assert moe_experts("vllm-0.33", 10, "triton", "fp4", 8).refused  # refused whatever the DP size
