"""What a new user still tripped over (issue 48): each test is one item, as the user saw it before and
as it reads now."""

from __future__ import annotations

import pytest

FLASH = ("check", "deepseek-v4-flash", "--device-memory", "h200")
ROOT_DOCS = __import__("pathlib").Path(__file__).resolve().parents[2] / "docs"


def _deployment(r) -> str:
    return next(line for line in r.out.splitlines() if line.startswith("Deployment:"))


# -- item 2: the engines' own flag spellings ----------------------------------------------------------

@pytest.mark.parametrize("spelled", [("--tensor-parallel-size", "4"), ("-tp", "4"), ("-tp=4",)])
def test_vllm_tensor_parallel_spellings_are_tp(csa, spelled):
    """Before: `--tensor-parallel-size 4` -> "Did you mean '--page-size'?"; `-tp 4` -> "No such option '-t'"."""
    r = csa(*FLASH, "--engine", "vllm-0.33", *spelled, "--brief")
    assert r.code == 0, r.err
    assert _deployment(r).startswith("Deployment: tp 4 pp 1 dp 1 ep 1: 4 x h200")
    assert _deployment(r) == _deployment(csa(*FLASH, "--engine", "vllm-0.33", "--tp", "4", "--brief"))


def test_vllm_expert_parallel_switch_is_ep_over_every_gpu(csa):
    """Before: `--enable-expert-parallel` -> "Did you mean '--shared-expert-tp1'?"."""
    for switch in ("--enable-expert-parallel", "-ep"):
        r = csa(*FLASH, "--engine", "vllm-0.33", "-tp", "4", "-dp", "2", switch, "--brief")
        assert r.code == 0, r.err
        assert _deployment(r).startswith("Deployment: tp 4 pp 1 dp 2 ep 8: 8 x h200")
        assert "note: --enable-expert-parallel read as --ep 8 (tp x dp)" in r.err


def test_sglang_dp_attention_is_read_as_sglang_means_it(csa):
    r = csa(*FLASH, "--engine", "sglang-0.5.23", "--tp-size", "8", "--dp-size", "8", "--enable-dp-attention",
            "--brief")
    assert r.code == 0, r.err
    assert _deployment(r).startswith("Deployment: tp 1 pp 1 dp 8 ep 1: 8 x h200")
    assert "read as --tp 1 --dp 8 (8 GPUs)" in r.err
    ep = csa(*FLASH, "--engine", "sglang-0.5.23", "--tp-size", "8", "--ep-size", "8", "--brief")
    assert ep.code == 0 and _deployment(ep).startswith("Deployment: tp 8 pp 1 dp 1 ep 8")


@pytest.mark.parametrize("engine, words, said", [
    ("sglang-0.5.23", ("-tp", "8"), "-tp: is vLLM's spelling; sglang-0.5.23 spells it --tp-size"),
    ("sglang-0.5.23", ("--enable-expert-parallel",), "sglang-0.5.23 spells it --ep-size N"),
    ("vllm-0.33", ("--tp-size", "8"), "--tp-size: is SGLang's spelling; vllm-0.33 spells it --tensor-parallel-size"),
    ("vllm-0.33", ("--enable-dp-attention",), "data-parallel attention already: --data-parallel-size"),
    ("sglang-0.5.23", ("--tp-size", "8", "--dp-size", "2"), "2 without --enable-dp-attention runs 2 separate"),
    ("sglang-0.5.23", ("--tp", "8", "--dp", "8", "--enable-dp-attention"), "SGLang reads --tp as --tp-size"),
    ("vllm-0.33", ("--tp", "8", "-tp", "4"), "given twice with different values: --tp 8 and -tp 4"),
])
def test_another_engines_spelling_names_this_engines(csa, engine, words, said):
    r = csa(*FLASH, "--engine", engine, *words, "--brief")
    assert r.code == 2 and said in r.err, r.err
    assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err


def test_an_engine_spelling_without_an_engine_says_what_to_write(csa):
    r = csa(*FLASH, "-tp", "8", "--brief")
    assert r.code == 2 and "-tp: is vLLM's spelling of --tp: name the engine with --engine" in r.err


