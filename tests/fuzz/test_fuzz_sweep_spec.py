"""Property-based fuzzing of sweep specs: any structure parses into points or is BadInput."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from csa_plan.planner.errors import BadInput
from csa_plan.planner.sweep.spec import parse_spec

from helpers import FUZZ, EXAMPLES

WORKLOAD = str((EXAMPLES / "traces" / "azure_conv_sample_200.csv").resolve())

scalar = (st.none() | st.booleans() | st.integers(min_value=-5, max_value=2**64) | st.just(10**400)
          | st.floats() | st.text(max_size=8)
          | st.sampled_from(["h200", "80GiB", "fit", "fit/4096", "max", "queue", "refuse", "vllm", "exact",
                             "deepseek-v4-flash", "round-robin", "nope", "0GiB", "-1"]))
value = scalar | st.lists(scalar, max_size=3) | st.dictionaries(st.sampled_from(["fit", "weights", "runtime", "x"]),
                                                                 scalar, max_size=2)
grid = st.dictionaries(st.sampled_from(["model", "device", "reserved", "tp", "pp", "dp", "router", "reserve",
                                        "policy", "layout", "rate_scale", "max_seq_len", "bogus"]), value, max_size=6)
spec = st.fixed_dictionaries(
    {"workload": st.just(WORKLOAD) | scalar, "grid": grid | scalar},
    optional={
        "objective": st.sampled_from(["fewest_devices", "rate_per_device", "x"]) | scalar,
        "constraints": st.dictionaries(st.sampled_from(["zero_refusals", "wait_p99_max_s", "min_mean_utilization",
                                                        "x"]), scalar, max_size=2) | scalar,
        "search": st.dictionaries(st.sampled_from(["rel_tol", "min_scale", "max_scale", "x"]), scalar,
                                  max_size=2) | scalar,
        "time": st.dictionaries(st.sampled_from(["prefill_tok_s", "tpot_ms"]), scalar, max_size=2) | scalar,
        "seed": scalar, "sort": scalar, "name": scalar,
    },
)


@FUZZ
@given(spec)
def test_sweep_spec_structures(data):
    try:
        parsed = parse_spec(data, "s.yaml")
    except BadInput as exc:
        assert str(exc)
        return
    assert parsed.points
