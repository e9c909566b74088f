"""The busy-time bound (issue 45 item 5) is a lower bound on what the exact replay spends, and it prunes only
what the replay would refuse: a point the bound proves infeasible is never one the replay serves."""

from __future__ import annotations

import json

import numpy as np
import pytest

from csa_plan.planner.serving.serve import runtime_setup, serve
from csa_plan.planner.sweep.evaluate import (Task, _sim_config, load_context_workload, load_point_model, point_bound,
                                             triage)
from csa_plan.planner.sweep.spec import parse_spec


def _spec(tmp_path, rate, requests, isl, osl, device, tp, dp, settings=None):
    (tmp_path / "m.yaml").write_text(json.dumps({"name": "m", "seed": 3, "requests": requests, "classes": [
        {"name": "a", "rate": rate, "prompt": {"dist": "fixed", "value": isl},
         "output": {"dist": "fixed", "value": osl}}]}))
    return parse_spec({"workload": "m.yaml", "grid": {"model": "deepseek-v4-flash", "device": device, "tp": tp,
                                                      "dp": dp, "engine": "vllm-0.33", "max_seq_len": isl + osl,
                                                      "settings": settings},
                       "constraints": {"tpot_p99_max_ms": 50}}, str(tmp_path / "s.yaml"))


@pytest.mark.parametrize("device, tp, dp, settings", [("b200", 4, 2, None), ("h200", 8, 1, None),
                                                      ("b200", 2, 1, {"num_speculative_tokens": 2})])
def test_the_replay_is_never_faster_than_the_bound_says(tmp_path, device, tp, dp, settings):
    """An overload (every request at once): the replay's makespan on each replica is at least the busy
    seconds the bound charges for its requests."""
    spec = _spec(tmp_path, 10_000, 120, 1024, 64, device, tp, dp, settings)
    p = spec.points[0]
    bound = point_bound(Task(spec.context, p))
    assert bound is not None
    wl = load_context_workload(spec.context.workload, False, None)
    setup = runtime_setup(load_point_model(p.model, p.max_seq_len), _sim_config(spec.context, p))
    res = serve(setup, wl, 1.0)
    done = np.asarray(res.finished_ns, dtype=np.int64)
    assert (done >= 0).all()
    makespan_s = (done.max() - int(np.asarray(res.arrival_ns).min())) / 1e9
    rate = len(wl) / (int(wl.arrival_ns[-1] - wl.arrival_ns[0]) / 1e9)
    per_request_s = bound.busy_s_per_s / bound.rate_per_replica_per_s  # seconds of steps a request costs
    assert bound.rate_per_replica_per_s == pytest.approx(rate / dp, rel=1e-6)
    assert makespan_s >= per_request_s * len(wl) / dp * 0.999, (makespan_s, per_request_s)


def test_a_shape_the_bound_proves_short_of_the_rate_is_one_the_replay_refuses(tmp_path):
    """Far over the bound: the replay at that rate does not sustain it either (checked through evaluate)."""
    from csa_plan.planner.sweep.evaluate import evaluate

    spec = _spec(tmp_path, 40, 400, 2048, 128, "h200", 8, 1)
    p = spec.points[0]
    bound = point_bound(Task(spec.context, p))
    assert bound is not None and bound.infeasible and "not replayed" in bound.line()
    r = evaluate(Task(spec.context, p))
    assert not r.feasible


def test_a_split_the_engine_cannot_make_is_a_bad_deployment_with_the_nearest_valid_shapes(tmp_path):
    """SGLang and vLLM at dp 6: moe_intermediate_size 2048 over 6 MoE ranks is a divisibility rule, not
    'no memory left' (issue 45), and the skip offers the nearest shapes that split."""
    spec = _spec(tmp_path, 5, 50, 1024, 64, "b200", 1, [4, 6])
    skips = {s.key: s for s in triage(spec).skipped}
    (skip,) = skips.values()
    assert "dp=6" in skip.key and skip.reason.value == "BadDeployment"
    assert "moe_intermediate_size 2048 does not split over 6 MoE ranks" in skip.detail
    assert "nearest valid: tp 1 dp 4 (4 GPUs) or tp 1 dp 8 (8 GPUs)" in skip.detail


@pytest.mark.parametrize("engine, settings, k", [("vllm-0.33", {"num_speculative_tokens": 2}, 2),
                                                 ("vllm-0.33", None, 0),
                                                 ("sglang-0.5.23", {"speculative_num_steps": 2}, 3)])
