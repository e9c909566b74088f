"""Refit vLLM's non-KV start-up terms on the posted logs marked 'fit', and test them on the 'held-out' ones.

    python tools/heldout_vllm_nonkv.py [--logs tests/fixtures/vllm_nonkv_logs.json] [--write]

Each posted log (``tests/fixtures/vllm_nonkv_logs.json``: source, printed lines, csa-plan's command
for its flags) is predicted from its flags alone through ``csa-plan check --json``. The terms of
``planner/budget/vllm_nonkv.py`` that a log can fix are refitted on the training split:

* the non-torch figure from the RTX PRO 6000 log's KV pool (``Available KV cache memory``): the
  figure that makes the predicted pool equal the printed one (the printed figure has 2 decimals,
  +-5 MiB);
* the CUDA-graph factor from the same log's ``--gpu-memory-utilization=0.9500 is equivalent to
  ...=0.9334`` (graphs = the difference x total memory) over csa-plan's capture-list token bytes.

A refitted figure that differs from the code's beyond the log's rounding is reported (the code is
not rewritten: a change of a fitted constant is a reviewed edit). The table of every log, its
release, the printed and predicted figure and the error goes to stdout, or with ``--write`` to
``docs/vllm-nonkv-heldout.md``, whose band is stated from the held-out logs only.
``tests/budget/test_vllm_nonkv_heldout.py`` recomputes it from the fixtures.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "tests" / "fixtures" / "vllm_nonkv_logs.json"
DOC = ROOT / "docs" / "vllm-nonkv-heldout.md"
RTX_EQUIVALENT_UTILIZATION = (0.95, 0.9334)  # the RTX log's "0.9500 is equivalent to 0.9334" line


def run_check(argv: list[str]) -> dict:
    """``csa-plan check ARGV --json`` in process, as the tests run it."""
    from csa_plan.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(["check", *argv, "--json"])
        except SystemExit as exc:
            if exc.code not in (0, 3, None):
                raise RuntimeError(f"csa-plan check {' '.join(argv)}: exit {exc.code}: {err.getvalue().strip()}")
    return json.loads(out.getvalue())


def predicted(log: dict) -> float:
    from csa_plan.planner.units import GiB

    d = run_check(log["argv"])
    if log["measure"] == "kv_gib":
        return d["budget"]["kv_memory_bytes"] / GiB
    if log["measure"] == "concurrency":
        return float(d["engine"]["pool"]["concurrency"])
    raise ValueError(f"{log['id']}: unknown measure {log['measure']!r}")


def refit(logs: list[dict]) -> list[str]:
    """The training split's figures, re-derived, beside the code's: one line each."""
    from csa_plan.planner.budget.vllm_nonkv import FIT_025, activation_token_bytes, capture_descs, capture_sizes
    from csa_plan.planner.budget.vllm_nonkv import graph_estimate_bytes
    from csa_plan.planner.cards import card
    from csa_plan.planner.units import GiB, MiB

    rtx = next(log for log in logs if log["id"] == "rtx-pro-6000-tp2")
    kv_pred = run_check(rtx["argv"])["budget"]["kv_memory_bytes"]
    non_torch = FIT_025.non_torch_tp_bytes + kv_pred - round(rtx["printed"] * GiB)
    total = card("rtx-pro-6000").memory_bytes
    graphs = round((RTX_EQUIVALENT_UTILIZATION[0] - RTX_EQUIVALENT_UTILIZATION[1]) * total)
    from csa_plan.planner.budget.stage import model_dims
    from csa_plan.planner.loaders.model_files import PRESETS
    from csa_plan.planner.presets import read_preset

    dims = model_dims(json.loads(read_preset(PRESETS["deepseek-v4-flash"])), "deepseek-v4-flash")
    assert dims is not None
    sizes = capture_sizes("vllm-0.25", max_num_seqs=64, mnbt=4096, spec_tokens=2, sm100=False, sizes=None,
                          max_size=None)
    unit = graph_estimate_bytes(capture_descs("FULL_AND_PIECEWISE", sizes, 64, 2), activation_token_bytes(dims, 2),
                                1_000_000)
    factor_ppm = graphs * 1_000_000 // unit
    return [f"non-torch at TP > 1: refit {non_torch / MiB:,.1f} MiB, code {FIT_025.non_torch_tp_bytes / MiB:,.0f} MiB "
            f"(the printed 10.29 GiB is +-5 MiB)",
            f"CUDA-graph factor: refit {factor_ppm / 1e6:.4f}, code {FIT_025.graph_factor_ppm / 1e6:.4f} "
            f"(graphs {graphs:,} B = (0.95 - 0.9334) x {total:,} B)"]


def table(logs: list[dict]) -> tuple[list[dict], str]:
    rows = []
    for log in logs:
        p = predicted(log)
        rows.append({"id": log["id"], "role": log["role"], "release": log["release"], "measure": log["measure"],
                     "printed": log["printed"], "predicted": p, "error_pct": (p / log["printed"] - 1) * 100,
                     "source": log["source"]})
    unit = {"kv_gib": " GiB", "concurrency": "x"}
    lines = ["| log | role | release | printed | predicted | error |", "|---|---|---|---:|---:|---:|"]
    for r in rows:
        u = unit[r["measure"]]
        lines.append(f"| {r['id']} | {r['role']} | {r['release']} | "
                     f"{r['printed']:.2f}{u} | {r['predicted']:.2f}{u} | {r['error_pct']:+.1f} % |")
    held = [r["error_pct"] for r in rows if r["role"] == "held-out"]
    band = (f"Held-out band ({len(held)} logs): {min(held):+.1f} % to {max(held):+.1f} %; the fit logs are not "
            "counted.")
    sources = "".join(f"* {r['id']}: {r['source']}\n" for r in rows)
    return rows, "\n".join(lines) + "\n\n" + band + "\n\nSources:\n\n" + sources


HEADER = """# vLLM's non-KV start-up terms on posted logs: fit and held out

Generated by `python tools/heldout_vllm_nonkv.py --write` from `tests/fixtures/vllm_nonkv_logs.json`
(each log's source, printed lines and flags); `tests/budget/test_vllm_nonkv_heldout.py` recomputes
the table. Predicted = `csa-plan check` from the log's flags alone (no `--kv-memory`), the terms of
`planner/budget/vllm_nonkv.py`. A 'fit' log fixes a term (its error is small by construction); the
band is stated from the 'held-out' logs only.

"""


def render(logs: list[dict]) -> str:
    _, body = table(logs)
    return HEADER + body + "\nRefit on the training split:\n\n" + "".join(f"* {line}\n" for line in refit(logs)) + \
        FOOTER


FOOTER = """
What the held-out band says: the two 0.25 logs off the fit (B200 DP 8, GH200 with the `LLM` class)
are within -0.4 % and -12.4 %; the two vllm#51041 H20 logs on 0.26 are about +56 % too large and
no term explains them: not DeepEP (vLLM builds no all-to-all at TP 2 without DP,
`tests/budget/test_deepep.py`), not the draft layers (the 0731 run's MTP drafter is one layer). No
further public stock-vLLM DeepSeek-V4 log printing `Model loading took` and `Available KV cache
memory` with its flags was found (forks are not stock: #50576's SM8x fork, a 0.26.1rc0 SM120 fork),
so the profile-run, non-torch and graph terms are not separately refitted beyond the one log that
prints them all.
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", type=Path, default=LOGS)
    ap.add_argument("--write", action="store_true", help=f"write {DOC.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    logs = json.loads(args.logs.read_text(encoding="utf-8"))["logs"]
    text = render(logs)
    if args.write:
        DOC.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
