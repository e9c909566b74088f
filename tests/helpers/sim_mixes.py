"""The hypothesis mixes the fast-path proofs run on, and the contended configuration each becomes.

Shared by tests/simulate/test_simulate.py (fast path == ledger replay) and test_slices.py (the
same with tiny slices), so both proofs draw exactly the same cases.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from csa_plan.planner.placement import Placement, Router
from csa_plan.planner.reserve import Policy, Reserve, SimConfig, TimeModel, prepare
from csa_plan.planner.workloads import Workload


def workload(arrival_ns, prompt, output, classes=None) -> Workload:
    n = len(arrival_ns)
    return Workload("test", np.array(arrival_ns, dtype=np.int64), np.array(prompt, dtype=np.int64),
                    np.array(output, dtype=np.int64),
                    np.zeros(n, dtype=np.int32) if classes is None else np.array(classes, dtype=np.int32),
                    ("a",) if classes is None else ("a", "b"))


@st.composite
def mixes(draw):
    n = draw(st.integers(1, 40))
    gaps = draw(st.lists(st.sampled_from([0, 0, 1, 5, 100, 10_000]), min_size=n, max_size=n))
    prompt = draw(st.lists(st.integers(0, 40_000), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(0, 30_000), min_size=n, max_size=n))
    classes = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    placement = Placement(tp=draw(st.sampled_from([1, 2])), pp=draw(st.sampled_from([1, 2, 3])),
                          dp=draw(st.sampled_from([1, 2])), router=draw(st.sampled_from(list(Router))))
    return (np.cumsum(gaps).tolist(), prompt, output, classes, placement,
            draw(st.sampled_from(list(Policy))), draw(st.sampled_from(list(Reserve))),
            draw(st.integers(0, 12)), draw(st.sampled_from([1000, 4096, 16_384])),
            draw(st.sampled_from([1_000, 50_000])), draw(st.sampled_from([0, 0, 0, 1, 3])))


def contended(model, mix) -> tuple[Workload, SimConfig]:
    """A drawn mix as a workload and a configuration whose limit runs from 'never fits' to roomy
    (``slots`` of the largest bundle, thirds), with the drawn running-request cap."""
    arrival, prompt, output, classes, placement, policy, reserve, slots, bucket, prefill, max_running = mix
    wl = workload([a * 1_000_000 for a in arrival], prompt, output, classes)
    base = SimConfig(placement=placement, reserve=reserve, bucket=bucket, policy=policy, max_seq_len=65_536,
                     time=TimeModel(prefill_tok_s=prefill, tpot_ms=0.01))
    probe = prepare(model, wl, base)
    biggest = max(b.total_bytes for stages in probe.bundles for b in stages) if probe.bundles else 1
    limit = 0 if slots == 0 else slots * biggest // 3 + 1
    return wl, SimConfig(placement=placement, limit_bytes=limit, reserve=reserve, bucket=bucket, policy=policy,
                         max_seq_len=65_536, time=base.time, max_running=max_running)
