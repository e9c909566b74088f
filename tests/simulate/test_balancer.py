"""Issue 44, item 2: requests spread over DP ranks as each engine's own load balancer spreads them.

The policy functions equal the engines' own code on the cases ``tools/crosscheck_balancer.py`` drove through
vLLM 0.25.0 / 0.33.0 / 0.34.0's ``get_core_engine_for_request`` and SGLang 0.5.23's ``DPBudget``
(``tests/fixtures/balancer_expected.json``); the ranks replayed together (``serving/balanced.py``) give
exactly the assignments the engines' rules give on a constructed trace where they differ from round-robin,
and the same run as the per-rank replay where round-robin and the closed loop's order coincide."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from csa_plan.planner.replay.loop import replay
from csa_plan.planner.replay.protocol import RuntimeOptions, RuntimeTrace
from csa_plan.planner.serving.balanced import replay_balanced
from csa_plan.planner.serving.balancer import (Balancer, DPBudget, Method, SglangLoad, VllmDpLb, sglang_balancer,
                                               vllm_balancer, vllm_pick)
from csa_plan.planner.serving.replicas import replay_closed_replicas
from csa_plan.planner.steptime.model import StepTime

from test_closed_loop_replicas import _plan, check

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = json.loads((ROOT / "tests" / "fixtures" / "balancer_expected.json").read_text())
TIME = StepTime(20.0, 10_000.0, linear=(1e-3, 0.0, 2e-6, 0.0, 1e-5, 0.0, 0.0, -1.0))
RR = Balancer(Method.ROUND_ROBIN, "round_robin")


def _tool():
    sys.path.insert(0, str(ROOT / "tools"))
    import crosscheck_balancer

    return crosscheck_balancer


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_the_engines_own_picks(key):
    """Every pick the engine's own code made on the stored cases, made again by csa-plan's port."""
    tool = _tool()
    doc = EXPECTED[key]
    check_fn = tool.check_sglang if key.startswith("sglang") else tool.check_vllm
    assert sum(len(c["events"]) for c in doc["cases"]) > 300
    assert check_fn(doc) == []


def test_the_stored_cases_tell_the_scores_apart():
    """The cases discriminate: 0.33's picks under 0.25's score (and SGLang's under the other method) differ."""
    tool = _tool()
    swapped = dict(EXPECTED["vllm-0.33.0"], old_score=True)
    assert len(tool.check_vllm(swapped)) > 5
    swapped = dict(EXPECTED["sglang-0.5.23/total_tokens"], method="total_requests")
    assert len(tool.check_sglang(swapped)) > 5


def test_vllm_score_by_hand():
    """core_client.py:1768-1794 (0.33.0) on one table: rank 1's queue on a full KV cache is penalized
    (2 + 6 x 2 x 0.4 = 6.8 > rank 2's 5), rank 0's in-flight floor (7) beats its stale snapshot (1)."""
    table = [[0, 1, 0.2], [2, 0, 0.9], [0, 5, 0.1]]
    assert vllm_pick(table, [7, 0, 0], 0, Method.VLLM_INFLIGHT) == 2
    assert vllm_pick(table, [0, 0, 0], 0, Method.VLLM_INFLIGHT) == 0
    assert vllm_pick(table, [0, 0, 0], 0, Method.VLLM_QUEUE) == 0  # 0.25: 4 x 0 + 1 = 1 lowest
    assert vllm_pick([[0, 0], [0, 0], [0, 0]], [0, 0, 0], 2, Method.VLLM_QUEUE) == 2  # a tie: the scan's start wins


def test_vllm_publication_clock():
    """The coordinator publishes 100 ms after its last publication once counts changed, at once when they
    change later, every 5 s otherwise; a publication wipes the front-end's own +1s."""
    lb = VllmDpLb(2, Method.VLLM_INFLIGHT, 0)
    lb.step_start(0, 30_000_000, _vl(3, 0))  # changed at 30 ms: published at 100 ms
    assert lb.choose(99_999_999, 0) == 0 and lb.table[0][0] == 1  # before it: the +1 on a zero table
    lb.finished(0, 1)
    assert lb.choose(100_000_000, 0) == 1 and lb.table == [[3, 0, 0.0], [1, 0, 0.0]] and lb.publications == 1
    lb.step_start(1, 350_000_000, _vl(1, 0))  # changed at 350 ms, 250 ms after the last: published at once
    lb.choose(350_000_000, 0)
    assert lb.publications == 2 and lb.last_publish_ns == 350_000_000
    lb.choose(5_350_000_000, 0)  # nothing changed: the 5 s heartbeat
    assert lb.publications == 3


def _vl(waiting: int, running: int):
    from csa_plan.planner.serving.balancer import VllmLoad

    return VllmLoad(waiting, running, 0.0)


def test_sglang_budget_keeps_its_own_counts_until_a_new_snapshot():
    """DPBudget.update_budget (:129-139) skips a rank whose snapshot is not new: its +1s stand."""
    b = DPBudget(2)
    b.update_budget([(0, 1, SglangLoad(1, 0, 100)), (1, 1, SglangLoad(0, 0, 0))])
    assert [b.dispatch(Method.TOTAL_REQUESTS) for _ in range(3)] == [1, 0, 1]
    b.update_budget([(0, 1, SglangLoad(0, 0, 0)), (1, 2, SglangLoad(0, 0, 0))])  # rank 0's stamp unchanged
    assert b.total_requests == [2, 0]


def test_sglang_snapshots_are_read_only_when_written():
    """A rank writes a snapshot after a prefill batch, every 15th decode batch and on falling idle
    (scheduler.py:871-886, 5322): the replay asks for its load then and only then, and the controller's
    table takes exactly those snapshots."""
    from csa_plan.planner.serving.balancer import SGLANG_SNAPSHOT_INTERVAL, SglangDpController

    c = SglangDpController(2, Method.TOTAL_REQUESTS, 0)
    asked = []

    def load(running, waiting):
        def read():
            asked.append((running, waiting))
            return SglangLoad(running, waiting, 0)
        return read

    c.step_end(0, 10, True, False, load(3, 0))  # a prefill batch: written
    for i in range(2 * SGLANG_SNAPSHOT_INTERVAL - 1):  # decodes: the 15th written, the 29th not yet
        c.step_end(0, 20 + i, False, False, load(2, 0))
    c.step_end(1, 30, False, True, load(0, 0))  # idle: written
    assert asked == [(3, 0), (2, 0), (0, 0)]
    assert [t for t, _ in c.snapshots[0]] == [10, 20 + SGLANG_SNAPSHOT_INTERVAL - 1]
    assert c.choose(100_000_000, 0) == 1 and c.budget.total_requests == [2, 1]


def _uneven(n: int) -> RuntimeTrace:
    """Request 0 is long (4,096-token prompt, 400 outputs: 0.41 s); the others short (128, 2), one every 50 ms."""
    prompts = np.array([4096] + [128] * (n - 1), dtype=np.int64)
    outputs = np.array([400] + [2] * (n - 1), dtype=np.int64)
    return RuntimeTrace(np.arange(n, dtype=np.int64) * 50_000_000, prompts, outputs)


@pytest.mark.parametrize("engine, balancer, expected", [
    ("vllm-0.33", vllm_balancer("vllm-0.33"), [0, 1, 1, 1, 1, 1]),
    # 0.25's score reads only the table: at 150 ms and 250 ms the coordinator's next publication is not yet due
    # (rank 1's counts changed at 100 ms / 200 ms, published 100 ms after the last one), so the table still
    # shows rank 1's +1 (4 x 1 waiting) against rank 0's one running request: rank 0 wins
    ("vllm-0.33", vllm_balancer("vllm-0.25"), [0, 1, 1, 0, 1, 0]),
    ("sglang-0.5.23", sglang_balancer("total_requests"), [0, 1, 1, 1, 1, 1]),
    ("sglang-0.5.23", sglang_balancer("total_tokens"), [0, 1, 1, 1, 1, 1]),
])
def test_a_load_aware_balancer_avoids_the_busy_rank(engine, balancer, expected):
    """Round-robin sends every other short request behind the long one on rank 0; each engine's balancer
    sends them to the idle rank 1 as far as the state it has been shown says rank 0 is busy."""
    plan, sizing = _plan(engine)
    trace = _uneven(6)
    rr, lb = [], []
    a = replay_balanced(lambda: plan.runtime(sizing, trace, RuntimeOptions()), trace, TIME, 2, RR, assignment=rr)
    b = replay_balanced(lambda: plan.runtime(sizing, trace, RuntimeOptions()), trace, TIME, 2, balancer,
                        assignment=lb)
    assert rr == [0, 1, 0, 1, 0, 1]
    assert lb == expected
    assert not a.refused and not b.refused
    spread = f"{expected.count(0)}/{expected.count(1)} over the 2 ranks"
    assert any(balancer.label in n and spread in n for n in b.notes)
    assert (np.asarray(b.finished_ns) > 0).all() and (np.asarray(a.finished_ns) > 0).all()


@pytest.mark.parametrize("engine", ("vllm-0.33", "sglang-0.5.23"))
def test_round_robin_together_equals_the_ranks_alone_in_lockstep(engine):
    """Equal requests behind a closed loop: the co-simulation with round-robin sends request i to rank
    i mod dp and steps the ranks together, which is what the per-rank replay put in lockstep does."""
    plan, sizing = _plan(engine)
    n = 16
    trace = RuntimeTrace(np.zeros(n, dtype=np.int64), np.full(n, 512, dtype=np.int64), np.full(n, 32, dtype=np.int64))
    alone = replay_closed_replicas(lambda t, share: replay(plan.runtime(sizing, t, RuntimeOptions()), t, TIME,
                                                           max_concurrency=share), trace, 2, 4, lockstep_time=TIME)
    together = replay_balanced(lambda: plan.runtime(sizing, trace, RuntimeOptions()), trace, TIME, 2, RR,
                               max_concurrency=4)
    for field in ("arrival_ns", "admitted_ns", "first_token_ns", "finished_ns"):
        assert np.array_equal(np.asarray(getattr(alone, field)), np.asarray(getattr(together, field))), field
    check(together, trace, 4, 2)


@pytest.mark.parametrize("engine, balancer", [("vllm-0.33", vllm_balancer("vllm-0.33")),
                                              ("sglang-0.5.23", sglang_balancer("total_tokens"))])
def test_one_client_pool_under_a_balancer(engine, balancer):
    """Uneven requests behind one closed loop of 6: never more than 6 in flight over the ranks, every
    request served once, on one rank, each sent when another ended."""
    plan, sizing = _plan(engine)
    rng = np.random.default_rng(44)
    n = 40
    trace = RuntimeTrace(np.zeros(n, dtype=np.int64), rng.integers(64, 3000, n), rng.integers(1, 80, n))
    owners: list[int] = []
    res = replay_balanced(lambda: plan.runtime(sizing, trace, RuntimeOptions()), trace, TIME, 3, balancer,
                          max_concurrency=6, assignment=owners)
    fin = np.asarray(res.finished_ns)
    sent = np.asarray(res.arrival_ns)
    assert (fin > 0).all() and not res.refused and set(owners) == {0, 1, 2}
    for t in np.unique(np.concatenate([sent, fin])):
        assert ((sent <= t) & (fin > t)).sum() <= 6
    assert sorted(sent[6:].tolist()) == sorted(fin.tolist())[:n - 6]


FLASH = ("--model", "deepseek-v4-flash", "--gpu", "b200", "--max-concurrency", "8")
DP2 = ("--tp", "1", "--dp", "2", "--ep", "2")


def _mix(tmp_path: Path) -> str:
    p = tmp_path / "mix.yaml"
    p.write_text("name: lb\nseed: 1\nrequests: 16\nmodel: deepseek-v4-flash\nmax_seq_len: 4096\nclasses:\n"
                 "  - name: c\n    rate: 4.0\n    prompt: {dist: uniform, low: 256, high: 2048}\n"
                 "    output: {dist: uniform, low: 4, high: 32}\n")
    return str(p)


@pytest.mark.parametrize("args, field, words", [
    (("--engine", "sglang-0.5.23", *DP2, "--load-balance-method", "shortest_queue"),
     "--load-balance-method", "shortest_queue"),
    (("--engine", "sglang-0.5.23", *DP2, "--load-balance-method", "follow_bootstrap_room"),
     "--load-balance-method", "bootstrap room"),
    (("--engine", "sglang-0.5.23", "--tp", "2", "--load-balance-method", "total_requests"), "--load-balance-method",
     "--dp above 1"),
    (("--engine", "vllm-0.33", *DP2, "--load-balance-method", "total_requests"),
     "--load-balance-method", "SGLang"),
    (("--engine", "sglang-0.5.23", "--tp", "2", "--pp", "2", "--dp", "2", "--load-balance-method", "total_tokens"),
     "--load-balance-method", "pipeline stages"),
])
def test_a_method_that_cannot_apply_is_one_line(csa, tmp_path, args, field, words):
    r = csa("simulate", _mix(tmp_path), *FLASH, *args)
    assert r.code == 2 and field in r.err and words in r.err and len(r.err.strip().splitlines()) == 1, (r.code,
                                                                                                         r.err)


@pytest.mark.parametrize("engine, extra, method", [
    ("vllm-0.33", (), "vllm-inflight-score"), ("sglang-0.5.23", (), "round_robin"),
    ("sglang-0.5.23", ("--load-balance-method", "total_tokens"), "total_tokens"),
])
def test_the_output_names_the_balancer(csa, tmp_path, engine, extra, method):
    args = ("simulate", _mix(tmp_path), *FLASH, "--engine", engine, *DP2, *extra)
    r = csa(*args, "--json")
    assert r.code == 0, r.err
    lb = json.loads(r.out)["runtime"]["dp_balancer"]
    assert lb["method"] == method
    text = csa(*args)
    assert "requests over the DP ranks:" in text.out
    if engine.startswith("vllm"):
        assert "not configurable in vLLM" in lb["label"]


def test_the_option_is_sglangs_own():
    """--load-balance-method's choices are what SGLang 0.5.23's parser registers (tests/fixtures/engine_flags.json),
    and vLLM registers no such flag (its balancer is not configurable)."""
    from csa_plan.planner.serving.balancer import SGLANG_CHOICES

    flags = json.loads((ROOT / "tests" / "fixtures" / "engine_flags.json").read_text())
    assert sorted(SGLANG_CHOICES) == sorted(flags["sglang-0.5.23"]["values"]["--load-balance-method"][1])
    assert all("--load-balance-method" not in flags[r]["values"] for r in ("vllm-0.25", "vllm-0.26", "vllm-0.33",
                                                                          "vllm-0.34"))
    assert sglang_balancer(None).round_robin and "auto = round_robin" in sglang_balancer(None).label


@pytest.mark.parametrize("engine, balancer", [("vllm-0.33", vllm_balancer("vllm-0.33")),
                                              ("vllm-0.33", vllm_balancer("vllm-0.26")),
                                              ("sglang-0.5.23", sglang_balancer("total_requests"))])
def test_open_loop_arrivals_under_a_balancer(engine, balancer):
    """Open-loop arrivals keep their trace times; each request is dispatched on arrival and its times are
    ordered (sent <= admitted <= first token <= finished); the shared steps are every rank's."""
    plan, sizing = _plan(engine)
    rng = np.random.default_rng(7)
    n = 60
    trace = RuntimeTrace(np.sort(rng.integers(0, 2_000_000_000, n)).astype(np.int64), rng.integers(64, 3000, n),
                         rng.integers(1, 60, n))
    owners: list[int] = []
    res = replay_balanced(lambda: plan.runtime(sizing, trace, RuntimeOptions()), trace, TIME, 3, balancer,
                          assignment=owners)
    sent, adm, first, fin = (np.asarray(x, dtype=np.int64) for x in (res.arrival_ns, res.admitted_ns,
                                                                      res.first_token_ns, res.finished_ns))
    assert np.array_equal(sent, trace.arrival_ns) and not res.refused and min(owners) >= 0
    assert (adm >= sent).all() and (first >= adm).all() and (fin >= first).all()
    ends = np.asarray(res.series.end_ns)
    assert set(fin.tolist()) <= set(ends.tolist())  # every finish is a shared step's end


def test_vllm_with_pipeline_stages_says_its_balancer_is_not_modelled(csa, tmp_path):
    """vLLM's balancer is not asked for, so --pp is not refused: the ranks are replayed alone, round-robin,
    and the output says so."""
    r = csa("simulate", _mix(tmp_path), "--model", "deepseek-v4-flash", "--gpu", "h200", "--max-concurrency", "8",
            "--engine", "vllm-0.33", "--tp", "2", "--pp", "2", "--dp", "2", "--json")
    assert r.code == 0, r.err
    lb = json.loads(r.out)["runtime"]["dp_balancer"]
    assert lb["method"] == "round_robin" and "with --pp" in lb["label"] and "not modelled" in lb["label"]


def test_a_sweep_method_on_replicas_behind_a_router_is_refused(csa, tmp_path):
    (tmp_path / "m.yaml").write_text("name: m\nseed: 1\nrequests: 20\nmodel: deepseek-v4-flash\nclasses:\n  - name: a\n"
                                     "    rate: 1\n    prompt: {dist: fixed, value: 100}\n"
                                     "    output: {dist: fixed, value: 10}\n")
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nworkload: m.yaml\ngrid:\n  model: deepseek-v4-flash\n  device: h200\n  tp: 1\n  dp: 2\n"
                    "  expert_parallel: true\n  replicas: 2\n  engine: sglang-0.5.23\n  settings:\n"
                    "    - {load_balance_method: total_tokens}\nconstraints: {wait_p99_max_s: 10}\n")
    r = csa("sweep", str(spec), "-j", "1")
    assert r.code == 2 and "grid.settings" in r.err and "replicas 2" in r.err, r.err
    assert len(r.err.strip().splitlines()) == 1
