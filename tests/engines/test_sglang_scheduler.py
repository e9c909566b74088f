"""SGLang 0.5.23's scheduler in motion (planner/engines/sglang/scheduler.py) through the one loop.

Small cases worked from the source (file:line in scheduler.py's docstring); Hypothesis invariants over
random traces and pools, retraction storms included. The per-step agreement with SGLang's own
PrefillAdder / ratio tracker / retraction order / window eviction is tools/crosscheck_sglang_runtime.py
(outside CI: it needs SGLang installed).
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from csa_plan.planner.engines.sglang.runtime import SglangRuntime, page_keys
from csa_plan.planner.engines.sglang.compiled import replay_for
from csa_plan.planner.engines.sglang.scheduler import SchedulerConfig
from csa_plan.planner.replay.loop import replay
from csa_plan.planner.replay.protocol import RuntimeTrace
from csa_plan.planner.steptime.model import StepTime

TIME = StepTime(tpot_ms=20.0, prefill_tok_s=10_000.0)


def _trace(arrival_s, prompt, output, ids=None):
    offsets = None
    flat = None
    if ids is not None:
        offsets = np.cumsum([0] + [len(x) for x in ids]).astype(np.int64)
        flat = np.array([i for x in ids for i in x], dtype=np.int64)
    return RuntimeTrace(np.array([int(a * 1e9) for a in arrival_s], dtype=np.int64),
                        np.array(prompt, dtype=np.int64), np.array(output, dtype=np.int64), flat, offsets)


def _run(trace, **cfg):
    rt = SglangRuntime(SchedulerConfig(**cfg), trace, "sglang-0.5.23", compiled=replay_for)
    return rt, replay(rt, trace, TIME, compiled=False)  # the Python model: its internals are read below


def test_prefill_steps_run_before_decode_steps():
    """scheduler.py:3999-4001: a prefill batch, when one is admitted, runs instead of the decode step."""
    tr = _trace([0, 0.005], [1000, 1000], [3, 3])
    rt, res = _run(tr, full_pages=100, swa_pages=40)
    # step 1 prefills request 0 (100 ms); request 1 arrived meanwhile: step 2 prefills it and request 0
    # does not decode; then two decode steps of 20 ms finish both
    assert res.first_token_ns == [100_000_000, 200_000_000]
    assert res.finished_ns == [240_000_000, 240_000_000]
    assert res.series.prefill_tokens.tolist() == [1000, 1000, 0, 0]


def test_chunked_prefill_and_the_chunk_budget():
    tr = _trace([0], [20000], [2])
    rt, res = _run(tr, full_pages=200, swa_pages=80, chunked_prefill_size=8192)
    assert res.series.prefill_tokens.tolist()[:3] == [8192, 8192, 3616]


def test_radix_cache_shares_a_checkpointed_prompt():
    """A second request with the same hash ids matches the first one's prompt pages, up to
    (fill - 1) // page pages (schedule_batch.py:1766-1785), where the first one's window is still live."""
    ids = [[1, 2, 3, 4]]
    tr = _trace([0, 10], [2048, 2048], [2, 2], ids * 2)
    rt, res = _run(tr, full_pages=100, swa_pages=40)
    assert res.prefix_hit_tokens == 7 * 256
    rt2, res2 = _run(tr, full_pages=100, swa_pages=40, radix_cache=False)
    assert res2.prefix_hit_tokens == 0


def test_a_prefix_ending_in_a_tombstone_is_not_a_hit():
    """The first request decodes 600 tokens: its prompt-end window stays in the tree (checkpointed
    after its prefill), so a prompt that stops earlier inside it finds only tombstones."""
    tr = _trace([0, 100], [2048, 1024], [600, 2], [[1, 2, 3, 4], [1, 2]])
    rt, res = _run(tr, full_pages=100, swa_pages=40)
    assert res.prefix_hit_tokens == 0


