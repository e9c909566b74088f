"""Decode retraction (sglang-0.5.23 ``srt/managers/schedule_batch.py:3451-3579``).

``_get_decode_retraction_order`` (3543-3579, ``--retraction-policy length``, the default,
``arg_groups/fields/schedule.py:126-138``): requests sorted by (decoded tokens, -prompt tokens)
descending; ``retract_decode`` pops from the end — the request with the fewest decoded tokens goes
first, and among equals the longest prompt — until the next decode step fits, always keeping one
(3457-3466). The retracted go to the back of the waiting queue (``managers/scheduler.py:4538-4539``,
``_add_request_to_queue`` appends, 3493) and recompute their prompt plus what they had decoded.
"""

from __future__ import annotations

from typing import Callable, Sequence


def retraction_order(decoded: Sequence[int], prompt: Sequence[int]) -> list[int]:
    """Indices from most to least preferred to keep (the loop pops from the end)."""
    order = list(range(len(decoded)))
    order.sort(key=lambda i: (decoded[i], -prompt[i]), reverse=True)
    return order


def retract(decoded: Sequence[int], prompt: Sequence[int], fits: Callable[[list[int]], bool],
            release: Callable[[int], None]) -> tuple[list[int], list[int]]:
    """Run the retraction loop: (kept indices in order, retracted indices in retraction order).

    ``fits(kept)`` is check_decode_mem over the kept requests; ``release(i)`` frees request i's pages.
    """
    order = retraction_order(decoded, prompt)
    retracted: list[int] = []
    first = True
    while first or not fits(order):
        if len(order) == 1:
            break
        first = False
        i = order.pop()
        release(i)
        retracted.append(i)
    return order, retracted
