"""sweep's engine axis for engines whose runtime is replayed step by step (issues 25 and 27, item 6):
the same replay, budget and rate search as ``simulate --engine`` / ``--find-capacity``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers import EXAMPLES

TRACE = EXAMPLES / "traces" / "azure_conv_sample_200.csv"
ENGINES = ("vllm-0.33", "sglang-0.5.23")
SPEC = """name: runtime
workload: azure_conv_sample_200.csv
grid:
  model: deepseek-v4-pro
  device: h200
  reserved: {{weights: 0, runtime: 110GiB}}
  max_seq_len: 65536
  reserve: fit
  engine: {engines}
constraints: {{zero_refusals: true, wait_p99_max_s: {wait}}}
search: {{rel_tol: 0.2, max_scale: 4}}
time: {{step_time: fixed}}  # the reservation model's clock: the two are compared under one clock
"""


def _spec(tmp_path: Path, engines: str = "[vllm-0.33, sglang-0.5.23]", wait: str = "5") -> Path:
    shutil.copy(TRACE, tmp_path / TRACE.name)
    path = tmp_path / "runtime.yaml"
    path.write_text(SPEC.format(engines=engines, wait=wait))
    return path


def _evaluate(path: Path):
    from csa_plan.planner.sweep.evaluate import Task, evaluate
    from csa_plan.planner.sweep.spec import load_spec

    spec = load_spec(str(path))
    return spec, {p.engine: evaluate(Task(spec.context, p)) for p in spec.points}


def test_runtime_points_differ_from_the_reservation_model(tmp_path):
    """vLLM's in-flight budget charged at admission refuses requests on one H200; vLLM itself queues
    them and serves all 200 (what the sweep now answers)."""
    from csa_plan.planner.reserve.engine_run import EngineRun
    from csa_plan.planner.placement import Placement
    from csa_plan.planner.reserve import SimConfig, TimeModel, prepare, simulate
    from csa_plan.planner.sweep.evaluate import _card_settings, load_context_workload, load_point_model

    spec, results = _evaluate(_spec(tmp_path))
    for p in spec.points:
        r = results[p.engine]
        assert r.runtime is not None and r.peak_bytes is None
        assert r.requests == r.admitted == r.runtime.served == 200 and r.refused == 0 and r.feasible
        assert r.wait_p99_ns == round(r.runtime.queue_wait_p99_s * 1e9) > 0
        assert r.sustainable_rate_scale is not None and r.sustainable_rate_scale > 1
        # the old reservation model of the same point
        ctx = spec.context
        config = SimConfig(placement=Placement(tp=p.tp, pp=p.pp, dp=p.dp), limit_bytes=p.limit_bytes,
                           reserve=p.reserve, bucket=p.bucket, policy=p.policy,
                           time=TimeModel(prefill_tok_s=ctx.prefill_tok_s, tpot_ms=ctx.tpot_ms),
                           max_seq_len=p.max_seq_len, engine=EngineRun(p.engine, _card_settings(p.memory_bytes,
                                                                                                p.engine)))
        old = simulate(prepare(load_point_model(p.model, p.max_seq_len),
                               load_context_workload(ctx.workload, ctx.sort, ctx.seed), config))
        if p.engine == "vllm-0.33":
            assert old.refused > 0  # the reservation answer: infeasible under zero_refusals
        assert (old.refused, old.wait_p99_ns) != (r.refused, r.wait_p99_ns)


MOONCAKE = EXAMPLES / "traces" / "mooncake_conversation_head200.jsonl"
BUDGET_SPEC = """name: budget
workload: mooncake_conversation_head200.jsonl
grid: {{model: deepseek-v4-flash, device: h200, tp: 4, max_seq_len: 65536, engine: {engine}}}
constraints: {{zero_refusals: true, wait_p99_max_s: 5}}
search: {{rel_tol: 0.2, max_scale: 4}}
"""


@pytest.mark.parametrize("engine", ENGINES)
def test_a_runtime_point_is_simulate_engine_on_the_same_deployment(csa, tmp_path, engine):
    """The sweep point's figures are simulate --engine's on the same device budget (reserved: budget,
    the default: planner/budget, as check and simulate --device-memory size it), exactly; the
    Mooncake head's shared prefixes exercise the prefix cache."""
    head = tmp_path / MOONCAKE.name  # the first 30 requests: the replays stay fast
    head.write_text("".join(MOONCAKE.read_text().splitlines(keepends=True)[:30]))
    path = tmp_path / "budget.yaml"
    path.write_text(BUDGET_SPEC.format(engine=engine))
    spec, results = _evaluate(path)
    r, p = results[engine], spec.points[0]
    doc = csa("simulate", str(head), "--model", "deepseek-v4-flash", "--device-memory", "h200", "--tp", "4",
              "--max-seq-len", "65536", "--engine", engine, "--json").json()
    assert doc["engine"]["pool"]["kv_memory_bytes"] == p.limit_bytes == doc["budget"]["kv_memory_bytes"]
    assert doc["runtime"]["prefix_cache"]["hit_tokens"] > 0
    rt = doc["runtime"]
    f = r.runtime
    assert (f.engine, f.served, f.preemptions, f.preempted_requests, f.tokens_recomputed, f.prefix_hit_tokens) == (
        rt["engine"], rt["served"], rt["preemptions"]["count"], rt["preemptions"]["requests"],
        rt["preemptions"]["tokens_recomputed"], rt["prefix_cache"]["hit_tokens"])
    assert (f.queue_wait_p99_s, f.ttft_p99_s, f.e2e_p99_s) == (rt["queue_wait"]["p99_s"], rt["ttft"]["p99_s"],
                                                              rt["e2e"]["p99_s"])
    assert (f.peak_units, f.usable_units, f.peak_running, f.steps) == (
        rt["occupancy"]["peak_units"], rt["occupancy"]["usable_units"], rt["occupancy"]["peak_running"], rt["steps"])
    # and the point's rate search is simulate --find-capacity's (same start, bound and search)
    from csa_plan.planner.serving.serve import runtime_capacity, runtime_setup
    from csa_plan.planner.sweep.evaluate import _card_settings, load_context_workload, load_point_model
    from csa_plan.planner.reserve.engine_run import EngineRun
    from csa_plan.planner.placement import Placement
    from csa_plan.planner.reserve import SimConfig

    config = SimConfig(placement=Placement(tp=p.tp), limit_bytes=p.limit_bytes, max_seq_len=p.max_seq_len,
                       engine=EngineRun(engine, _card_settings(p.memory_bytes, engine)))
    setup = runtime_setup(load_point_model(p.model, p.max_seq_len), config)
    ctx = spec.context
    cap = runtime_capacity(setup, load_context_workload(ctx.workload, ctx.sort, ctx.seed), ctx.constraints.wait_p99_max_ns,
                           rel_tol=ctx.search.rel_tol, scale_min=ctx.search.min_scale, scale_max=ctx.search.max_scale)
    assert (cap.rate_scale, cap.capped, cap.probes) == (r.sustainable_rate_scale, r.at_least, r.probes)


