"""Which SWA pages a request frees as it advances (sglang-0.5.23 ``srt/mem_cache/common.py:75-140``).

``free_swa_out_of_window_slots(req, pre_len)``: nothing happens unless
``pre_len - window >= evicted + interval``; then, with a prefix-sharing cache, everything below
``pre_len - ceil_align(max(window, page), page)`` is freed (without one, below ``pre_len - window``),
floored to the page. Decode calls it through ``maybe_evict_swa`` (``managers/schedule_batch.py:
4068-4100``) with ``pre_len = seqlen - 1`` from the request's second decode step on
(``decode_batch_idx >= 1``), gated by ``SGLANG_SWA_EVICTION_INTERVAL`` = 128 (``environ.py:730``,
trigger at ``schedule_batch.py:4063-4066``); with the radix cache, the checkpoint after each prefill
chunk calls it with ``pre_len = extend_end - 1`` and interval 1 (``unified_radix_cache.py:1340-1366``,
``unified_cache/components/swa.py:1030-1046``); without it, the extend's allocation calls it with the
chunk's start (``schedule_batch.py:4105-4122``).
"""

from __future__ import annotations

from csa_plan.planner.units import round_up

EVICTION_INTERVAL = 128  # environ.py:730


def evicted_after(evicted: int, pre_len: int, window: int, page: int, prefix_sharing: bool,
                  interval: int = 1) -> int:
    """The new ``swa_evicted_seqlen`` (tokens; page-aligned) after ``free_swa_out_of_window_slots``."""
    if pre_len - window < evicted + interval:
        return evicted
    if prefix_sharing:
        threshold = pre_len - round_up(max(window, page), page)
    else:
        threshold = pre_len - window
    new = max(evicted, threshold)
    new = new // page * page
    return new if new > evicted else evicted


def next_change(evicted: int, window: int, page: int, prefix_sharing: bool) -> int:
    """The smallest ``pre_len`` at which ``evicted_after(evicted, pre_len, ..., interval=1)`` frees
    anything: below it every call is a no-op, so the decode loop can skip them exactly."""
    above = (evicted // page + 1) * page  # the first page-aligned mark past ``evicted``
    if prefix_sharing:
        return max(above + round_up(max(window, page), page), evicted + window + 1)
    return above + window
