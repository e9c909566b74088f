"""Bounded memory without changed answers: everything read a slice at a time gives exactly what
one pass over whole arrays gives (the old implementations are kept here as the references)."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from csa_plan.planner.loaders.model_files import load_model
from csa_plan.planner.placement import Placement
from csa_plan.planner.reserve import Policy, Reserve, SimConfig, TimeModel, prepare, simulate
from csa_plan.planner.reserve import fast, scenario, timeline
from csa_plan.planner.reserve.replay import replay
from csa_plan.planner.reserve.series import residency_series
from csa_plan.planner.units import NS_PER_S
from csa_plan.planner.workloads import Workload, load_workload, mix
from csa_plan.planner.workloads.mix import parse_mix
from csa_plan.planner.workloads.traces import read_trace_csv

from helpers import EXAMPLES
from helpers.sim_mixes import contended, mixes

FLASH = load_model("deepseek-v4-flash")
PRO = load_model("deepseek-v4-pro")


@contextmanager
def tiny_slices(events: int = 3, requests: int = 2, prepared: int = 5):
    """Slices of a few events and requests, so every carry between slices is exercised."""
    saved = (timeline.SLICE_EVENTS, timeline.SLICE_REQUESTS, fast.SLICE_REQUESTS, scenario.SLICE)
    timeline.SLICE_EVENTS, timeline.SLICE_REQUESTS, fast.SLICE_REQUESTS, scenario.SLICE = (
        events, requests, requests, prepared)
    try:
        yield
    finally:
        timeline.SLICE_EVENTS, timeline.SLICE_REQUESTS, fast.SLICE_REQUESTS, scenario.SLICE = saved


# -- the residency series, by a plain reference -------------------------------------------------


def reference_series(scn, d, buckets: int):
    """Per group and in flight: the event list sorted by (time, release first, request), levels
    after each event, observed at the last event of each instant of that group, and per bucket
    the highest observation in it or the last one before it (0 before any)."""
    placement = scn.config.placement
    adm = [i for i in range(scn.requests) if int(d.outcome[i]) == 0]
    admit = d.admit_ns.tolist()
    events = sorted([(admit[i] + int(scn.hold_ns[i]), 0, i) for i in adm] + [(admit[i], 1, i) for i in adm])
    last = max([t for t, _, _ in events] + [int(scn.arrival_ns[-1]), 1])
    edges = np.linspace(0, last, buckets, endpoint=False).astype(np.int64).tolist()

    def bucketed(selected, value):
        obs, level = [], 0
        for k, (t, kind, i) in enumerate(selected):
            level += value(i) * (1 if kind else -1)
            if k + 1 == len(selected) or selected[k + 1][0] != t:
                obs.append((t, level))
        out = []
        for b, edge in enumerate(edges):
            stop = edges[b + 1] if b + 1 < len(edges) else None
            before = [v for t, v in obs if t < edge]
            inside = [v for t, v in obs if t >= edge and (stop is None or t < stop)]
            out.append(max([before[-1] if before else 0] + inside))
        return out

    groups = []
    for r in range(placement.dp):
        mine = [e for e in events if int(d.replica[e[2]]) == r]
        for s in range(placement.pp):
            groups.append(bucketed(mine, lambda i: scn.bundles[int(scn.tier[i])][s].total_bytes))
    return edges, groups, bucketed(events, lambda i: 1)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mixes())
def test_sliced_run_equals_the_ledger_replay_and_the_reference_series(mix):
    """The hypothesis mixes of test_simulate, with slices of 3 events and 2 requests: the run still
    equals the ledger replay, and the residency series equals the plain reference, sliced or not."""
    wl, config = contended(FLASH, mix)
    whole = prepare(FLASH, wl, config)
    with tiny_slices():
        scn = prepare(FLASH, wl, config)
        for name in ("hold_ns", "tier", "upfront"):
            assert np.array_equal(getattr(scn, name), getattr(whole, name)) and \
                getattr(scn, name).dtype == getattr(whole, name).dtype, name
        assert scn.tier_tokens == whole.tier_tokens
        fast_result = simulate(scn)
        ref, ledger = replay(scn)
        assert fast_result == ref and fast_result.decisions.same_as(ref.decisions) and ledger.at_baseline
        sliced = residency_series(scn, fast_result.decisions, buckets=7)
        together = simulate(scn, series_buckets=7)  # bucketed in the observables' own passes
        assert together == fast_result
        joint = residency_series(scn, together.decisions, buckets=7)
    unsliced = residency_series(scn, simulate(scn).decisions, buckets=7)
    edges, groups, flight = reference_series(scn, fast_result.decisions, 7)
    for series in (sliced, joint, unsliced):
        assert series.edges_ns.tolist() == edges
        assert [g.tolist() for _, g in series.groups] == groups
        assert series.in_flight.tolist() == flight


# -- prepare ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("reserve", list(Reserve))
def test_prepare_in_slices_gives_the_whole_array_answer(reserve):
    """Tiers are the sorted distinct reserved lengths and each request's index into them (-1
    beyond max_seq_len), in the narrowest dtype; NeverFits per tier; hold times exact."""
    wl = load_workload(str(EXAMPLES / "traces" / "azure_conv_sample_200.csv"))
    long = Workload("t", wl.arrival_ns, np.concatenate([wl.prompt_tokens[:-1], [2_000_000]]).astype(np.int64),
                    wl.output_tokens.astype(np.int64), wl.class_ids, wl.class_names)
    config = SimConfig(placement=Placement(tp=8), reserve=reserve, limit_bytes=12 << 30,
                       time=TimeModel(prefill_tok_s=3333.0, tpot_ms=17.5))
    whole = prepare(PRO, long, config)
    with tiny_slices(prepared=7):
        sliced = prepare(PRO, long, config)
    total = long.prompt_tokens + long.output_tokens
    exceeds = total > whole.max_seq_len
    if reserve is Reserve.FIT:
        wanted = np.minimum(np.maximum(-(-total // config.bucket) * config.bucket, whole.window), whole.max_seq_len)
        tokens, inverse = np.unique(wanted[~exceeds], return_inverse=True)
    else:
        tokens, inverse = np.array([whole.max_seq_len]), np.zeros(int((~exceeds).sum()), dtype=np.int64)
    expected_tier = np.full(len(total), -1)
    expected_tier[~exceeds] = inverse
    hold = np.maximum(np.rint(long.prompt_tokens * (NS_PER_S / 3333.0)).astype(np.int64)
                      + np.rint(long.output_tokens * 17.5e6).astype(np.int64), 1)
    for scn in (whole, sliced):
        assert scn.tier_tokens == tuple(tokens.tolist())
        assert scn.tier.tolist() == expected_tier.tolist() and scn.tier.dtype == np.int8
        assert scn.hold_ns.tolist() == hold.tolist()
        assert int(scn.upfront[-1]) == 1  # RequestExceedsCapacity
    assert np.array_equal(whole.upfront, sliced.upfront)


def test_rate_scale_in_slices_rounds_each_arrival_as_before():
    wl = load_workload(str(EXAMPLES / "traces" / "azure_conv_sample_200.csv"))
    scn = prepare(PRO, wl, SimConfig())
    with tiny_slices(prepared=3):
        scaled = scn.with_rate_scale(0.37)
    assert scaled.arrival_ns.tolist() == np.rint(wl.arrival_ns / 0.37).astype(np.int64).tolist()


# -- generated mixes ------------------------------------------------------------------------------


def one_draw(data, source):
    """generate_mix as it was: every kind drawn for all requests at once."""
    classes, seed, requests, duration, settings = parse_mix(data, source)
    rng = np.random.default_rng(seed)
    total_rate = sum(c.rate_per_s for c in classes)
    if requests is None:
        requests = int(rng.poisson(total_rate * duration))
    gaps = rng.exponential(1.0 / total_rate, size=requests)
    gaps[0] = 0.0
    arrival = np.rint(np.cumsum(gaps) * NS_PER_S).astype(np.int64)
    shares = np.array([c.rate_per_s for c in classes]) / total_rate
    class_ids = rng.choice(len(classes), size=requests, p=shares).astype(np.int32)
    prompt = np.empty(requests, dtype=np.int64)
    output = np.empty(requests, dtype=np.int64)
    for k, c in enumerate(classes):
        mask = class_ids == k
        n = int(mask.sum())
        prompt[mask] = c.prompt.sample(rng, n)
        output[mask] = c.output.sample(rng, n)
    return arrival, prompt, output, class_ids


SPECS = [
    {"seed": 3, "requests": 5001, "classes": [
        {"name": "a", "rate": 120.0, "prompt": {"dist": "lognormal", "median": 1000, "sigma": 1.1, "max": 200000},
         "output": {"dist": "uniform", "low": 1, "high": 900}},
        {"name": "b", "rate": 12.0, "prompt": {"dist": "empirical", "values": [16000, 32000, 128000],
                                                "weights": [5, 3, 1]}, "output": {"dist": "fixed", "value": 400}},
        {"name": "c", "rate": 0.5, "prompt": {"dist": "empirical", "values": [7, 9]},
         "output": {"dist": "lognormal", "median": 50, "sigma": 2.0, "min": 3}}]},
    {"seed": 11, "duration_s": 40.0, "classes": [
        {"name": "only", "rate": 100.0, "prompt": {"dist": "uniform", "low": 0, "high": 2 ** 40},
         "output": {"dist": "lognormal", "median": 1e17, "sigma": 3.0, "max": 2 ** 63 - 1}}]},
    {"seed": 5, "requests": 1, "classes": [
        {"rate": 1.0, "prompt": {"dist": "fixed", "value": 1}, "output": {"dist": "fixed", "value": 1}}]},
]


@pytest.mark.parametrize("slice_size", [1, 7, 1000, 1 << 20])
@pytest.mark.parametrize("spec", range(len(SPECS)))
def test_mix_drawn_in_slices_equals_one_draw(monkeypatch, spec, slice_size):
    monkeypatch.setattr(mix, "MIX_SLICE", slice_size)
    wl = mix.generate_mix(SPECS[spec], "m")
    arrival, prompt, output, class_ids = one_draw(SPECS[spec], "m")
    assert wl.arrival_ns.tolist() == arrival.tolist()
    assert wl.prompt_tokens.tolist() == prompt.tolist() and wl.output_tokens.tolist() == output.tolist()
    assert wl.class_ids.tolist() == class_ids.tolist() and wl.class_ids.dtype == np.int8
    big = spec == 1  # counts at or above 2^30 widen the token columns to int64
    assert wl.prompt_tokens.dtype == (np.int64 if big else np.int32)
    assert wl.output_tokens.dtype == (np.int64 if big else np.int32)


# -- narrow columns ---------------------------------------------------------------------------------


def test_trace_token_columns_are_int32_until_a_count_needs_int64():
    small = read_trace_csv("arrival_s,prompt_tokens,output_tokens\n0,5,7\n1,1073741823,3\n", "t")
    assert small.prompt_tokens.dtype == np.int32 and small.prompt_tokens.tolist() == [5, 2 ** 30 - 1]
    big = read_trace_csv("arrival_s,prompt_tokens,output_tokens\n0,5,7\n1,1073741824,9223372036854775807\n", "t")
    assert big.prompt_tokens.dtype == np.int64 and big.prompt_tokens.tolist() == [5, 2 ** 30]
    assert big.output_tokens.tolist() == [7, 2 ** 63 - 1]
    burst = load_workload(str(EXAMPLES / "traces" / "burstgpt_v1_head42.csv"))
    assert burst.class_ids.dtype == np.int16 and burst.prompt_tokens.dtype == np.int32


def test_refuse_policy_keeps_no_admission_times():
    """Under the refuse policy every admission happens on arrival: the compiled loop stores no
    admission time, and the derived ones equal the ledger replay's."""
    if fast.compiled_loop() is None:
        pytest.skip("the compiled decision loop is not built (no C compiler at install)")
    wl = load_workload(str(EXAMPLES / "traces" / "azure_conv_sample_200.csv"))
    scn = prepare(PRO, wl, SimConfig(placement=Placement(tp=8), limit_bytes=30 << 30))
    d = fast.decide(scn)
    assert d.stored_admit_ns is None
    ref, _ = replay(scn)
    assert d.admit_ns.tolist() == ref.decisions.admit_ns.tolist() and d.same_as(ref.decisions)
    queued = fast.decide(prepare(PRO, wl, SimConfig(placement=Placement(tp=8), limit_bytes=30 << 30,
                                                    policy=Policy.QUEUE)))
    assert queued.stored_admit_ns is not None


