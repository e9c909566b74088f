"""Extreme time options are refused as bad input instead of wrapping the int64 clock."""

from __future__ import annotations

import pytest

from helpers import EXAMPLES

TRACE = str(EXAMPLES / "traces" / "azure_conv_sample_200.csv")


@pytest.mark.parametrize("option,value", [("--rate-scale", "1e-300"), ("--tpot-ms", "1e300"),
                                          ("--prefill-tok-s", "1e-300"), ("--rate-scale", "nan"),
                                          ("--tpot-ms", "inf")])
def test_extreme_time_options(csa, option, value):
    r = csa("simulate", TRACE, "--model", "deepseek-v4-flash", option, value)
    assert r.code == 2
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and "Traceback" not in r.err


# -- release times summed along a queue (issue 24: cdecide.c signed overflow) -----------------------


def _queued_chain(requests: int, hold_ns: int):
    """``requests`` requests arriving together near 2^61 ns on a device that holds one at a time."""
    from csa_plan.planner.layout import GroupBytes
    from csa_plan.planner.placement import Placement, split_stages
    from csa_plan.planner.reserve import Policy, Scenario, SimConfig
    import numpy as np

    arrival = np.full(requests, 2_300_000_000_000_100_000, dtype=np.int64)
    return Scenario(SimConfig(placement=Placement(), limit_bytes=10, policy=Policy.QUEUE), split_stages(1, 0, 1),
                    1 << 20, 128, (8,), ((GroupBytes(compressed_bytes=7, carry_bytes=1),),), arrival, arrival,
                    np.full(requests, hold_ns, dtype=np.int64), np.zeros(requests, dtype=np.int8),
                    np.zeros(requests, dtype=np.int8), np.zeros(requests, dtype=np.int32), ("a",), "chain.csv")


@pytest.mark.parametrize("loop", ["compiled", "python", "ledger replay"])
def test_a_release_past_the_int64_clock_is_bad_input_in_every_loop(loop):
    """A fourth queued release of 2^61 ns after an arrival at 2.3e18 ns pass 2^63 - 1: the first request
    whose release would wrap is named (it wrapped to a span of 0.0 s and utilisation 0.0 before)."""
    from csa_plan.planner.errors import BadInput
    from csa_plan.planner.reserve import decide
    from csa_plan.planner.reserve.fast import compiled_loop
    from csa_plan.planner.reserve.replay import replay

    if loop == "compiled" and compiled_loop() is None:
        pytest.skip("the compiled decision loop is not built here")
    run = {"compiled": lambda s: decide(s, compiled=True), "python": lambda s: decide(s, compiled=False),
           "ledger replay": replay}[loop]
    assert run(_queued_chain(3, 1 << 61))  # three releases: the last at 2.3e18 + 3 x 2^61 < 2^63
    with pytest.raises(BadInput, match=r"chain.csv: request 4: admitted at 9,217,529,028 s .*MAX_CLOCK_NS"):
        run(_queued_chain(4, 1 << 61))


def _ovf(tmp_path):
    trace = tmp_path / "ovf.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "2300000000.0001,1,2300\n" * 5)
    return str(trace)


def test_queued_clock_overflow_through_the_cli(csa, tmp_path):
    """The campaign's case end to end, with and without --verify: exit 2, one line (was exit 0 with
    a wrapped span, and 'DIFFERS from the ledger replay' exit 3 under --verify)."""
    trace = _ovf(tmp_path)
    for extra in ((), ("--verify",), ("--json",)):
        r = csa("simulate", trace, "--model", "deepseek-v4-flash", "--policy", "queue", "--device-memory", "5GB",
                "--weights", "1B", "--reserved", "1B", "--tpot-ms", "1e9", *extra)
        assert r.code == 2, (r.code, r.out[-300:], r.err)
        lines = r.err.strip().splitlines()
        assert len(lines) == 1 and "ovf.csv: request 5" in lines[0] and "MAX_CLOCK_NS" in lines[0]


def test_hold_sums_past_int64_stay_exact(csa, tmp_path):
    """Four 2.3e18 ns holds on one device: their sum passes int64 (a mean utilisation of -35.5% and
    'DIFFERS' under --verify before); summed exactly it is the ledger replay's figure."""
    import json

    r = csa("simulate", _ovf(tmp_path), "--model", "deepseek-v4-flash", "--policy", "queue", "--device-memory",
            "16GB", "--weights", "1B", "--reserved", "1B", "--tpot-ms", "1e9", "--verify", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["verified_against_ledger_replay"] is True
    device = doc["devices"][0]
    assert 0 < device["mean_utilization"] <= device["peak_utilization"] <= 1
