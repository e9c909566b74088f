"""Workload readers: exact parsing, strict bad input naming the line, seeded mixes."""

from __future__ import annotations

import numpy as np
import pytest

from csa_plan.planner.errors import BadInput
from csa_plan.planner.workloads import generate_mix, load_workload, read_jsonl, read_trace_csv

from helpers import EXAMPLES

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def test_azure_timestamps_keep_seven_fractional_digits():
    wl = read_trace_csv(HEADER + "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951691,396,109\n", "t")
    assert wl.arrival_ns.tolist() == [0, 4_314_579_100]
    assert wl.prompt_tokens.tolist() == [374, 396] and wl.output_tokens.tolist() == [44, 109]


def test_sample_is_the_head_of_the_full_trace():
    full = load_workload(str(EXAMPLES / "traces" / "azure_llm_inference_2023_conv.csv"))
    sample = load_workload(str(EXAMPLES / "traces" / "azure_conv_sample_200.csv"))
    assert len(sample) == 200
    assert np.array_equal(sample.arrival_ns, full.arrival_ns[:200])
    assert np.array_equal(sample.prompt_tokens, full.prompt_tokens[:200])


@pytest.mark.parametrize("row,where,words", [
    ("2023-11-16 18:15:46.1,12\n", "t:3", "expected 3 comma-separated fields"),
    ("2023-11-16 18:15:46.1,-5,3\n", "t:3: ContextTokens", "negative"),
    ("2023-11-16 18:15:46.1,5,many\n", "t:3: GeneratedTokens", "non-negative integer"),
    ("2023-11-16 18:15:46.1,5.5,3\n", "t:3: ContextTokens", "non-negative integer"),
    ("yesterday,5,3\n", "t:3: TIMESTAMP", "expected"),
    ("2023-13-16 18:15:46.1,5,3\n", "t:3: TIMESTAMP", "not a valid date"),
])
def test_malformed_rows_name_their_line(row, where, words):
    with pytest.raises(BadInput) as info:
        read_trace_csv(HEADER + "2023-11-16 18:15:46.0,1,1\n" + row, "t")
    assert str(info.value).startswith(where) and words in str(info.value)


@pytest.mark.parametrize("text", ["", HEADER, HEADER + "\n\n"])
def test_empty_trace_is_bad_input(text):
    with pytest.raises(BadInput, match="empty trace"):
        read_trace_csv(text, "t")


def test_missing_column_is_bad_input():
    with pytest.raises(BadInput, match="header lacks GeneratedTokens"):
        read_trace_csv("TIMESTAMP,ContextTokens\n1,2\n", "t")


def test_unsorted_timestamps_are_refused_unless_sorted_explicitly():
    text = HEADER + "10.5,1,1\n12,2,2\n11,3,3\n"
    with pytest.raises(BadInput, match=r"t:4: arrival is earlier than line 3's.*--sort"):
        read_trace_csv(text, "t")
    wl = read_trace_csv(text, "t", sort=True)
    assert wl.arrival_ns.tolist() == [0, 500_000_000, 1_500_000_000]
    assert wl.prompt_tokens.tolist() == [1, 3, 2] and wl.notes


def test_jsonl_reads_exact_arrivals_and_names_bad_lines():
    wl = read_jsonl('{"arrival_s": 0.1, "prompt_tokens": 5, "output_tokens": 6}\n'
                    '{"arrival_s": 0.3, "prompt_tokens": 7, "output_tokens": 0}\n', "j")
    assert wl.arrival_ns.tolist() == [0, 200_000_000]
    for line, words in [('{"arrival_s": 1, "prompt_tokens": -1, "output_tokens": 1}', "j:1: prompt_tokens"),
                        ('{"arrival_s": 1, "prompt_tokens": "9", "output_tokens": 1}', "j:1: prompt_tokens"),
                        ('{"arrival_s": 1, "prompt_tokens": 1}', "j:1: output_tokens: missing"),
                        ('{"arrival_s": -1, "prompt_tokens": 1, "output_tokens": 1}', "j:1: arrival_s"),
                        ('[1, 2]', "j:1: expected a JSON object"), ('{oops', "j:1: malformed JSON")]:
        with pytest.raises(BadInput) as info:
            read_jsonl(line + "\n", "j")
        assert str(info.value).startswith(words)


