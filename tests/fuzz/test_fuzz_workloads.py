"""Property-based fuzzing of the workload surfaces: traces, JSONL and mix specs.

Every input is either read into a Workload whose arrays are sane (sorted, non-negative,
int64) or rejected with BadInput. No other exception, no silent overflow.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from csa_plan.planner.errors import BadInput
from csa_plan.planner.workloads import generate_mix, read_jsonl, read_trace_csv

from helpers import FUZZ


HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def sane_or_bad_input(build) -> None:
    try:
        w = build()
    except BadInput as exc:
        assert str(exc)
        return
    n = len(w)
    assert n > 0
    assert w.arrival_ns.dtype.name == "int64" and int(w.arrival_ns[0]) == 0
    assert all(int(a) <= int(b) for a, b in zip(w.arrival_ns[:-1], w.arrival_ns[1:]))
    assert int(w.prompt_tokens.min()) >= 0 and int(w.output_tokens.min()) >= 0
    assert len(w.prompt_tokens) == len(w.output_tokens) == len(w.class_ids) == n


stamp = st.one_of(
    st.datetimes().map(lambda d: d.strftime("%Y-%m-%d %H:%M:%S.%f")),
    st.datetimes().map(lambda d: d.isoformat()),
    st.decimals(allow_nan=False, allow_infinity=False, places=7).map(str),
    st.integers(min_value=-10, max_value=10**30).map(str),
    st.sampled_from(["", "2023-13-45 99:99:99", "2023-11-16 18:15:46.6805900", "1e9", "nan", "inf", "0x10",
                     "9" * 40, "2023-11-16", "-1.5"]),
    st.text(max_size=8),
)
token = st.one_of(st.integers(min_value=-5, max_value=2**64).map(str),
                  st.sampled_from(["", "1.5", "1e3", "-0", " 7 ", "NaN", "٣", "9" * 5000]), st.text(max_size=4))
row = st.tuples(stamp, token, token).map(lambda t: ",".join(t)) | st.text(max_size=20)


@FUZZ
@given(st.lists(row, max_size=12), st.booleans(), st.sampled_from([HEADER, "", "TIMESTAMP,ContextTokens", "\ufeff" + HEADER,
                                                                   "ContextTokens,GeneratedTokens,TIMESTAMP"]))
def test_csv_trace(rows, sort, header):
    text = "\n".join([header, *rows])
    sane_or_bad_input(lambda: read_trace_csv(text, "t.csv", sort=sort))


number = st.one_of(st.integers(min_value=-(2**70), max_value=2**70) | st.just(10**400), st.floats(allow_nan=False, allow_infinity=False),
                   st.sampled_from([1e308, 1e-300, 5e-324, 0, -0.0]))
value = number | st.text(max_size=4) | st.booleans() | st.none() | st.lists(st.integers(), max_size=2)
jsonl_row = st.dictionaries(st.sampled_from(["arrival_s", "prompt_tokens", "output_tokens", "x"]), value, max_size=4)


@FUZZ
@given(st.lists(jsonl_row.map(json.dumps) | st.text(max_size=20), max_size=10), st.booleans())
def test_jsonl(rows, sort):
    text = "\n".join(rows)
    sane_or_bad_input(lambda: read_jsonl(text, "r.jsonl", sort=sort))


dist = st.one_of(
    st.fixed_dictionaries({"dist": st.just("fixed"), "value": value}),
    st.fixed_dictionaries({"dist": st.just("uniform"), "low": value, "high": value}),
    st.fixed_dictionaries({"dist": st.just("lognormal"), "median": number, "sigma": number},
                          optional={"min": value, "max": value}),
    st.fixed_dictionaries({"dist": st.just("empirical"), "values": st.lists(value, max_size=4) | value},
                          optional={"weights": st.lists(number, max_size=4) | value}),
    st.dictionaries(st.sampled_from(["dist", "value", "low"]), value | st.sampled_from(["zipf", "fixed"]), max_size=3),
)
klass = st.fixed_dictionaries({"rate": number | value, "prompt": dist, "output": dist}, optional={"name": value})
mix = st.fixed_dictionaries(
    {"classes": st.lists(klass, max_size=3) | value},
    optional={
        "seed": value,
        "requests": st.sampled_from([1, 7, 300, 0, -1, 2**63, 10**9]) | value,
        "duration_s": number | value,
        "rate_scale": number | value,
        "memory": st.fixed_dictionaries({}, optional={"device": st.sampled_from(["h200", "80GiB", "x", 5]),
                                                      "reserved": st.sampled_from(["1GiB", "-1", 3])}) | value,
        "deployment": st.dictionaries(st.sampled_from(["tp", "pp", "dp", "router"]), value, max_size=3) | value,
        "time": st.dictionaries(st.sampled_from(["prefill_tok_s", "tpot_ms"]), number | value, max_size=2) | value,
        "bogus": value,
    },
)


@FUZZ
@given(mix)
def test_mix_spec(data):
    sane_or_bad_input(lambda: generate_mix(data, "m.yaml"))


def test_extreme_mix_values_are_bad_input_not_wrapped():
    import pytest

    fixed = {"dist": "fixed", "value": 5}
    cases = [
        ({"classes": [{"rate": 1e308, "prompt": fixed, "output": fixed}], "duration_s": 1}, "rate"),
        ({"classes": [{"rate": 1e9, "prompt": fixed, "output": fixed}], "duration_s": 1e308}, "duration_s"),
        ({"classes": [{"rate": 1e-9, "prompt": fixed, "output": fixed}], "requests": 70}, "int64 nanosecond"),
        ({"classes": [{"rate": 1, "prompt": {"dist": "lognormal", "median": 5, "sigma": 1e308}, "output": fixed}],
          "requests": 3}, "sigma"),
    ]
    for data, needle in cases:
        with pytest.raises(BadInput, match=needle):
            generate_mix(data, "m.yaml")
    w = generate_mix({"classes": [{"rate": 1, "prompt": {"dist": "empirical", "values": [1, 2],
                                                         "weights": [1e308, 1e308]}, "output": fixed}],
                      "requests": 50}, "m.yaml")
    assert set(w.prompt_tokens.tolist()) <= {1, 2}


def test_trace_spanning_beyond_the_clock_is_bad_input():
    import pytest

    with pytest.raises(BadInput, match="int64 nanosecond clock"):
        read_trace_csv(HEADER + "\n0,1,1\n9223372037,1,1\n", "t.csv")
    with pytest.raises(BadInput, match="int64 nanosecond clock"):
        read_trace_csv(HEADER + "\n0001-01-01 00:00:00,1,1\n9999-01-01 00:00:00,1,1\n", "t.csv")


def test_regression_huge_numbers_found_by_atheris():
    """atheris found a JSONL arrival with a 200-digit exponent (decimal.InvalidOperation);
    the same family: integer literals beyond Python's 4300-digit conversion limit."""
    import pytest

    digits = "9" * 5000
    cases = [
        (read_jsonl, '{"arrival_s": 0.0, "prompt_tokens": 12' + "4" * 100 + "e" + "4" * 200 + ', "output_tokens": 1}',
         "number out of range"),
        (read_jsonl, '{"arrival_s": 1e999999999, "prompt_tokens": 1, "output_tokens": 1}', "int64 nanosecond clock"),
        (read_jsonl, '{"arrival_s": 1, "prompt_tokens": ' + digits + ', "output_tokens": 1}', "number out of range"),
        (read_trace_csv, HEADER + "\n1," + digits + ",1", "too large"),
        (read_trace_csv, HEADER + "\n" + digits + ".5,1,1", "int64 nanosecond clock"),
    ]
    for reader, text, needle in cases:
        with pytest.raises(BadInput, match=needle) as err:
            reader(text, "r")
        assert len(str(err.value)) < 200


def test_integer_beyond_float_range_is_bad_input():
    import pytest

    fixed = {"dist": "fixed", "value": 1}
    with pytest.raises(BadInput, match="out of range"):
        generate_mix({"classes": [{"rate": 10**400, "prompt": fixed, "output": fixed}], "requests": 3}, "m.yaml")
