"""``PrefillAdder`` with ``SWAPrefillBudget``: which waiting requests one prefill pass admits.

sglang-0.5.23, DeepSeek-V4 on CUDA (paged SWA pool, no per-request SWA ring, no Mamba, no HiCache,
not AMD): the allocator is ``SWATokenToKVPoolAllocator`` and its budget ``SWAPrefillBudget``
(``srt/mem_cache/allocator/swa.py:173-178``). The rules kept here:

* ``remaining_total`` = full available + full evictable - total_offset (``mem_cache/prefill_budget.py:
  98-106,181-189``); total_offset starts at the sum over running requests of
  min(max_new - decoded, CLIP 4096) x new_token_ratio (``managers/schedule_policy.py:689-696,785-795``);
* ``remaining_swa`` = SWA available + SWA evictable - swa_offset (``prefill_budget.py:191-194``);
* ``add_one_req`` (``schedule_policy.py:1395-1427``): total = uncached prompt + min(max_new - decoded,
  4096) + one page; ``check_prefill`` (``prefill_budget.py:225-257``) refuses unless total <
  remaining_total and the SWA estimate (``estimate_swa_kv_tokens``, 27-57) < remaining_swa — a
  request whose SWA estimate could never fit the pool gets its chunk capped instead (241-257);
* a request longer than the chunk budget is chunked at a page boundary (``_select_prefill_admission``,
  1592-1683) and reserves no output until its last chunk;
* ``reserve`` (``prefill_budget.py:143-154,297-311``): total_offset += ceil_page(extend) + page +
  max_new, current_offset += ceil_page(extend) + page, swa_offset += the SWA estimate; the chunk
  and input budgets lose ceil_page(extend) (``_update_prefill_budget``, 895-952);
* ``budget_state`` (874-893): NO_TOKEN when remaining_total, remaining_current or remaining_swa is
  not positive; OTHER when max_prefill_tokens (16,384, ``arg_groups/fields/schedule.py:71-81``)
  or the chunk budget is spent;
* the continuing chunked request first (``add_chunked_req``, 1140-1223): its chunk is min(chunk
  budget, remaining_total, remaining_swa - page), not page-floored; no room, no progress this pass.

Tokens everywhere, as SGLang counts them (pages x 256).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

CLIP_MAX_NEW_TOKENS = 4096  # schedule_policy.py:89-91


class AddResult(str, Enum):
    CONTINUE = "continue"
    NO_TOKEN = "no_token"
    OTHER = "other"


class Pools(Protocol):
    """What the budget reads from the allocator and the tree, in tokens."""

    def full_available(self) -> int: ...

    def full_evictable(self) -> int: ...

    def swa_available(self) -> int: ...

    def swa_evictable(self) -> int: ...

    size_swa: int


def estimate_swa_kv_tokens(extend: int, max_new: int, window: int, page: int,
                           allocation_limit: int | None = None) -> int:
    """prefill_budget.py:27-57 (no host hit)."""
    allocated = extend if allocation_limit is None else min(extend, allocation_limit)
    tail = max(allocated - window, 0)
    return tail + min(extend + max_new, window) + page


def running_offset(remaining: list[int], new_token_ratio: float) -> float:
    """The running batch's reservation (schedule_policy.py:689-696,785-795): the sum, in the batch's order, of
    min(remaining, CLIP_MAX_NEW_TOKENS) x ratio (a conditional rather than ``min``: the same value, faster)."""
    clip = CLIP_MAX_NEW_TOKENS
    return sum([(r if r < clip else clip) * new_token_ratio for r in remaining])


def ceil_paged(tokens: int, page: int) -> int:
    return -(-tokens // page) * page


@dataclass(frozen=True)
class Admission:
    prefix_len: int
    extend_len: int
    max_new_tokens: int  # reserved: 0 for a chunk that does not finish the prompt
    is_chunked: bool


class PrefillAdder:
    def __init__(self, pools: Pools, page: int, window: int, new_token_ratio: float,
                 max_prefill_tokens: int, chunked_prefill_size: int,
                 running: list[tuple[int, int]], remaining: list[int] | None = None) -> None:
        """``running``: (max_new_tokens, decoded) of every request in the running batch; or, instead,
        ``remaining``: max_new_tokens - decoded of each (the same offset, without the pairs)."""
        self.pools, self.page, self.window = pools, page, window
        self.new_token_ratio = new_token_ratio
        self.rem_input_tokens = max_prefill_tokens
        self.rem_chunk_tokens = chunked_prefill_size
        self.total_offset: float = 0
        self.current_offset: float = 0
        self.swa_offset: float = 0
        if remaining is None:
            remaining = [max_new - out for max_new, out in running]
        self.total_offset += running_offset(remaining, new_token_ratio)

    # -- budget views ---------------------------------------------------------------------------

    def _avail(self) -> int:
        return self.pools.full_available() + self.pools.full_evictable()

    @property
    def remaining_total(self) -> float:
        return self._avail() - self.total_offset

    @property
    def remaining_current(self) -> float:
        return self._avail() - self.current_offset

    @property
    def remaining_swa(self) -> float:
        return self.pools.swa_available() + self.pools.swa_evictable() - self.swa_offset

    def swa_tokens(self, extend: int, max_new: int, chunk_limit: int | None = None) -> int:
        return estimate_swa_kv_tokens(extend, max_new, self.window, self.page, chunk_limit)

    def budget_state(self) -> AddResult:
        if not (self.remaining_total > 0 and self.remaining_current > 0 and self.remaining_swa > 0):
            return AddResult.NO_TOKEN
        if self.rem_input_tokens <= 0 or self.rem_chunk_tokens <= 0:
            return AddResult.OTHER
        return AddResult.CONTINUE

    def _reserve(self, extend: int, max_new: int, chunk_limit: int | None) -> None:
        ext = ceil_paged(extend, self.page)
        immediate = ext + self.page
        self.total_offset += immediate + max_new
        self.current_offset += immediate
        self.swa_offset += self.swa_tokens(ceil_paged(ext, self.page), max_new, chunk_limit)
        self.rem_input_tokens -= ext
        self.rem_chunk_tokens -= ext

    # -- the continuing chunk -------------------------------------------------------------------------

    def add_chunked(self, prefix_len: int, fill_len: int, max_new: int, decoded: int) -> int | None:
        """Tokens of the continuing chunk this pass (None: no room, it waits)."""
        available = min(self.rem_chunk_tokens, int(self.remaining_total))
        available = min(available, int(self.remaining_swa) - self.page)
        if available <= 0:
            return None
        extend = fill_len - prefix_len
        truncated = extend > available
        new_len = min(extend, available)
        chunk_limit = self.rem_chunk_tokens
        self._reserve(new_len, 0 if truncated else min(max_new, CLIP_MAX_NEW_TOKENS), chunk_limit)
        return new_len

    # -- a waiting request ----------------------------------------------------------------------------

    def select(self, prefix_len: int, fill_len: int, max_new: int, decoded: int) -> Admission | AddResult:
        """_select_prefill_admission, with the prefix already pinned by the caller."""
        remaining_new = min(max(max_new - decoded, 0), CLIP_MAX_NEW_TOKENS)
        extend = fill_len - prefix_len
        total = extend + remaining_new + self.page
        input_tokens = ceil_paged(extend, self.page)
        chunk_limit = self.rem_chunk_tokens
        if total >= self.remaining_total:
            return AddResult.NO_TOKEN
        needed = self.swa_tokens(ceil_paged(extend, self.page), remaining_new, chunk_limit)
        if not needed < self.remaining_swa:
            if needed < self.pools.size_swa:  # transient pressure: wait
                return AddResult.NO_TOKEN
            headroom = self.swa_tokens(0, remaining_new)
            cap = max(0, (int(self.remaining_swa) - headroom) // self.page * self.page)
            if cap <= 0:
                return AddResult.NO_TOKEN
            chunk_limit = min(chunk_limit, cap)
        max_new_reserved = min(max_new, CLIP_MAX_NEW_TOKENS)
        if input_tokens > chunk_limit:
            extend = chunk_limit // self.page * self.page
            end = (prefix_len + extend) // self.page * self.page
            extend = end - prefix_len
            if extend <= 0:
                return AddResult.OTHER
            return Admission(prefix_len, extend, 0, True)
        return Admission(prefix_len, extend, max_new_reserved, False)

    def commit(self, admission: Admission) -> AddResult:
        self._reserve(admission.extend_len, admission.max_new_tokens, self.rem_chunk_tokens)
        return self.budget_state()
