"""The second hostile campaign (issue 24), part A: resume files, output streams, orphaned workers.

* ``test_resume_reproduction``: every hostile ``--resume`` file (``helpers/hostile_io.py``):
  exit 2, one line naming the file, line and field, nothing raw on the terminal — and
  every file in the folder byte for byte as it was (the campaign's data loss).
* ``test_stream_reproduction``: whole processes with stdout on ``/dev/full``, on a pipe
  closed after one line, under ``PYTHONIOENCODING=ascii``/``latin-1``/``LANG=C``, with
  ``FORCE_COLOR`` on a file, with invisible characters in names: the documented exit,
  one line or silence, no traceback, nothing hidden or raw in what is shown.
* ``test_pool_workers_die_with_the_parent``: the parent of a ``sweep --jobs 2`` killed alone
  with TERM, HUP and KILL; no worker and no resource tracker outlives it.
* generators: every character class ``printable`` must escape, resume records forged at
  random (whatever is accepted is consistent), the guarded stream against every OS error.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import math
import os
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from csa_plan.planner.errors import BadInput
from csa_plan.planner.text import is_hidden, printable

from helpers import EXAMPLES
from helpers.hostile import control_bytes
from helpers.hostile_io import (ORPHAN_SIGNALS, RESUME_CASES, RESUME_EXPECT, STREAM_CASES, hidden_chars,
                                orphans_after, run_stream_case, small_identity, stream_problems)

SMALL = settings(max_examples=150, deadline=None)
SMALL_SWEEP = str(EXAMPLES / "sweeps" / "small.yaml")


def _snapshot(folder: Path) -> dict[str, str]:
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            out[str(path)] = "-> " + os.readlink(path)
        elif path.is_file():
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


# -- resume files -----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", RESUME_CASES, ids=[c.name for c in RESUME_CASES])
def test_resume_reproduction(csa, tmp_path, case):
    args = case.build(tmp_path, 1)
    before = _snapshot(tmp_path)
    r = csa(*args)
    assert r.code == 2, (r.code, r.err[-500:])
    lines = [line for line in r.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in r.err and "internal error" not in r.err, r.err[-1000:]
    for needle in RESUME_EXPECT[case.name]:
        assert needle in lines[0], (needle, lines[0])
    assert not control_bytes(r.out + r.err) and not hidden_chars(r.out + r.err)
    assert _snapshot(tmp_path) == before  # nothing written, nothing created, nothing followed


def test_the_acceptable_record_is_accepted(csa, tmp_path):
    """The forged cases differ from a record this sweep accepts by the one change they name."""
    spec, identity, record = small_identity()
    path = tmp_path / "done.jsonl"
    path.write_text(identity.header_line() + "\n" + json.dumps(record) + "\n")
    r = csa("sweep", SMALL_SWEEP, "-j", "1", "--json", "--resume", str(path))
    assert r.code == 0, r.err
    assert r.json()["grid"]["resumed"] == 1
    assert path.read_text().startswith(identity.header_line() + "\n" + json.dumps(record) + "\n")  # appended only


def test_a_new_resume_file_starts_with_its_header_and_is_only_appended_to(csa, tmp_path):
    path = tmp_path / "r.jsonl"
    first = csa("sweep", SMALL_SWEEP, "-j", "1", "--json", "--resume", str(path))
    text = path.read_text()
    header = json.loads(text.splitlines()[0])
    assert header["schema"] == "csa-plan/sweep-resume/v1"
    assert {"spec", "spec_sha256", "workload", "workload_sha256", "spec_digest", "grid_sha256"} <= header.keys()
    assert len(text.splitlines()) == 1 + first.json()["grid"]["ran"]
    again = csa("sweep", SMALL_SWEEP, "-j", "1", "--json", "--resume", str(path))
    assert again.json()["grid"]["resumed"] == first.json()["grid"]["ran"] and path.read_text() == text
    assert [p.name for p in tmp_path.iterdir()] == ["r.jsonl"]  # no temporary file left


def test_resume_in_a_missing_folder_is_one_line(csa, tmp_path):
    r = csa("sweep", SMALL_SWEEP, "-j", "1", "--resume", str(tmp_path / "no" / "r.jsonl"))
    assert r.code == 2 and "cannot create" in r.err and len(r.err.strip().splitlines()) == 1


def test_a_hard_link_to_the_resume_file_is_refused_as_plot(csa, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "r.jsonl"
    assert csa("sweep", SMALL_SWEEP, "-j", "1", "--resume", str(path)).code == 0
    os.link(path, tmp_path / "same.png")
    before = _snapshot(tmp_path)
    r = csa("sweep", SMALL_SWEEP, "-j", "1", "--resume", str(path), "--plot", str(tmp_path / "same.png"))
    assert r.code == 2 and "--resume" in r.err and _snapshot(tmp_path) == before


_FIELDS = ["devices", "requests", "admitted", "refused", "refusals", "wait_p99_ns", "peak_bytes", "mean_utilization",
           "peak_utilization", "sustainable_rate_scale", "at_least", "probes", "sustainable_rate_per_s",
           "rate_per_device_per_s", "feasible", "violations", "key"]
_values = (st.none() | st.booleans() | st.integers(min_value=-5, max_value=400) | st.integers(min_value=-(2 ** 70),
           max_value=2 ** 70) | st.floats(allow_nan=False) | st.sampled_from([0.0, 0.1, 0.2, 1.0, 1e12])
           | st.dictionaries(st.sampled_from(["OutOfMemory", "NeverFits", "\u202eX\x1b", "x"]),
                             st.integers(min_value=-1, max_value=300), max_size=2)
           | st.lists(st.sampled_from(["x", "5 refused (OutOfMemory 5)"]), max_size=2))


@SMALL
@given(st.dictionaries(st.sampled_from(_FIELDS), _values, max_size=4))
def test_whatever_a_forged_record_says_what_is_accepted_is_consistent(changes):
    from csa_plan.planner.sweep.results import point_violations
    from csa_plan.planner.sweep.resume import parse_resume

    spec, identity, record = small_identity()
    data = {**record, **changes}
    points = {p.key: p for p in spec.points}
    try:
        done, _ = parse_resume(json.dumps(data) + "\n", "r.jsonl", spec.digest, points, identity, first_line=2)
    except BadInput as exc:
        assert str(exc).startswith("r.jsonl:2") and not control_bytes(str(exc)) and not hidden_chars(str(exc))
        return
    for r in done.values():
        assert r.key in points and r.devices == points[r.key].devices and r.requests == identity.requests
        assert r.admitted + r.refused == r.requests == 200 and sum(n for _, n in r.refusals) == r.refused
        assert 0 <= r.mean_utilization <= r.peak_utilization * (1 + 1e-9) and r.peak_utilization <= 1
        assert (r.wait_p99_ns is None) == (r.admitted == 0)
        if r.sustainable_rate_scale is not None:
            assert math.isclose(r.sustainable_rate_per_s, r.sustainable_rate_scale * identity.base_rate_per_s,
                                rel_tol=1e-9)
        assert r.violations == point_violations(identity.constraints, r.refusals, r.wait_p99_ns,
                                                r.mean_utilization, r.sustainable_rate_scale)
        assert r.feasible == (not r.violations)


def test_every_record_a_real_sweep_writes_is_accepted_again(csa, tmp_path):
    """The checks accept everything csa-plan itself writes (the engines sweep too: other policies and refusals)."""
    for spec in (SMALL_SWEEP, str(EXAMPLES / "sweeps" / "engines.yaml")):
        path = tmp_path / (Path(spec).stem + ".jsonl")
        first = csa("sweep", spec, "-j", "1", "--json", "--resume", str(path))
        assert first.code in (0, 3), first.err
        again = csa("sweep", spec, "-j", "1", "--json", "--resume", str(path))
        assert again.code == first.code, again.err
        assert again.json()["grid"]["resumed"] == first.json()["grid"]["ran"]
        assert again.json()["results"] == first.json()["results"]


# -- output streams ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", STREAM_CASES, ids=[c.name for c in STREAM_CASES])
def test_stream_reproduction(tmp_path, case):
    if "plot" in case.name:
        pytest.importorskip("matplotlib")
    code, out, err, seconds = run_stream_case(case, tmp_path)
    assert not stream_problems(case, code, out, err), (stream_problems(case, code, out, err), out[-800:], err[-800:])
    if case.stdout == "head":
        assert out.strip()  # the first line did arrive
    assert seconds < 60


def test_colour_when_asked_and_only_then(tmp_path):
    from helpers.hostile_io import StreamCase, args

    plain = StreamCase("x", args("check", "deepseek-v4-pro"), (0,), "", env=(("FORCE_COLOR", "1"),))
    asked = StreamCase("x", args("--color", "always", "check", "deepseek-v4-pro"), (0,), "")
    by_env = StreamCase("x", args("check", "deepseek-v4-pro"), (0,), "", env=(("CSA_PLAN_COLOR", "always"),))
    never = StreamCase("x", args("--color", "never", "check", "deepseek-v4-pro"), (0,), "",
                       env=(("CSA_PLAN_COLOR", "always"),))
    assert "\x1b" not in run_stream_case(plain, tmp_path)[1]
    assert "\x1b[" in run_stream_case(asked, tmp_path)[1] and "\x1b[" in run_stream_case(by_env, tmp_path)[1]
    assert "\x1b" not in run_stream_case(never, tmp_path)[1]
    over_no_color = StreamCase("x", args("--color", "always", "check", "deepseek-v4-pro"), (0,), "",
                               env=(("NO_COLOR", "1"),))
    no_color = StreamCase("x", args("check", "deepseek-v4-pro"), (0,), "", env=(("NO_COLOR", "1"),))
    assert "\x1b[" in run_stream_case(over_no_color, tmp_path)[1]
    assert "\x1b" not in run_stream_case(no_color, tmp_path)[1]


def test_a_failing_stderr_still_ends_with_the_exit_code(monkeypatch):
    """Bad input with stderr on a full disk: the message cannot be said, the exit code still is."""
    failing = _Failing(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    monkeypatch.setattr(sys, "stderr", failing)
    from csa_plan.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(["check", "/nonexistent/model.yaml"])
    assert info.value.code == 2 and sys.stderr is failing


class _Failing(io.StringIO):
    def __init__(self, exc: OSError, after: int = 0) -> None:
        super().__init__()
        self.exc, self.after = exc, after

    def write(self, text: str) -> int:
        if self.after <= 0:
            raise self.exc
        self.after -= 1
        return super().write(text)


@pytest.mark.parametrize("name, code", [("EPIPE", 141), ("ENOSPC", 2), ("EIO", 2), ("EFBIG", 2), ("EDQUOT", 2)])
@pytest.mark.parametrize("after", [0, 3])
def test_every_os_error_on_stdout_is_an_exit_not_a_traceback(csa, monkeypatch, name, code, after):
    num = getattr(errno, name)
    exc = BrokenPipeError(num, os.strerror(num)) if name == "EPIPE" else OSError(num, os.strerror(num))
    failing = _Failing(exc, after)
    monkeypatch.setattr(sys, "stdout", failing)
    from csa_plan.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(["check", "deepseek-v4-pro"])
    assert info.value.code == code
    assert sys.stdout is failing  # restored


@pytest.mark.parametrize("encoding", ["ascii", "latin-1", "cp1252", "utf-8"])
def test_any_encoding_gets_escapes_never_an_error(csa, monkeypatch, encoding, tmp_path):
    from csa_plan.cli.stream import guarded

    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding=encoding, errors="strict")
    monkeypatch.setattr(sys, "stdout", stream)
    with guarded():  # an escape for what the encoding cannot carry (a surrogate: what no encoding can)
        print("snow \u2603 caf\u00e9 \u2588 \udcff")
    stream.flush()
    text = raw.getvalue().decode(encoding)
    assert text.startswith("snow ") and ("\u2603" in text or "\\u2603" in text) and "\\udcff" in text


# -- printable: every hidden class ------------------------------------------------------------------


HIDDEN_CLASSES = ["\u200b", "\u200c", "\u200d", "\u2060", "\u00ad", "\u034f", "\U000e0041", "\U000e0001", "\u180e",
                  "\u202a", "\u202e", "\u2066", "\u2069", "\u061c", "\ufeff", "\ufe0f", "\U000e0100", "\u115f",
                  "\u3164", "\uffa0", "\u2800", "\u00a0", "\u3000", "\ue000", "\U0010fffd", "\udcff", "\u0378",
                  "\u2028", "\x1b", "\x9b", "\x7f"]


@pytest.mark.parametrize("char", HIDDEN_CLASSES, ids=[f"U+{ord(c):04X}" for c in HIDDEN_CLASSES])
def test_printable_escapes_every_hidden_class(char):
    shown = printable(f"a{char}b")
    assert shown != f"a{char}b" and char not in shown and shown.isascii() and is_hidden(char)


@SMALL
@given(st.text(alphabet=st.characters(), max_size=200))
def test_printable_leaves_nothing_hidden(text):
    shown = printable(text)
    assert not hidden_chars(shown) and not control_bytes(shown)
    kept = printable(text, keep_newlines=True)
    assert not hidden_chars(kept) and kept.count("\n") == text.count("\n")


def test_ordinary_text_is_untouched():
    for text in ("deepseek-v4-pro", "réglage — 1,024 █ … ✓", "注意", "ä" * 1000):
        assert printable(text) == text


# -- orphaned workers -------------------------------------------------------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("signal_name", ORPHAN_SIGNALS)
def test_pool_workers_die_with_the_parent(tmp_path, signal_name):
    run = orphans_after(signal_name, tmp_path, wait_s=10.0)
    assert run.processes >= 3, run  # two workers and the resource tracker were running
    assert not run.survivors, run
    assert run.resume_ok, run


def test_die_with_parent_exits_a_process_whose_parent_is_gone():
    """The watchdog half, alone: a worker re-parented (its parent pid changed) ends itself."""
    import subprocess

    code = ("import os, sys, time\n"
            "from csa_plan.planner.sweep.executors import die_with_parent\n"
            "die_with_parent(1)\n"  # not our parent: as if it had died before the worker started
            "time.sleep(30)\n")
    proc = subprocess.run([sys.executable, "-c", code], timeout=20)
    assert proc.returncode == 1
