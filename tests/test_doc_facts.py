"""Facts the docs state that the code also holds, checked against the code (issue 36 item 12).

- docs/json-schemas.md lists exactly the keys ``check --json`` emits: the document's own and,
  for the rows that list them, each object's (a key in parentheses is a nested one). Before, it
  listed a ``memory`` key that is not emitted and left out ``fit``, ``head``, ``warnings`` and
  ``all_refusals``.
- The GPU tables in docs (check.md, gpus.md) list exactly the cards of ``planner/cards.py``, with
  the table's figures: before, check.md's table had 7 cards and lacked h20, gpus.md had 12.
"""

from __future__ import annotations

import json
import re

import pytest

from helpers import ROOT

SCHEMAS = ROOT / "docs" / "json-schemas.md"
ROWS_WITH_KEYS = ("model", "options", "counts", "totals", "fit", "head", "budget", "all_refusals", "refusals",
                  "groups", "layers")


def documented_check_keys() -> dict[str, set[str]]:
    """Each row of the check/v2 table: its key(s) -> the keys its content lists outside parentheses."""
    text = SCHEMAS.read_text()
    table = text[text.index("`check --json` prints"):text.index("Byte classes")]
    rows: dict[str, set[str]] = {}
    for line in table.splitlines():
        m = re.match(r"\| (.+?) \| (.+) \|$", line)
        if not m or not m.group(1).startswith("`"):
            continue
        content, previous = m.group(2), None
        while previous != content:  # drop nested (...) groups, innermost first
            previous, content = content, re.sub(r"\([^()]*\)", "", content)
        for key in re.findall(r"`([a-z_0-9]+)`", m.group(1)):
            rows[key] = set(re.findall(r"`([a-z_0-9]+)`", content))
    return rows


def _keys(value) -> set[str]:
    if isinstance(value, list):  # every item's keys: owner and reader groups add compression_ratio
        return set().union(*(set(v) for v in value))
    return set(value)


def test_json_schemas_lists_exactly_the_check_keys(csa):
    rows = documented_check_keys()
    docs = [csa("check", *args, "--json").json() for args in (
        ("deepseek-v4-pro",),
        ("deepseek-v4-pro", "--device-memory", "h200", "--tp", "8", "--engine", "vllm-0.33"),
        ("deepseek-v4-pro", "--device-memory", "h200", "--tp", "8", "--concurrency", "64"),
        ("deepseek-v4.1-flash",),  # shared compressed state: owner/reader counts, group ratios, sharing
        (str(ROOT / "examples" / "configs" / "refusals" / "UnsupportedRatio.yaml"),),
    )]
    emitted = set().union(*(d.keys() for d in docs))
    assert set(rows) == emitted, (sorted(set(rows) - emitted), sorted(emitted - set(rows)))
    for key in ROWS_WITH_KEYS:
        seen = set().union(*(_keys(d[key]) for d in docs if d.get(key)))
        assert rows[key] == seen, (key, sorted(rows[key] - seen), sorted(seen - rows[key]))


def test_the_error_document_and_the_shared_keys_are_as_documented(csa):
    text = SCHEMAS.read_text()
    example = json.loads(re.search(r"```json\n(.+?)\n```", text, re.S).group(1))
    err = csa("check", "deepseek-v4-pro", "--tp", "x", "--json").json()
    assert set(err) == set(example) == {"schema", "exit_code", "message"}
    sample = str(ROOT / "examples" / "traces" / "azure_conv_sample_200.csv")
    for args in (("check", "deepseek-v4-flash"), ("compare", "deepseek-v4-flash"),
                 ("simulate", sample, "--model", "deepseek-v4-flash"),
                 ("sweep", str(ROOT / "examples" / "sweeps" / "small.yaml"), "-j", "1")):
        doc = csa(*args, "--json").json()
        assert "model_info" in doc, args
        assert "device_limit" in (doc["results"][0] if args[0] == "sweep" else doc), args  # a sweep's per point


def _card_tables() -> list[tuple[str, dict[str, str]]]:
    """Every Markdown table in README.md and docs/ whose first column names GPU cards: (page, name -> row)."""
    from csa_plan.planner.cards import CARDS

    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        rows: dict[str, str] = {}
        for line in [*page.read_text().splitlines(), ""]:
            if line.startswith("|"):
                first = line.split("|")[1].strip().strip("`")
                if first in CARDS:
                    rows[first] = line
                continue
            if len(rows) >= 3:
                found.append((page.name, rows))
            rows = {}
    return found


