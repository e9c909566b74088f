"""Issue 12's matrix: every command x output mode x edge model/device/trace, at 80 and 200 columns.

For each cell: no internal error (exit 1), no number or name cut with an ellipsis, and
no markup swallowed: the files carry markup-looking names (``tiny[bold].yaml``,
``trace[red].jsonl``) and must be shown as they are.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from helpers import EXAMPLES, ROOT

EDGE = ROOT / "tests" / "fixtures" / "edge"
ELLIPSIS = "\u2026"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("m[x]")
    tiny = d / "tiny[bold].yaml"
    shutil.copy(EXAMPLES / "configs" / "tiny-interleaved.yaml", tiny)
    swa = d / "swa[red].yaml"
    shutil.copy(EDGE / "all-swa.yaml", swa)
    refused = d / "ratio[blink].yaml"
    shutil.copy(EXAMPLES / "configs" / "refusals" / "UnsupportedRatio.yaml", refused)
    trace = d / "trace[red].jsonl"
    trace.write_text(json.dumps({"arrival_s": 0.0, "prompt_tokens": 1200, "output_tokens": 300}) + "\n")
    spec = d / "sweep[bold].yaml"
    spec.write_text(f"name: m\nworkload: {trace.name}\ngrid:\n  model: {tiny.name}\n  device: h200\n"
                    "  reserved: 130GiB\n  dp: [1, 2]\nobjective: fewest_devices\n"
                    "constraints: {zero_refusals: true}\nsearch: {rel_tol: 0.25}\n")
    return {"tiny": str(tiny), "swa": str(swa), "refused": str(refused), "trace": str(trace), "spec": str(spec),
            "dir": d}


def _cases(f):
    """(name, argv, markup-looking names that must appear verbatim in table output)."""
    t, s, r, tr = f["tiny"], f["swa"], f["refused"], f["trace"]
    mem = ("--device-memory", "h200", "--weights", "0")
    zero = ("--device-memory", "1MiB", "--weights", "0")  # a device nothing fits
    cases = []
    for label, model in (("tiny", t), ("swa", s), ("refused", r)):
        for dev_label, dev in (("unlimited", ()), ("h200", mem), ("zero", zero)):
            for mode in ((), ("--per-layer",), ("--json",)):
                cases.append((f"check-{label}-{dev_label}-{'-'.join(mode) or 'table'}", ("check", model, *dev, *mode)))
            cases.append((f"compare-{label}-{dev_label}", ("compare", model, "--layout", "exact", "--layout",
                                                          "bf16-reference", *dev)))
    cases.append(("check-pro-2m", ("check", "deepseek-v4-pro", "--max-seq-len", "2000000", *mem, "--per-layer")))
    cases.append(("compare-pro-2m-json", ("compare", "deepseek-v4-pro", "--max-seq-len", "2M", *mem, "--json")))
    for label, model in (("tiny", t), ("swa", s), ("refused", r)):
        for dev_label, dev in (("unlimited", ()), ("h200", ("--device-memory", "h200", "--weights", "0")),
                               ("zero", zero)):
            cases.append((f"simulate-{label}-{dev_label}", ("simulate", tr, "--model", model, *dev)))
        cases.append((f"simulate-{label}-json", ("simulate", tr, "--model", model, "--json")))
    cases.append(("sweep-table", ("sweep", f["spec"], "-j", "1")))
    cases.append(("sweep-json", ("sweep", f["spec"], "-j", "1", "--json")))
    # run-gpu: the all-SWA model has no CSA/HCA layer to run (bad input, before any compile); a
    # refused model is refused after the emulator build (~40 s here), too slow for this matrix
    cases.append(("run-gpu-swa", ("run-gpu", s, "--backend", "emulate")))
    return cases


PLOTS = [("compare", lambda f: ("compare", f["tiny"], "--layout", "exact")),
         ("simulate", lambda f: ("simulate", f["trace"], "--model", f["tiny"], "--device-memory", "h200",
                                 "--weights", "0")),
         ("sweep", lambda f: ("sweep", f["spec"], "-j", "1"))]


def _check_output(r, argv, width):
    assert r.code != 1 and "internal error" not in r.err, (argv, r.err)
    assert r.code in (0, 2, 3), (argv, r.code, r.err)
    if r.code == 2:  # bad input: one line on stderr; stdout empty, or with --json the one-line error document
        assert len(r.err.strip().splitlines()) == 1, (argv, r.err, r.out)
        if "--json" in argv:
            assert r.out.count("\n") == 1 and json.loads(r.out)["schema"] == "csa-plan/error/v1", (argv, r.out)
        else:
            assert not r.out, (argv, r.err, r.out)
        return
    if "--json" in argv:
        json.loads(r.out)  # stdout is the document alone
        return
    assert ELLIPSIS not in r.out, (argv, width, r.out)  # nothing cut short
    for line in r.out.splitlines():  # a table row cropped at the edge would lose its closing border
        if line[:1] in ("│", "┃"):
            assert line.rstrip()[-1:] == line[0] and len(line) <= width, (argv, width, line)
    shown = re.sub(r"\s+", "", r.out)  # a long path may wrap; its characters must all be there
    for path in (a for a in argv if "[" in a):
        name = path.rsplit("/", 1)[-1]
        swallowed = re.sub(r"\[[a-z]+\]", "", name)  # what rich would print if it read [red] as a tag
        assert swallowed not in shown or name in shown, (argv, name, r.out)


@pytest.mark.parametrize("width", [80, 200])
def test_every_command_and_mode_at_this_width(csa, files, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.chdir(files["dir"])
    seen = set()
    for name, argv in _cases(files):
        r = csa(*argv)
        _check_output(r, argv, width)
        seen.add(argv[0])
    assert seen == {"check", "compare", "simulate", "sweep", "run-gpu"}


@pytest.mark.parametrize("command,argv", PLOTS, ids=[p[0] for p in PLOTS])
def test_plot_mode_writes_and_names_the_file(csa, files, tmp_path, monkeypatch, command, argv):
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(files["dir"])
    target = tmp_path / f"{command}[x].png"
    r = csa(*argv(files), "--plot", str(target))
    assert r.code in (0, 3) and "internal error" not in r.err, r.err
    assert target.read_bytes()[:4] == b"\x89PNG"
    assert f"plot written to {target}" in r.out  # the markup-looking name intact
    import csa_plan.cli.plots as plots

    monkeypatch.setattr(plots, "plotting_available", lambda: False)
    r = csa(*argv(files), "--plot", str(target))
    assert r.code == 2 and "pip install 'csa-plan[plot]'" in r.err, r.err


def test_markup_in_names_and_hints_is_never_swallowed(csa, files, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    r = csa("simulate", files["trace"], "--model", files["tiny"])
    assert "trace[red].jsonl" in r.out and "tiny-interleaved" in r.out
    r = csa("check", files["swa"])
    assert "swa[red].yaml" in r.out
    r = csa("compare", files["tiny"])
    assert "tiny[bold].yaml" in r.out
    r = csa("sweep", files["spec"], "-j", "1")
    assert "trace[red].jsonl" in r.out
