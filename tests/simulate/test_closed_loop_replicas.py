"""Issue 47, class 3: a closed-loop client in front of data-parallel replicas is one client pool for the
deployment (``vllm bench serve --max-concurrency C`` against the deployment), never C per replica, and no
time it reports is negative.

``--max-concurrency 1 --dp 4`` kept 4 requests in flight (C rounded up per replica) and the merged result
kept the trace's arrival times beside the closed loop's admissions: a p50 queue wait of -3.34 s at exit 0,
on both engines. Property test over random traces, concurrencies and replica counts, both engines."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from csa_plan.planner.runtime.loop import replay
from csa_plan.planner.runtime.protocol import RuntimeOptions, RuntimeTrace
from csa_plan.planner.runtime.replicas import replay_closed_replicas, split_round_robin
from csa_plan.planner.runtime.steptime import StepTime

_PLANS: dict = {}
ENGINES = ("vllm-0.33", "sglang-0.5.23")


def _plan(engine: str):
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.loaders.model_files import load_model

    if engine not in _PLANS:
        s = EngineSettings(max_num_seqs=8) if engine.startswith("vllm") else EngineSettings(max_running_requests=8)
        plan = get_engine(engine).configure(load_model("deepseek-v4-flash"), s, 8192)
        _PLANS[engine] = (plan, plan.size_pool(4 << 30))
    return _PLANS[engine]


def closed(engine: str, trace: RuntimeTrace, dp: int, c: int, time: StepTime):
    plan, sizing = _plan(engine)
    runtimes = [plan.runtime(sizing, sub, RuntimeOptions()) for sub, _ in split_round_robin(trace, dp)]
    return replay_closed_replicas(runtimes, trace, dp, time, c)


def check(res, trace: RuntimeTrace, c: int) -> None:
    n = len(trace)
    sent = np.asarray(res.arrival_ns, dtype=np.int64)
    adm, first, fin = (np.asarray(x, dtype=np.int64) for x in (res.admitted_ns, res.first_token_ns, res.finished_ns))
    assert (sent >= 0).all() and (np.diff(sent) >= 0).all()  # sent in the trace's order, every one
    assert (sent[:min(n, c)] == int(trace.arrival_ns[0])).all()
    served = fin >= 0
    assert ((adm >= sent) | (adm < 0)).all()
    assert ((first >= adm) | (first < 0)).all() and (fin[served] >= first[served]).all()
    assert (fin[served] >= sent[served]).all()
    assert set(np.flatnonzero(~served).tolist()) == set(res.refused)
    for t in np.unique(np.concatenate([sent, fin[served]])):
        assert ((sent <= t) & (fin > t) & served).sum() <= c, t  # one pool of C for the whole deployment
    if not res.refused:  # each request past the first C is sent as one ends
        assert sorted(sent[c:].tolist()) == sorted(fin.tolist())[:max(0, n - c)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data(), st.integers(1, 6), st.integers(1, 4), st.sampled_from(ENGINES))
def test_one_client_pool_for_every_replica_count(data, c, dp, engine):
    n = data.draw(st.integers(1, 16))
    gaps = data.draw(st.lists(st.integers(0, 3 * 10**9), min_size=n, max_size=n))
    prompts = data.draw(st.lists(st.one_of(st.integers(1, 3000), st.integers(9000, 9100)), min_size=n, max_size=n))
    outputs = data.draw(st.lists(st.integers(1, 80), min_size=n, max_size=n))
    trace = RuntimeTrace(np.cumsum(gaps).astype(np.int64), np.array(prompts, dtype=np.int64),
                         np.array(outputs, dtype=np.int64))
    check(closed(engine, trace, dp, c, StepTime(20.0, 10_000.0)), trace, c)


@pytest.mark.parametrize("engine", ENGINES)
def test_one_replica_is_the_plain_closed_loop(engine):
    """dp 1 through the lockstep driver is the one-replica loop, request by request and step by step."""
    rng = np.random.default_rng(7)
    n = 12
    trace = RuntimeTrace(np.sort(rng.integers(0, 10**10, n)).astype(np.int64), rng.integers(1, 4000, n).astype(np.int64),
                         rng.integers(1, 60, n).astype(np.int64))
    time = StepTime(20.0, 10_000.0)
    plan, sizing = _plan(engine)
    for c in (1, 3):
        a = closed(engine, trace, 1, c, time)
        b = replay(plan.runtime(sizing, trace, RuntimeOptions()), trace, time, compiled=False, max_concurrency=c)
        assert a.same_as(b) and np.array_equal(np.asarray(a.arrival_ns), np.asarray(b.arrival_ns))


@pytest.mark.parametrize("engine", ENGINES)
def test_the_issue_case_has_one_request_in_flight_and_no_negative_wait(csa, engine):
    from helpers import EXAMPLES

    r = csa("simulate", str(EXAMPLES / "traces" / "sample.jsonl"), "--engine", engine, "--model", "deepseek-v4-flash",
            "--device-memory", "h200", "--tp", "2", "--dp", "4", "--max-concurrency", "1", "--json")
    assert r.code == 0, r.err
    rt = r.json()["runtime"]
    for key in ("queue_wait", "ttft", "e2e"):
        assert all(v >= 0 for k, v in rt[key].items() if k.endswith("_s") and v is not None), (key, rt[key])
    assert rt["occupancy"]["peak_running"] <= 1


ENGINE_RUN = ("--model", "deepseek-v4-flash", "--device-memory", "h200", "--tp", "2")


@pytest.mark.parametrize("engine", ENGINES)
def test_find_capacity_with_a_closed_loop_is_refused(csa, tmp_path, engine):
    """The loop ignores arrival times, so a rate search would report its ceiling as a capacity."""
    from helpers import EXAMPLES

    trace = str(EXAMPLES / "traces" / "sample.jsonl")
    r = csa("simulate", trace, "--engine", engine, *ENGINE_RUN, "--find-capacity", "--max-wait", "10",
            "--max-concurrency", "2")
    assert r.code == 2 and "--find-capacity" in r.err and "closed loop" in r.err and len(r.err.splitlines()) == 1


def test_runtime_capacity_text_says_at_least_as_the_json_does(csa):
    from helpers import EXAMPLES

    args = ("simulate", str(EXAMPLES / "traces" / "sample.jsonl"), "--engine", "vllm-0.33", *ENGINE_RUN,
            "--find-capacity", "--max-wait", "10")
    cap = csa(*args, "--json").json()["capacity"]
    text = " ".join(csa(*args).out.split())
    assert cap["at_least"] is True and "capacity: at least x" in text
