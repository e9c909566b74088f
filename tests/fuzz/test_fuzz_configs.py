"""Property-based fuzzing of the config surfaces: any input either plans or is BadInput.

Nothing else may escape (no KeyError, TypeError, RecursionError, OverflowError ...).
"""

from __future__ import annotations

import json
from importlib import resources

from hypothesis import given
from hypothesis import strategies as st

from csa_plan.planner.errors import BadInput
from csa_plan.planner.loaders.model_files import PRESETS, _parse_json, from_hf_config, from_yaml_spec
from csa_plan.planner.plan import PlanOptions, plan_model
from csa_plan.planner.loaders.safe_yaml import load_yaml

from helpers import FUZZ


FLASH = json.loads(resources.files("csa_plan.planner.presets").joinpath(PRESETS["deepseek-v4-flash"]).read_text())

scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=True) | st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
small_ints = st.integers(min_value=-3, max_value=1 << 21) | st.sampled_from([0, 1, 4, 128, 512, 2**63, 2**64, 10**400])


def plans_or_bad_input(build) -> None:
    try:
        spec = build()
        for options in (PlanOptions(), PlanOptions(tp=2, query_len=3, batch=2)):
            plan_model(spec, options)
    except BadInput as exc:
        assert str(exc)  # a message naming source and problem


@FUZZ
@given(st.dictionaries(st.sampled_from(sorted(FLASH)), json_values | small_ints, max_size=6),
       st.sets(st.sampled_from(sorted(FLASH)), max_size=3))
def test_hf_config_mutations(changes, removed):
    data = {**FLASH, **changes}
    for key in removed:
        data.pop(key, None)
    plans_or_bad_input(lambda: from_hf_config(data, source="config.json", name="fuzz"))


@FUZZ
@given(st.lists(st.sampled_from([0, 1, 2, 4, 128, -1, 2**63]), min_size=0, max_size=50), small_ints)
def test_hf_ratio_lists(ratios, n_layers):
    data = {**FLASH, "compress_ratios": ratios, "num_hidden_layers": n_layers}
    plans_or_bad_input(lambda: from_hf_config(data, source="config.json", name="fuzz"))


@FUZZ
@given(st.text(max_size=200))
def test_json_text(text):
    plans_or_bad_input(lambda: from_hf_config(_parse_json(text, "c.json"), source="c.json", name="fuzz"))


FIELDS = ["compression_ratio", "cache_format", "num_heads", "head_dim", "qk_rope_head_dim", "index_num_heads",
          "index_head_dim", "index_topk", "window", "max_seq_len", "batch", "device_count"]
field_values = small_ints | st.sampled_from(["fp8_e4m3_block64", "f32", "fp4_e2m1_block32", "x"]) | scalars
layer = st.dictionaries(st.sampled_from(FIELDS + ["repeat", "mtp", "state_edges", "bogus"]),
                        field_values | st.dictionaries(st.sampled_from(["compressed", "carry", "index_key", "x"]),
                                                       st.booleans() | scalars, max_size=3), max_size=5)
spec = st.fixed_dictionaries(
    {"layers": st.lists(layer, max_size=5) | json_values},
    optional={k: field_values for k in FIELDS + ["name", "compress_ratios", "num_nextn_predict_layers"]},
)


@FUZZ
@given(spec)
def test_yaml_spec_structures(data):
    plans_or_bad_input(lambda: from_yaml_spec(data, source="m.yaml"))


yaml_alphabet = st.sampled_from(list("abc:-[]{}&*!|>'\"#%@`,? \n\t0123456789") + ["layers:", "compression_ratio: 4",
                                                                                  "\n  - ", "!!python/object", "&a", "*a"])


@FUZZ
@given(st.lists(yaml_alphabet, max_size=60).map("".join))
def test_yaml_text(text):
    plans_or_bad_input(lambda: from_yaml_spec(load_yaml(text, "m.yaml"), source="m.yaml"))
