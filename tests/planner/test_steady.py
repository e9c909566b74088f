"""Sustainable means steady (issue 45): the one judgement of a probed rate, on runs built by hand."""

from __future__ import annotations

import numpy as np
import pytest

from csa_plan.planner.steady import GROWS, SHORT, STEADY, WINDOW_LIFETIMES, copies_needed, judge, repeat_arrivals

S = 1_000_000_000


def _poisson(rate_per_s: float, span_s: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1 / rate_per_s, int(rate_per_s * span_s * 1.2) + 10)
    t = np.cumsum(gaps)
    return np.rint(t[t < span_s] * S).astype(np.int64)


def _fifo(arrival: np.ndarray, service_ns: int, servers: int = 1) -> np.ndarray:
    """Finish times of a FIFO queue with ``servers`` servers of a fixed service time."""
    free = np.zeros(servers, dtype=np.int64)
    done = np.empty_like(arrival)
    for i, a in enumerate(arrival):
        k = int(np.argmin(free))
        start = max(int(a), int(free[k]))
        free[k] = start + service_ns
        done[i] = free[k]
    return done


def _copies(rate_per_s: float, span_s: float, copies: int) -> np.ndarray:
    return repeat_arrivals(_poisson(rate_per_s, span_s), copies)


def test_a_stable_queue_over_many_lifetimes_is_steady():
    arrival = _copies(10, 100, 2)
    done = _fifo(arrival, S // 2, servers=8)  # capacity 16 req/s against 10
    j = judge(arrival, done, copies=2)
    assert j.steady is True and j.reason == STEADY
    assert j.window_lifetimes >= WINDOW_LIFETIMES and j.lifetime_ns >= S // 2


def test_arrivals_outpacing_completions_are_a_growing_queue():
    arrival = _copies(10, 100, 2)
    done = _fifo(arrival, S // 2, servers=4)  # capacity 8 req/s against 10: the queue grows without end
    j = judge(arrival, done, copies=2)
    assert j.steady is False and j.reason == GROWS and j.growth_ns > 0


def test_one_copy_says_nothing():
    arrival = _poisson(10, 200)
    j = judge(arrival, _fifo(arrival, S // 2, servers=8))
    assert j.steady is None and j.reason == SHORT


def test_a_burst_that_drains_is_too_short_to_say():
    """The issue's burst: every request arrives within a few seconds and runs at once; the run says nothing."""
    arrival = _copies(400, 3, 2)
    done = arrival + 50 * S  # all admitted at once, each living 50 s
    j = judge(arrival, done, copies=2)
    assert j.steady is None and j.reason == SHORT
    need = copies_needed(int(arrival[len(arrival) // 2 - 1] - arrival[0]), len(arrival) // 2, j.lifetime_ns, 2)
    assert need * 3 >= 50 * 5  # the copies needed span the window of 5 lifetimes of 50 s


def test_a_trace_s_own_bursts_and_sizes_are_no_queue():
    """Longer requests, and a burst, in a trace's second half lengthen those lifetimes without any queue:
    compared with themselves one copy earlier they take no longer."""
    base = _poisson(10, 100)
    arrival = repeat_arrivals(base, 3)
    hold = np.tile(np.where(base > 50 * S, 10 * S, S), 3)
    done = arrival + hold
    j = judge(arrival, done, copies=3)
    assert j.steady is True and j.growth_ns == 0


def test_repeated_arrivals_keep_the_trace_s_rate():
    base = np.array([0, 2, 3, 9], dtype=np.int64) * S
    out = repeat_arrivals(base, 3)
    assert len(out) == 12 and np.all(np.diff(out) >= 0)
    period = 9 * S + 3 * S  # the span plus one mean gap
    assert list(out[4:8]) == list(base + period) and list(out[8:]) == list(base + 2 * period)


def test_repeated_workload_has_fresh_prefix_ids():
    from dataclasses import replace

    from csa_plan.planner.workloads.extend import repeated
    from csa_plan.planner.workloads.workload import Workload

    wl = Workload("w", np.array([0, S], dtype=np.int64), np.array([10, 20], dtype=np.int32),
                  np.array([5, 6], dtype=np.int32), np.zeros(2, dtype=np.int8), ("c",),
                  hash_ids=np.array([0, 1, 1, 2], dtype=np.int64), hash_offsets=np.array([0, 2, 4], dtype=np.int64))
    two = repeated(wl, 2)
    assert len(two) == 4 and list(two.prompt_tokens) == [10, 20, 10, 20]
    assert list(two.hash_offsets) == [0, 2, 4, 6, 8]
    assert set(two.hash_ids[:4]).isdisjoint(two.hash_ids[4:])  # a copy never hits another's prefix cache
    assert repeated(wl, 1) is wl and "repeated with fresh request ids" in two.notes[-1]
    assert replace(wl) is not None


@pytest.mark.parametrize("copies", [1, 4])
def test_the_ledger_scenario_repeats_as_the_workload_does(copies):
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.placement import Placement
    from csa_plan.planner.reserve import SimConfig, prepare
    from csa_plan.planner.workloads import load_workload
    from csa_plan.planner.workloads.extend import repeated

    from helpers import ROOT

    wl = load_workload(str(ROOT / "examples/traces/azure_conv_sample_200.csv"))
    spec = load_model("deepseek-v4-pro")
    config = SimConfig(placement=Placement(tp=8), limit_bytes=60 << 30)
    a = prepare(spec, wl, config).repeated(copies)
    b = prepare(spec, repeated(wl, copies), config)
    assert np.array_equal(a.arrival_ns, b.arrival_ns) and np.array_equal(a.hold_ns, b.hold_ns)
    assert np.array_equal(a.tier, b.tier)