MIX = {
    "seed": 5, "requests": 4000,
    "classes": [
        {"name": "a", "rate": 3.0, "prompt": {"dist": "fixed", "value": 100}, "output": {"dist": "uniform", "low": 1, "high": 9}},
        {"name": "b", "rate": 1.0, "prompt": {"dist": "lognormal", "median": 1000, "sigma": 1.0, "max": 5000},
         "output": {"dist": "empirical", "values": [7, 70], "weights": [1, 0]}},
    ],
}


def test_mix_is_seeded_and_respects_each_distribution():
    one, two = generate_mix(MIX, "m"), generate_mix(MIX, "m")
    assert np.array_equal(one.arrival_ns, two.arrival_ns) and np.array_equal(one.prompt_tokens, two.prompt_tokens)
    a, b = one.class_ids == 0, one.class_ids == 1
    assert len(one) == 4000 and one.class_names == ("a", "b")
    assert set(one.prompt_tokens[a].tolist()) == {100}
    assert one.output_tokens[a].min() >= 1 and one.output_tokens[a].max() <= 9
    assert one.prompt_tokens[b].min() >= 1 and one.prompt_tokens[b].max() <= 5000
    assert set(one.output_tokens[b].tolist()) == {7}
    assert 0.7 < a.mean() < 0.8  # rate share 3:1
    assert np.all(np.diff(one.arrival_ns) >= 0) and one.arrival_ns[0] == 0


@pytest.mark.parametrize("patch,field", [
    ({"classes": [{"rate": 0, "prompt": {"dist": "fixed", "value": 1}, "output": {"dist": "fixed", "value": 1}}]},
     "classes[0].rate"),
    ({"classes": [{"rate": 1, "prompt": {"dist": "zipf", "a": 2}, "output": {"dist": "fixed", "value": 1}}]},
     "classes[0].prompt.dist"),
    ({"classes": [{"rate": 1, "prompt": {"dist": "uniform", "low": 5, "high": 1}, "output": {"dist": "fixed", "value": 1}}]},
     "classes[0].prompt.high"),
    ({"classes": []}, "classes"),
    ({"requests": 0}, "requests"),
    ({"duration_s": 5}, "requests"),
    ({"memory": {"device": "h200", "reserved": "lots"}}, "memory.reserved"),
    ({"colour": "blue"}, "colour"),
])
def test_bad_mix_specs_name_the_field(patch, field):
    with pytest.raises(BadInput) as info:
        generate_mix({**MIX, **patch}, "m")
    assert info.value.field == field



def test_timestamps_with_utc_offsets_2024_azure_format():
    """The 2024 Azure traces write '+00:00'; offsets are applied, so one instant reads the same."""
    from csa_plan.planner.workloads import read_trace_csv

    text = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
            "2024-05-10 00:00:00.009930+00:00,10,1\n"
            "2024-05-10T00:00:01Z,10,1\n"
            "2024-05-10 05:30:02.5+05:30,10,1\n"
            "2024-05-09 16:00:03-0800,10,1\n")
    w = read_trace_csv(text, "t.csv")
    assert w.arrival_ns.tolist() == [0, 990_070_000, 2_490_070_000, 2_990_070_000]


def test_quoted_csv_fields_and_crlf():
    from csa_plan.planner.workloads import read_trace_csv

    text = ('"TIMESTAMP","ContextTokens","GeneratedTokens"\r\n'
            '"2023-11-16 18:15:46.6805900","374","44"\r\n'
            '2023-11-16 18:15:50.9951690,396,109\r\n')
    w = read_trace_csv(text, "t.csv")
    assert w.arrival_ns.tolist() == [0, 4_314_579_000]
    assert w.prompt_tokens.tolist() == [374, 396] and w.output_tokens.tolist() == [44, 109]
