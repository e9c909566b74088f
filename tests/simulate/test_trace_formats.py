"""Published trace formats read from their fixtures, and hostile variants of each.

Every fixture is also converted by hand here (csv / json modules, Decimal seconds) into
our JSONL, and both must give the same requests and the same simulated peak.
"""

from __future__ import annotations

import csv
import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from csa_plan.planner.errors import BadInput
from csa_plan.planner.workloads import TraceOptions, load_workload, read_jsonl, read_trace_csv
from csa_plan.planner.workloads import csv_trace
from csa_plan.planner.workloads.csv_trace import read_csv_blocks
from csa_plan.planner.workloads.jsonl_trace import read_jsonl_blocks

from helpers import EXAMPLES

TRACES = EXAMPLES / "traces"
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def _stamp_seconds(text: str) -> Decimal:
    from datetime import datetime, timezone

    whole, _, rest = text.partition(".")
    frac, zone = rest, ""
    for sign in "+-":
        if sign in rest:
            frac, zone = rest.split(sign)[0], sign + rest.split(sign)[1]
    if not rest and "+" in whole[19:]:
        whole, zone = whole[:19], whole[19:]
    t = datetime.fromisoformat(whole + (zone or "+00:00"))
    return Decimal(int(t.astimezone(timezone.utc).timestamp())) + (Decimal("0." + frac) if frac else 0)


def hand_converted(path: Path, fmt: str) -> list[tuple[Decimal, int, int]]:
    """(arrival seconds, prompt, output) of the requests the format keeps, read without our readers."""
    if path.suffix == ".jsonl":
        recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if fmt == "mooncake":
            return [(Decimal(r["timestamp"]) / 1000, r["input_length"], r["output_length"]) for r in recs]
        return [(Decimal(str(r["arrival_s"])), r["prompt_tokens"], r["output_tokens"]) for r in recs]
    rows = list(csv.DictReader(path.open(newline="")))
    if fmt == "azure":
        return [(_stamp_seconds(r["TIMESTAMP"]), int(r["ContextTokens"]), int(r["GeneratedTokens"])) for r in rows]
    if fmt == "burstgpt":
        return [(Decimal(r["Timestamp"]), int(r["Request tokens"]), int(r["Response tokens"])) for r in rows
                if int(r["Response tokens"]) != 0]
    return [(Decimal(r["arrival_s"]), int(r["prompt_tokens"]), int(r["output_tokens"])) for r in rows]


def as_jsonl(rows: list[tuple[Decimal, int, int]]) -> str:
    t0 = min(r[0] for r in rows)
    return "".join(json.dumps({"arrival_s": 0, "prompt_tokens": p, "output_tokens": o}).replace(
        '"arrival_s": 0', f'"arrival_s": {a - t0}') + "\n" for a, p, o in rows)


FIXTURES = [
    ("azure_llm_inference_2023_conv.csv", "azure", 19366),
    ("azure_conv_sample_200.csv", "azure", 200),
    ("azure_2024_style_50.csv", "azure", 50),
    ("burstgpt_v1_head42.csv", "burstgpt", 38),
    ("burstgpt_v3_style_42.csv", "burstgpt", 38),
    ("mooncake_conversation_head200.jsonl", "mooncake", 200),
    ("mooncake_synthetic_head100.jsonl", "mooncake", 100),
    ("sample.csv", "csv", 5),
    ("sample.jsonl", "jsonl", 5),
]


def _peak(wl, limit_gib: int | None = None, policy: str = "refuse"):
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.placement import Placement
    from csa_plan.planner.reserve import prepare, simulate
    from csa_plan.planner.reserve.scenario import Policy, Reserve, SimConfig

    spec = load_model("deepseek-v4-flash")
    config = SimConfig(placement=Placement(), limit_bytes=(limit_gib or 0) << 30, reserve=Reserve.FIT,
                       policy=Policy(policy))
    return simulate(prepare(spec, wl, config))