def test_runtime_points_resume_and_forged_records_are_refused(csa, tmp_path):
    path = _spec(tmp_path, engines="sglang-0.5.23")
    resume = tmp_path / "done.jsonl"
    first = csa("sweep", str(path), "-j", "1", "--json", "--resume", str(resume))
    assert first.code == 0, first.err
    doc = first.json()
    assert doc["schema"] == "csa-plan/sweep/v2"
    (res,) = doc["results"]
    assert res["model"] == "runtime" and res["runtime"]["engine"].startswith("sglang") and res["peak_bytes"] is None
    again = csa("sweep", str(path), "-j", "1", "--json", "--resume", str(resume))
    assert again.code == 0, again.err
    assert again.json()["grid"]["resumed"] == 1 and again.json()["results"] == doc["results"]
    header, record = resume.read_text().splitlines()
    rec = json.loads(record)
    assert rec["schema"] == "csa-plan/sweep-point/v2" and rec["runtime"]["served"] == 200
    for field, change in (("runtime.served", lambda r: r["runtime"].update(served=199)),
                          ("wait_p99_ns", lambda r: r.update(wait_p99_ns=r["wait_p99_ns"] + 1)),
                          ("peak_bytes", lambda r: r.update(peak_bytes=1)),
                          ("runtime", lambda r: r["runtime"].pop("steps")),
                          ("peak_units", lambda r: r["runtime"].update(peak_units=r["runtime"]["usable_units"] + 1))):
        forged = json.loads(record)
        change(forged)
        bad = tmp_path / "forged.jsonl"
        bad.write_text(header + "\n" + json.dumps(forged) + "\n")
        r = csa("sweep", str(path), "-j", "1", "--resume", str(bad))
        assert r.code == 2 and field in r.err and "Traceback" not in r.err, (field, r.err)


