"""Simulate settings: the command line over the mix spec over the defaults, field by field."""

from __future__ import annotations

import pytest

from csa_plan.planner.errors import BadInput
from csa_plan.planner.placement import Router
from csa_plan.planner.reserve.settings import DEFAULTS, merge, sim_config
from csa_plan.planner.reserve import Policy, Reserve
from csa_plan.planner.workloads import MixSettings


def test_precedence_field_by_field():
    cli = MixSettings(tp=8, policy="queue")
    mix = MixSettings(model="deepseek-v4-pro", tp=4, pp=2, reserve="fit", device_memory_bytes=10**12)
    s = merge(cli, mix)
    assert (s.model, s.tp, s.pp, s.policy, s.reserve, s.dp, s.bucket) == ("deepseek-v4-pro", 8, 2, "queue", "fit", 1, 4096)
    config, budget = sim_config(s, "m.yaml")
    assert config.placement.tp == 8 and config.placement.pp == 2 and config.placement.router is Router.ROUND_ROBIN
    assert config.policy is Policy.QUEUE and config.reserve is Reserve.FIT
    assert budget.limit_bytes == config.limit_bytes == 10**12


def test_defaults_are_unlimited_and_exact():
    config, budget = sim_config(merge(MixSettings(), MixSettings()), "m.yaml")
    assert budget is None and config.limit_bytes == 0 and config.layout == "exact"
    assert DEFAULTS.prefill_tok_s == 10_000.0 and DEFAULTS.tpot_ms == 20.0 and DEFAULTS.rate_scale == 1.0


def test_unknown_value_from_a_mix_names_its_field():
    with pytest.raises(BadInput, match=r"m.yaml: deployment.router: unknown value 'random'"):
        sim_config(merge(MixSettings(), MixSettings(router="random")), "m.yaml")