@pytest.mark.parametrize("name,fmt,count", FIXTURES)
def test_each_format_reads_its_fixture_like_the_hand_converted_trace(name, fmt, count):
    path = TRACES / name
    wl = load_workload(str(path))
    assert wl.trace.format == fmt and len(wl) == count
    ref = read_jsonl(as_jsonl(hand_converted(path, fmt)), "hand")
    assert np.array_equal(wl.arrival_ns, ref.arrival_ns)
    assert np.array_equal(wl.prompt_tokens, ref.prompt_tokens) and np.array_equal(wl.output_tokens, ref.output_tokens)
    for limit, policy in ((None, "refuse"), (20, "refuse"), (20, "queue")):
        a, b = _peak(wl, limit, policy), _peak(ref, limit, policy)
        assert (a.peak_bytes, a.peak_ns, a.admitted, a.wait_p99_ns) == (b.peak_bytes, b.peak_ns, b.admitted, b.wait_p99_ns)


def test_each_published_format_is_named_by_force_too():
    assert load_workload(str(TRACES / "sample.csv"), options=TraceOptions(format="csv")).trace.format == "csv"
    with pytest.raises(BadInput, match="header lacks Request tokens, Response tokens, Model"):
        load_workload(str(TRACES / "azure_conv_sample_200.csv"), options=TraceOptions(format="burstgpt"))
    with pytest.raises(BadInput, match="--format: mooncake is a JSONL format"):
        load_workload(str(TRACES / "sample.csv"), options=TraceOptions(format="mooncake"))


def test_burstgpt_filters_and_failures_are_counted():
    path = str(TRACES / "burstgpt_v1_head42.csv")
    wl = load_workload(path)
    assert wl.class_names == ("ChatGPT", "GPT-4") and wl.trace.excluded == (("failed", 4),)
    assert int((wl.class_ids == 1).sum()) == 9
    chat = load_workload(path, options=TraceOptions(where=(("model", "chatgpt"),)))
    assert len(chat) == 29 and chat.class_names == ("ChatGPT",)
    assert dict(chat.trace.excluded) == {"--where": 12, "failed": 1}
    assert len(load_workload(path, options=TraceOptions(keep_failures=True))) == 42
    conv = load_workload(path, options=TraceOptions(where=(("log type", "Conversation log"),), keep_failures=True))
    assert len(conv) == 42
    with pytest.raises(BadInput, match="--where: no column 'session id'"):
        load_workload(path, options=TraceOptions(where=(("session id", "1"),)))
    with pytest.raises(BadInput, match="no requests left"):
        load_workload(path, options=TraceOptions(where=(("model", "Claude"),)))


def test_mooncake_hash_ids_are_kept_and_summarised():
    wl = load_workload(str(TRACES / "mooncake_conversation_head200.jsonl"))
    recs = [json.loads(x) for x in (TRACES / "mooncake_conversation_head200.jsonl").read_text().splitlines()]
    flat = [h for r in recs for h in r["hash_ids"]]
    assert wl.hash_ids.tolist() == flat
    assert wl.hash_offsets.tolist()[-1] == len(flat) and wl.hash_offsets.tolist()[:3] == [0, len(recs[0]["hash_ids"]),
                                                                                        len(recs[0]["hash_ids"]) + len(recs[1]["hash_ids"])]
    seen: set[int] = set()
    shared = 0
    for h in flat:
        shared += h in seen
        seen.add(h)
    assert wl.trace.prefix.blocks == len(flat) and wl.trace.prefix.shared_blocks == shared
    assert wl.trace.prefix.block_tokens == 512


def test_mooncake_unsorted_keeps_each_requests_hash_ids():
    text = ('{"timestamp": 30, "input_length": 5, "output_length": 1, "hash_ids": [1, 2]}\n'
            '{"timestamp": 10, "input_length": 6, "output_length": 1, "hash_ids": [3]}\n'
            '{"timestamp": 20, "input_length": 7, "output_length": 1, "hash_ids": []}\n')
    with pytest.raises(BadInput, match="m:2: arrival is earlier than line 1's"):
        read_jsonl(text, "m")
    wl = read_jsonl(text, "m", sort=True)
    assert wl.arrival_ns.tolist() == [0, 10_000_000, 20_000_000] and wl.prompt_tokens.tolist() == [6, 7, 5]
    assert wl.hash_ids.tolist() == [3, 1, 2] and wl.hash_offsets.tolist() == [0, 1, 1, 3]