def test_unknown_options_get_a_close_spelling_or_none(csa):
    """Before: an unrelated option was offered ('--page-size' for '--tensor-parallel-size')."""
    typo = csa(*FLASH, "--engine", "vllm-0.33", "--tensor-paralel-size", "8")
    assert typo.code == 2 and "Did you mean '--tensor-parallel-size'?" in typo.err
    unrelated = csa(*FLASH, "--engine", "vllm-0.33", "--trust-remote-code")
    assert unrelated.code == 2 and "mean" not in unrelated.err
    # SGLang's --page-size is not offered on vLLM, nor vLLM's --block-size on SGLang
    assert "mean" not in csa(*FLASH, "--engine", "vllm-0.33", "--page-sze", "256").err
    assert "Did you mean '--page-size'?" in csa(*FLASH, "--engine", "sglang-0.5.23", "--page-sze", "256").err


def test_no_card_of_another_vendor_is_suggested(csa):
    """Before: `--device-memory b300` -> "did you mean 'mi300x'?" (B300 is a card of the table now, issue 44:
    a name of the same digits and another vendor's letter stands in for it)."""
    assert csa(*FLASH, "--brief", "--device-memory", "b300").code == 0
    r = csa(*FLASH, "--brief", "--device-memory", "x300")
    assert r.code == 2 and "mi300x'?" not in r.err and "cannot read size 'x300'" in r.err
    assert "did you mean 'h200'?" in csa(*FLASH[:2], "--device-memory", "H-200x").err


# -- item 3: figures pasted from logs -----------------------------------------------------------------

def test_a_decimal_gib_from_the_log_is_read_and_its_bytes_said(csa):
    """Before: `--kv-memory 84.91GiB` (vLLM's "Available KV cache memory: 84.91 GiB") -> "not a whole number
    of bytes", exit 2."""
    r = csa("check", "deepseek-v4-flash", "--engine", "vllm-0.33", "--kv-memory", "84.91GiB", "--max-seq-len", "16K",
            "--json")
    assert r.code == 0, r.err
    assert r.json()["head"]["kv_memory_bytes"] == 91_171_418_275 == int(84.91 * (1 << 30))
    assert ("note: --kv-memory 84.91GiB read as 91,171,418,275 B (84.91 x 2^30 rounded down to a whole byte; a "
            "figure printed to 2 decimals stands for up to 5,368,709 B either side)") in r.err
    whole = csa("check", "deepseek-v4-flash", "--engine", "vllm-0.33", "--kv-memory", "80GiB", "--json")
    assert whole.code == 0 and "note:" not in whole.err  # a whole figure needs no word
    for bad in ("84.5", "1.5G", "0.3B"):  # no unit, a binary suffix, a fraction of a byte: still refused
        assert csa("check", "deepseek-v4-flash", "--engine", "vllm-0.33", "--kv-memory", bad).code == 2


def test_the_other_actual_usage_wording_and_another_length_are_said(csa, tmp_path):
    """Before: vLLM's "Actual usage is W GiB for weight, A GiB for peak activation, N GiB for non-torch memory, and
    G GiB for CUDAGraph memory" was skipped without a word, and a log of another max_model_len calibrated silently.
    Now that wording is read term by term, a wording no rule reads is bad input naming its line (issue 47: a log
    is read whole), and another length is said in a note."""
    from pathlib import Path

    logs = Path(__file__).resolve().parents[1] / "fixtures" / "startup_logs"
    text = (logs / "vllm-0.25-rtx-pro-6000-flash-tp2.log").read_text()
    line = ("(Worker_TP0 pid=1) INFO [gpu_worker.py:857] Free memory on device (94.97/95.59 GiB) on startup. Actual "
            "usage is 75.64 GiB for weight, 2.10 GiB for peak activation, 0.95 GiB for non-torch memory, and 1.31 GiB "
            "for CUDAGraph memory. Current kv cache memory in use is 10.29 GiB.\n")
    log = tmp_path / "split.log"
    log.write_text(text + line)
    args = ("check", "deepseek-v4-flash", "--engine", "vllm-0.25", "--device-memory", "rtx-pro-6000", "--tp", "2",
            "--max-num-seqs", "64", "--num-speculative-tokens", "2", "--gpu-memory-utilization", "0.95",
            "--kv-cache-dtype", "fp8", "--max-num-batched-tokens", "4096", "--from-log", str(log))
    r = csa(*args, "--max-seq-len", "16K", "--json")
    assert r.code == 0, r.err
    terms = {t["term"]: t["implied_bytes"] for t in r.json()["budget"]["calibration"]["terms"]}
    assert terms["weights ('Actual usage ... for weight')"] == int(75.64 * (1 << 30))
    assert terms["non-torch memory ('Actual usage ... for non-torch memory')"] == int(0.95 * (1 << 30))
    assert terms["CUDA graphs as captured ('Actual usage ... CUDAGraph memory')"] == int(1.31 * (1 << 30))
    notes = r.json()["budget"]["calibration"]["notes"]
    assert notes[0].startswith("the log ran max_model_len 1,048,576, the command asks 16,384: the terms are compared "
                               "at the log's length")
    assert all(f"note: --from-log: {n}" in r.err for n in notes)
    same = csa(*args, "--max-seq-len", "1M", "--json")
    assert same.code == 0 and not any("max_model_len" in n for n in same.json()["budget"]["calibration"]["notes"])
    log.write_text(text + line + "INFO Actual usage is 3 GB of something else\n")
    unread = csa(*args, "--max-seq-len", "1M")
    n = len((text + line).splitlines()) + 1
    assert unread.code == 2 and f"split.log:{n}" in unread.err and "cannot read" in unread.err, unread.err
    assert len(unread.err.strip().splitlines()) == 1