def test_a_runtime_engine_needs_a_wait_bound(csa, tmp_path):
    path = _spec(tmp_path, engines="vllm-0.33")
    path.write_text(path.read_text().replace(", wait_p99_max_s: 5", ""))
    r = csa("sweep", str(path))
    assert r.code == 2 and "constraints.wait_p99_max_s" in r.err and "vllm-0.33" in r.err


@pytest.mark.parametrize("bound", ["ttft_p99_max_s: 2", "tpot_p99_max_ms: 50"])
def test_slo_bounds_alone_are_a_valid_engine_sweep(tmp_path, bound):
    """Issue 45: a TTFT or TPOT bound alone limits the rate; no queue-wait bound is asked for."""
    from csa_plan.planner.sweep.evaluate import triage
    from csa_plan.planner.sweep.spec import load_spec

    path = _spec(tmp_path, engines="vllm-0.33")
    path.write_text(path.read_text().replace("wait_p99_max_s: 5", bound))
    spec = load_spec(str(path))
    assert spec.context.constraints.wait_p99_max_s is None
    assert len(triage(spec).to_run) == 1  # not refused, not skipped


def _runtime_setup(engine: str):
    """The setup simulate builds for ``test_find_capacity_replays_each_engine``'s command line."""
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.placement import Placement
    from csa_plan.planner.reserve import SimConfig, TimeModel
    from csa_plan.planner.reserve.engine_run import EngineRun
    from csa_plan.planner.serving.serve import runtime_setup

    spec = load_model("deepseek-v4-pro", max_seq_len=65536)
    config = SimConfig(placement=Placement(), limit_bytes=0, max_seq_len=65536,
                       time=TimeModel(step_time="fixed"), engine=EngineRun(engine, EngineSettings(), 31 * 2**30))
    return runtime_setup(spec, config)


@pytest.mark.parametrize("engine", ENGINES)
def test_find_capacity_replays_each_engine(csa, engine):
    """simulate --find-capacity for both runtimes: the answer sustains the bound, a faster rate does not."""
    args = ("simulate", str(TRACE), "--model", "deepseek-v4-pro", "--kv-memory", "31GiB", "--max-seq-len", "65536",
            "--engine", engine, "--step-time", "fixed")  # the rate search under a clock that is monotone in load
    assert csa(*args, "--find-capacity").code == 2  # the engine queues: the wait bound is the criterion
    doc = csa(*args, "--find-capacity", "--max-wait", "1", "--json").json()
    cap = doc["capacity"]
    assert cap["max_wait_s"] == 1 and cap["rate_scale"] > 0 and cap["at_least"] is False and len(cap["probes"]) > 1
    rt = doc["runtime"]
    assert doc["time"]["rate_scale"] == cap["rate_scale"]
    # the answer's replay is the run that was judged steady: the sample repeated as its window needed
    steady = cap["steady"]
    assert steady["steady"] is True and steady["window_lifetimes"] >= 5 and steady["copies"] == cap["copies"]
    assert rt["served"] == rt["requests"] == 200 * cap["copies"]
    # the search's bracket: twice the answer is judged not sustained (or too short to say), never sustained
    from csa_plan.planner.serving.serve import steady_probe
    from csa_plan.planner.workloads import load_workload

    setup = _runtime_setup(engine)
    probe = steady_probe(setup, load_workload(str(TRACE)), cap["rate_scale"] * 2, 10 ** 9)
    assert probe.ok is not True


