"""Data-parallel ranks step together (issue 44, item 2): behind a closed-loop client each rank's replay is put
on one shared clock, every shared step as long as the slowest rank's, an idle rank running a dummy batch."""

from __future__ import annotations

import numpy as np
import pytest

from csa_plan.planner.replay.loop import replay
from csa_plan.planner.replay.protocol import RuntimeOptions, RuntimeTrace
from csa_plan.planner.serving.lockstep import dummy_ns
from csa_plan.planner.serving.replicas import replay_closed_replicas
from csa_plan.planner.steptime.model import StepTime

from test_closed_loop_replicas import _plan, check

# a linear clock in which a prefill token costs far more than a decoded one: unequal ranks step unequally
TIME = StepTime(20.0, 10_000.0, linear=(1e-3, 0.0, 2e-6, 0.0, 1e-5, 0.0, 0.0, -1.0))


def _trace(n: int) -> RuntimeTrace:
    prompts = np.array([4096 if i % 2 == 0 else 128 for i in range(n)], dtype=np.int64)  # rank 0 long, rank 1 short
    outputs = np.array([16 if i % 2 == 0 else 96 for i in range(n)], dtype=np.int64)
    return RuntimeTrace(np.zeros(n, dtype=np.int64), prompts, outputs)


def _run(engine: str, trace: RuntimeTrace, lock: bool):
    plan, sizing = _plan(engine)
    return replay_closed_replicas(lambda t, share: replay(plan.runtime(sizing, t, RuntimeOptions()), t, TIME,
                                                          max_concurrency=share), trace, 2, 4,
                                  lockstep_time=TIME if lock else None)


@pytest.mark.parametrize("engine", ("vllm-0.33", "sglang-0.5.23"))
def test_ranks_wait_for_the_slowest(engine):
    trace = _trace(24)
    alone, together = _run(engine, trace, False), _run(engine, trace, True)
    check(together, trace, 4, 2)
    for field in ("first_token_ns", "finished_ns", "admitted_ns", "arrival_ns"):
        a, b = (np.asarray(getattr(r, field), dtype=np.int64) for r in (alone, together))
        assert (b >= a).all(), field  # a shared step is never shorter than a rank's own
    fin_a, fin_b = np.asarray(alone.finished_ns), np.asarray(together.finished_ns)
    short = np.arange(1, 24, 2)  # the short-prompt rank waits on the long-prompt rank's prefills
    assert (fin_b[short] > fin_a[short]).any()
    assert (fin_b >= 0).all()
    line = [n for n in together.notes if "step together" in n]
    assert len(line) == 1 and f"({dummy_ns(TIME):,} ns)" in line[0]
    assert not any("step together" in n for n in alone.notes)


def test_equal_ranks_are_unchanged():
    """Identical ranks step identically: lockstep moves nothing (the published fixed-length cells)."""
    n = 16
    trace = RuntimeTrace(np.zeros(n, dtype=np.int64), np.full(n, 512, dtype=np.int64), np.full(n, 32, dtype=np.int64))
    plan, sizing = _plan("vllm-0.33")
    run = lambda lock: replay_closed_replicas(
        lambda t, share: replay(plan.runtime(sizing, t, RuntimeOptions()), t, TIME, max_concurrency=share),
        trace, 2, 4, lockstep_time=TIME if lock else None)
    a, b = run(False), run(True)
    assert np.array_equal(np.asarray(a.finished_ns), np.asarray(b.finished_ns))
    assert "0 of" in [x for x in b.notes if "step together" in x][0]
