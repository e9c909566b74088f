"""Simulation semantics (CONTRACT §5) and the fast path == ledger replay proofs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from csa_plan.planner.layout import GroupBytes
from csa_plan.planner.loaders.model_files import load_model
from csa_plan.planner.memory import parse_size
from csa_plan.planner.placement import Placement, Router, split_stages
from csa_plan.planner.reserve.capacity import find_capacity
from csa_plan.planner.reserve.fast import compiled_fits, compiled_loop, observe
from csa_plan.planner.reserve.replay import replay
from csa_plan.planner.reserve import (Outcome, Policy, Reserve, Scenario, SimConfig, TimeModel, decide, nearest_rank, prepare, reserved_tokens, simulate)
from csa_plan.planner.workloads import load_workload

from helpers import EXAMPLES, ROOT
from helpers.sim_mixes import contended, mixes, workload

FLASH = load_model("deepseek-v4-flash")
PRO = load_model("deepseek-v4-pro")
H200 = parse_size("h200", "test")
GIB = 1 << 30


def toy(arrival_ns, hold_ns, sizes, limit, policy=Policy.REFUSE, placement=Placement(), upfront=None) -> Scenario:
    """A scenario with hand-picked bundle sizes: request i reserves tier ``sizes[i]`` bytes per device."""
    tiers = sorted(set(sizes))
    n = len(arrival_ns)
    split = split_stages(placement.pp, 0, placement.pp)
    bundles = tuple(tuple(GroupBytes(compressed_bytes=t - 1, carry_bytes=1) for _ in range(placement.pp))
                    for t in tiers)
    arrival = np.array(arrival_ns, dtype=np.int64)
    return Scenario(SimConfig(placement=placement, limit_bytes=limit, policy=policy), split, 1 << 20, 128,
                    tuple(tiers), bundles, arrival, arrival, np.array(hold_ns, dtype=np.int64),
                    np.array([tiers.index(s) for s in sizes], dtype=np.int64),
                    np.array(upfront or [0] * n, dtype=np.int8), np.zeros(n, dtype=np.int32), ("a",))


def both(scn: Scenario):
    """The fast path (compiled loop where built) equals the ledger replay, and the pure-Python
    loop takes the very same decisions."""
    fast = simulate(scn)
    ref, ledger = replay(scn)
    assert fast == ref
    assert fast.decisions.same_as(ref.decisions)
    assert ledger.at_baseline and fast.baseline_ok
    python = decide(scn, compiled=False)
    assert python.same_as(fast.decisions)
    assert observe(scn, python) == fast  # the numpy timeline gives what the compiled loop's does
    if compiled_fits(scn):
        assert decide(scn, compiled=True).same_as(fast.decisions)
    return fast


# -- semantics ----------------------------------------------------------------------------


def test_release_happens_before_admission_at_the_same_instant():
    r = both(toy([0, 10], [10, 5], [60, 60], limit=100))
    assert r.admitted == 2 and r.refused == 0
    assert r.devices[0].peak_bytes == 60 and r.peak_in_flight == 1


def test_refuse_policy_fails_closed_and_counts_the_reason():
    r = both(toy([0, 1, 2], [10, 10, 10], [60, 60, 30], limit=100))
    assert r.decisions.outcome.tolist() == [0, Outcome.OUT_OF_MEMORY.value, 0]
    assert dict(r.refusals) == {"OutOfMemory": 1}
    assert r.devices[0].peak_bytes == 90 and r.devices[0].peak_ns == 2


def test_queue_is_fifo_and_reports_waits():
    # request 2 (30 B) would fit at t=2 but must not overtake request 1
    r = both(toy([0, 1, 2], [10, 10, 10], [60, 60, 30], limit=100, policy=Policy.QUEUE))
    assert r.decisions.admit_ns.tolist() == [0, 10, 10]
    assert r.queued == 2 and r.wait_p50_ns == 8 and r.wait_p99_ns == 9 and r.wait_max_ns == 9
    assert r.refused == 0


def test_never_fitting_request_is_refused_up_front_not_queued():
    scn = prepare(PRO, workload([0, 1], [100, 100], [10, 10]),
                  SimConfig(limit_bytes=4 * GIB, policy=Policy.QUEUE))
    r = both(scn)
    assert dict(r.refusals) == {"NeverFits": 2} and r.admitted == 0


def test_request_longer_than_max_seq_len_is_refused_with_its_type():
    scn = prepare(PRO, workload([0, 1], [1_048_000, 100], [577, 10]), SimConfig(policy=Policy.QUEUE))
    r = both(scn)
    assert dict(r.refusals) == {"RequestExceedsCapacity": 1}
    assert r.decisions.outcome.tolist() == [Outcome.EXCEEDS_CAPACITY.value, 0]


def test_unlimited_accounts_everything_and_refuses_nothing():
    scn = prepare(PRO, workload([0, 0, 0], [10, 10, 10], [10, 10, 10]), SimConfig(placement=Placement(tp=8)))
    r = both(scn)
    per_device = scn.bundles[0][0].total_bytes
    assert r.refused == 0 and r.devices[3].peak_bytes == 3 * per_device
    assert r.peak_bytes == 8 * 3 * per_device
    assert r.utilization(r.devices[0]) == (None, None)


def test_reserve_max_matches_the_contract_total():
    scn = prepare(PRO, workload([0], [10], [10]), SimConfig())
    assert scn.tier_tokens == (1_048_576,)
    assert scn.bundles[0][0].total_bytes == 5_473_376_512


@pytest.mark.parametrize("total,expected", [(0, 128), (100, 4096), (4096, 4096), (4097, 8192),
                                            (1_048_575, 1_048_576), (1_048_576, 1_048_576)])
def test_fit_rounds_up_to_the_bucket_at_least_the_window(total, expected):
    assert reserved_tokens(total, Reserve.FIT, 4096, 128, 1_048_576) == expected
    assert reserved_tokens(total, Reserve.MAX, 4096, 128, 1_048_576) == 1_048_576


def test_fit_reserves_less_than_max():
    wl = workload([0, 1, 2], [1000, 5000, 100], [100, 100, 5000])
    fit = prepare(PRO, wl, SimConfig(reserve=Reserve.FIT))
    assert fit.tier_tokens == (4096, 8192) and fit.tier.tolist() == [0, 1, 1]
    r = both(fit)
    assert r.devices[0].peak_bytes == sum(fit.bundles[t][0].total_bytes for t in (0, 1, 1))


def test_time_model_holds_prefill_plus_decode():
    scn = prepare(PRO, workload([0], [20_000], [50]), SimConfig(time=TimeModel(prefill_tok_s=10_000, tpot_ms=20)))
    assert scn.hold_ns.tolist() == [2_000_000_000 + 50 * 20_000_000]


def test_rate_scale_compresses_arrivals():
    scn = prepare(PRO, workload([0, 1_000_000_000, 3_000_000_000], [1, 1, 1], [1, 1, 1]),
                  SimConfig(time=TimeModel(rate_scale=2.0)))
    assert scn.arrival_ns.tolist() == [0, 500_000_000, 1_500_000_000]


def test_pipeline_stages_charge_their_own_layers():
    scn = prepare(FLASH, workload([0], [10], [10]), SimConfig(placement=Placement(tp=1, pp=2)))
    assert scn.split.main_counts == (22, 21) and scn.split.layers[-1][-1] == 43
    r = both(scn)
    assert [d.peak_bytes for d in r.devices] == [scn.bundles[0][0].total_bytes, scn.bundles[0][1].total_bytes]
    single = prepare(FLASH, workload([0], [10], [10]), SimConfig())
    assert r.peak_bytes == single.bundles[0][0].total_bytes


def test_round_robin_rotates_replicas():
    r = both(toy([0, 1, 2, 3], [100] * 4, [10] * 4, limit=100, placement=Placement(dp=2)))
    assert r.decisions.replica.tolist() == [0, 1, 0, 1]


def test_least_loaded_picks_the_emptier_replica():
    r = both(toy([0, 1, 2], [100, 100, 100], [50, 10, 10], limit=100,
                 placement=Placement(dp=2, router=Router.LEAST_LOADED)))
    assert r.decisions.replica.tolist() == [0, 1, 1]


def test_admission_is_all_or_nothing_across_devices():
    r = both(toy([0, 1], [100, 100], [60, 60], limit=100, placement=Placement(tp=4, pp=2)))
    assert r.admitted == 1 and r.peak_bytes == 8 * 60


def test_per_class_peak_and_class_maxima():
    scn = prepare(PRO, workload([0, 5_000_000_000], [100, 100], [10, 10]), SimConfig(reserve=Reserve.FIT))
    r = both(scn)
    assert r.at_peak == scn.bundles[0][0]
    assert r.class_max == scn.bundles[0][0]


def test_nearest_rank_percentiles_are_members_of_the_data():
    assert nearest_rank(list(range(1, 101)), 50) == 50
    assert nearest_rank(list(range(1, 101)), 99) == 99
    assert nearest_rank([7], 99) == 7


def test_find_capacity_bisects_to_the_edge():
    wl = load_workload(str(EXAMPLES / "traces" / "azure_conv_sample_200.csv"))
    scn = prepare(PRO, wl, SimConfig(placement=Placement(tp=8), limit_bytes=H200 - 120 * GIB))
    cap = find_capacity(scn, rel_tol=1e-2)
    assert cap.rate_scale is not None and not cap.capped
    assert cap.result.refused == 0
    worse = simulate(scn.with_rate_scale(cap.rate_scale * 1.02))
    assert worse.refusal_count(Outcome.OUT_OF_MEMORY) > 0


# -- fast path == ledger replay -----------------------------------------------------------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mixes())
def test_fast_path_equals_ledger_replay(mix):
    scn = prepare(FLASH, *contended(FLASH, mix))
    both(scn)


def test_contended_loop_agrees_with_the_uncontended_shortcut():
    """When nothing contends, the sequential loop must reach the shortcut's answer."""
    wl = load_workload(str(EXAMPLES / "traces" / "azure_conv_sample_200.csv"))
    for policy in Policy:
        for limit in (0, H200):
            roomy = prepare(PRO, wl, SimConfig(placement=Placement(tp=8, dp=2), limit_bytes=limit, policy=policy))
            shortcut = decide(roomy)
            assert shortcut.outcome.tolist() == [0] * 200
            assert decide(roomy, shortcut=False).same_as(shortcut)
            both(roomy)


