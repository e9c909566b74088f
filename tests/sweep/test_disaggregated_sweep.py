"""sweep and plan over disaggregated layouts (issue 46, item 4): the ``disaggregation`` axis beside aggregated
shapes, the one rate search and steady probe through the composition of ``serving/disaggregation.py``,
GPUs counted over both roles, each role's launch command."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers import EXAMPLES

TRACE = EXAMPLES / "traces" / "azure_conv_sample_200.csv"
SPEC = """name: pd
workload: azure_conv_sample_200.csv
grid:
  model: deepseek-v4-flash
  device: h200
  tp: [2, 4]
  max_seq_len: 65536
  engine: {engine}
  disaggregation:
    - null
    - {{prefill_workers: 1, prefill_tp: 2, decode_workers: 1, decode_tp: 2}}
constraints: {{zero_refusals: true, tpot_p99_max_ms: 200}}
search: {{rel_tol: 0.2, max_scale: 2}}
"""


def _spec(tmp_path: Path, engine: str = "vllm-0.33", body: str | None = None) -> Path:
    shutil.copy(TRACE, tmp_path / TRACE.name)
    path = tmp_path / "pd.yaml"
    path.write_text(body or SPEC.format(engine=engine))
    return path


def _pd(spec):
    (p,) = [p for p in spec.points if p.disaggregation is not None]
    return p


def _load(path: Path):
    from csa_plan.planner.sweep.spec import load_spec

    return load_spec(str(path))


def test_one_point_per_layout_counted_over_both_roles(tmp_path):
    spec = _load(_spec(tmp_path))
    layouts = [p.layout_label for p in spec.points]
    assert layouts == ["aggregated", "1P tp2 + 1D tp2", "aggregated"]  # tp 2 and 4 aggregated; the layout once
    pd = _pd(spec)
    assert (pd.tp, pd.dp, pd.pp, pd.replicas) == (1, 1, 1, 1) and pd.devices == 4
    assert pd.key.endswith("disaggregation=1P tp2 + 1D tp2")
    assert pd.as_dict()["disaggregation"] == "1P tp2 + 1D tp2"
    assert pd.role_point("decode").tp == 2 and pd.role_point("decode").disaggregation is None


def test_a_role_s_dp_and_the_grid_s_expert_parallel_shape_each_role_s_worker(tmp_path):
    """issue 46: a layout's role dp is its worker's data-parallel ranks (tp x dp GPUs, each rank a replica of the
    role's replay); the grid's expert_parallel is EP over every GPU of each worker (ep = tp x dp), folded into the
    roles so the point is one layout; the role's aggregated point carries both."""
    body = SPEC.format(engine="vllm-0.33").replace(
        "    - {prefill_workers: 1, prefill_tp: 2, decode_workers: 1, decode_tp: 2}",
        "    - {prefill_workers: 1, prefill_tp: 1, prefill_dp: 2, decode_workers: 2, decode_tp: 2}").replace(
        "  disaggregation:", "  expert_parallel: [false, true]\n  disaggregation:")
    spec = _load(_spec(tmp_path, body=body))
    pds = [p for p in spec.points if p.disaggregation is not None]
    assert [p.layout_label for p in pds] == ["1P tp1 dp2 + 2D tp2", "1P tp1 dp2 ep2 + 2D tp2 ep2"]
    plain, ep = pds
    assert plain.devices == ep.devices == 2 + 4 and not ep.expert_parallel
    pre = ep.role_point("prefill")
    assert (pre.tp, pre.dp, pre.ep, pre.replicas) == (1, 2, 2, 1)
    assert (plain.role_point("prefill").ep, ep.role_point("decode").ep) == (None, 2)
    assert (ep.disaggregation.prefill.ranks, ep.disaggregation.decode.ranks) == (2, 2)


@pytest.mark.parametrize("value, problem", [
    ("{prefill_workers: 1, prefill_tp: 2}", "without the other role: add decode_workers/decode_tp"),
    ("{prefill_tp: 2, decode_tp: 0}", "decode_tp: must be at least 1"),
    ("{prefill_tp: 2, decode_tp: 2, transfer_link: carrier-pigeon}", "unknown link"),
    ("{prefill_tp: 2, decode_tp: 2, decode_pp: 2}", "unknown key"),
    ("{prefill_tp: 2, decode_tp: 2, decode_dp: 0}", "decode_dp: must be at least 1"),
    ("{prefill_tp: 2, decode_tp: 2, decode_dp: 2, decode_ep: 2}", "tp x dp = 4"),
    ("{prefill_tp: 2, prefill_ep: 2}", "without the other role"),
    ("{prefill_tp: 2, decode_ep: 2}", "decode_ep: shapes the decode role"),
    ("{}", "names no role"),
])
def test_a_bad_layout_is_one_line_naming_its_field(tmp_path, value, problem):
    from csa_plan.planner.errors import BadInput

    body = SPEC.format(engine="vllm-0.33").replace(
        "    - {prefill_workers: 1, prefill_tp: 2, decode_workers: 1, decode_tp: 2}", f"    - {value}")
    with pytest.raises(BadInput) as exc:
        _load(_spec(tmp_path, body=body))
    assert exc.value.field.startswith("grid.disaggregation") and problem in exc.value.problem


def test_static_skips_say_which_role_and_why(tmp_path):
    from csa_plan.planner.sweep.evaluate import triage

    body = SPEC.format(engine="[null, vllm-0.33]").replace(
        "    - {prefill_workers: 1, prefill_tp: 2, decode_workers: 1, decode_tp: 2}",
        "    - {prefill_workers: 1, prefill_tp: 1, decode_workers: 1, decode_tp: 2}\n"
        "    - {prefill_workers: 2, prefill_tp: 4, decode_workers: 1, decode_tp: 4, transfer_link: nvlink}")
    body = body.replace("tpot_p99_max_ms: 200", "wait_p99_max_s: 5")
    spec = _load(_spec(tmp_path, body=body))
    skipped = {s.key: s for s in triage(spec).skipped}
    why = {p.layout_label + " " + str(p.engine): skipped[p.key].detail for p in spec.points
           if p.disaggregation is not None and p.key in skipped}
    assert why["1P tp1 + 1D tp2 None"].startswith("disaggregation replays an engine's")
    assert why["1P tp1 + 1D tp2 vllm-0.33"].startswith("prefill worker (tp1): ")  # V4-Flash needs two H200s
    assert "nvlink" in why["2P tp4 + 1D tp4 over nvlink vllm-0.33"]  # 12 GPUs: more than one 8-GPU NVLink domain


@pytest.mark.parametrize("engine", ["vllm-0.33", "sglang-0.5.23"])
def test_the_point_is_the_composition_under_the_one_rate_search(tmp_path, engine):
    """The disaggregated point's figures are ``serve_disaggregated``'s at the target rate, and the rate search
    serves the composed setup through ``serve.serve`` (the steady probe's own call) to the same client result."""
    import numpy as np

    from csa_plan.planner.serving.disaggregation import composed_setup, serve_disaggregated
    from csa_plan.planner.serving.serve import report, serve
    from csa_plan.planner.sweep.evaluate import (Task, _role_setups, evaluate, load_context_workload,
                                                 load_point_model, transfer_link)

    spec = _load(_spec(tmp_path, engine))
    p = _pd(spec)
    r = evaluate(Task(spec.context, p))
    wl = load_context_workload(spec.context.workload, spec.context.sort, spec.context.seed)
    model = load_point_model(p.model, p.max_seq_len)
    prefill, decode = _role_setups(spec.context, p, model)
    _, bytes_s = transfer_link(p)
    run = serve_disaggregated(prefill, decode, wl, 1.0, bytes_s)
    setup = composed_setup(prefill, decode, bytes_s)
    via_search = serve(setup, wl, 1.0)
    for name in ("arrival_ns", "admitted_ns", "first_token_ns", "finished_ns"):
        assert np.array_equal(np.asarray(getattr(via_search, name)), np.asarray(getattr(run.result, name)))
    rep = report(setup, run.result, wl)
    assert r.devices == 4 and r.runtime.ttft_p99_s == rep.ttft.p99_s and r.runtime.tpot_p99_s == rep.tpot.p99_s
    assert r.runtime.served == 200 and r.probes >= 1 and r.steady
    d = r.disaggregation
    assert d["layout"] == "1P tp2 + 1D tp2" and d["link"] == "nvlink" and d["prefill"]["gpus"] == 2
    t = d["transfer"]
    sent = np.asarray(run.transfers.end_ns) >= 0
    assert t["requests"] == int(sent.sum()) == 200
    assert t["bytes_total"] == int(np.asarray(run.transfers.bytes_total)[sent].sum()) > 0
    assert isinstance(t["bytes"]["p99"], int) and t["bytes"]["p50"] <= t["bytes"]["p99"] <= t["bytes"]["max"]
    from csa_plan.planner.sweep.results import PointResult

    assert PointResult.from_dict(r.as_dict()) == r  # a resume line round-trips


def test_the_busy_bound_bounds_each_role(tmp_path):
    """A layout whose prefill worker cannot compute the prompts the rate brings is not replayed, and the
    bound names the role."""
    from csa_plan.planner.sweep.evaluate import Task, point_bound

    body = SPEC.format(engine="vllm-0.33").replace("max_scale: 2", "max_scale: 2000").replace(
        "  engine: vllm-0.33", "  engine: vllm-0.33\n  rate_scale: 1000")
    spec = _load(_spec(tmp_path, body=body))
    b = point_bound(Task(spec.context, _pd(spec)))
    assert b is not None and b.infeasible and b.line().startswith("bound: a ")
    assert b.who in ("a prefill worker", "a decode worker")


PP_SPEC = """name: pp
workload: azure_conv_sample_200.csv
grid:
  model: deepseek-v4-flash
  device: h200
  tp: 2
  pp: [1, 2]
  max_seq_len: 65536
  engine: {engine}
constraints: {{zero_refusals: true, tpot_p99_max_ms: 200}}
search: {{rel_tol: 0.2, max_scale: 2}}
"""


@pytest.mark.parametrize("engine", ["vllm-0.33", "sglang-0.5.23"])
def test_pipeline_stages_are_evaluated_with_each_stage_s_pool(tmp_path, engine):
    """issue 46 item 3: an engine point with pp 2 is no longer skipped; it replays the scheduler in the pool
    the stages give it (``serving/pipeline.py``, as ``simulate --engine --pp`` does) on 4 GPUs."""
    from csa_plan.planner.serving.serve import runtime_setup
    from csa_plan.planner.sweep.evaluate import Task, _sim_config, evaluate, load_point_model, pipeline_pools_of, triage

    spec = _load(_spec(tmp_path, body=PP_SPEC.format(engine=engine)))
    assert not triage(spec).skipped
    (p2,) = [p for p in spec.points if p.pp == 2]
    pools = pipeline_pools_of(p2)
    assert len(pools.stages) == 2
    (p1,) = [p for p in spec.points if p.pp == 1]
    model = load_point_model(p2.model, p2.max_seq_len)
    setup = runtime_setup(model, _sim_config(spec.context, p2))
    assert setup.pipeline is not None and setup.sizing.total_units == pools.sizing.total_units
    assert setup.sizing.total_units > runtime_setup(model, _sim_config(spec.context, p1)).sizing.total_units
    r = evaluate(Task(spec.context, p2))
    assert r.devices == 4 and r.runtime is not None and r.runtime.served == 200 and r.steady


def test_a_sweep_answered_by_a_layout_prints_each_role_s_launch(tmp_path, csa):
    body = SPEC.format(engine="sglang-0.5.23").replace("  tp: [2, 4]\n", "").replace("    - null\n", "")
    path = _spec(tmp_path, body=body)
    r = csa("sweep", str(path), "--json")
    assert r.code == 0, r.err
    doc = r.json()
    a = doc["answer"]
    assert a["label"] == "the only point" and a["point"]["disaggregation"] == "1P tp2 + 1D tp2"
    assert a["devices"] == 4 and a["disaggregation"]["transfer"]["requests"] == 200
    assert a["point"]["limit_bytes"] > 0  # the decode worker's pool, not a tp-1 budget
    assert doc["head"]["launch"]["decode"]["argv"][-4:] == ["--disaggregation-mode", "decode",
                                                            "--disaggregation-transfer-backend", "mooncake"]
    text = csa("sweep", str(path)).out
    assert "launch prefill: python -m sglang.launch_server" in text and "KV transfer over nvlink" in text
