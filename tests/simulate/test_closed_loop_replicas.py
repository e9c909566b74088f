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

from csa_plan.planner.replay.loop import replay
from csa_plan.planner.replay.protocol import RuntimeOptions, RuntimeTrace
from csa_plan.planner.serving.replicas import closed_shares, replay_closed_replicas
from csa_plan.planner.steptime.model import StepTime

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


def closed(engine: str, trace: RuntimeTrace, dp: int, c: int, time: StepTime, compiled: bool | None = None):
    plan, sizing = _plan(engine)
    return replay_closed_replicas(lambda t, share: replay(plan.runtime(sizing, t, RuntimeOptions()), t, time,
                                                          compiled=compiled, max_concurrency=share), trace, dp, c)


def check(res, trace: RuntimeTrace, c: int, dp: int) -> None:
    n = len(trace)
    sent = np.asarray(res.arrival_ns, dtype=np.int64)
    adm, first, fin = (np.asarray(x, dtype=np.int64) for x in (res.admitted_ns, res.first_token_ns, res.finished_ns))
    served = fin >= 0
    assert (sent[served] >= int(trace.arrival_ns[0])).all()
    assert ((adm >= sent) | (adm < 0)).all()
    assert ((first >= adm) | (first < 0)).all() and (fin[served] >= first[served]).all()
    assert (fin[served] >= sent[served]).all()
    assert set(np.flatnonzero(~served).tolist()) == set(res.refused)
    for t in np.unique(np.concatenate([sent[served], fin[served]])):
        assert ((sent <= t) & (fin > t) & served).sum() <= c, t  # one pool of C for the whole deployment
    shares = closed_shares(c, dp)
    assert sum(shares) == c and max(shares) - min(shares) <= 1 and len(shares) == min(c, dp)
    if not res.refused:  # within a replica, each request past its share is sent as one of its own ends
        for k, share in enumerate(shares):
            own = np.arange(k, n, len(shares))
            assert sorted(sent[own][share:].tolist()) == sorted(fin[own].tolist())[:max(0, len(own) - share)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data(), st.integers(1, 6), st.integers(1, 4), st.sampled_from(ENGINES))
def test_one_client_pool_for_every_replica_count(data, c, dp, engine):
    n = data.draw(st.integers(1, 16))
    gaps = data.draw(st.lists(st.integers(0, 3 * 10**9), min_size=n, max_size=n))
    prompts = data.draw(st.lists(st.one_of(st.integers(1, 3000), st.integers(9000, 9100)), min_size=n, max_size=n))
    outputs = data.draw(st.lists(st.integers(1, 80), min_size=n, max_size=n))
    trace = RuntimeTrace(np.cumsum(gaps).astype(np.int64), np.array(prompts, dtype=np.int64),
                         np.array(outputs, dtype=np.int64))
    check(closed(engine, trace, dp, c, StepTime(20.0, 10_000.0), compiled=data.draw(st.sampled_from([None, False]))),
          trace, c, dp)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_compiled_loops_and_the_twins_agree_under_the_split(engine):
    rng = np.random.default_rng(7)
    n = 40
    trace = RuntimeTrace(np.sort(rng.integers(0, 10**10, n)).astype(np.int64), rng.integers(1, 4000, n).astype(np.int64),
                         rng.integers(1, 60, n).astype(np.int64))
    time = StepTime(20.0, 10_000.0)
    for c, dp in ((1, 4), (3, 2), (5, 4), (8, 3)):
        a, b = closed(engine, trace, dp, c, time, compiled=False), closed(engine, trace, dp, c, time)
        assert a.same_as(b) and np.array_equal(np.asarray(a.arrival_ns), np.asarray(b.arrival_ns)), (c, dp)
        check(a, trace, c, dp)


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
    assert ("capacity: at least x" in text) == cap["at_least"]  # the run's own answer, as its JSON says
    from csa_plan.cli.render_runtime import capacity_line  # and both ways, whatever this trace's answer is

    for at_least in (True, False):
        line = capacity_line({**cap, "at_least": at_least})
        assert line.startswith("capacity: at least x") == at_least, line