def test_header_names_are_case_folded():
    wl = read_trace_csv(" timestamp ,CONTEXTTOKENS,generatedtokens\n2023-11-16 18:15:46.5,3,4\n", "t")
    assert wl.trace.format == "azure" and wl.prompt_tokens.tolist() == [3]
    wl = read_jsonl('{"Arrival_S": 1, "PROMPT_TOKENS": 2, "output_tokens": 3}\n', "j")
    assert wl.prompt_tokens.tolist() == [2]


def test_every_bad_field_of_a_row_is_reported_together():
    with pytest.raises(BadInput) as info:
        read_trace_csv(HEADER + "2023-11-16 18:15:46.0,1,1\nyesterday,-1,abc\n", "t")
    msg = str(info.value)
    assert msg.startswith("t:3: TIMESTAMP: expected") and "; ContextTokens: token count is negative" in msg
    assert "; GeneratedTokens: expected a non-negative integer token count, got 'abc'" in msg and "\n" not in msg
    with pytest.raises(BadInput) as info:
        read_jsonl('{"arrival_s": "x", "output_tokens": true}\n', "j")
    assert str(info.value) == ("j:1: arrival_s: expected a number of s, got 'x'; prompt_tokens: missing; "
                               "output_tokens: expected a non-negative integer, got 'true'")


def test_columns_and_time_units_map_any_layout():
    text = "t_ms,in,out,extra\n1000,10,1,x\n1500.5,20,2,y\n"
    opts = TraceOptions(columns=(("arrival", "T_MS"), ("prompt", "in"), ("output", "out")), time_unit="ms")
    wl = read_trace_csv(text, "g", options=opts)
    assert wl.arrival_ns.tolist() == [0, 500_500_000] and wl.output_tokens.tolist() == [1, 2]
    with pytest.raises(BadInput, match="unrecognised CSV layout"):
        read_trace_csv(text, "g")
    with pytest.raises(BadInput, match="--columns: name the prompt, output column"):
        read_trace_csv(text, "g", options=TraceOptions(columns=(("arrival", "t_ms"),)))
    wl = read_jsonl('{"at": 5, "p": 1, "o": 2}\n{"at": 7, "p": 1, "o": 2}\n', "j",
                    options=TraceOptions(columns=(("arrival", "at"), ("prompt", "p"), ("output", "o")), time_unit="us"))
    assert wl.arrival_ns.tolist() == [0, 2000]
    for unit, ns in (("s", 1_500_000_000), ("ms", 1_500_000), ("us", 1_500), ("ns", 2)):
        wl = read_trace_csv("arrival_s,prompt_tokens,output_tokens\n0,1,1\n1.5,1,1\n", "u",
                            options=TraceOptions(time_unit=unit))
        assert wl.arrival_ns.tolist() == [0, ns]


@pytest.mark.parametrize("row,words", [
    ('"2023-11-16 18:15:46.1","' + "1" * 131_073 + '",3', "(131,073 bytes) is too large"),
    ('"2023-11-16 18:15:46.1","' + "a" * 131_073 + '",3', "(131,073 bytes)"),
    ("2023-11-16 18:15:46.1," + "0" * 100_000 + "7,3", "field is 100,001 bytes long"),
    ("2023-11-16 18:15:46.1+99:99,5,3", "UTC offset out of range"),
    ("2023-11-16 18:15:46.1-24:00,5,3", "UTC offset out of range"),
    ("2023-11-16 18:15:46.1,\u0663,3", "expected a non-negative integer token count"),
    ("2023-11-16 18:15:46.1,\uff11\uff12,3", "expected a non-negative integer token count"),
    ("2023-11-\u0661\u0666 18:15:46.1,5,3", "expected 'YYYY-MM-DD"),
    ("2023-11-16 18:15:46.1234567890,5,3", "expected 'YYYY-MM-DD"),
    ("2023-02-29 18:15:46,5,3", "not a valid date"),
    ("12,5,3", "mixes dates and numbers"),
    ("2023-11-16 18:15:46.1,5,9223372036854775808", "too large"),
    ('2023-11-16 18:15:46.1,"5,3', "expected 3 comma-separated fields, got 2"),
])
def test_hostile_csv_rows_are_one_line_bad_input(row, words, monkeypatch):
    monkeypatch.setattr(csv_trace, "MAX_LINE_BYTES", 200_000)  # a whole row is held to it too (issue 37)
    with pytest.raises(BadInput) as info:
        read_trace_csv(HEADER + "2023-11-16 18:15:46.0,1,1\n" + row + "\n" + ("x" * 5000 if '"5,3' in row else ""),
                       "t")
    msg = str(info.value)
    assert words in msg and "\n" not in msg and len(msg) < 400


