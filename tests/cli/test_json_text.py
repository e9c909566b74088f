"""The ``--json`` writer (cli/json_text.py) gives exactly ``json.dumps(doc, indent=2)``."""

from __future__ import annotations

import enum
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from csa_plan.cli.json_text import dumps_indented
from csa_plan.planner.commands.check import CheckRequest, run_check
from csa_plan.planner.plan import PlanOptions


class Color(str, enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
KEYS = st.text() | st.integers() | st.floats() | st.booleans() | st.none()
DOCS = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                    | st.dictionaries(KEYS, inner, max_size=4), max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(DOCS)
def test_equals_json_dumps_on_any_document(doc):
    assert dumps_indented(doc) == json.dumps(doc, indent=2)


def test_edge_values_and_subclasses():
    for doc in ({}, [], (), {"a": {}, "b": []}, [float("nan"), float("inf"), -float("inf"), -0.0, 1e300],
                "é\u2028\x00\"\\", {1: 2, 2.5: 1, True: 0, False: 1, None: 2},
                {Color.RED: [Color.RED, Level.HIGH, True]}):
        assert dumps_indented(doc) == json.dumps(doc, indent=2), doc


def test_what_json_refuses_it_refuses_the_same_way():
    for doc in ({"a": object()}, {(1, 2): 3}, [{1, 2}]):
        try:
            json.dumps(doc, indent=2)
        except TypeError as exc:
            expected = str(exc)
        try:
            dumps_indented(doc)
        except TypeError as exc:
            assert str(exc) == expected
        else:
            raise AssertionError(f"{doc!r} was written")
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    for write in (lambda: json.dumps(deep, indent=2), lambda: dumps_indented(deep)):
        try:
            write()
        except RecursionError:
            pass
        else:
            raise AssertionError("too deep a document was written")


def test_a_real_check_document():
    for args in ({}, {"device_memory_bytes": 150_754_820_096, "engine": "vllm-0.33"}):
        doc = run_check(CheckRequest("deepseek-v4-pro", PlanOptions(tp=8), **args)).report
        assert dumps_indented(doc) == json.dumps(doc, indent=2)
