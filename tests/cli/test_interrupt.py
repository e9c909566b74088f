"""Ctrl-C and progress in the compiled replays (issue 36 items 1 and 6).

The compiled loops (``cvllm.c``, ``csglang.c``) hold the GIL for a whole replay: before, a SIGINT
waited for the end of a million-request run (minutes) and then printed a 52-line traceback, and the
progress bar was drawn once, at the end. Now each loop runs the signal handlers and calls a progress
callback every few thousand turns (``set_progress``), and the CLI turns KeyboardInterrupt into one
line and exit 130. Checked here with a real SIGINT on the shipped million-request mix, through both
engines, and on the loops themselves.
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from csa_plan.planner.engines.sglang.compiled import compiled_module as csglang_module
from csa_plan.planner.engines.sglang.runtime import SglangRuntime
from csa_plan.planner.engines.sglang.compiled import replay_for
from csa_plan.planner.engines.sglang.scheduler import SchedulerConfig
from csa_plan.planner.engines.vllm.kv_cache_manager import GroupSpec
from csa_plan.planner.engines.vllm.compiled import compiled_module as cvllm_module
from csa_plan.planner.engines.vllm.scheduler import VllmRuntime
from csa_plan.planner.engines.vllm.compiled import compiled_replay
from csa_plan.planner.replay.loop import replay
from csa_plan.planner.replay.protocol import RuntimeTrace
from csa_plan.planner.steptime.model import StepTime

ROOT = Path(__file__).resolve().parents[2]
MILLION = "examples/mixes/million-requests-vllm.yaml"
ENGINES = {"vllm-0.33": [], "sglang-0.5.23": ["--max-running-requests", "64"]}  # SGLang refuses 1M without it
needs_both = pytest.mark.skipif(cvllm_module() is None or csglang_module() is None,
                                reason="the compiled loops are not built (pip install -e . builds them; CI does)")
TIME = StepTime(20.0, 10_000.0)
PROGRESS = re.compile(rb"simulating\S*\s.*?(\d+)%")


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from csa_plan.cli.entry import main; main()", *args]


def _in_a_terminal(argv: list[str], stop_at_percent: int, limit_s: float = 120.0) -> tuple[int, bytes, float, float]:
    """Run ``argv`` on a pseudo-terminal (so the progress bar is drawn); SIGINT once the bar shows
    ``stop_at_percent``. Returns (exit code, everything written, s from start to that percent, s from
    the SIGINT to the exit)."""
    master, slave = pty.openpty()
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=ROOT,
                            env={**os.environ, "COLUMNS": "100", "TERM": "xterm"})
    os.close(slave)
    out, sent = b"", None
    try:
        while time.monotonic() - start < limit_s:
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    chunk = os.read(master, 1 << 16)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
                shown = [int(p) for p in PROGRESS.findall(out[-2000:])]
                if sent is None and shown and max(shown) >= stop_at_percent:
                    sent = time.monotonic()
                    proc.send_signal(signal.SIGINT)
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=max(1.0, limit_s - (time.monotonic() - start)))
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert sent is not None, f"no progress drawn before the end: {out[-400:]!r}"
    return code, out, sent - start, time.monotonic() - sent


@needs_both
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_ctrl_c_in_a_compiled_million_request_replay_is_one_line_and_exit_130(engine):
    """The bar moves while the compiled loop runs (it reached 2% of a million requests), and a SIGINT
    then ends the process within 2 s: exit 130, ``csa-plan: interrupted`` and no traceback."""
    code, out, _to_progress, to_exit = _in_a_terminal(_cli("simulate", MILLION, "--engine", engine,
                                                           *ENGINES[engine]), stop_at_percent=2)
    assert code == 130 and to_exit < 2.0, (code, to_exit, out[-400:])
    text = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", out).replace(b"\r", b"\n")
    lines = [line.strip() for line in text.split(b"\n") if line.strip() and not PROGRESS.search(line)]
    assert lines == [b"csa-plan: interrupted"], lines[-5:]


@needs_both
def test_ctrl_c_without_a_terminal_is_one_stderr_line():
    """No terminal, no bar: the signal check is in the loops whether or not a callback is set. The
    vLLM replay of the million mix runs for well over 10 s here; SIGINT it 4 s in."""
    proc = subprocess.Popen(_cli("simulate", MILLION, "--engine", "vllm-0.33", "--json"), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(4.0)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (130, b"csa-plan: interrupted\n") and time.monotonic() - sent < 2.0, err
    assert out == b'{"schema": "csa-plan/error/v1", "exit_code": 130, "message": "interrupted"}\n'


def _vllm_runtime(trace: RuntimeTrace) -> VllmRuntime:
    return VllmRuntime(trace, (GroupSpec(16, None),), ("a",), 200, 4096, 2048, 8, True, 0, 0, compiled=compiled_replay)


def _sglang_runtime(trace: RuntimeTrace) -> SglangRuntime:
    return SglangRuntime(SchedulerConfig(full_pages=40, swa_pages=40, page=16, window=16, max_running_requests=8),
                         trace, "sglang-0.5.23", compiled=replay_for)


def _trace(n: int = 3000) -> RuntimeTrace:
    rng = np.random.default_rng(36)
    return RuntimeTrace(np.sort(rng.integers(0, 10**10, n)).astype(np.int64), rng.integers(1, 300, n).astype(np.int64),
                        rng.integers(1, 60, n).astype(np.int64))


class Stop(Exception):
    pass


@needs_both
@pytest.mark.parametrize("make", [_vllm_runtime, _sglang_runtime], ids=["cvllm", "csglang"])
def test_the_compiled_loops_report_progress_and_stop_when_it_raises(make):
    trace = _trace()
    plain = replay(make(trace), trace, TIME, compiled=True)
    seen: list[tuple[int, int]] = []
    reported = replay(make(trace), trace, TIME, progress=lambda done, total: seen.append((done, total)), compiled=True)
    assert isinstance(reported.admitted_ns, np.ndarray)  # it did run compiled
    assert reported.same_as(plain)  # reporting changes nothing
    assert len(seen) >= 3 and seen[-1] == (len(trace), len(trace)), seen[-3:]
    assert all(total == len(trace) for _, total in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and 0 < seen[1][0] < len(trace), seen[:3]

    def stop(done: int, total: int) -> None:
        raise Stop(done)

    with pytest.raises(Stop):
        replay(make(trace), trace, TIME, progress=stop, compiled=True)
    again = replay(make(trace), trace, TIME, compiled=True)  # the callback is cleared after a run
    assert again.same_as(plain)


@needs_both
@pytest.mark.parametrize("args, delay_s", [
    (("sweep", "examples/sweeps/azure-200.yaml", "-j", "1"), 0.7),  # before any point runs (was 50 lines)
    (("simulate", MILLION, "--engine", "vllm-0.33", "--find-capacity", "--max-wait", "5"), 3.0),  # was 43 lines
], ids=["sweep-early", "find-capacity"])
def test_an_interrupt_anywhere_is_one_line_and_exit_130(args, delay_s):
    proc = subprocess.Popen(_cli(*args), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(delay_s)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 130 and len(lines) == 1 and lines[0].startswith("csa-plan: interrupted"), err[-600:]
    assert time.monotonic() - sent < 2.0
