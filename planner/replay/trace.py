"""A workload as the runtime loop reads it: arrivals after ``--rate-scale``, token counts, prefix ids."""

from __future__ import annotations

from typing import TYPE_CHECKING

from csa_plan.planner.replay.protocol import MOONCAKE_BLOCK_TOKENS, RuntimeTrace

if TYPE_CHECKING:
    from csa_plan.planner.workloads.workload import Workload


def runtime_trace(wl: "Workload", rate_scale: float = 1.0) -> RuntimeTrace:
    """``rate_scale`` divides arrival times (as ``simulate`` does everywhere); a request of 0 output
    tokens asks for one (the server's minimum, ``max_tokens >= 1``)."""
    import numpy as np

    from csa_plan.planner.clock import refuse_past_clock

    arrival = wl.arrival_ns.astype(np.int64)
    if rate_scale != 1.0:
        if len(arrival):  # the ledger's bound: a tiny scale would wrap the int64 clock (a negative wait)
            refuse_past_clock(int(arrival.max()), rate_scale)
        arrival = np.rint(arrival / rate_scale).astype(np.int64)
    block = MOONCAKE_BLOCK_TOKENS
    prefix = getattr(wl.trace, "prefix", None) if wl.trace is not None else None
    if prefix is not None:
        block = getattr(prefix, "block_tokens", block) or block
        if not getattr(prefix, "kept", True):
            from csa_plan.planner.errors import BadInput
            from csa_plan.planner.workloads.workload import MAX_REPLAY_HASH_IDS

            raise BadInput(wl.source, "hash_ids", f"{prefix.blocks:,} prefix-block ids: an engine replay keeps them "
                                                  f"per request, at most {MAX_REPLAY_HASH_IDS:,} (MAX_REPLAY_HASH_IDS); "
                                                  "the ledger (no --engine) reads the trace, or replay a part of it")
    return RuntimeTrace(arrival, wl.prompt_tokens.astype(np.int64), np.maximum(wl.output_tokens, 1).astype(np.int64),
                        wl.hash_ids, wl.hash_offsets, block)


def slice_trace(trace: RuntimeTrace, skip: int, n: int) -> RuntimeTrace:
    """Requests ``skip .. skip + n`` with arrivals from the first of them (cross-checks and tests)."""
    import numpy as np

    sl = slice(skip, skip + n)
    arrival = trace.arrival_ns[sl]
    arrival = arrival - arrival[0] if len(arrival) else arrival
    ids = offs = None
    if trace.block_ids is not None and trace.block_offsets is not None:
        o = trace.block_offsets
        lo, hi = int(o[skip]), int(o[min(skip + n, len(o) - 1)])
        ids = np.asarray(trace.block_ids[lo:hi], dtype=np.int64)
        offs = np.asarray(o[skip:skip + n + 1], dtype=np.int64) - lo
    return RuntimeTrace(arrival, trace.prompt_tokens[sl], trace.output_tokens[sl], ids, offs, trace.id_block_tokens)