# -- the real Azure conversation trace ----------------------------------------------------

AZURE = EXAMPLES / "traces" / "azure_llm_inference_2023_conv.csv"


@pytest.fixture(scope="module")
def azure():
    return load_workload(str(AZURE))


def test_azure_trace_is_complete(azure):
    assert len(azure) == 19_366
    assert int(azure.prompt_tokens.sum()) == 22_361_870 and int(azure.output_tokens.sum()) == 4_088_665
    assert int(azure.arrival_ns[-1]) == 3_501_721_937_000


@pytest.mark.parametrize("policy,rate_scale", [(Policy.REFUSE, 0.5), (Policy.QUEUE, 0.5), (Policy.QUEUE, 0.6)])
def test_azure_trace_v4_pro_tp8_h200_matches_ledger_replay(azure, policy, rate_scale):
    config = SimConfig(placement=Placement(tp=8), limit_bytes=H200 - 20 * GIB, policy=policy,
                       time=TimeModel(rate_scale=rate_scale))
    scn = prepare(PRO, azure, config)
    r = both(scn)  # the fast path equals the event-by-event ledger replay, waits included
    per_request = scn.bundles[0][0].total_bytes
    assert r.devices[0].peak_bytes == 24 * per_request  # 24 requests fill a 120.4 GiB limit
    if policy is Policy.REFUSE:
        assert dict(r.refusals) == {"OutOfMemory": 48} and r.queued == 0
    elif rate_scale == 0.5:
        assert r.refused == 0 and r.queued == 97 and r.wait_max_ns > 0 and r.wait_p50_ns == 0
    else:  # enough waiting that the 99th percentile is a real wait
        assert r.refused == 0 and r.queued == 700
        assert (r.wait_p50_ns, r.wait_p99_ns, r.wait_max_ns) == (0, 629_511_667, 2_086_371_666)


