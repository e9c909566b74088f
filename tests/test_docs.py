"""docs/CONTRACT.md is the statement every "CONTRACT §N" points at, and its numbers are the code's.

- every "CONTRACT §N" (and "CONTRACT §2, §5", "CONTRACT §2–§6") in the README, the docs,
  the code, the examples and the tests names a section that docs/CONTRACT.md has;
- every ``*.md`` file the README, the docs or the code mention is in the repository
  (nothing points at files a user's clone does not have), and so is every source path
  (``planner/….py``, ``tests/….py``, …) that the README or the docs name;
- every worked-example table in docs/CONTRACT.md equals ``plan_model`` digit for digit.
"""

from __future__ import annotations

import re

import pytest

from helpers import ROOT

CONTRACT = ROOT / "docs" / "CONTRACT.md"
SCANNED_DIRS = ("cli", "planner", "kernels", "tests", "examples", "benchmarks", "fuzz", "docs")
SUFFIXES = {".py", ".md", ".cu", ".cuh", ".h", ".cpp", ".yaml", ".yml"}
_REF = re.compile(r"CONTRACT\s+(§\d+(?:\s*(?:,|–|-|and|or)\s*§\d+)*)")
_SECTION = re.compile(r"^## §(\d+)\. ", re.M)
_MD = re.compile(r"(?<![\w/.-])((?:\.\./|[\w-]+/)*[\w-]+\.md)\b")
_TABLE = re.compile(r"<!-- worked-example: (\S+) tp=(\d+) -->\n((?:\|.*\n)+)")


def scanned_files() -> list:
    files = [ROOT / "README.md"]
    for d in SCANNED_DIRS:
        files += [p for p in (ROOT / d).rglob("*") if p.suffix in SUFFIXES and p.is_file()
                  and "__pycache__" not in p.parts and "out" not in p.relative_to(ROOT).parts]
    return sorted(files)


def sections() -> set[int]:
    return {int(n) for n in _SECTION.findall(CONTRACT.read_text(encoding="utf-8"))}


def test_contract_sections_are_numbered_in_order():
    numbers = [int(n) for n in _SECTION.findall(CONTRACT.read_text(encoding="utf-8"))]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 6


def test_every_contract_reference_resolves():
    have = sections()
    bad, seen = [], 0
    for path in scanned_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for m in _REF.finditer(text):
            numbers = [int(n) for n in re.findall(r"§(\d+)", m.group(1))]
            if "–" in m.group(1) or re.search(r"§\d+\s*-\s*§", m.group(1)):
                numbers = list(range(numbers[0], numbers[-1] + 1))
            seen += 1
            line = text.count("\n", 0, m.start()) + 1
            bad += [f"{path.relative_to(ROOT)}:{line}: {m.group(0)!r}" for n in numbers if n not in have]
    assert seen > 20, "the reference scan found almost nothing: is the pattern broken?"
    assert not bad, f"these references name a section docs/CONTRACT.md does not have (it has {sorted(have)}):\n" \
        + "\n".join(bad)


def test_every_mentioned_markdown_file_is_in_the_repository():
    bad = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))] + [
            p for d in ("cli", "planner", "kernels") for p in (ROOT / d).rglob("*.py")]:
        text = path.read_text(encoding="utf-8")
        for m in _MD.finditer(text):
            name = m.group(1)
            candidates = [ROOT / name, ROOT / "docs" / name, path.parent / name]
            if name.startswith("../") or not any(c.is_file() for c in candidates):
                line = text.count("\n", 0, m.start()) + 1
                bad.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert not bad, "these name a Markdown file that is not in the repository (a user's clone lacks it); " \
        "cite docs/CONTRACT.md or docs/DEEPSEEK_V4.md instead:\n" + "\n".join(bad)


def worked_examples() -> list:
    return [pytest.param(m.group(1), int(m.group(2)), m.group(3), id=f"{m.group(1)}-tp{m.group(2)}")
            for m in _TABLE.finditer(CONTRACT.read_text(encoding="utf-8"))]


def test_the_worked_examples_are_found():
    assert {tuple(p.values[:2]) for p in worked_examples()} == {
        ("deepseek-v4-pro", 1), ("deepseek-v4-flash", 1), ("deepseek-v4-pro", 8)}


@pytest.mark.parametrize("name, tp, table", worked_examples())
def test_worked_example_equals_the_plan(name, tp, table):
    from csa_plan.planner.layout import STATE_CLASSES, LayerKind
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.plan import PlanOptions, plan_model

    plan = plan_model(load_model(name, max_seq_len=None, window=None), PlanOptions(tp=tp))
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.strip().splitlines()]
    header, body = rows[0], rows[2:]
    per_kind = {}
    for layer in plan.layers:
        per_kind.setdefault(layer.kind, set()).add(layer.bytes)
    assert all(len(v) == 1 for v in per_kind.values()), "one group size per kind is what the table shows"
    columns = [next(iter(per_kind[k])).as_dict() for k in (LayerKind.CSA, LayerKind.HCA, LayerKind.SWA)]
    columns.append(plan.per_device.as_dict())
    counts = [plan.count(k) for k in (LayerKind.CSA, LayerKind.HCA, LayerKind.SWA)]
    for title, count in zip(header[1:4], counts):
        assert f"(x{count}" in title, (title, count)
    assert [r[0] for r in body] == [c.value for c in STATE_CLASSES] + ["total"]
    for row in body:
        shown = [int(v.replace(",", "")) for v in row[1:]]
        assert shown == [col[row[0]] for col in columns], row[0]


_SOURCE_PATH = re.compile(r"(?<![\w/.-])((?:cli|planner|kernels|tests|benchmarks|examples|fuzz|docs)/[\w./-]*\.(?:py|md))\b")


def test_every_source_path_in_the_readme_and_docs_exists():
    bad = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for m in _SOURCE_PATH.finditer(text):
            if not (ROOT / m.group(1)).is_file():
                bad.append(f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(1)}")
    assert not bad, "these paths name no file of the repository (moved or renamed?):\n" + "\n".join(bad)