def test_escape_sequences_in_a_header_never_reach_the_message():
    with pytest.raises(BadInput) as info:
        read_trace_csv("\x1b]0;pwned\x07TIMESTAMP,\x1b[31mContextTokens\n1,2\n", "t")
    assert "\x1b" not in str(info.value) and "\x07" not in str(info.value) and "\\x1b" in str(info.value)


def test_unicode_line_separators_do_not_shift_line_numbers():
    with pytest.raises(BadInput, match="^t:4: ContextTokens"):
        read_trace_csv(HEADER + "1,1,1\n2,\u2028,1\n".replace("\u2028", "1") + "3,x\u2028,1\n", "t")


def test_quoted_newlines_and_commas_stay_inside_their_field():
    text = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            '1,"Chat,\nGPT",5,6,11,API log\n2,"GPT-4",7,8,15,"API log"\n')
    wl = read_trace_csv(text, "b")
    assert wl.class_names == ("Chat,\\nGPT", "GPT-4") and wl.prompt_tokens.tolist() == [5, 7]


@pytest.mark.parametrize("block", [1, 7, 64, 1 << 20])
def test_chunk_and_block_boundaries_change_nothing(block, monkeypatch):
    text = (TRACES / "burstgpt_v3_style_42.csv").read_bytes() + b'\r\n\r\n  \n4800.5,1,1,"Chat GPT",3,4,7,API log'
    whole = read_csv_blocks([text], "b", TraceOptions())
    monkeypatch.setattr(csv_trace, "CHUNK_BYTES", 97)
    parts = [text[i:i + block] for i in range(0, len(text), block)]
    chunked = read_csv_blocks(parts, "b", TraceOptions())
    for k in ("arrival_ns", "prompt_tokens", "output_tokens", "class_ids"):
        assert np.array_equal(getattr(whole, k), getattr(chunked, k))
    assert whole.class_names == chunked.class_names and len(whole) == 39


def test_error_lines_are_exact_across_chunks(monkeypatch):
    monkeypatch.setattr(csv_trace, "CHUNK_BYTES", 50)
    rows = "".join(f"{i},{i},1\n" for i in range(200))
    with pytest.raises(BadInput, match=r"^c:150: prompt_tokens: token count is negative"):
        read_trace_csv("arrival_s,prompt_tokens,output_tokens\n" + rows.replace("148,148,", "148,-1,"), "c")
    with pytest.raises(BadInput, match=r"^c:102: arrival is earlier than line 101's"):
        read_trace_csv("arrival_s,prompt_tokens,output_tokens\n" + rows.replace("99,99,", "1000,99,"), "c")


def test_request_count_is_bounded(monkeypatch):
    from csa_plan.planner.workloads import columnar

    monkeypatch.setattr(columnar, "MAX_TRACE_REQUESTS", 10)
    with pytest.raises(BadInput, match="more than 10 requests"):
        read_trace_csv("arrival_s,prompt_tokens,output_tokens\n" + "1,1,1\n" * 11, "c")


@pytest.mark.parametrize("line,words", [
    ('{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [' * 1 + "[" * 100_000 + "]" * 100_000
     + "]}", "nested too deeply"),
    ('{"timestamp": 1, "timestamp": 2, "input_length": 1, "output_length": 1}', "timestamp: duplicate key"),
    ('{"timestamp": NaN, "input_length": 1, "output_length": 1}', "NaN is not a number"),
    ('{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [1, -2]}', "hash_ids: expected non-negative"),
    ('{"timestamp": 1e30, "input_length": 1, "output_length": 1}', "int64 nanosecond clock"),
    ('{"timestamp": 9223372036854775807, "input_length": 1, "output_length": 1}', "int64 nanosecond clock"),
])
def test_hostile_jsonl_records_are_one_line_bad_input(line, words):
    with pytest.raises(BadInput) as info:
        read_jsonl('{"timestamp": 0, "input_length": 1, "output_length": 1}\n' + line + "\n", "m")
    assert words in str(info.value) and str(info.value).startswith("m:2")


