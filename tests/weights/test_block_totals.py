"""The inventory's fast figures (each distinct layer block once, times its multiplicity) against the
one-entry-per-layer listing summed weight by weight, as the inventory and ``shard`` computed them
before blocks: totals, and every stage's bytes by part, for both presets under several engines,
deployments and stored dtypes. The reference below walks ``inventory.weights`` (every layer's own
entries), so a block counted the wrong number of times, on the wrong stage, or a layer left out
makes them differ."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from csa_plan.planner.errors import BadInput
from csa_plan.planner.placement import Placement
from csa_plan.planner.weights.registry import inventory_for
from csa_plan.planner.weights.rules import RULES
from csa_plan.planner.weights.sharding import ROLE_PART, Part, local_bytes, shard
from csa_plan.planner.weights.tensors import Role

from helpers import ROOT


def config(name, **changes):
    data = json.loads((ROOT / "planner" / "presets" / f"{name}.json").read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


DTYPES = {  # stored dtypes: the checkpoint's (FP8 + FP4 experts), FP8 experts, BF16 throughout
    "fp4-experts": {},
    "fp8-experts": {"expert_dtype": "fp8"},
    "bf16": {"quantization_config": None, "expert_dtype": None},
}


def per_weight_stages(inv, rules, placement, mtp):
    """Every stage's bytes by part, one weight entry (one layer) at a time."""
    g = rules.groups(placement, inv.dim("routed_experts"))
    pp = placement.pp
    stage_of, start = {}, 0
    for s, n in enumerate(rules.stage_counts(inv.num_main_layers, pp)):
        stage_of.update({layer: s for layer in range(start, start + n)})
        start += n
    stage_of.update({layer: pp - 1 for layer in range(inv.num_main_layers, inv.num_main_layers + inv.num_mtp_layers)})
    totals = [Counter() for _ in range(pp)]
    for w in inv.weights:
        if w.is_mtp and not mtp:
            continue
        n = min(w.copies, g.local_experts) if w.expert is not None else w.copies
        if not n:
            continue
        part = Part.MTP if w.is_mtp else ROLE_PART.get(w.role, Part.ATTENTION)
        if w.layer is not None:
            stages = (stage_of[w.layer],)
        elif w.role is Role.EMBED:
            stages = (0, pp - 1) if mtp and pp > 1 and rules.mtp_embed_when_pp else (0,)
        elif w.role is Role.HC_HEAD and rules.hc_head_every_stage:
            stages = tuple(range(pp))
        else:
            stages = (pp - 1,)
        for s in stages:
            totals[s][part] += local_bytes(w, rules, g) * n
    return [(sum(t.values()), tuple((p, t[p]) for p in Part if t[p])) for t in totals]


@pytest.mark.parametrize("name", ["deepseek-v4-flash", "deepseek-v4-pro"])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_totals_equal_the_per_layer_listing(name, dtype):
    inv = inventory_for(config(name, **DTYPES[dtype]), name)
    for view in (inv, inv.without_mtp()):
        ws = view.weights
        assert view.tensor_count == sum(w.tensor_count for w in ws)
        assert view.element_count == sum(w.elements for w in ws)
        assert view.nbytes == sum(w.nbytes for w in ws)
    layers = {w.layer for w in inv.weights if w.layer is not None}
    assert layers == set(range(inv.num_main_layers + inv.num_mtp_layers))
    names = [t.name for w in inv.weights for t in w.tensors]
    assert len(names) == len(set(names))  # every layer under its own names
    assert all(t.name.startswith(f"layers.{w.layer}.") for w in inv.weights if w.layer is not None and not w.is_mtp
               for t in w.tensors)
    assert not any(w.is_mtp for w in inv.without_mtp().weights)


DEPLOYMENTS = [dict(tp=1), dict(tp=2), dict(tp=4), dict(tp=8), dict(tp=8, ep=8), dict(tp=4, dp=2),
               dict(tp=2, dp=4, ep=8), dict(tp=4, pp=2), dict(tp=2, pp=4), dict(tp=1, pp=3), dict(tp=8, ep=4)]


@pytest.mark.parametrize("name", ["deepseek-v4-flash", "deepseek-v4-pro"])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_shard_equals_the_per_layer_listing(name, dtype):
    inv = inventory_for(config(name, **DTYPES[dtype]), name)
    compared = 0
    for rules in RULES.values():
        for d in DEPLOYMENTS:
            placement = Placement(**d)
            for mtp in (False, True):
                try:
                    got = shard(inv, rules, placement, mtp=mtp)
                except BadInput:
                    continue
                assert [(s.nbytes, s.by_part) for s in got.stages] == \
                    per_weight_stages(inv, rules, placement, mtp), (rules.name, d, mtp)
                compared += 1
    assert compared >= 20