def test_a_long_capacity_search_runs_its_answer_again_instead_of_keeping_it(monkeypatch):
    """From KEEP_RESULTS_BELOW requests on, the search keeps only the best scale and runs it once
    more for the answer: the same result as the kept one."""
    from csa_plan.planner.reserve import capacity

    wl = load_workload(str(EXAMPLES / "traces" / "azure_conv_sample_200.csv"))
    scn = prepare(PRO, wl, SimConfig(placement=Placement(tp=8), limit_bytes=(141 * 10 ** 9) - (120 << 30)))
    kept = capacity.find_capacity(scn, rel_tol=1e-2)
    calls = []
    real = capacity.simulate
    monkeypatch.setattr(capacity, "simulate", lambda s: calls.append(s.config.time.rate_scale) or real(s))
    monkeypatch.setattr(capacity, "KEEP_RESULTS_BELOW", 0)
    again = capacity.find_capacity(scn, rel_tol=1e-2)
    assert again.rate_scale == kept.rate_scale and again.probes == kept.probes and again.result == kept.result
    assert len(calls) == len(kept.probes) + 1 and calls[-1] == kept.rate_scale


def test_memory_grows_by_a_few_tens_of_bytes_per_request():
    """A 2,000,000-request mix through generation, prepare, the compiled run and its series:
    the traced peak (numpy's buffers included) stays under 30 bytes per request plus 64 MiB of
    slices (51 B per request measured; with every slice as large as the run, 286)."""
    import tracemalloc

    import yaml

    if fast.compiled_loop() is None:
        pytest.skip("the compiled decision loop is not built (no C compiler at install)")
    spec = yaml.safe_load((EXAMPLES / "mixes" / "million-requests.yaml").read_text())
    spec["requests"] = 2_000_000
    tracemalloc.start()
    try:
        wl = mix.generate_mix(spec, "m")
        scn = prepare(PRO, wl, SimConfig(placement=Placement(tp=8), reserve=Reserve.FIT))
        result = simulate(scn, series_buckets=60)
        residency_series(scn, result.decisions, 60)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.admitted == 2_000_000
    assert peak < 30 * 2_000_000 + (64 << 20), peak / 2_000_000
