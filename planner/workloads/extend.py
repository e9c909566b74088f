"""A trace too short for a steady state, extended by the one stated method (``planner/steady.py``
``EXTENSION``): repeated end to end with fresh request ids."""

from __future__ import annotations

from dataclasses import replace

from csa_plan.planner.workloads.workload import Workload


def repeated(wl: Workload, copies: int) -> Workload:
    """``copies`` copies of ``wl`` one after another: copy k's arrivals shifted by k x (the span plus
    one mean gap), so the arrival rate and the gaps' statistics stay the trace's own; its
    prefix-block ids shifted past every id of the copies before it (a copy is new traffic, not a
    repeat the prefix cache would hit). ``copies`` 1 is ``wl`` itself."""
    import numpy as np

    if copies <= 1 or len(wl) == 0:
        return wl
    from csa_plan.planner.steady import repeat_arrivals

    n = len(wl)
    arrival = repeat_arrivals(wl.arrival_ns, copies)
    ids = offs = None
    if wl.hash_ids is not None and wl.hash_offsets is not None:
        base = wl.hash_ids.astype(np.int64)
        width = int(base.max()) + 1 if len(base) else 1
        ids = np.concatenate([base + k * width for k in range(copies)])
        offs0 = wl.hash_offsets.astype(np.int64)
        total = int(offs0[-1])
        offs = np.concatenate([offs0[:-1] + k * total for k in range(copies)] + [np.array([copies * total])])
    note = f"extended to {copies} copies of its {n:,} requests (repeated with fresh request ids)"
    return replace(wl, arrival_ns=arrival, prompt_tokens=np.tile(wl.prompt_tokens, copies),
                   output_tokens=np.tile(wl.output_tokens, copies), class_ids=np.tile(wl.class_ids, copies),
                   hash_ids=ids, hash_offsets=offs, notes=wl.notes + (note,))
