"""The second hostile campaign (issue 24), part A: resume files, output streams and
orphaned pool workers — builders shared by ``tests/fuzz/test_fuzz_hostile_io.py`` and
``fuzz/measure_hostile.py``.

Three kinds of reproduction:

* ``RESUME_CASES`` (``Case``, run like issue 18's): a ``--resume`` file that is not this
  sweep's resume file, or whose records are forged. Each must be bad input (exit 2, one
  line) and leave every file in its folder byte for byte as it was.
* ``STREAM_CASES`` (``StreamCase``): the same CLI with stdout sent to ``/dev/full``, to a
  pipe whose reader stops after one line (``| head -1``), or with an environment
  (``PYTHONIOENCODING=ascii``, ``LANG=C``, ``FORCE_COLOR=1``); run as a whole process.
* ``ORPHAN_SIGNALS``: a ``sweep --jobs 2`` whose parent alone is killed with TERM, HUP or
  KILL (``orphans_after``): no pool worker and no resource tracker may outlive it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from helpers import EXAMPLES, ROOT
from helpers.hostile import PRO, SMALL_SWEEP, Case, _w

TRACE = EXAMPLES / "traces" / "sample.jsonl"
HIDDEN = "\u200b\u00ad\u034f\U000e0041\u180e\u202e\u2066\ufe0f\u3164\u2800"  # invisible, format, bidi, fillers


# Default-ignorable code points Python calls printable (combining grapheme joiner, Hangul fillers,
# variation selectors), and the blank braille pattern: each renders as nothing or a blank.
_INVISIBLE_PRINTABLE = frozenset([0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F, 0x2800,
                                  0x3164, 0xFFA0, *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)])


def hidden_chars(text: str) -> list[str]:
    """Characters a reader cannot see or that reorder the line (newline and tab aside): what
    Python does not call printable (controls, format and bidirectional characters, separators,
    surrogates, private use, unassigned, spaces but U+0020) and the invisible printable ones.
    Written apart from ``planner/text.py``: the oracle is not the code under test."""
    return sorted({f"U+{ord(c):04X}" for c in text
                   if c not in "\n\t" and (not c.isprintable() or ord(c) in _INVISIBLE_PRINTABLE)})


# -- resume files ---------------------------------------------------------------------------------

_IDENTITY: list = []


def small_identity():
    """The resume identity of examples/sweeps/small.yaml and a record it would accept."""
    if not _IDENTITY:
        from csa_plan.planner.sweep.evaluate import WorkloadBounds, load_context_workload, triage
        from csa_plan.planner.sweep.resume import ResumeIdentity
        from csa_plan.planner.sweep.spec import load_spec

        spec = load_spec(str(SMALL_SWEEP))
        ctx = spec.context
        bounds = WorkloadBounds.of(load_context_workload(ctx.workload, ctx.sort, ctx.seed))
        identity = ResumeIdentity.of(spec, bounds.requests, bounds.base_rate_per_s)
        p = triage(spec).to_run[0]  # a point the sweep runs (the first ones are skipped statically)
        rate = 2.0 * bounds.base_rate_per_s
        record = {"schema": "csa-plan/sweep-point/v2", "spec_digest": spec.digest, "key": p.key, "devices": p.devices,
                  "requests": bounds.requests, "admitted": bounds.requests, "refused": 0, "refusals": {},
                  "wait_p99_ns": 0, "peak_bytes": round(0.2 * p.limit_bytes), "mean_utilization": 0.1,
                  "peak_utilization": 0.2,
                  "sustainable_rate_scale": 2.0, "at_least": False, "probes": 3, "sustainable_rate_per_s": rate,
                  "rate_per_device_per_s": rate / p.devices, "feasible": True, "violations": [], "runtime": None,
                  "steady": ""}
        _IDENTITY.extend([spec, identity, record])
    return _IDENTITY


def resume_file(lines: Callable[[dict, dict], list[str | dict]], name: str = "done.jsonl",
                extra: Callable[[Path], list[str]] = lambda folder: []) -> Callable[[Path, int], list[str]]:
    """A resume file of ``lines(header, record)`` (dicts are written as JSON) for small.yaml."""
    def build(folder: Path, scale: int) -> list[str]:
        _spec, identity, record = small_identity()
        body = lines(dict(identity.header()), dict(record))
        text = "".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in body)
        return ["sweep", str(SMALL_SWEEP), "-j", "1", "--resume", _w(folder, name, text), *extra(folder)]
    return build


def forged(**changes) -> Callable[[Path, int], list[str]]:
    """A valid header, then the acceptable record with ``changes``."""
    return resume_file(lambda h, r: [h, {**r, **changes}])


def raw_resume(data: Callable[[], bytes], name: str = "notes.txt") -> Callable[[Path, int], list[str]]:
    def build(folder: Path, scale: int) -> list[str]:
        return ["sweep", str(SMALL_SWEEP), "-j", "1", "--resume", _w(folder, name, data())]
    return build


def symlink_to_victim(folder: Path, scale: int) -> list[str]:
    (folder / "run").mkdir()
    victim = _w(folder, "victim.txt", "the only copy of my notes")  # no final newline: read as a torn line
    os.symlink("../victim.txt", folder / "run" / "r.jsonl")
    assert Path(victim).exists()
    return ["sweep", str(SMALL_SWEEP), "-j", "1", "--resume", str(folder / "run" / "r.jsonl")]


def same_as_plot(folder: Path, scale: int) -> list[str]:
    return ["sweep", str(SMALL_SWEEP), "-j", "1", "--resume", str(folder / "r.png"), "--plot", str(folder / "r.png")]


def plot_is_resume_by_another_name(folder: Path, scale: int) -> list[str]:
    (folder / "sub").mkdir()
    return ["sweep", str(SMALL_SWEEP), "-j", "1", "--resume", str(folder / "r.png"),
            "--plot", str(folder / "sub" / ".." / "r.png")]


RESUME_CASES: tuple[Case, ...] = (
    Case("resume-notes-no-final-newline", raw_resume(lambda: b"meeting notes: ask about the H200 quota"), (2,),
         "test_resume_reproduction[resume-notes-no-final-newline]"),
    Case("resume-one-line-json-config", raw_resume(lambda: b'{"model": "deepseek-v4-pro", "tp": 8}', "cfg.json"),
         (2,), "test_resume_reproduction[resume-one-line-json-config]"),
    Case("resume-99580-byte-binary", raw_resume(lambda: random.Random(24).randbytes(99_580).replace(b"\n", b" "), "blob.bin"), (2,),
         "test_resume_reproduction[resume-99580-byte-binary]"),
    Case("resume-empty-file", raw_resume(lambda: b"", "r.jsonl"), (2,), "test_resume_reproduction[resume-empty-file]"),
    Case("resume-symlink-to-victim", symlink_to_victim, (2,), "test_resume_reproduction[resume-symlink-to-victim]"),
    Case("resume-same-path-as-plot", same_as_plot, (2,), "test_resume_reproduction[resume-same-path-as-plot]"),
    Case("resume-plot-via-dotdot", plot_is_resume_by_another_name, (2,),
         "test_resume_reproduction[resume-plot-via-dotdot]"),
    Case("resume-record-without-header", resume_file(lambda h, r: [r]), (2,),
         "test_resume_reproduction[resume-record-without-header]"),
    Case("resume-header-other-spec", resume_file(lambda h, r: [{**h, "spec_sha256": "0" * 64}, r]), (2,),
         "test_resume_reproduction[resume-header-other-spec]"),
    Case("resume-header-other-workload", resume_file(lambda h, r: [{**h, "workload_sha256": "1" * 64}, r]), (2,),
         "test_resume_reproduction[resume-header-other-workload]"),
    Case("resume-requests-999999999", forged(requests=999_999_999, admitted=999_999_999), (2,),
         "test_resume_reproduction[resume-requests-999999999]"),
    Case("resume-admitted+refused-above-requests", forged(refused=5, refusals={"OutOfMemory": 5}), (2,),
         "test_resume_reproduction[resume-admitted+refused-above-requests]"),
    Case("resume-refusals-do-not-sum", forged(admitted=195, refused=5, refusals={"OutOfMemory": 3}), (2,),
         "test_resume_reproduction[resume-refusals-do-not-sum]"),
    Case("resume-unknown-reason-U+202E-ESC", forged(admitted=195, refused=5, refusals={"\u202eSSECCA\x1b[31m": 5}),
         (2,), "test_resume_reproduction[resume-unknown-reason-U+202E-ESC]"),
    Case("resume-utilization-1e12", forged(mean_utilization=1e12, peak_utilization=1e12), (2,),
         "test_resume_reproduction[resume-utilization-1e12]"),
    Case("resume-mean-above-peak", forged(mean_utilization=0.9, peak_utilization=0.2), (2,),
         "test_resume_reproduction[resume-mean-above-peak]"),
    Case("resume-point-of-another-spec", forged(key="model=x,device=h100,tp=99"), (2,),
         "test_resume_reproduction[resume-point-of-another-spec]"),
    Case("resume-feasible-despite-refusals",
         forged(admitted=195, refused=5, refusals={"OutOfMemory": 5}, feasible=True, violations=[]), (2,),
         "test_resume_reproduction[resume-feasible-despite-refusals]"),
    Case("resume-rate-not-scale-x-base", forged(sustainable_rate_per_s=1.0, rate_per_device_per_s=1.0), (2,),
         "test_resume_reproduction[resume-rate-not-scale-x-base]"),
    Case("resume-wait-with-nothing-admitted",
         forged(admitted=0, refused=200, refusals={"OutOfMemory": 200}, wait_p99_ns=5), (2,),
         "test_resume_reproduction[resume-wait-with-nothing-admitted]"),
    Case("resume-unknown-key", forged(note="\x1b]0;pwned\x07"), (2,), "test_resume_reproduction[resume-unknown-key]"),
    Case("resume-rate-scale-outside-search", resume_file(lambda h, r: [h, {
        **r, "sustainable_rate_scale": 2.0 ** -30, "sustainable_rate_per_s": r["sustainable_rate_per_s"] / 2 ** 31,
        "rate_per_device_per_s": r["rate_per_device_per_s"] / 2 ** 31}]), (2,),
         "test_resume_reproduction[resume-rate-scale-outside-search]"),
    Case("resume-is-the-spec-file", lambda folder, scale: ["sweep", _w(folder, "s.yaml", SMALL_SWEEP.read_text().replace(
        "../traces/", str(EXAMPLES / "traces") + "/")), "-j", "1", "--resume", str(folder / "s.yaml")], (2,),
         "test_resume_reproduction[resume-is-the-spec-file]"),
    Case("resume-trailing-slash", lambda folder, scale: ["sweep", str(SMALL_SWEEP), "-j", "1", "--resume",
                                                         str(folder / "r.jsonl") + "/"], (2,),
         "test_resume_reproduction[resume-trailing-slash]"),
    Case("resume-conflicting-duplicate", resume_file(lambda h, r: [h, r, {**r, "probes": 4}]), (2,),
         "test_resume_reproduction[resume-conflicting-duplicate]"),
)

RESUME_EXPECT: dict[str, tuple[str, ...]] = {
    "resume-notes-no-final-newline": ("notes.txt", "not a csa-plan resume file", "nothing was written"),
    "resume-one-line-json-config": ("cfg.json", "not a csa-plan resume file", "nothing was written"),
    "resume-99580-byte-binary": ("blob.bin", "not a csa-plan resume file"),
    "resume-empty-file": ("r.jsonl", "empty"),
    "resume-symlink-to-victim": ("--resume", "symbolic link"),
    "resume-same-path-as-plot": ("--plot", "--resume"),
    "resume-plot-via-dotdot": ("--plot", "--resume"),
    "resume-record-without-header": ("not a csa-plan resume file",),
    "resume-header-other-spec": ("done.jsonl:1", "spec_sha256", "another sweep spec"),
    "resume-header-other-workload": ("done.jsonl:1", "workload_sha256", "another workload"),
    "resume-requests-999999999": ("done.jsonl:2", "requests", "the workload has 200"),
    "resume-admitted+refused-above-requests": ("done.jsonl:2", "refused", "is not the 200 requests"),
    "resume-refusals-do-not-sum": ("done.jsonl:2", "refusals", "sum to 3"),
    "resume-unknown-reason-U+202E-ESC": ("done.jsonl:2", "unknown refusal reason", "\\u202e", "\\x1b"),
    "resume-utilization-1e12": ("done.jsonl:2", "mean_utilization"),
    "resume-mean-above-peak": ("done.jsonl:2", "mean_utilization", "above the peak"),
    "resume-point-of-another-spec": ("done.jsonl:2", "key", "no point of this sweep"),
    "resume-feasible-despite-refusals": ("done.jsonl:2", "violations"),
    "resume-rate-not-scale-x-base": ("done.jsonl:2", "rate"),  # the first inconsistent rate (the point has 8 devices)
    "resume-wait-with-nothing-admitted": ("done.jsonl:2", "wait_p99_ns"),
    "resume-conflicting-duplicate": ("done.jsonl:3", "differs"),
    "resume-unknown-key": ("done.jsonl:2", "note", "unknown key"),
    "resume-rate-scale-outside-search": ("done.jsonl:2", "sustainable_rate_scale", "outside the search"),
    "resume-is-the-spec-file": ("s.yaml", "not a csa-plan resume file"),
    "resume-trailing-slash": ("--resume", "names a folder"),
}


# -- output streams -------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamCase:
    """A whole-process run with stdout sent somewhere hostile and/or an environment."""

    name: str
    build: Callable[[Path, int], list[str]]
    codes: tuple[int, ...]
    test: str
    stdout: str = "file"  # "file" (read back), "/dev/full", "head" (a pipe closed after one line), "closed" (>&-)
    env: tuple[tuple[str, str], ...] = ()
    expect_err: tuple[str, ...] = ()  # what the one stderr line must say (exit 2)
    expect_out: tuple[str, ...] = ()  # what stdout must contain
    quiet: bool = False  # nothing at all on stderr
    full_scale: int = 1
    esc_allowed: bool = False  # the user asked for colour


def args(*a: str) -> Callable[[Path, int], list[str]]:
    return lambda folder, scale: [str(x) for x in a]


NAMES_YAML = ("name: \"V4 r\u00e9sum\u00e9 \u2603 \u00fc\u00f1\u00ee \u6ce8\u610f\"\nnum_heads: 64\nmax_seq_len: 4096\n"
              "head_dim: 512\nqk_rope_head_dim: 64\nlayers:\n  - compression_ratio: 128\n")
HIDDEN_YAML = NAMES_YAML.replace("V4 r\u00e9sum\u00e9 \u2603", "a" + "a".join(HIDDEN) + "z")


def model_named(text: str, name: str = "m.yaml") -> Callable[[Path, int], list[str]]:
    return lambda folder, scale: ["check", _w(folder, name, text)]


def non_ascii_path(folder: Path, scale: int) -> list[str]:
    return ["check", _w(folder, "mod\u00e8le \u2603.yaml", NAMES_YAML)]


def undecodable_path(folder: Path, scale: int) -> list[str]:
    """A file name that is not UTF-8 (reaches Python as surrogate escapes)."""
    raw = os.fsencode(str(folder)) + b"/caf\xe9-\xff.yaml"
    with open(raw, "wb") as f:
        f.write(NAMES_YAML.encode())
    return ["check", os.fsdecode(raw)]


def hidden_class_mix(folder: Path, scale: int) -> list[str]:
    text = (f"model: {PRO}\nrequests: 20\nseed: 1\nclasses:\n"
            + "".join(f"  - {{name: \"chat{c}\", rate: 1.0, prompt: {{dist: fixed, value: 64}}, "
                      f"output: {{dist: fixed, value: 8}}}}\n" for c in ("\u200b", "\U000e0041", "\u034f")))
    return ["simulate", _w(folder, "mix.yaml", text)]


def dollar_trace(folder: Path, scale: int) -> list[str]:
    trace = _w(folder, "a$\\frac$.jsonl", TRACE.read_bytes())
    return ["simulate", trace, "--model", PRO, "--plot", str(folder / "p.png")]


def markup_plot(folder: Path, scale: int) -> list[str]:
    return ["simulate", str(TRACE), "--model", PRO, "--plot", str(folder / "[bold red]p[link=x].png")]


def trailing_slash_plot(folder: Path, scale: int) -> list[str]:
    return ["simulate", str(TRACE), "--model", PRO, "--plot", str(folder / "x.png") + "/"]


ASCII = (("PYTHONIOENCODING", "ascii"),)
LATIN1 = (("PYTHONIOENCODING", "latin-1"),)
LANG_C = (("LANG", "C"), ("LC_ALL", "C"), ("PYTHONUTF8", "0"), ("PYTHONCOERCECLOCALE", "0"))

STREAM_CASES: tuple[StreamCase, ...] = (
    StreamCase("stdout-/dev/full-text", args("check", PRO), (2,), "test_stream_reproduction[stdout-/dev/full-text]",
               stdout="/dev/full", expect_err=("cannot write to stdout", "No space left on device")),
    StreamCase("stdout-/dev/full-json", args("check", PRO, "--json"), (2,),
               "test_stream_reproduction[stdout-/dev/full-json]", stdout="/dev/full",
               expect_err=("cannot write to stdout",)),
    StreamCase("stdout-/dev/full-sweep", args("sweep", SMALL_SWEEP, "-j", "1"), (2,),
               "test_stream_reproduction[stdout-/dev/full-sweep]", stdout="/dev/full",
               expect_err=("cannot write to stdout",)),
    StreamCase("stdout-closed", args("check", PRO), (2,), "test_stream_reproduction[stdout-closed]",
               stdout="closed", expect_err=("cannot write to stdout", "closed")),
    StreamCase("check-pipe-head-1", args("check", PRO), (0, 141), "test_stream_reproduction[check-pipe-head-1]",
               stdout="head", quiet=True),
    StreamCase("check-json-pipe-head-1", args("check", PRO, "--json"), (0, 141),
               "test_stream_reproduction[check-json-pipe-head-1]", stdout="head", quiet=True),
    StreamCase("simulate-pipe-head-1", args("simulate", TRACE, "--model", PRO), (0, 141),
               "test_stream_reproduction[simulate-pipe-head-1]", stdout="head", quiet=True),
    StreamCase("help-pipe-head-1", args("--help"), (0, 141), "test_stream_reproduction[help-pipe-head-1]",
               stdout="head", quiet=True),
    StreamCase("ascii-non-ascii-name", model_named(NAMES_YAML), (0, 3),
               "test_stream_reproduction[ascii-non-ascii-name]", env=ASCII, expect_out=("\\u2603",)),
    StreamCase("latin-1-non-ascii-name", model_named(NAMES_YAML), (0, 3),
               "test_stream_reproduction[latin-1-non-ascii-name]", env=LATIN1),
    StreamCase("LANG=C-non-ascii-name", model_named(NAMES_YAML), (0, 3),
               "test_stream_reproduction[LANG=C-non-ascii-name]", env=LANG_C),
    StreamCase("ascii-non-ascii-path", non_ascii_path, (0, 3), "test_stream_reproduction[ascii-non-ascii-path]",
               env=ASCII),
    StreamCase("ascii-missing-non-ascii-path", args("check", "/nonexistent/mod\u00e8le \u2603.yaml"), (2,),
               "test_stream_reproduction[ascii-missing-non-ascii-path]", env=ASCII, expect_err=("\\u2603",)),
    StreamCase("LANG=C-undecodable-path", undecodable_path, (0, 3),
               "test_stream_reproduction[LANG=C-undecodable-path]", env=LANG_C),
    StreamCase("utf-8-undecodable-path", undecodable_path, (0, 3),
               "test_stream_reproduction[utf-8-undecodable-path]"),
    StreamCase("ascii-simulate-ascii-input", args("simulate", TRACE, "--model", PRO), (0,),
               "test_stream_reproduction[ascii-simulate-ascii-input]", env=ASCII),
    StreamCase("latin-1-sweep-ascii-input", args("sweep", SMALL_SWEEP, "-j", "1"), (0,),
               "test_stream_reproduction[latin-1-sweep-ascii-input]", env=LATIN1),
    StreamCase("ascii-class-names", hidden_class_mix, (0, 3), "test_stream_reproduction[ascii-class-names]",
               env=ASCII),
    StreamCase("preset-with-zero-width-space", args("check", "deepseek-v4-pro\u200b"), (2,),
               "test_stream_reproduction[preset-with-zero-width-space]", expect_err=("\\u200b",)),
    StreamCase("model-name-invisible-and-bidi", model_named(HIDDEN_YAML), (0, 3),
               "test_stream_reproduction[model-name-invisible-and-bidi]",
               expect_out=("\\u200b", "\\xad", "\\u034f", "\\U000e0041", "\\u180e", "\\u202e")),
    StreamCase("class-names-invisible", hidden_class_mix, (0, 3),
               "test_stream_reproduction[class-names-invisible]", expect_out=("chat\\u200b", "chat\\U000e0041")),
    StreamCase("FORCE_COLOR-not-a-terminal", args("check", PRO), (0, 3),
               "test_stream_reproduction[FORCE_COLOR-not-a-terminal]", env=(("FORCE_COLOR", "1"),)),
    StreamCase("TTY_COMPATIBLE-not-a-terminal", args("sweep", SMALL_SWEEP, "-j", "1"), (0,),
               "test_stream_reproduction[TTY_COMPATIBLE-not-a-terminal]",
               env=(("TTY_COMPATIBLE", "1"), ("FORCE_COLOR", "3"))),
    StreamCase("plot-trailing-slash", trailing_slash_plot, (2,), "test_stream_reproduction[plot-trailing-slash]",
               expect_err=("--plot", "names a folder")),
    StreamCase("plot-same-file-as-budget-plot", lambda folder, scale: [
        "simulate", str(TRACE), "--model", PRO, "--plot", str(folder / "a.png"), "--budget-plot",
        str(folder / "." / "a.png")], (2,), "test_stream_reproduction[plot-same-file-as-budget-plot]",
        expect_err=("--budget-plot", "is the --plot file")),
    StreamCase("plot-mathtext-trace-path", dollar_trace, (0,), "test_stream_reproduction[plot-mathtext-trace-path]"),
    StreamCase("plot-rich-markup-path", markup_plot, (0,), "test_stream_reproduction[plot-rich-markup-path]",
               expect_out=("[bold red]p[link=x].png",)),
)


def run_stream_case(case: StreamCase, folder: Path, prefix: tuple[str, ...] = (),
                    timeout: float = 120) -> tuple[int, str, str, float]:
    """Run ``csa-plan`` (``python -m csa_plan.cli.main``) as the case says: (exit, stdout, stderr, seconds).
    ``prefix`` wraps the command (``prlimit``, ``/usr/bin/time -v``)."""
    argv = case.build(folder, case.full_scale)
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "CSA_PLAN_COLOR",
                                                             "PYTHONIOENCODING")}
    env.update(dict(case.env))
    cmd = [*prefix, sys.executable, "-m", "csa_plan.cli.main", *argv]
    encoding = env.get("PYTHONIOENCODING", "utf-8")  # how to read back what it wrote
    started = time.perf_counter()
    if case.stdout == "head":
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=folder)
        first = proc.stdout.readline()
        proc.stdout.close()  # the reader goes away, as head does
        err = proc.stderr.read()
        code = proc.wait(timeout)
        return code, first.decode(encoding, "surrogateescape"), err.decode(encoding, "surrogateescape"), \
            time.perf_counter() - started
    if case.stdout == "/dev/full":
        with open("/dev/full", "wb") as full:
            proc = subprocess.run(cmd, stdout=full, stderr=subprocess.PIPE, env=env, cwd=folder, timeout=timeout)
        return proc.returncode, "", proc.stderr.decode(encoding, "surrogateescape"), time.perf_counter() - started
    if case.stdout == "closed":
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=folder,
                              timeout=timeout, preexec_fn=lambda: os.close(1))
        return proc.returncode, "", proc.stderr.decode(encoding, "surrogateescape"), time.perf_counter() - started
    proc = subprocess.run(cmd, capture_output=True, env=env, cwd=folder, timeout=timeout)
    return (proc.returncode, proc.stdout.decode(encoding, "surrogateescape"),
            proc.stderr.decode(encoding, "surrogateescape"), time.perf_counter() - started)


def stream_problems(case: StreamCase, code: int, out: str, err: str) -> list[str]:
    """What is wrong with one run of a stream case (empty: it meets its bound)."""
    from helpers.hostile import control_bytes

    own = err[: err.rfind("\tCommand being timed:")] if "\tCommand being timed:" in err else err
    lines = [line for line in own.splitlines() if line.strip() and not line.startswith("Command exited")]
    problems = []
    if code not in case.codes:
        problems.append(f"exit {code}, expected {case.codes}")
    if "Traceback" in own or "internal error" in own or "Exception ignored" in own:
        problems.append("a traceback or an internal error")
    if code == 2 and len(lines) != 1:
        problems.append(f"{len(lines)} stderr lines, expected 1")
    if case.quiet and lines:
        problems.append(f"stderr not quiet: {lines[0][:120]!r}")
    problems += [f"stderr lacks {n!r}" for n in case.expect_err if not any(n in line for line in lines)]
    problems += [f"stdout lacks {n!r}" for n in case.expect_out if n not in out]
    shown = out + own
    if control_bytes(shown) and not case.esc_allowed:
        problems.append(f"control bytes {control_bytes(shown)[:5]}")
    if hidden_chars(shown):
        problems.append(f"hidden characters {hidden_chars(shown)[:5]}")
    return problems


# -- orphaned workers -----------------------------------------------------------------------------

ORPHAN_SIGNALS = ("SIGTERM", "SIGHUP", "SIGKILL")
ORPHAN_MIX = (EXAMPLES / "mixes" / "chat-h200.yaml")


def slow_sweep(folder: Path) -> list[str]:
    """A sweep whose points take seconds each, so the pool is busy when the parent is killed."""
    _w(folder, "mix.yaml", ORPHAN_MIX.read_text().replace("requests: 20000", "requests: 100000"))
    spec = _w(folder, "s.yaml", "workload: mix.yaml\ngrid: {model: deepseek-v4-pro, device: h200, reserved: {weights: 0, runtime: 120GiB}, "
                                "tp: 8, dp: [1, 2, 3, 4, 5, 6, 7, 8], reserve: fit}\nsearch: {rel_tol: 0.0001}\n")
    return ["sweep", spec, "--jobs", "2", "--resume", str(folder / "r.jsonl")]


def _children(pid: int) -> set[int]:
    """Every descendant of ``pid`` (read from /proc: no psutil)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
            parents[int(entry)] = int(stat[stat.rfind(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().split(b")")[-1].split()[0] != b"Z"
    except OSError:
        return False


@dataclass
class OrphanRun:
    signal: str
    processes: int = 0  # workers and tracker seen before the kill
    survivors: list[int] = field(default_factory=list)  # still alive after the wait
    seconds: float = 0.0  # until the last one ended (or the wait ran out)
    resume_ok: bool = True


def orphans_after(signal_name: str, folder: Path, wait_s: float = 10.0) -> OrphanRun:
    """Start the slow sweep, wait for its pool, kill the parent alone; who is left after ``wait_s``?"""
    argv = slow_sweep(folder)
    proc = subprocess.Popen([sys.executable, "-m", "csa_plan.cli.main", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=folder, start_new_session=True)
    run = OrphanRun(signal_name)
    try:
        deadline = time.monotonic() + 60
        children: set[int] = set()
        while time.monotonic() < deadline and proc.poll() is None:
            children = _children(proc.pid)
            if len(children) >= 3:  # two workers and the resource tracker
                break
            time.sleep(0.1)
        time.sleep(1.0)  # the workers have started their first points
        children = _children(proc.pid)
        run.processes = len(children)
        os.kill(proc.pid, getattr(signal, signal_name))
        proc.wait(30)
        started = time.monotonic()
        while time.monotonic() - started < wait_s and any(_alive(p) for p in children):
            time.sleep(0.1)
        run.seconds = time.monotonic() - started
        run.survivors = sorted(p for p in children if _alive(p))
        text = (folder / "r.jsonl").read_text() if (folder / "r.jsonl").exists() else ""
        run.resume_ok = text.startswith('{"schema": "csa-plan/sweep-resume/v1"') or not text
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in run.survivors:  # never leave them behind, even when the test fails
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    return run


__all__ = ["RESUME_CASES", "RESUME_EXPECT", "STREAM_CASES", "ORPHAN_SIGNALS", "StreamCase", "hidden_chars",
           "orphans_after", "run_stream_case", "stream_problems", "small_identity", "ROOT"]
