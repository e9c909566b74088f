"""Growing request columns and the last step every trace reader shares.

Readers append chunk-sized numpy arrays. A request costs 18 bytes here: arrival int64,
prompt and output tokens int32 (widened to int64 once, the first time a count reaches
2^30, so a sum of two counts stays exact in int32), class id int16. A file's columns are
reserved once for the most rows its size allows (untouched pages are never resident),
growing by doubling otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from csa_plan.planner.errors import I63_LIMIT, BadInput
from csa_plan.planner.workloads.workload import MAX_TRACE_REQUESTS, Workload

if TYPE_CHECKING:
    import numpy as np

NARROW_TOKENS = 1 << 30
"""Token counts below this are kept as int32 (a sum of two still fits int32)."""


def narrow_int_dtype(count: int) -> "np.dtype":
    """The narrowest signed integer dtype that holds 0..count-1 (class ids)."""
    import numpy as np

    return np.dtype(np.int8 if count <= 128 else np.int16 if count <= 32768 else np.int32)


def store_tokens(column: "np.ndarray", lo: int, values: "np.ndarray") -> "np.ndarray":
    """Write ``values`` at ``lo``; an int32 column that cannot hold them is widened to int64 first
    (the returned column replaces the old one)."""
    import numpy as np

    if column.dtype == np.int32 and len(values) and (int(values.max()) >= NARROW_TOKENS or
                                                       int(values.min()) < -NARROW_TOKENS):
        column = column.astype(np.int64)
    column[lo:lo + len(values)] = values
    return column


class Columns:
    """Append-only request columns with a capacity (see the module docstring for the dtypes)."""

    def __init__(self, source: str, capacity: int = 1 << 16) -> None:
        import numpy as np

        from csa_plan.planner.workloads.workload import MAX_TRACE_CLASSES

        self.source = source
        self.n = 0
        cap = max(1, min(capacity, MAX_TRACE_REQUESTS + 1))
        self.arrival = np.empty(cap, dtype=np.int64)
        self.prompt = np.empty(cap, dtype=np.int32)
        self.output = np.empty(cap, dtype=np.int32)
        self.cls = np.empty(cap, dtype=narrow_int_dtype(MAX_TRACE_CLASSES))

    def append(self, arrival: "np.ndarray", prompt: "np.ndarray", output: "np.ndarray", cls: "np.ndarray | int") -> None:
        import numpy as np

        k = len(arrival)
        if self.n + k > MAX_TRACE_REQUESTS:
            raise BadInput(self.source, None, f"more than {MAX_TRACE_REQUESTS:,} requests (the limit of one trace)")
        if self.n + k > len(self.arrival):
            cap = min(max(2 * len(self.arrival), self.n + k), MAX_TRACE_REQUESTS)
            for name in ("arrival", "prompt", "output", "cls"):
                old = getattr(self, name)
                new = np.empty(cap, dtype=old.dtype)
                new[:self.n] = old[:self.n]
                setattr(self, name, new)
        sl = slice(self.n, self.n + k)
        self.arrival[sl] = arrival
        self.prompt = store_tokens(self.prompt, self.n, prompt)
        self.output = store_tokens(self.output, self.n, output)
        self.cls[sl] = cls
        self.n += k

    def workload(self, class_names: tuple[str, ...], sort: bool, notes: list[str], **extra) -> Workload:
        """Arrivals made relative to the earliest; sorted stably when ``sort`` found them out of order."""
        import numpy as np

        n = self.n
        arrival, prompt, output, cls = (a[:n] for a in (self.arrival, self.prompt, self.output, self.cls))
        if len(self.arrival) > 2 * n + (1 << 20):  # a small trace gives back the address space it did not use
            arrival, prompt, output, cls = (a.copy() for a in (arrival, prompt, output, cls))
        lo, hi = int(arrival.min()), int(arrival.max())
        if hi - lo >= I63_LIMIT:  # relative nanoseconds must fit int64 (about 292 years)
            raise BadInput(self.source, None, f"arrivals span {hi - lo} ns, more than an int64 nanosecond clock holds")
        arrival -= lo
        if sort:
            order = np.argsort(arrival, kind="stable")
            arrival, prompt, output, cls = arrival[order], prompt[order], output[order], cls[order]
            if "hash_offsets" in extra and extra["hash_offsets"] is not None:
                extra = _reorder_hashes(order, **extra)
        return Workload(self.source, arrival, prompt, output, cls, class_names, notes=tuple(notes), **extra)


def _reorder_hashes(order: "np.ndarray", hash_ids: "np.ndarray", hash_offsets: "np.ndarray", **rest) -> dict:
    import numpy as np

    lengths = np.diff(hash_offsets)[order]
    starts = hash_offsets[:-1][order]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    idx = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]))
    return dict(rest, hash_ids=hash_ids[idx], hash_offsets=offsets)