def test_jsonl_blocks_split_anywhere():
    text = (TRACES / "mooncake_synthetic_head100.jsonl").read_bytes()
    whole = read_jsonl_blocks([text], "m", TraceOptions())
    parts = read_jsonl_blocks([text[i:i + 333] for i in range(0, len(text), 333)], "m", TraceOptions())
    assert np.array_equal(whole.arrival_ns, parts.arrival_ns) and np.array_equal(whole.hash_ids, parts.hash_ids)


def test_a_huge_output_count_blames_the_trace_field_not_the_option(tmp_path):
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.reserve import prepare
    from csa_plan.planner.reserve.scenario import SimConfig

    wl = read_trace_csv(HEADER + f"2023-11-16 18:15:46.0,1,1\n2023-11-16 18:15:47.0,1,{2**63 - 1}\n", "t.csv")
    with pytest.raises(BadInput, match=r"^t.csv: GeneratedTokens: request 2 has 9,223,372,036,854,775,807 tokens"):
        prepare(load_model("deepseek-v4-flash"), wl, SimConfig())


def test_lognormal_max_near_2_63_never_overflows_the_cast():
    from csa_plan.planner.workloads import generate_mix

    mix = {"seed": 1, "requests": 2000, "classes": [{"rate": 1.0, "prompt": {"dist": "lognormal", "median": 1e18,
           "sigma": 3.0, "max": 2**63 - 1}, "output": {"dist": "fixed", "value": 1}}]}
    wl = generate_mix(mix, "m")
    assert int(wl.prompt_tokens.min()) > 1 and int(wl.prompt_tokens.max()) <= 2**63 - 1
    assert int(wl.prompt_tokens.max()) == 9223372036854774784


def test_a_file_with_too_many_rows_is_refused_before_parsing(tmp_path, monkeypatch):
    """The 498 MiB / 87M-row attack, scaled down: refused from a line count, nothing parsed."""
    from csa_plan.planner.workloads import traces

    monkeypatch.setattr(traces, "MAX_TRACE_REQUESTS", 1000)
    big = tmp_path / "big.csv"
    big.write_bytes(b"arrival_s,prompt_tokens,output_tokens\n" + b"1,1,1\n" * 1002)
    with pytest.raises(BadInput, match="more than 1,000 rows"):
        load_workload(str(big))
    blank = tmp_path / "blank.csv"  # many newlines, few rows: read as usual
    blank.write_bytes(b"arrival_s,prompt_tokens,output_tokens\n" + b"1,1,1\n" * 5 + b"\n\r\n" * 2000)
    assert len(load_workload(str(blank))) == 5


# -- issue 24: one column, one role ------------------------------------------------------------------


@pytest.mark.parametrize("mapping, needle", [
    ("arrival=a,prompt=b,output=b", "'b' is named for both prompt and output"),
    ("arrival=a,prompt=a,output=a", "'a' is named for both arrival and prompt"),
    ("arrival=A,prompt=a,output=c", "'a' is named for both arrival and prompt"),  # names are matched case-folded
])
def test_one_column_cannot_hold_two_roles(mapping, needle):
    from csa_plan.planner.errors import BadInput
    from csa_plan.planner.workloads.formats import parse_columns

    with pytest.raises(BadInput, match=needle):
        parse_columns(mapping)


def test_a_header_naming_a_column_twice_is_bad_input(csa, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens,contexttokens\n2023-11-16 18:15:46,1,1,5\n")
    r = csa("simulate", str(trace), "--model", "deepseek-v4-flash")
    assert r.code == 2 and "t.csv:1" in r.err and "'contexttokens' twice (columns 2 and 4)" in r.err