def test_every_gpu_table_in_the_docs_is_the_card_table():
    from csa_plan.planner.cards import CARDS

    tables = _card_tables()
    assert [page for page, _ in tables] == ["gpus.md"]  # one table; check.md points to it
    for page, rows in tables:
        assert set(rows) == set(CARDS), (page, sorted(set(rows) ^ set(CARDS)))
        for name, card in CARDS.items():
            cells = [c.strip() for c in rows[name].split("|")[1:-1]]
            assert cells[1:5] == [card.device_name, f"{card.memory_mib:,}", card.sm, card.vendor], (page, name)


def test_the_docs_count_the_shipped_onnx_graphs_alike():
    """README said two example graphs ship, onnx.md three: each page's count is the folder's."""
    words = {2: "two", 3: "three", 4: "four", 5: "five"}
    shipped = len(list((ROOT / "examples" / "onnx").glob("*.onnx")))
    for page in (ROOT / "README.md", ROOT / "docs" / "onnx.md"):
        said = re.search(r"\b(\w+) example graphs are shipped", page.read_text(), re.I)
        assert said and said.group(1).lower() == words[shipped], (page.name, said and said.group(1), shipped)


def test_check_md_is_for_users_and_the_internals_live_in_architecture_md():
    """Half of check.md was contributor material (record __init__ compiles, gc thresholds, kvfit
    benchmarks); it lives in architecture.md, and check.md links there."""
    check = (ROOT / "docs" / "check.md").read_text()
    arch = (ROOT / "docs" / "architecture.md").read_text()
    for internal in ("`@record`", "young generation", "atexit", "Inventory.blocks", "--kvfit-python", "ModelFacts"):
        assert internal not in check and internal in arch, internal
    assert "architecture.md#start-up-and-latency-benchmarksbench_clipy" in check


# -- figures the README states, held to what they state (issue 48 item 7) ---------------------------

def _collected(*marker: str) -> int:
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *marker],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    counts = [int(m.group(1)) for m in re.finditer(r"^tests/\S+: (\d+)$", run.stdout, re.M)]
    assert counts, run.stdout[-2000:] + run.stderr[-2000:]
    return sum(counts)


@pytest.mark.slow
def test_the_readme_test_counts_are_the_suites():
    """The README's "The whole suite (N tests)" and "M of the N tests" (not fuzz, not slow) are counted here:
    adding or removing tests fails this until the README says the new figures."""
    text = " ".join((ROOT / "README.md").read_text().split())
    whole = int(re.search(r"The whole suite \(([\d,]+) tests\)", text).group(1).replace(",", ""))
    quick, of = (int(g.replace(",", "")) for g in re.search(r"([\d,]+) of the ([\d,]+) tests", text).groups())
    got_whole, got_quick = _collected(), _collected("-m", "not fuzz and not slow")
    assert (whole, of, quick) == (got_whole, got_whole, got_quick), (
        f"README.md: write 'The whole suite ({got_whole:,} tests)' and '{got_quick:,} of the {got_whole:,} tests'")


def test_the_readme_error_band_is_the_fits():
    """The README's step-time error figures are the fit's own medians (planner/steptime/steptime_fit.json):
    TPOT and TTFT, on the fitted rows and on every held-out row."""
    fit = json.loads((ROOT / "planner" / "steptime" / "steptime_fit.json").read_text())
    text = " ".join((ROOT / "README.md").read_text().split())
    said = re.search(r"TPOT median (\d+) % on the fitted rows, (\d+) % held out; TTFT (\d+) % and (\d+) %", text)
    assert said, "README.md no longer states the step-time error band as this test reads it"
    median = lambda key: round(100 * fit["summary"][key]["median_abs_err"])  # noqa: E731
    assert tuple(int(g) for g in said.groups()) == (median("TPOT fit"), median("TPOT all held out"),
                                                    median("TTFT fit"), median("TTFT all held out"))


def test_the_runtime_docs_describe_the_step_time_source_not_the_old_clock():
    """docs/vllm-runtime.md and docs/sglang-runtime.md said a step lasts max(tpot_ms / 1000, prefill / rate): that
    is the `fixed` source only; MTP drafts were "all accepted"; the report list lacked TPOT and p90."""
    for name in ("vllm-runtime.md", "sglang-runtime.md", "simulate.md", "steptime.md"):
        for paragraph in (ROOT / "docs" / name).read_text().split("\n\n"):
            flat = " ".join(paragraph.split())
            if re.search(r"max\((tpot_ms|--tpot-ms)", flat):
                assert "fixed" in flat, (name, flat[:200])
    vllm = " ".join((ROOT / "docs" / "vllm-runtime.md").read_text().split())
    assert "all accepted" not in vllm and "--spec-acceptance" in vllm
    for doc in ("vllm-runtime.md", "sglang-runtime.md"):
        flat = " ".join((ROOT / "docs" / doc).read_text().split())
        assert "time per output token" in flat and "p90" in flat and "physics" in flat, doc