# -- the compiled decision loop -------------------------------------------------------------


needs_compiled = pytest.mark.skipif(compiled_loop() is None, reason="the optional cdecide extension is not built "
                                    "(no C compiler at install): the Python loop runs instead")


@needs_compiled
@pytest.mark.parametrize("policy", list(Policy))
@pytest.mark.parametrize("dp,pp,router", [(1, 1, Router.ROUND_ROBIN), (3, 2, Router.LEAST_LOADED),
                                          (2, 1, Router.ROUND_ROBIN)])
def test_compiled_loop_equals_the_python_loop_on_a_contended_trace(azure, policy, dp, pp, router):
    config = SimConfig(placement=Placement(tp=8, pp=pp, dp=dp, router=router), limit_bytes=H200 - 20 * GIB,
                       policy=policy, time=TimeModel(rate_scale=1.5 * dp))
    scn = prepare(PRO, azure, config)
    fast = decide(scn, compiled=True)
    assert fast.same_as(decide(scn, compiled=False, shortcut=False))
    contended = (fast.outcome == Outcome.OUT_OF_MEMORY.value) | (fast.admit_ns > scn.arrival_ns)
    assert int(contended.sum()) > 0  # refusals (refuse) or waits (queue): the loop decided something


def test_totals_beyond_int64_run_in_the_python_loop():
    """A limit near 2^63 could overflow the compiled loop's int64 totals: it is not used."""
    scn = toy([0, 1, 2], [10, 10, 10], [1 << 61, 1 << 61, 1 << 61], limit=(1 << 63) - 1)
    if compiled_loop() is not None:
        with pytest.raises(RuntimeError, match="beyond int64"):
            decide(scn, compiled=True)
    r = both(scn)
    assert r.admitted == 3


def test_a_stale_compiled_loop_is_set_aside(monkeypatch):
    """The extension carries its calling convention's version; the caller takes only its own, so an
    extension built from an older cdecide.c (an editable install not rebuilt) is never called."""
    import re
    import sys
    import types

    from csa_plan.planner.reserve import fast

    source = (ROOT / "planner" / "reserve" / "cdecide.c").read_text()
    assert int(re.search(r"#define CDECIDE_ABI (\d+)", source).group(1)) == fast.CDECIDE_ABI
    try:
        from csa_plan.planner.reserve import cdecide
    except ImportError:
        cdecide = None
    if cdecide is not None:
        assert cdecide.ABI == fast.CDECIDE_ABI
    stale = types.ModuleType("csa_plan.planner.reserve.cdecide")
    stale.ABI = fast.CDECIDE_ABI - 1
    monkeypatch.setitem(sys.modules, "csa_plan.planner.reserve.cdecide", stale)
    monkeypatch.setattr(sys.modules["csa_plan.planner.reserve"], "cdecide", stale, raising=False)
    monkeypatch.setattr(fast.CDECIDE, "_module", False)
    assert fast.compiled_loop() is None