# -- item 4: the length question exits 0 -----------------------------------------------------------

def test_the_longest_context_question_is_answered_with_exit_0(csa):
    """Before: README question 2 ("the longest context for 64 requests") printed `DOES NOT FIT (exit 3)`,
    because --max-seq-len defaults to the model's 1M."""
    args = ("check", "deepseek-v4-pro", "--device-memory", "h200", "--tp", "8", "--concurrency", "64")
    r = csa(*args, "--brief")
    assert r.code == 0, r.out
    lines = r.out.splitlines()
    assert lines[0].startswith("ADMITTED (exit 0)")
    assert lines[1] == "Longest max_seq_len for 64 concurrent requests: 106,472 tokens [layout: exact]"
    assert "StatePoolTooSmall" not in r.out
    doc = csa(*args, "--json").json()
    assert (doc["exit_code"], doc["verdict"], doc["head"]["question"]) == (0, "admitted", "length")
    assert doc["fit"]["longest_context"] == 106_472 and doc["fit"]["requests_that_fit"] == 6
    # the count asked at a length is still the count: 64 of 1M do not fit
    at = csa(*args, "--max-seq-len", "1M", "--json").json()
    assert (at["exit_code"], at["head"]["question"]) == (3, "count")
    # and when no length holds them, the length question fails too
    none = csa("check", "deepseek-v4-pro", "--device-memory", "h200", "--tp", "8", "--concurrency", "100000",
               "--json").json()
    assert none["exit_code"] == 3 and none["fit"]["longest_context"] is None


# -- item 1: the vLLM headline count ----------------------------------------------------------------

def test_vllm_count_is_said_as_admitted_at_once_with_the_decoding_figure_beside_it(csa):
    """Before: `Requests of 16,384 tokens that fit: 16` (per request 6.27 GiB), read as "it cannot be served",
    while a decoding request holds 86 MiB and simulate runs hundreds at once."""
    args = ("check", "deepseek-v4-flash", "--max-seq-len", "16K", "--device-memory", "h200", "--tp", "8",
            "--engine", "vllm-0.33")
    text = " ".join(csa(*args, "--brief").out.split())
    assert ("Requests of 16,384 tokens admitted at once into an empty cache: 16 (the engine's 'Maximum "
            "concurrency') [engine: vllm-0.33]") in text
    assert "decoding (each holds 86.02 MiB): 1,024 at once, admitted one by one (the running cap; memory: 1,173)" in text
    assert "charged per request at admission: 6.27 GiB (6,735,052,800 B)" in text
    fit = csa(*args, "--json").json()["fit"]
    steady = fit["steady_decode"]
    assert fit["requests_that_fit"] == 16 and fit["per_request_bytes"] == 6_735_052_800
    assert steady["count"] == 1024 and steady["by_memory"] == 1173 and steady["limited_by"] == "running cap"
    assert steady["per_request_bytes"] == 90_201_600  # what compare calls a decoding request
    # the figure is reachable one by one: n-1 decoding plus one admission charge fit the usable blocks
    units = steady["units_per_request"]
    need = fit["per_request_bytes"] // (steady["per_request_bytes"] // units)
    usable = csa(*args, "--json").json()["engine"]["pool"]["usable_units"]
    n = steady["by_memory"]
    assert (n - 1) * units + need <= usable < n * units + need
    # without the running cap the figure is memory's
    more = csa(*args, "--max-num-seqs", "2048", "--json").json()["fit"]["steady_decode"]
    assert more["count"] == 1173 and more["limited_by"] == "memory"
    # SGLang and the exact layout charge a decoding request what they admit: no second figure
    for other in (("--engine", "sglang-0.5.23"), ()):
        a = [x for x in args if x not in ("--engine", "vllm-0.33")]
        r = csa(*a, *other, "--json").json()["fit"]
        assert r["steady_decode"] is None
        assert "tokens that fit:" in csa(*a, *other, "--brief").out


