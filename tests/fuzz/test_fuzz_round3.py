"""The third hostile campaign (issue 37): every reproduction of ``helpers/hostile_round3.py`` through the
real CLI, grouped by class, plus what an exit code cannot show.

* ``test_round3_reproduction``: exit code, one line naming the file or option, field and bound for bad
  input, no traceback or internal error, no control character; text and ``--json``.
* steps bombs: a replay's peak memory is flat in its number of steps (whole processes, 200,000 against
  2,000,000 steps, both engines; old main grew by about 90 bytes a step), and the report's figures are
  the same at any bucket cap (``tests/simulate/test_step_series.py`` checks the buckets themselves).
* the compiled loops refuse arrays they cannot take with a typed error (``ReplayInputError``), never
  a ValueError from inside.
* encodings: ``PYTHONIOENCODING=idna`` (``punycode``) is one ASCII line and exit 2 for every
  command, ``--help`` included.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.hostile import JSON_COMMANDS, control_bytes, one_line
from helpers.hostile_round3 import CASES, ENCODINGS, EXPECT, steps_trace

CSA = str(Path(sys.executable).with_name("csa-plan"))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_round3_reproduction(csa, tmp_path, case):
    args = case.build(tmp_path, 1)
    started = time.perf_counter()
    r = csa(*args)
    elapsed = time.perf_counter() - started
    assert r.code in case.codes, (r.code, r.out[-500:], r.err[-500:])
    assert "Traceback" not in r.err and "internal error" not in r.err, r.err[-2000:]
    assert not control_bytes(r.out + r.err) and "\x1b" not in r.out + r.err
    if r.code == 2:
        line = one_line(r)
        for needle in EXPECT.get(case.name, ()):
            assert needle in line, (needle, line)
    assert elapsed < 30, elapsed  # the full sizes are measured by fuzz/measure_hostile.py
    assert len(r.out) < 200_000, len(r.out)  # the text report is bounded (8,192 distinct layers: 64 rows shown)
    if args[0] in JSON_COMMANDS and r.code == 2:
        j = csa(*args, "--json")
        assert j.code == r.code and not control_bytes(j.out + j.err)


# -- steps bombs ----------------------------------------------------------------------------------

def _peak_rss_kib(argv: list[str]) -> tuple[int, int]:
    """(exit code, peak RSS in KiB) of one whole process, measured from a fresh parent."""
    probe = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True); "
             "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=300)
    code, kib = out.stdout.split()
    return int(code), int(kib)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak RSS of a child via getrusage (Linux)")
@pytest.mark.parametrize("engine", ["vllm-0.33", "sglang-0.5.23"])
def test_replay_memory_is_flat_in_the_number_of_steps(tmp_path, engine):
    """4 requests of 50,000 output tokens (200,000 steps) against 4 of 500,000 (2,000,000 steps): at about
    90 bytes a step old main grew by some 160 MB; the bounded series keeps the peak within 40 MB."""
    from helpers import hostile_round3

    peaks = []
    for tokens in (50_000, 500_000):
        (tmp_path / str(tokens)).mkdir()
        argv = steps_trace(engine, 4)(tmp_path / str(tokens), 1)
        path = Path(argv[1])
        path.write_text(path.read_text().replace('"output_length": 50000', f'"output_length": {tokens}'))
        code, kib = _peak_rss_kib([CSA, *argv])
        assert code == 0
        peaks.append(kib)
    assert hostile_round3.GAP_MS * 1_000_000 > 500_000 * 20_000_000  # each runs alone: 20 ms steps
    assert peaks[1] - peaks[0] < 40 * 1024, peaks


def test_a_replay_past_the_bucket_cap_reports_the_exact_figures(csa, tmp_path, monkeypatch):
    """The same trace with the step series capped at 64 buckets: every figure of the report (steps,
    peaks, means, waits, makespan) as with the default cap; only the plot's points are coarser."""
    from csa_plan.planner.replay import result

    args = steps_trace("vllm-0.33", 4)(tmp_path, 1)
    full = csa(*args, "--json").json()["runtime"]
    monkeypatch.setattr(result, "STEP_BUCKETS", 64)
    capped = csa(*args, "--json").json()["runtime"]
    assert full["steps"] == capped["steps"] == 200_000
    full.pop("series"), capped.pop("series")
    assert full == capped


