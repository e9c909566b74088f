"""Speculative decoding as each method costs a step (issue 44, item 3): MTP and EAGLE chains run the
checkpoint's drafter once per draft, DSpark once per block; every method verifies k + 1 tokens."""

from __future__ import annotations

import pytest

from csa_plan.planner.steptime.drafts import METHODS, DraftMethod, accepted_per_step, draft_plan


def _flash():
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.serving.step_source import model_inputs

    spec = load_model("deepseek-v4-flash")
    return (spec, *model_inputs(spec))


def test_method_shapes():
    assert draft_plan(DraftMethod.MTP, 0) is None
    mtp, eagle, dspark = (draft_plan(m, 3) for m in ("mtp", "EAGLE", "DSPARK"))
    assert (mtp.passes, mtp.tokens_per_request, mtp.verify) == (3, 1, 4)
    assert (eagle.passes, eagle.tokens_per_request) == (3, 1)
    assert (dspark.passes, dspark.tokens_per_request, dspark.verify) == (1, 3, 4)
    assert "1 drafter pass of a 3-position block" in dspark.label()
    with pytest.raises(ValueError):
        draft_plan("medusa", 2)


def test_published_defaults_stated_once():
    from csa_plan.planner.replay.draft_acceptance import DEFAULT_RATE

    assert DEFAULT_RATE == METHODS[DraftMethod.MTP].default_acceptance == 0.65
    assert all(f.source for f in METHODS.values())
    # DSpark's 0.90 is the rate at which a 5-token block accepts the cookbook's 4.678 tokens a step
    assert abs(accepted_per_step(METHODS[DraftMethod.DSPARK].default_acceptance, 5) - 4.678) < 0.01


def test_drafter_is_the_checkpoints_mtp_weights():
    """The drafter's bytes are the inventory's is_mtp weights (experts apart) plus the LM head, exactly."""
    from csa_plan.planner.steptime.physics import model_cost
    from csa_plan.planner.weights.tensors import Role

    spec, data, inv = _flash()
    cost = model_cost(spec, data, inv)
    experts = (Role.EXPERT_W13, Role.EXPERT_W2)
    dense = sum(w.nbytes for w in inv.weights if w.is_mtp and w.role not in experts)
    head = sum(w.nbytes for w in inv.weights if w.role is Role.HEAD and not w.is_mtp)
    assert cost.draft.dense_bytes == dense + head
    assert cost.draft.expert_bytes == sum(w.nbytes for w in inv.weights if w.is_mtp and w.role in experts)
    assert cost.draft.layers == sum(d.is_mtp for d in spec.layers) == 1
    # the main layers' figures leave the drafter out, as before
    assert cost.expert_bytes == sum(w.nbytes for w in inv.weights if not w.is_mtp and w.role in experts)


def test_chain_pays_per_draft_block_pays_once():
    from csa_plan.planner.cards import CARDS
    from csa_plan.planner.placement import Placement
    from csa_plan.planner.steptime.physics import basis_rows, draft_rows, model_cost
    from csa_plan.planner.weights.rules import RULES

    spec, data, inv = _flash()
    cost = model_cost(spec, data, inv, RULES["vllm-0.33"], Placement(tp=4))
    perf = CARDS["b200"].perf
    plain = basis_rows(cost, perf)
    mtp = draft_rows(cost, perf, draft_plan("mtp", 3))
    dspark = draft_rows(cost, perf, draft_plan("DSPARK", 3))
    w = cost.draft.dense_bytes / perf.hbm_bytes_s
    assert mtp["weights"][0] == pytest.approx(3 * w) and dspark["weights"][0] == pytest.approx(w)
    assert mtp["layer"][0] == 3 and dspark["layer"][0] == 1
    # per request both draft 3 positions through the drafter's linears
    assert mtp["flops"][4] == pytest.approx(dspark["flops"][4]) and mtp["flops"][4] > 0
    # the verify pass: 4 query tokens a request score the context (3 more than a plain decode)
    assert mtp["flops"][5] == pytest.approx(3 * plain["flops"][5])
    both = basis_rows(cost, perf, draft_plan("mtp", 3))
    assert both["weights"][0] == pytest.approx(plain["weights"][0] + 3 * w)
    assert both["weights"][7] == plain["weights"][7]