# -- item 6: run-gpu --json without a GPU -----------------------------------------------------------

def test_run_gpu_json_without_a_gpu_prints_the_error_document(csa, monkeypatch):
    """Before: `run-gpu --json` printed nothing on stdout without a GPU (exit 5)."""
    import json

    from csa_plan.kernels import gpu_env

    monkeypatch.setattr(gpu_env, "gpu_unavailable_reason", lambda: "no usable GPU: CuPy not installed (test)")
    r = csa("run-gpu", "--json")
    assert r.code == 5
    assert json.loads(r.out) == {"schema": "csa-plan/error/v1", "exit_code": 5,
                                 "message": "no usable GPU: CuPy not installed (test)"}
    assert r.err == "csa-plan: no usable GPU: CuPy not installed (test)\n"
    plain = csa("run-gpu")
    assert plain.code == 5 and plain.out == ""
    refused = csa("run-gpu", "--backend", "emulate", "--limit", "1MiB", "--json")
    assert refused.code == 3 and json.loads(refused.out)["exit_code"] == 3
    assert "exit 5" in (ROOT_DOCS / "json-schemas.md").read_text()


# -- item 7 (sweep) and item 8: the shipped engines example -------------------------------------------

def test_the_shipped_engine_sweep_answers_a_deployable_engine_and_states_its_band(csa, monkeypatch):
    """Before: `sweep examples/sweeps/engines.yaml` answered `dp 1, engine exact (no engine) — 2 devices` (no
    server runs csa-plan's contract layout), and sweep printed its step-time source without the error band the
    README promised "with every answer". docs/sweep.md's example shows what it prints."""
    from helpers import EXAMPLES

    monkeypatch.setenv("COLUMNS", "100")
    spec = str(EXAMPLES / "sweeps" / "engines.yaml")
    doc = csa("sweep", spec, "--json").json()
    assert doc["exit_code"] == 0 and doc["answer"]["point"]["engine"] in ("vllm-0.33", "sglang-0.5.23")
    assert all(r["point"]["engine"] is not None for r in doc["results"])
    import json

    from helpers import ROOT

    hopper = json.loads((ROOT / "planner" / "steptime" / "steptime_fit.json").read_text())["fits"]["sglang/hopper"]
    bands = {r["runtime"]["step_time"] for r in doc["results"]}
    assert bands and all(f"(error band: {hopper['band']})" in b for b in bands)  # Hopper's band, as fitted
    text = csa("sweep", spec)
    printed = [line.rstrip() for line in text.out.splitlines()]
    assert printed[0].startswith("answer: dp 1, engine vllm-0.33 — 2 devices")
    assert any(line.startswith("  step time: physics") for line in printed) and "error band" in text.out
    # docs/sweep.md's example block: every line it shows is printed, in order
    page = (ROOT_DOCS / "sweep.md").read_text()
    block = page[page.index("$ csa-plan sweep examples/sweeps/engines.yaml\n"):].split("```")[0].splitlines()[1:]
    at = 0
    for want in (w.rstrip() for w in block if w.strip() and w.strip() != "…"):
        while at < len(printed) and printed[at] != want:
            at += 1
        assert at < len(printed), f"docs/sweep.md shows a line the sweep no longer prints: {want!r}"
        at += 1


# -- item 5: latency in the short forms ---------------------------------------------------------------

SIM = ("simulate", "examples/traces/azure_conv_sample_200.csv", "--model", "deepseek-v4-flash", "--tp", "2",
       "--device-memory", "h200", "--engine", "vllm-0.33", "--max-seq-len", "64K")


def test_brief_gives_ttft_and_tpot_and_the_rate_found(csa, monkeypatch):
    """Before: `simulate --brief` gave the queue wait but not TTFT/TPOT; with `--find-capacity --max-wait 2` it
    omitted the sustainable rate its help promises."""
    monkeypatch.chdir(ROOT_DOCS.parent)
    doc = csa(*SIM, "--json").json()["runtime"]
    brief = csa(*SIM, "--brief").out.splitlines()
    assert brief[2] == (f"  served 200 of 200; p99: queue wait {doc['queue_wait']['p99_s']:.3f} s, TTFT "
                        f"{doc['ttft']['p99_s']:.3f} s, TPOT {doc['tpot']['p99_s'] * 1000:.3f} ms")
    cap = csa(*SIM, "--find-capacity", "--max-wait", "2", "--json").json()["capacity"]
    found = " ".join(csa(*SIM, "--find-capacity", "--max-wait", "2", "--brief").out.split())
    assert (f"capacity: x{cap['rate_scale']:.4g} arrival rate = {cap['rate_per_s']:,.3g} req/s keeps every request "
            f"served, queue-wait p99 <= 2 s ({len(cap['probes'])} probes)") in found