# -- the compiled loops' own refusals --------------------------------------------------------------

def test_the_compiled_loops_refuse_inconsistent_arrays_with_a_typed_error():
    from csa_plan.planner.engines.sglang.compiled import compiled_module as sglang_module
    from csa_plan.planner.engines.vllm.kv_cache_manager import GroupSpec
    from csa_plan.planner.engines.vllm.compiled import compiled_module
    from csa_plan.planner.engines.vllm.scheduler import VllmRuntime
    from csa_plan.planner.engines.vllm.compiled import compiled_replay
    from csa_plan.planner.errors import ReplayInputError
    from csa_plan.planner.replay.loop import replay
    from csa_plan.planner.replay.protocol import RuntimeTrace
    from csa_plan.planner.steptime.model import StepTime

    if compiled_module() is None or sglang_module() is None:
        pytest.skip("the compiled replays are not built (pip install -e . builds them; CI does)")
    trace = RuntimeTrace(np.array([5, 0], dtype=np.int64), np.array([100, 100], dtype=np.int64),
                         np.array([3, 3], dtype=np.int64))  # arrivals out of order: no caller passes that
    rt = VllmRuntime(trace, (GroupSpec(16, None),), ("a",), 100, 8192, 2048, 8, True, 0, 0, compiled=compiled_replay)
    with pytest.raises(ReplayInputError) as info:
        replay(rt, trace, StepTime(20.0, 10_000.0), compiled=True)
    assert "cvllm" in str(info.value) and info.value.exit_code == 2


def test_a_rate_scale_past_the_clock_is_refused_before_any_replay(monkeypatch, csa):
    """Refused where the arrivals are scaled (``runtime_trace``), before a replay or a compiled loop runs."""
    from csa_plan.planner.replay import loop

    ran = []
    monkeypatch.setattr(loop, "replay", lambda *a, **k: ran.append(1))
    from helpers.hostile_round3 import AZURE, ENGINE_ARGS

    r = csa("simulate", AZURE, "--engine", "vllm-0.33", *ENGINE_ARGS, "--rate-scale", "1e-12")
    assert r.code == 2 and not ran and "--rate-scale" in r.err


# -- encodings ------------------------------------------------------------------------------------

@pytest.mark.parametrize("encoding,argv", ENCODINGS, ids=[f"{e}-{' '.join(a)}" for e, a in ENCODINGS])
def test_an_encoding_that_cannot_carry_text_is_one_line_and_exit_2(encoding, argv):
    env = {**os.environ, "PYTHONIOENCODING": encoding}
    done = subprocess.run([CSA, *argv], capture_output=True, env=env, timeout=120)
    err = done.stderr.decode("ascii")  # the one line is ASCII, whatever the encoding
    assert done.returncode == 2, (done.returncode, err[-500:])
    assert err.count("\n") == 1 and err.startswith("csa-plan: error: stdout: its encoding")
    assert "PYTHONIOENCODING" in err and done.stdout == b""


# -- smaller: CSA_PLAN_COLOR on the eager paths, the two parsers on --json ---------------------------

@pytest.mark.parametrize("argv", [("--help",), ("--version",), ("-h",), ()], ids=["help", "version", "h", "bare"])
def test_a_bogus_color_variable_is_one_line_everywhere(argv):
    env = {**os.environ, "CSA_PLAN_COLOR": "bogus"}
    done = subprocess.run([CSA, *argv], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stdout[:200])
    assert done.stderr.count("\n") == 1 and "CSA_PLAN_COLOR" in done.stderr and "'bogus'" in done.stderr


WORDS = ["--json", "--resume", "--top", "abc", "5", "-j", "1", "--plot", "x.png", "--", "s.yaml", "--resume=--json"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=7))
def test_json_mode_is_what_click_parses(words):
    """The error document goes to stdout exactly when click's own parse of the line sets --json."""
    import click

    from csa_plan.cli.click_command import build
    from csa_plan.cli.commands import load_command
    from csa_plan.cli.error_doc import json_asked

    command = build(load_command("sweep"))
    try:
        ctx = command.make_context("sweep", list(words), resilient_parsing=True)
    except click.exceptions.ClickException:
        return  # click stops before it knows (a usage error it reports by itself)
    assert json_asked(["sweep", *words]) == bool(ctx.params.get("as_json")), words