MIX = """name: d
seed: 1
requests: 32
model: deepseek-v4-flash
max_seq_len: 4096
classes:
  - name: fixed
    rate: 1000.0
    prompt: {dist: fixed, value: 1024}
    output: {dist: fixed, value: 64}
"""


def test_replays_say_what_drafts_they_run(csa, tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text(MIX)
    base = ("simulate", str(path), "--gpu", "b200", "--tp", "4", "--max-concurrency", "8", "--json")
    r = csa(*base, "--engine", "vllm-0.33", "--num-speculative-tokens", "3")
    assert r.code == 0, r.err
    label = r.json()["time"]["step_time"]["label"]
    assert "drafts: mtp k=3: 3 drafter passes of 1 position a request, 4 tokens verified" in label
    r = csa(*base, "--engine", "sglang-0.5.23", "--speculative-num-steps", "3")
    assert r.code == 0, r.err
    assert "drafts: EAGLE k=3: 3 drafter passes of 1 position a request" in r.json()["time"]["step_time"]["label"]


# --- the MoE backend in the clock (issue 44, item 4) -----------------------------------------------------------


def test_backend_keys_as_the_engines_spell_them():
    from csa_plan.planner.steptime.physics import MOE_BACKENDS, moe_backend_key

    assert moe_backend_key("sglang", "flashinfer_mxfp4", "deepep") == "deepep"
    assert moe_backend_key("sglang", "marlin", "none") == "marlin"
    assert moe_backend_key("sglang", "deepep (a2a)") == "deepep"  # the published table's spelling
    assert moe_backend_key("vllm", "deep_gemm_mega_moe") == "deep_gemm_mega_moe"
    assert moe_backend_key("vllm", "auto") is None and moe_backend_key("vllm", "humming") is None
    assert "triton" in MOE_BACKENDS


def test_each_fitted_backend_has_its_rows_and_the_rest_are_not_distinguished():
    from csa_plan.planner.steptime.physics import moe_backend_note, shipped_fit

    fits = shipped_fit()["fits"]
    for name, fit in fits.items():
        rows = fit.get("moe_rows") or {}
        for key, n in rows.items():
            assert n > 0 and f"moe:{key}" in fit["beta"], name
        # the counts are the fit-split rows of the table with that backend on the family
        fam = name.split("/")[1]
        engine = name.split("/")[0]
        table = [t for t in shipped_fit()["rows"] if t["engine"] == engine and t["split"] == "fit"
                 and _family(t["gpu"]) == fam]
        assert rows == {b: sum(t["moe_backend"] == b for t in table) for b in {t["moe_backend"] for t in table}
                        if b != "-"} or engine == "vllm"
    note, applies = moe_backend_note("triton", "--moe-runner-backend triton", "sglang", "blackwell")
    assert not applies and "not distinguished" in note
    note, applies = moe_backend_note("deepep", "--moe-a2a-backend deepep", "sglang", "blackwell")
    assert applies and "fitted on 6 deepep rows" in note
    assert not moe_backend_note("marlin", "--moe-backend marlin", "vllm", "hopper")[1]  # a stand-in fit


def _family(gpu):
    from csa_plan.planner.cards import CARDS

    return CARDS[gpu].perf.family


def test_the_backend_changes_the_step_and_is_named(csa, tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text(MIX)
    base = ("simulate", str(path), "--gpu", "b200", "--tp", "1", "--dp", "4", "--ep", "4", "--max-concurrency", "16",
            "--engine", "sglang-0.5.23", "--json")
    runs = {}
    for a2a in ("deepep", "megamoe"):
        r = csa(*base, "--moe-a2a-backend", a2a)
        assert r.code == 0, r.err
        d = r.json()
        assert f"MoE backend --moe-a2a-backend {a2a}: its own term" in d["time"]["step_time"]["label"]
        runs[a2a] = d["runtime"]["tpot"]["p50_s"]
    assert runs["deepep"] > runs["megamoe"]  # deepep's fitted term is the larger
    r = csa("simulate", str(path), "--gpu", "b200", "--tp", "4", "--engine", "vllm-0.33", "--moe-backend",
            "flashinfer_trtllm", "--json")
    assert r.code == 0, r.err
    assert "MoE backend --moe-backend flashinfer_trtllm: not distinguished" in r.json()["time"]["step_time"]["label"]
    # a backend vLLM's MXFP4 oracle refuses for DeepSeek-V4 on the card is refused here too, not costed
    r = csa("simulate", str(path), "--gpu", "b200", "--tp", "4", "--engine", "vllm-0.33", "--moe-backend", "triton")
    assert r.code == 2 and "--moe-backend" in r.err and "refuses it" in r.err and "Traceback" not in r.err


def test_a_dspark_checkpoint_drafts_as_dspark(csa, tmp_path):
    """Flash-0731 carries a DSpark drafter (its config names dspark_target_layer_ids): vLLM's replay drafts its
    --num-speculative-tokens as one block pass, costed from the checkpoint's own draft layers."""
    from csa_plan.planner.loaders.model_files import load_model

    path = tmp_path / "d.yaml"
    path.write_text(MIX.replace("deepseek-v4-flash", "deepseek-v4-flash-0731"))
    r = csa("simulate", str(path), "--gpu", "b200", "--tp", "4", "--max-concurrency", "8", "--engine", "vllm-0.33",
            "--num-speculative-tokens", "5", "--json")
    assert r.code == 0, r.err
    assert "drafts: DSPARK k=5: 1 drafter pass of a 5-position block a request, 6 tokens verified" \
        in r.json()["time"]["step_time"]["label"]
    spec = load_model("deepseek-v4-flash-0731")
    assert sum(d.is_mtp for d in spec.layers) == 3  # the three DSpark blocks are the drafter the clock reads


# --- the SGLang replay runs drafts (EAGLE, top-k 1) ---------------------------------------------------------------


def _sglang_steps(acceptance: float, steps_flag: int, output: int) -> tuple[int, list[int]]:
    import numpy as np

    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.replay.loop import replay
    from csa_plan.planner.replay.protocol import RuntimeOptions, RuntimeTrace
    from csa_plan.planner.steptime.model import StepTime

    plan = get_engine("sglang-0.5.23").configure(load_model("deepseek-v4-flash"),
                                                 EngineSettings(speculative_num_steps=steps_flag,
                                                                max_running_requests=8), 8192)
    sizing = plan.size_pool(4 << 30)
    trace = RuntimeTrace(np.zeros(1, dtype=np.int64), np.array([100], dtype=np.int64),
                         np.array([output], dtype=np.int64))
    seen: list[int] = []
    res = replay(plan.runtime(sizing, trace, RuntimeOptions(spec_acceptance=acceptance)), trace,
                 StepTime(20.0, 10_000.0), on_step=lambda s: seen.append(sum(s.tokens)))
    assert res.finished_ns[0] >= 0
    return res.series.steps, seen


def test_sglang_replay_verifies_and_accepts_drafts():
    steps, tokens = _sglang_steps(1.0, 3, 33)  # every draft accepted: 4 tokens a decode step
    assert steps == 1 + 8 and tokens[1:] == [4] * 8  # the prefill samples 1, eight verify steps of 4 make 33
    steps, tokens = _sglang_steps(0.0, 3, 33)  # none accepted: one token a step, still 4 verified
    assert steps == 1 + 32 and set(tokens[1:]) == {4}
    steps, _ = _sglang_steps(1.0, 3, 2)  # never past the request's last token
    assert steps == 2


def test_sglang_spec_acceptance_applies_where_drafts_run(csa, tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text(MIX)
    base = ("simulate", str(path), "--gpu", "b200", "--tp", "4", "--max-concurrency", "8", "--engine",
            "sglang-0.5.23", "--json")
    r = csa(*base, "--speculative-num-steps", "3", "--spec-acceptance", "0.8")
    assert r.code == 0, r.err
    d = r.json()
    assert "drafts: EAGLE k=3" in d["time"]["step_time"]["label"]
    assert any("each draft accepted at 0.8" in n for n in d["runtime"]["modelled"])
    r = csa(*base, "--spec-acceptance", "0.8")
    assert r.code == 2 and "no --speculative-num-steps" in r.err