def test_find_capacity_reports_req_per_s_and_every_probe_and_bounds_ttft_tpot(csa, monkeypatch):
    """Before: `capacity: x0.2514 … (10 probes)` without req/s nor the probes; only the wait was bounded (at the
    rate found, TPOT p99 was 192 ms)."""
    monkeypatch.chdir(ROOT_DOCS.parent)
    wait_only = csa(*SIM, "--find-capacity", "--max-wait", "2", "--json").json()
    cap = wait_only["capacity"]
    assert cap["rate_per_s"] == pytest.approx(cap["rate_scale"] * 200 / _span_s(), rel=1e-6)  # the trace's own rate
    assert [p["ok"] for p in cap["probes"]][:2] == [True, True] and any(not p["ok"] for p in cap["probes"])
    assert max(p["rate_scale"] for p in cap["probes"] if p["ok"]) == cap["rate_scale"]
    text = " ".join(csa(*SIM, "--find-capacity", "--max-wait", "2").out.split())
    assert "probes: x1 ok, x2 ok" in text and f"x{cap['rate_scale']:.4g} ok" in text
    tpot_at_wait_only = wait_only["runtime"]["tpot"]["p99_s"]
    assert tpot_at_wait_only > 0.06  # the wait bound alone lets TPOT p99 past 60 ms
    bounded = csa(*SIM, "--find-capacity", "--max-wait", "2", "--max-tpot", "60", "--json").json()
    assert bounded["runtime"]["tpot"]["p99_s"] <= 0.06 and bounded["capacity"]["max_tpot_ms"] == 60
    assert bounded["capacity"]["rate_scale"] < cap["rate_scale"]
    ttft = csa(*SIM, "--find-capacity", "--max-ttft", "0.5", "--json").json()
    assert ttft["runtime"]["ttft"]["p99_s"] <= 0.5 and ttft["capacity"]["criterion"] == \
        "every request served, TTFT p99 <= 0.5 s"
    # the bounds need --find-capacity and a replayed engine: one line each
    assert "add --find-capacity" in csa(*SIM, "--max-ttft", "1").err
    ledger = csa("simulate", "examples/traces/azure_conv_sample_200.csv", "--model", "deepseek-v4-pro", "--tp", "8",
                 "--device-memory", "h200", "--find-capacity", "--max-tpot", "50")
    assert ledger.code == 2 and "only an engine replayed step by step gives" in ledger.err


def _span_s() -> float:
    import csv

    rows = list(csv.DictReader(open(ROOT_DOCS.parent / "examples" / "traces" / "azure_conv_sample_200.csv")))
    return _seconds(rows[-1]["TIMESTAMP"]) - _seconds(rows[0]["TIMESTAMP"])


def _seconds(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp[:26]).timestamp()


def test_the_two_engine_table_has_a_tpot_row(csa, monkeypatch):
    """Before: `--engine vllm-0.33 --engine sglang-0.5.23` had queue wait, first token and end to end rows, no TPOT."""
    monkeypatch.chdir(ROOT_DOCS.parent)
    monkeypatch.setenv("COLUMNS", "120")
    args = [a for a in SIM if a not in ("--engine", "vllm-0.33")] + ["--engine", "vllm-0.33", "--engine",
                                                                        "sglang-0.5.23"]
    r = csa(*args)
    docs = csa(*args, "--json").json()["side_by_side"]
    row = next(line for line in r.out.splitlines() if "per output token p50/p99/max ms" in line)
    for d in docs:
        assert "/".join(f"{d['runtime']['tpot'][q] * 1000:,.1f}" for q in ("p50_s", "p99_s", "max_s")) in row


def test_compare_reads_the_engine_spellings_too(csa):
    r = csa("compare", "deepseek-v4-flash", "--engine", "vllm-0.33", "--device-memory", "h200", "-tp", "8", "--json")
    assert r.code == 0 and r.json()["options"]["tp"] == 8, r.err
    assert csa("compare", "deepseek-v4-flash", "--device-memory", "h200", "-tp", "8").code == 2