def test_the_bound_counts_the_drafts_a_step_may_accept(tmp_path, engine, settings, k):
    """With MTP a step may yield 1 + k tokens a request: the bound must allow for every draft accepted, or it
    would prune a shape MTP makes feasible (SGLang's draft tokens count the verified one: the safe side)."""
    from csa_plan.planner.sweep.bounds import drafts

    (tmp_path / "m.yaml").write_text(json.dumps({"name": "m", "seed": 3, "requests": 20, "classes": [
        {"name": "a", "rate": 5, "prompt": {"dist": "fixed", "value": 1024}, "output": {"dist": "fixed", "value": 64}}]}))
    spec = parse_spec({"workload": "m.yaml", "grid": {"model": "deepseek-v4-flash", "device": "b200", "tp": 4,
                                                      "engine": engine, "max_seq_len": 2048, "settings": settings},
                       "constraints": {"tpot_p99_max_ms": 50}}, str(tmp_path / "s.yaml"))
    p = spec.points[0]
    setup = runtime_setup(load_point_model(p.model, p.max_seq_len), _sim_config(spec.context, p))
    assert drafts(setup.plan) == k
    assert point_bound(Task(spec.context, p)).drafts == k


def test_expert_parallel_is_an_axis_the_shard_rules_memory_and_clock_read(tmp_path):
    """expert_parallel: true splits the experts over every GPU (EP = tp x dp): another point (its own key), other
    weights a GPU (so another pool), another step clock, and the launch says --enable-expert-parallel."""
    from csa_plan.planner.engines.launch import launch_argv

    (tmp_path / "m.yaml").write_text(json.dumps({"name": "m", "seed": 3, "requests": 20, "classes": [
        {"name": "a", "rate": 5, "prompt": {"dist": "fixed", "value": 1024}, "output": {"dist": "fixed", "value": 64}}]}))
    spec = parse_spec({"workload": "m.yaml", "grid": {"model": "deepseek-v4-flash", "device": "b200", "tp": 2, "dp": 4,
                                                      "engine": "vllm-0.33", "max_seq_len": 2048,
                                                      "expert_parallel": [False, True]},
                       "constraints": {"tpot_p99_max_ms": 50}}, str(tmp_path / "s.yaml"))
    off, on = spec.points
    assert off.ep is None and on.ep == 8 and off.key != on.key and on.key.endswith("expert_parallel=true")
    assert off.limit_bytes != on.limit_bytes
    clocks = [runtime_setup(load_point_model(p.model, p.max_seq_len), _sim_config(spec.context, p)).time.linear
              for p in (off, on)]
    assert clocks[0] != clocks[1]
    assert "--enable-expert-parallel" in launch_argv(on.engine, on.model, on.tp, on.dp, ep=on.ep).argv


def test_independent_servers_behind_a_router_are_an_axis(tmp_path):
    """replicas: 2 is two servers of the tp x dp shape: twice the GPUs, each server's own pool and clock (the
    shape's), the trace split round-robin over them; the launch is the shape's command twice."""
    from csa_plan.planner.engines.launch import launch_argv

    (tmp_path / "m.yaml").write_text(json.dumps({"name": "m", "seed": 3, "requests": 40, "classes": [
        {"name": "a", "rate": 8, "prompt": {"dist": "fixed", "value": 1024}, "output": {"dist": "fixed", "value": 32}}]}))
    spec = parse_spec({"workload": "m.yaml", "grid": {"model": "deepseek-v4-flash", "device": "b200", "tp": 4,
                                                      "engine": "sglang-0.5.23", "max_seq_len": 2048,
                                                      "replicas": [1, 2]},
                       "constraints": {"tpot_p99_max_ms": 50}}, str(tmp_path / "s.yaml"))
    one, two = spec.points
    assert (one.devices, two.devices) == (4, 8) and two.key.endswith("replicas=2")
    assert one.limit_bytes == two.limit_bytes  # each server is the one-server shape
    b1, b2 = (point_bound(Task(spec.context, p)) for p in (one, two))
    assert b2.rate_per_replica_per_s == pytest.approx(b1.rate_per_replica_per_s / 2)
    launch = launch_argv(two.engine, two.model, two.tp, two.dp, replicas=two.replicas)
    assert launch.replicas == 2 and launch.text.endswith("# x2 servers behind a router")
    assert "--dp-size" not in launch.argv  # independent servers, not DP attention


def test_the_mxfp4_runner_s_128_column_rule_is_a_bad_deployment_that_offers_expert_parallelism(tmp_path):
    """SGLang tp 2 x dp 16: 2048 / 32 = 64 columns a rank is under the flashinfer_mxfp4 runner's 128 -- a split
    rule, once mislabelled NoMemoryLeft; EP over the 32 GPUs (MoE TP 1) makes it, and the skip says so."""
    spec = _spec(tmp_path, 5, 50, 1024, 64, "b200", 2, 16)
    spec = parse_spec({"workload": "m.yaml", "grid": {"model": "deepseek-v4-flash", "device": "b200", "tp": 2,
                                                      "dp": 16, "engine": "sglang-0.5.23", "max_seq_len": 2048},
                       "constraints": {"tpot_p99_max_ms": 50}}, str(tmp_path / "s.yaml"))
    (skip,) = triage(spec).skipped
    assert skip.reason.value == "BadDeployment" and "multiple of 128 intermediate columns per rank, got 64" in skip.detail
    assert "nearest valid: this shape with expert_parallel: true (EP 32)" in skip.detail
