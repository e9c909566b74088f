"""One SGLang 0.5.23 scheduler over DeepSeek-V4's two page pools, stepped by the replay loop.

``get_next_batch_to_run`` (``srt/managers/scheduler.py:3894-4050``): the last prefill's finished
requests join the running batch; a prefill batch is built if the adder admits anything
(``_get_new_batch_prefill_raw``, 4079-4457: the continuing chunk first, then the waiting queue in
FCFS order — ``--schedule-policy fcfs``, ``arg_groups/fields/schedule.py:86-102`` — until a
request does not fit or ``--max-running-requests`` is reached) and it *runs instead of* a decode
step (3999-4001; mixed chunks are off, ``enable_mixed_chunk`` False, schedule.py:208-211);
otherwise the running batch decodes one token each (``update_running_batch``, 4459-4547), after
retracting (``retract.py``) when the next token's pages do not fit, or decaying the ratio.

The pools: full pages (c4 KV + indexer + c128 KV, one per 256 tokens of a request) and SWA pages
(the window's pages, freed as the request advances, ``window.py``); both page counts come from the
start-up sizing (``SglangPlan.pool_config``). A page allocation that finds its pool short evicts
unreferenced radix-cache pages first (``allocator/swa.py:210-220``).

What is not modelled (said in the report): the overlap scheduler's one-step lag, priority
scheduling and preemption, HiCache, speculative decoding, LoRA, the c128 state slots (fixed at
start-up, one per request slot: they bound nothing beyond --max-running-requests).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

from csa_plan.planner.engines.sglang_runtime.adder import AddResult, PrefillAdder
from csa_plan.planner.engines.sglang_runtime.radix import Node, RadixCache
from csa_plan.planner.engines.sglang_runtime.ratio import RatioRule, ratio_after_retract
from csa_plan.planner.engines.sglang_runtime.retract import retract
from csa_plan.planner.engines.sglang_runtime.window import EVICTION_INTERVAL, evicted_after
from csa_plan.planner.units import ceil_div


@dataclass(frozen=True)
class SchedulerConfig:
    full_pages: int  # max_total_num_tokens // page
    swa_pages: int  # the SWA pool's tokens // page
    page: int = 256
    window: int = 128
    max_running_requests: int = 256
    chunked_prefill_size: int = 8192
    max_prefill_tokens: int = 16384
    context_len: int = 1 << 20
    radix_cache: bool = True  # --disable-radix-cache turns it off
    schedule_conservativeness: float = 1.0


@dataclass(eq=False)
class Req:
    rid: int
    prompt: int
    max_new: int
    keys: tuple  # page keys of the prompt's shareable full pages
    out: int = 0  # decoded tokens (output_ids)
    prefix_len: int = 0  # tokens matched in the radix cache at this admission
    node: Node | None = None  # the locked prefix node
    kv_len: int = 0  # tokens whose KV is allocated
    own_full: int = 0  # full pages the request owns (beyond its shared prefix)
    swa_from: int = 0  # swa_evicted_seqlen: tokens below hold no SWA of the request's own
    own_swa: int = 0
    decode_idx: int = 0
    retractions: int = 0
    recomputed: int = 0

    @property
    def fill_len(self) -> int:
        return self.prompt + self.out


@dataclass
class Step:
    """What one scheduler step ran and what came of it."""

    kind: str  # "prefill" | "decode" | "idle"
    prefill_tokens: int = 0  # tokens computed by prefill chunks (recomputation included)
    decode_tokens: int = 0
    first_token: list[int] = field(default_factory=list)  # rids that got their first output token
    finished: list[int] = field(default_factory=list)
    retracted: list[int] = field(default_factory=list)
    aborted: list[int] = field(default_factory=list)
    admitted: list[int] = field(default_factory=list)  # rids scheduled for the first time this step
    hit_tokens: int = 0  # prefix tokens served from the radix cache by this step's admissions
    recomputed_tokens: int = 0  # prefill tokens of retracted requests' re-admissions
    alloc_shortfall_pages: int = 0  # pages the admission promised that the pools could not give (0)


class SglangScheduler:
    def __init__(self, cfg: SchedulerConfig) -> None:
        self.cfg = cfg
        self.tree = RadixCache(cfg.window, cfg.page)
        self.rule = RatioRule.from_config(cfg.schedule_conservativeness)
        self.ratio = self.rule.init
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.chunked: Req | None = None
        self.req_full = 0  # full pages owned by requests
        self.req_swa = 0
        self.size_swa = cfg.swa_pages * cfg.page

    # -- pool views (tokens, as the adder reads them) -------------------------------------------

    def full_available(self) -> int:
        return (self.cfg.full_pages - self.req_full - self.tree.nodes) * self.cfg.page

    def swa_available(self) -> int:
        return (self.cfg.swa_pages - self.req_swa - self.tree.swa_nodes) * self.cfg.page

    def full_evictable(self) -> int:
        return self.tree.evictable_full_pages * self.cfg.page

    def swa_evictable(self) -> int:
        return self.tree.evictable_swa_pages * self.cfg.page

    def full_in_use(self) -> int:
        return self.req_full + self.tree.nodes

    def swa_in_use(self) -> int:
        return self.req_swa + self.tree.swa_nodes

    # -- requests ---------------------------------------------------------------------------------

    def add(self, req: Req) -> None:
        self.waiting.append(req)

    def idle(self) -> bool:
        return not self.waiting and not self.running and self.chunked is None

    def _keys(self, req: Req, pages: int) -> list[Hashable]:
        keys = list(req.keys[:pages])
        keys += [(-1, req.rid, j) for j in range(len(keys), pages)]
        return keys

    # -- allocation -------------------------------------------------------------------------------

    def _alloc(self, full: int, swa: int) -> int:
        """Take pages, evicting the tree when short (allocator/swa.py:210-220); the shortfall left."""
        p = self.cfg.page
        short_full = full - self.full_available() // p
        short_swa = swa - self.swa_available() // p
        if self.cfg.radix_cache and (short_full > 0 or short_swa > 0):
            if short_full > 0:
                self.tree.evict_full(short_full)
            short_swa = swa - self.swa_available() // p
            if short_swa > 0:
                self.tree.evict_swa(short_swa)
        shortfall = max(0, full - self.full_available() // p) + max(0, swa - self.swa_available() // p)
        self.req_full += full
        self.req_swa += swa
        return shortfall

    def _release(self, req: Req, insert: bool) -> None:
        """Free a request's pages; a finished request's full pages go into the tree (cache_finished_req)."""
        if insert and self.cfg.radix_cache:
            pages = req.kv_len // self.cfg.page
            keys = self._keys(req, pages)
            shared = req.prefix_len // self.cfg.page
            got = self.tree.insert(keys, shared, req.swa_from // self.cfg.page)
            self.req_full -= req.own_full  # all of it: the tree took new_full, the rest is freed
            self.req_swa -= req.own_swa
        else:
            self.req_full -= req.own_full
            self.req_swa -= req.own_swa
        if req.node is not None:
            self.tree.unlock_path(req.node)
            req.node = None
        req.own_full = req.own_swa = 0

    def _evict_window(self, req: Req, pre_len: int, interval: int) -> None:
        new = evicted_after(req.swa_from, pre_len, self.cfg.window, self.cfg.page, self.cfg.radix_cache, interval)
        if new > req.swa_from:
            freed = min((new - req.swa_from) // self.cfg.page, req.own_swa)
            req.own_swa -= freed
            self.req_swa -= freed
            req.swa_from = new

    # -- one step ---------------------------------------------------------------------------------

    def step(self) -> Step:
        st = self._prefill()
        if st is not None:
            return st
        if self.running:
            return self._decode()
        return Step("idle")

    def _prefill(self) -> Step | None:
        cfg = self.cfg
        if not self.waiting and self.chunked is None:
            return None
        adder = PrefillAdder(self, cfg.page, cfg.window, self.ratio, cfg.max_prefill_tokens,
                             cfg.chunked_prefill_size, [(r.max_new, r.out) for r in self.running])
        can_run: list[tuple[Req, int, bool]] = []  # (request, extend tokens, chunk continues)
        st = Step("prefill")
        if self.chunked is not None:
            req = self.chunked
            n = adder.add_chunked(req.kv_len, req.fill_len, req.max_new, req.out)
            if n is not None:
                can_run.append((req, n, req.kv_len + n < req.fill_len))
        taken: set[int] = set()
        holds_row = 1 if self.chunked is not None else 0
        for req in self.waiting:
            if adder.budget_state() is AddResult.OTHER:
                break
            running_bs = len(self.running)
            held = 1 if can_run and can_run[0][0] is self.chunked else 0
            allocatable = min(cfg.max_running_requests - running_bs,
                              cfg.max_running_requests - running_bs - holds_row + held)
            if len(can_run) >= allocatable:
                break
            node, pages = (self.tree.match(req.keys, (req.fill_len - 1) // cfg.page) if cfg.radix_cache
                           else (None, 0))
            if node is not None:
                self.tree.lock_path(node)  # the temporary pin (schedule_policy.py:1225-1239,1428)
            adm = adder.select(pages * cfg.page, req.fill_len, req.max_new, req.out)
            if isinstance(adm, AddResult):
                if node is not None:
                    self.tree.unlock_path(node)
                break
            req.node = node if pages else None
            if node is not None and not pages:
                self.tree.unlock_path(node)
            req.prefix_len = adm.prefix_len
            req.kv_len = adm.prefix_len
            req.swa_from = adm.prefix_len
            res = adder.commit(adm)
            can_run.append((req, adm.extend_len, adm.is_chunked))
            taken.add(id(req))
            st.hit_tokens += adm.prefix_len
            if req.retractions:
                st.recomputed_tokens += adm.extend_len
            if res is not AddResult.CONTINUE:
                break
        if not can_run:
            return None
        if taken:
            self.waiting = [r for r in self.waiting if id(r) not in taken]
        new_chunked = None
        for req, n, continues in can_run:
            end = req.kv_len + n
            pages = ceil_div(end, cfg.page) - ceil_div(req.kv_len, cfg.page)
            st.alloc_shortfall_pages += self._alloc(pages, pages)
            req.own_full += pages
            req.own_swa += pages
            if req is not self.chunked and req.retractions == 0 and req.out == 0 and req.recomputed == 0:
                st.admitted.append(req.rid)
            if req.retractions:
                req.recomputed += n
            req.kv_len = end
            st.prefill_tokens += n
            self._evict_window(req, end, 1)
            if continues:
                new_chunked = req
                continue
            req.out += 1
            if req.out == 1:
                st.first_token.append(req.rid)
            req.decode_idx = 0
            if req.out >= req.max_new:
                self._release(req, insert=True)
                st.finished.append(req.rid)
            else:
                self.running.append(req)
        self.chunked = new_chunked
        return st

    def _decode_need(self, reqs: list[Req]) -> int:
        return sum(1 for r in reqs if r.kv_len % self.cfg.page == 0)

    def _fits(self, reqs: list[Req]) -> bool:
        """check_decode_mem (schedule_batch.py:3432-3449, allocator/base.py:171-185)."""
        p = self.cfg.page
        need = self._decode_need(reqs) * p
        if self.cfg.radix_cache:
            short_full = max(0, need - self.full_available())
            short_swa = max(0, need - self.swa_available())
            if short_full:
                self.tree.evict_full(ceil_div(short_full, p))
            short_swa = max(0, need - self.swa_available())
            if short_swa:
                self.tree.evict_swa(ceil_div(short_swa, p))
        return min(self.full_available(), self.swa_available()) >= need

    def _decode(self) -> Step:
        st = Step("decode")
        batch = self.running
        if not self._fits(batch):
            def fits(kept: list[int]) -> bool:
                return self._fits([batch[i] for i in kept])

            def release(i: int) -> None:
                self._release(batch[i], insert=False)

            kept, gone = retract([r.out for r in batch], [r.prompt for r in batch], fits, release)
            if len(kept) <= 1 and not fits(kept):
                last = kept.pop()
                self._release(batch[last], insert=False)
                st.aborted.append(batch[last].rid)
            for i in gone:
                r = batch[i]
                r.retractions += 1
                r.prefix_len = r.kv_len = r.swa_from = r.decode_idx = 0
                st.retracted.append(r.rid)
                self.waiting.append(r)
            batch = [batch[i] for i in sorted(kept)]
            self.running = batch
            self.ratio = ratio_after_retract([(r.out, r.max_new) for r in batch])
        else:
            self.ratio = self.rule.decayed(self.ratio)
        keep: list[Req] = []
        for req in batch:
            if req.decode_idx >= 1 and req.kv_len - self.cfg.window >= req.swa_from + EVICTION_INTERVAL:
                self._evict_window(req, req.kv_len, 1)
            if req.kv_len % self.cfg.page == 0:
                st.alloc_shortfall_pages += self._alloc(1, 1)
                req.own_full += 1
                req.own_swa += 1
            req.kv_len += 1
            req.out += 1
            req.decode_idx += 1
            st.decode_tokens += 1
            if req.out >= req.max_new:
                self._release(req, insert=True)
                st.finished.append(req.rid)
            else:
                keep.append(req)
        self.running = keep
        return st
