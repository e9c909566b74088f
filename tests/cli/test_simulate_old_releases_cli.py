"""``simulate/sweep --engine vllm-0.25|vllm-0.26``: their start-up is modelled, their scheduler is not.

The step-by-step replay (``VllmPlan.runtime``) steps vLLM 0.33.0's scheduler and KV cache managers;
0.25.0's and 0.26.0's v1/core/sched and kv cache managers differ from it, so replaying them under an
old release's name would be a silent wrong answer: bad input (exit 2) naming --engine, while
``check``/``compare --engine vllm-0.2x`` still plan that release's start-up."""

from __future__ import annotations

import json
import shutil

import pytest

from helpers import EXAMPLES

TRACE = "examples/traces/mooncake_conversation_head200.jsonl"
OLD = ("vllm-0.25", "vllm-0.26", "vllm-0.27", "vllm-0.28")


def _base(engine):
    return ("simulate", TRACE, "--model", "deepseek-v4-flash", "--device-memory", "h200", "--tp", "4",
            "--engine", engine)


def _refused(r, engine):
    assert r.code == 2, (r.code, r.out[:300], r.err[:300])
    assert "Traceback" not in r.err and "Traceback" not in r.out
    assert "would preempt" not in r.out  # no replay ran
    text = r.err if r.err.strip() else r.out
    assert "--engine" in text and "vLLM 0.33.0's scheduler" in text and f"check --engine {engine}" in text
    assert "use --engine vllm-0.33" in text


@pytest.mark.parametrize("engine", OLD)
def test_simulate_refuses_to_replay_another_releases_scheduler(csa, engine):
    r = csa(*_base(engine))
    _refused(r, engine)
    assert len(r.err.strip().splitlines()) == 1


@pytest.mark.parametrize("engine", OLD)
def test_simulate_json_refusal_is_the_error_document(csa, engine):
    r = csa(*_base(engine), "--json")
    _refused(r, engine)
    doc = json.loads(r.out)
    assert doc["exit_code"] == 2 and "--engine" in doc["message"] and engine in doc["message"]


@pytest.mark.parametrize("extra", [("--reserve", "fit"), ("--no-enable-prefix-caching",),
                                   ("--find-capacity", "--max-wait", "1")])
def test_the_refusal_comes_before_other_options(csa, extra):
    r = csa(*_base("vllm-0.26"), *extra)
    _refused(r, "vllm-0.26")


def test_start_up_is_still_planned_for_the_old_releases(csa):
    for engine in OLD:
        r = csa("check", "deepseek-v4-flash", "--device-memory", "h200", "--tp", "4", "--engine", engine, "--json")
        assert r.code == 0, r.err
        assert engine in r.out
        r = csa("compare", "deepseek-v4-flash", "--device-memory", "h200", "--tp", "4", "--engine", engine)
        assert r.code == 0 and engine in r.out


def test_vllm_033_replay_is_labelled_with_its_release(csa):
    r = csa(*_base("vllm-0.33"), "--json")
    assert r.code == 0, r.err
    rt = json.loads(r.out)["runtime"]
    assert rt["engine"] == "vLLM 0.33.0" and rt["headline"].startswith("vLLM 0.33.0 would preempt")


def test_sweep_engine_axis_refuses_the_old_releases(csa, tmp_path):
    trace = EXAMPLES / "traces" / "azure_conv_sample_200.csv"
    shutil.copy(trace, tmp_path / trace.name)
    path = tmp_path / "old.yaml"
    path.write_text(f"""name: old
workload: {trace.name}
grid:
  model: deepseek-v4-flash
  device: h200
  reserved: {{weights: 0, runtime: 110GiB}}
  max_seq_len: 65536
  engine: [vllm-0.33, vllm-0.26]
constraints: {{zero_refusals: true, wait_p99_max_s: 5}}
search: {{rel_tol: 0.2, max_scale: 4}}
""")
    r = csa("sweep", str(path), "-j", "1")
    assert r.code == 2 and "Traceback" not in r.err, (r.code, r.err[:400])
    assert "grid.engine" in r.err and "vllm-0.26" in r.err and "use --engine vllm-0.33" in r.err


def test_the_plan_api_refuses_too():
    """runtime() itself refuses an old release (no path reaches 0.33's scheduler under its name)."""
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.loaders.model_files import load_model

    model = load_model("deepseek-v4-flash", max_seq_len=65536)
    for name, refused in (("vllm-0.25", True), ("vllm-0.26", True), ("vllm-0.27", True), ("vllm-0.28", True),
                          ("vllm-0.33", False), ("vllm-0.34", False)):
        plan = get_engine(name).configure(model, EngineSettings(), 65536)
        assert plan.runtime_modelled and bool(plan.replay_refusal) is refused
    with pytest.raises(NotImplementedError, match="vllm-0.26"):
        plan = get_engine("vllm-0.26").configure(model, EngineSettings(), 65536)
        plan.runtime(plan.size_pool(8 << 30), None, None)