def test_a_preempting_point_with_refusals_is_simulate_engine(csa, tmp_path):
    """Where vLLM preempts (7 GiB, max_model_len 32,768) and refuses three prompts up front: the same
    served, preempted, refused and wait figures as simulate --engine; no rate sustains (a refusal at
    every rate), so the point is infeasible and says why."""
    head = tmp_path / MOONCAKE.name
    head.write_text("".join(MOONCAKE.read_text().splitlines(keepends=True)[:60]))
    from csa_plan.planner.memory import parse_size

    reserved = parse_size("h200", "test", "device") - 7 * 2**30  # an H200 (vLLM's >= 70 GiB defaults), 7 GiB of KV
    path = tmp_path / "tight.yaml"
    path.write_text("workload: mooncake_conversation_head200.jsonl\n"
                    f"grid: {{model: deepseek-v4-flash, device: h200, reserved: {{weights: 0, runtime: {reserved}}}, max_seq_len: 32768, "
                    "engine: vllm-0.33}\n"
                    "constraints: {zero_refusals: true, wait_p99_max_s: 100}\nsearch: {min_scale: 0.5, max_scale: 2}\n")
    spec, results = _evaluate(path)
    r = results["vllm-0.33"]
    doc = csa("simulate", str(head), "--model", "deepseek-v4-flash", "--device-memory", "h200", "--kv-memory", "7GiB",
              "--max-seq-len", "32768", "--engine", "vllm-0.33", "--json").json()
    assert spec.points[0].limit_bytes == doc["engine"]["pool"]["kv_memory_bytes"] == 7 * 2**30
    rt, f = doc["runtime"], r.runtime
    assert rt["preemptions"]["count"] > 0 and sum(x["requests"] for x in rt["refused"]) == 3
    assert (f.served, f.preemptions, f.preempted_requests, f.most_preemptions_for_one_request, f.tokens_recomputed) == (
        rt["served"], rt["preemptions"]["count"], rt["preemptions"]["requests"],
        rt["preemptions"]["most_for_one_request"], rt["preemptions"]["tokens_recomputed"])
    assert f.queue_wait_p99_s == rt["queue_wait"]["p99_s"] and r.admitted == rt["served"] == 57
    assert r.refusals == (("RequestExceedsCapacity", 3),) and r.refused == 3
    assert r.sustainable_rate_scale is None and not r.feasible
    assert any("3 refused" in v for v in r.violations) and "no sustainable rate" in r.violations


def test_a_runtime_point_routed_least_loaded_is_skipped(tmp_path):
    from csa_plan.planner.sweep.evaluate import triage
    from csa_plan.planner.sweep.spec import load_spec

    path = _spec(tmp_path, engines="vllm-0.33")
    path.write_text(path.read_text().replace("  reserve: fit\n", "  reserve: fit\n  dp: 2\n  router: least-loaded\n"))
    (skip,) = triage(load_spec(str(path))).skipped
    assert skip.reason.value == "BadDeployment" and "round-robin" in skip.detail


def test_engine_settings_are_a_sweep_axis(csa, tmp_path):
    """Issue 45 item 3: grid.settings gives each point its engine options by name; they reach the replay
    (a tight max_num_seqs sustains less) and the launch command; a setting the engine lacks is skipped as
    BadDeployment naming it; an unknown name is bad input."""
    path = _spec(tmp_path, engines="vllm-0.33")
    text = path.read_text().replace("  engine: vllm-0.33\n", "  engine: vllm-0.33\n  settings: [null, {max_num_seqs: 2}, "
                                    "{max_running_requests: 8}]\n")
    path.write_text(text)
    doc = csa("sweep", str(path), "--json").json()
    assert doc["skipped"]["counts"] == {"BadDeployment": 1}
    assert "has no setting max_running_requests" in doc["skipped"]["points"][0]["detail"]
    by = {(r["point"]["settings"] or {}).get("max_num_seqs"): r for r in doc["results"]}
    assert set(by) == {None, 2}
    assert by[2]["runtime"]["peak_running"] <= 2 < by[None]["runtime"]["peak_running"]
    assert by[2]["launch"]["argv"][-2:] == ["--max-num-seqs", "2"]
    assert "--max-num-seqs" not in by[None]["launch"]["argv"]
    path.write_text(text.replace("max_num_seqs: 2", "max_num_seq: 2"))
    r = csa("sweep", str(path))
    assert r.code == 2 and "grid.settings" in r.err and "max_num_seq" in r.err