def test_page_keys_follow_the_block_ids():
    keys = page_keys(np.array([7, 8]), 512, 1100, 256)
    assert keys == (((7,), 0), ((7,), 256), ((8,), 0), ((8,), 256))
    assert page_keys(np.array([7, 8]), 512, 700, 256) == (((7,), 0), ((7,), 256))
    assert page_keys(None, 512, 700, 256) == ()


def test_retraction_when_decode_runs_out_of_pages():
    """Long outputs, a small pool: the ratio decays, admission overshoots, decode retracts."""
    rng = np.random.default_rng(3)
    n = 40
    tr = _trace(np.sort(rng.uniform(0, 5, n)), rng.integers(200, 2000, n), rng.integers(1500, 3000, n))
    rt, res = _run(tr, full_pages=120, swa_pages=60, max_running_requests=32)
    assert rt.retractions > 0 and res.recomputed_tokens > 0
    assert all(f >= 0 for f in res.finished_ns)
    assert rt.sched.req_full == 0 and rt.sched.req_swa == 0
    assert rt.sched.ratio >= 0.098


def test_too_long_prompts_are_refused_at_arrival():
    tr = _trace([0, 0], [100 * 256, 500], [5, 5])
    rt, res = _run(tr, full_pages=100, swa_pages=40)
    assert list(res.refused) == [0] and res.finished_ns[1] > 0


@st.composite
def cases(draw):
    n = draw(st.integers(1, 30))
    arrival = sorted(draw(st.lists(st.floats(0, 20), min_size=n, max_size=n)))
    prompt = draw(st.lists(st.integers(1, 6000), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 3000), min_size=n, max_size=n))
    shared = draw(st.booleans())
    ids = [[draw(st.integers(0, 3)) if shared else 1000 * i + j for j in range(p // 512 + 1)]
           for i, p in enumerate(prompt)] if draw(st.booleans()) else None
    cfg = dict(full_pages=draw(st.integers(30, 400)), swa_pages=draw(st.integers(30, 120)),
               max_running_requests=draw(st.integers(1, 64)), chunked_prefill_size=draw(st.sampled_from([512, 2048, 8192])),
               radix_cache=draw(st.booleans()))
    return _trace(arrival, prompt, output, ids), cfg


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_invariants(case):
    """Every request ends (finished or refused); pools never over-committed; everything freed at
    the end except what the radix cache keeps; the same run twice is the same run."""
    trace, cfg = case
    rt, res = _run(trace, **cfg)
    s = rt.sched
    n = len(trace)
    ended = sum(1 for f in res.finished_ns if f >= 0) + len(res.refused) + len(rt.aborted)
    assert ended == n
    used = res.series.used
    if res.series.steps:
        assert (used[:, 0] <= cfg["full_pages"]).all() and (used[:, 1] <= cfg["swa_pages"]).all()
    assert s.req_full == 0 and s.req_swa == 0 and not s.running and s.chunked is None
    assert s.tree.locked == 0 and s.tree.swa_locked == 0
    if not cfg["radix_cache"]:
        assert s.tree.nodes == 0 and res.prefix_hit_tokens == 0
    assert sum(res.preemptions) == rt.retractions
    assert (res.recomputed_tokens > 0) == (rt.retractions > 0) or res.recomputed_tokens == 0
    rt2, res2 = _run(trace, **cfg)
    assert res.same_as(res2)


def test_a_prompt_just_under_the_input_limit_blocks_the_queue():
    """max_req_input_len = min(context - 1, capacity - 1) - 5 lets a 2,500-token prompt in a 2,560-token
    pool through (tp_worker.py:568-572), its max_new_tokens is clipped to 0 (scheduler.py:2710-2735), and
    add_one_req still needs extend + page = 2,756 < remaining_total: SGLang never admits it, and FCFS
    keeps everything behind it waiting — the replay ends them as stranded."""
    tr = _trace([0, 1, 2], [100, 2500, 100], [5, 5, 5])
    rt, res = _run(tr, full_pages=10, swa_pages=40)
    assert res.finished_ns[0] > 0 and res.finished_ns[1] == res.finished_ns[2] == -1
    assert sorted(res.refused) == [1, 2] and "never fits" in res.refused[1]
