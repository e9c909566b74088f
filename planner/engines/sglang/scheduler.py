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
from itertools import repeat
from typing import Hashable

from csa_plan.planner.engines.sglang.adder import AddResult, PrefillAdder
from csa_plan.planner.engines.sglang.radix import Node, RadixCache
from csa_plan.planner.engines.sglang.ratio import RatioRule, ratio_after_retract
from csa_plan.planner.engines.sglang.retract import retract
from csa_plan.planner.engines.sglang.window import EVICTION_INTERVAL, evicted_after, next_change
from csa_plan.planner.units import ceil_div
from csa_plan.planner.steptime.model import StepBatch


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


@dataclass(eq=False, slots=True)  # slots: the decode loops read these fields once per request per step
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
    decode_idx: int = 0  # decode_batch_idx; only ">= 1" is read, and the loop stops counting once it is
    retractions: int = 0
    started: bool = False  # scheduled once: its queue wait is over
    done_before: int = 0  # tokens computed before its last retraction (recomputation is up to these)
    swa_mark_for: int = -1  # the swa_from that swa_mark was computed for
    swa_mark: int = 0  # decode evicts only once kv_len reaches this (window.next_change and the interval gate)
    decode_due: int = 0  # the kv_len at which the decode loop must look again (0: at once; see _decode)

    @property
    def fill_len(self) -> int:
        return self.prompt + self.out


@dataclass
class Decision:
    """What one scheduler step runs (``schedule``); ``complete`` applies its model output."""

    kind: str  # "prefill" | "decode" | "idle"
    batch: list[tuple[Req, int, bool]] = field(default_factory=list)  # (request, tokens, chunk continues)
    prefill_tokens: int = 0  # tokens computed by prefill chunks (recomputation included)
    step_batch: StepBatch = field(default_factory=StepBatch)  # a prefill step's batch, for the step time
    admitted: list[int] = field(default_factory=list)  # rids taken from waiting this step
    retracted: list[int] = field(default_factory=list)
    aborted: list[int] = field(default_factory=list)  # the last request OOM even alone (schedule_batch.py:3511-3533)
    hit_tokens: int = 0  # prefix tokens served from the radix cache by this step's admissions
    hits: dict[int, int] = field(default_factory=dict)  # each admission's own (rid -> prefix tokens)
    query_tokens: int = 0  # prompt tokens those admissions looked up
    recomputed_tokens: int = 0  # prefill tokens of retracted requests' earlier progress
    mb: int = 0  # the micro-batch whose turn scheduled it (pipeline micro-batches; else 0)
    alloc_shortfall_pages: int = 0  # pages admission promised that the pools could not give (stays 0)


@dataclass
class Outcome:
    first_token: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)


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
        # a disaggregated prefill server (hold_on_finish): finished requests in disagg_prefill_inflight_queue, their
        # pages and req_to_token row kept until the transfer's KVPoll.Success (disaggregation/prefill.py:1151-1228)
        self.held: dict[int, Req] | None = None
        # pipeline micro-batches (``use_micro_batches``; None: one running batch, pp 1): each its own running batch
        self.mbs: list[list[Req]] | None = None
        self.mb = 0  # the micro-batch being scheduled (its running batch is ``running``)
        self.mb_size = cfg.max_running_requests  # pp_max_micro_batch_size (pp 1: max_running_requests)
        self.pending = 0  # requests of prefill batches in flight that finish their prompt (they hold rows)
        self.stash: Req | None = None  # a chunk scheduled last turn, checkpointed at the next turn (micro-batches)

    def use_micro_batches(self, count: int, pp_size: int) -> None:
        """SGLang's ``event_loop_pp`` (``srt/managers/scheduler_pp_mixin.py:104-215``): ``count`` =
        ``pp_loop_size`` = pp_size + pp_async_batch_depth (``init_pp_loop_state`` :561-570; the depth defaults
        to 0, ``arg_groups/fields/parallel.py:69-72``) micro-batches, each its own running batch
        (``running_mbs[mb_id]``, :131-153), scheduled in turn by ``get_next_batch_to_run(running_batch=...)``
        against the one shared pool, waiting queue, radix cache and chunked request; a micro-batch takes at most
        ``pp_max_micro_batch_size`` = max(max_running_requests // pp_size, 1) requests (``managers/scheduler.py:
        1237-1243``, ``get_num_allocatable_reqs`` :4034). Every stage's scheduler process makes the same
        decisions, so one scheduler stands for all."""
        self.mbs = [[] for _ in range(count)]
        self.mb = 0
        self.running = self.mbs[0]
        self.mb_size = max(self.cfg.max_running_requests // pp_size, 1)

    def all_running(self) -> int:
        """Running requests in every micro-batch (one running batch without micro-batches)."""
        return len(self.running) if self.mbs is None else sum(map(len, self.mbs))

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
        return not self.waiting and not self.all_running() and self.chunked is None and not self.pending

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

    def _checkpoint_unfinished(self, req: Req) -> None:
        """An unfinished request's checkpoint first frees its SWA out of the window with
        pre_len = len(key) - 1 (``unified_radix_cache.py:1340-1366``, SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS
        on by default, ``environ.py:728``), then inserts."""
        self._evict_window(req, req.kv_len - 1, 1)
        self._checkpoint(req, req.kv_len)

    def _checkpoint(self, req: Req, upto: int) -> None:
        """The tree takes the request's pages below ``upto`` (page-floored): ``checkpoint_kv_cache`` after
        every prefill chunk (``mem_cache/common.py:271-280``, ``batch_result_processor.py:393-394``) and
        ``release_kv_cache`` at the end (common.py:400-445). Its full pages there become tree pages the
        request keeps locked (its ``cache_protected_len``); its live SWA pages there become the tree's
        (those are what a later match of this prefix needs, swa.py:357-377) and it no longer frees them
        (``swa_dead_lo``, schedule_batch.py:994-1000)."""
        p = self.cfg.page
        pages = upto // p
        shared = req.prefix_len // p
        if pages <= shared:
            return
        _got, node = self.tree.insert(self._keys(req, pages), shared, req.swa_from // p)
        moved_full = pages - shared
        moved_swa = max(0, pages - max(shared, req.swa_from // p))
        req.own_full -= moved_full
        self.req_full -= moved_full
        req.own_swa -= moved_swa
        self.req_swa -= moved_swa
        self.tree.lock_path(node)
        if req.node is not None:
            self.tree.unlock_path(req.node)
        req.node = node
        req.prefix_len = pages * p
        req.swa_from = max(req.swa_from, req.prefix_len)

    def _release(self, req: Req, insert: bool) -> None:
        """Free a request's own pages; a finished one checkpoints into the tree first."""
        if insert and self.cfg.radix_cache:
            self._checkpoint(req, req.kv_len)
        self.req_full -= req.own_full
        self.req_swa -= req.own_swa
        if req.node is not None:
            self.tree.unlock_path(req.node)
            req.node = None
        req.own_full = req.own_swa = 0

    def _finish(self, req: Req) -> None:
        """A finished request's release, or (a disaggregated prefill server) its place in the inflight queue, whose
        ``release_kv_cache(req, tree_cache, checkpoint=True)`` waits for the transfer (``free_held``)."""
        if self.held is None:
            self._release(req, insert=True)
        else:
            self.held[req.rid] = req

    def free_held(self, rid: int) -> None:
        self._release(self.held.pop(rid), insert=True)

    def _evict_window(self, req: Req, pre_len: int, interval: int) -> None:
        new = evicted_after(req.swa_from, pre_len, self.cfg.window, self.cfg.page, self.cfg.radix_cache, interval)
        if new > req.swa_from:
            freed = min((new - req.swa_from) // self.cfg.page, req.own_swa)
            req.own_swa -= freed
            self.req_swa -= freed
            req.swa_from = new

    # -- one step ---------------------------------------------------------------------------------

    def schedule(self, mb: int = 0) -> Decision:
        """get_next_batch_to_run: a prefill batch if the adder admits anything, else a decode step. With
        micro-batches, micro-batch ``mb``'s turn (``event_loop_pp`` :131-153): its own running batch decodes, or
        a prefill batch of new admissions runs in its place and joins it when its result is processed."""
        if self.mbs is None:
            d = self._prefill()
            if d is not None:
                return d
            if self.running:
                return self._decode()
            return Decision("idle")
        self.mb = mb
        self.running = self.mbs[mb]
        if self.stash is not None:  # stash_chunked_request at the next get_next_batch_to_run (scheduler.py:3911-3920)
            if self.cfg.radix_cache:
                self._checkpoint_unfinished(self.stash)
            self.stash = None
        d = self._prefill()
        if d is None:
            d = self._decode() if self.running else Decision("idle")
        else:  # the chunked request goes on in the next turn's micro-batch, before this chunk's result is back
            self.chunked = next((req for req, _n, continues in d.batch if continues), None)
            self.stash = self.chunked
            self.pending += sum(1 for _req, _n, continues in d.batch if not continues)
        d.mb = mb
        self.mbs[mb] = self.running
        return d

    def complete(self, d: Decision) -> Outcome:
        """The fabricated model output: one sampled token per request that finished its prompt or decoded."""
        out = Outcome()
        mbs = self.mbs
        if mbs is not None:  # the micro-batch's result, processed one turn before its next turn (:188-204)
            self.running = mbs[d.mb]
        if d.kind == "prefill":
            new_chunked = None
            for req, _n, continues in d.batch:
                if continues:
                    if mbs is None:
                        if self.cfg.radix_cache:
                            self._checkpoint_unfinished(req)
                        new_chunked = req
                    continue
                if mbs is not None:
                    self.pending -= 1
                req.out += 1
                if req.out == 1:
                    out.first_token.append(req.rid)
                req.decode_idx = req.decode_due = 0
                if req.out >= req.max_new:
                    self._finish(req)
                    out.finished.append(req.rid)
                else:
                    if self.cfg.radix_cache:
                        self._checkpoint_unfinished(req)
                    self.running.append(req)  # merge_batch (scheduler.py:3955-3966)
            if mbs is None:
                self.chunked = new_chunked
        elif d.kind == "decode":
            done: list[Req] = []
            for req in self.running:
                req.out = n = req.out + 1
                if n >= req.max_new:
                    done.append(req)
            if done:  # rare: most steps finish nobody, and then the batch stays as it is
                for req in done:
                    self._finish(req)
                    out.finished.append(req.rid)
                self.running = [r for r in self.running if r.out < r.max_new]
        if mbs is not None:
            mbs[d.mb] = self.running
        return out

    def stranded(self) -> list[Req]:
        """Nothing running, nothing chunked, and the adder admits nobody: nothing will ever change."""
        return list(self.waiting) if not self.all_running() and self.chunked is None and not self.pending else []

    def _prefill(self) -> Decision | None:
        cfg = self.cfg
        if not self.waiting and self.chunked is None:
            return None
        adder = PrefillAdder(self, cfg.page, cfg.window, self.ratio, cfg.max_prefill_tokens,
                             cfg.chunked_prefill_size, (), [r.max_new - r.out for r in self.running])
        d = Decision("prefill")
        batch = d.batch
        if self.chunked is not None:
            req = self.chunked
            n = adder.add_chunked(req.kv_len, req.fill_len, req.max_new, req.out)
            if n is not None:
                batch.append((req, n, req.kv_len + n < req.fill_len))
        taken: set[int] = set()
        holds_row = 1 if self.chunked is not None else 0
        for req in self.waiting:
            if adder.budget_state() is AddResult.OTHER:
                break
            running_bs = len(self.running)  # this micro-batch's
            held = 1 if batch and batch[0][0] is self.chunked else 0
            in_use = running_bs if self.mbs is None else self.all_running() + self.pending  # rows of every micro-batch
            rows = cfg.max_running_requests - in_use - holds_row + held - (len(self.held) if self.held else 0)
            allocatable = min(self.mb_size - running_bs, rows)  # inflight requests keep their rows
            if len(batch) >= allocatable:  # get_num_allocatable_reqs (scheduler.py:4024-4050)
                break
            limit = (req.fill_len - 1) // cfg.page
            node, pages = self.tree.match(self._keys(req, limit), limit) if cfg.radix_cache else (None, 0)
            if pages:
                self.tree.lock_path(node)  # the temporary pin (schedule_policy.py:1225-1239,1428)
            adm = adder.select(pages * cfg.page, req.fill_len, req.max_new, req.out)
            if isinstance(adm, AddResult):
                if pages:
                    self.tree.unlock_path(node)
                break
            req.node = node if pages else None
            req.prefix_len = req.kv_len = req.swa_from = adm.prefix_len
            res = adder.commit(adm)
            batch.append((req, adm.extend_len, adm.is_chunked))
            taken.add(id(req))
            d.hit_tokens += adm.prefix_len
            d.hits[req.rid] = adm.prefix_len
            d.query_tokens += req.fill_len
            if not req.started:
                req.started = True
            d.admitted.append(req.rid)
            if res is not AddResult.CONTINUE:
                break
        if not batch:
            return None
        if taken:
            self.waiting = [r for r in self.waiting if id(r) not in taken]
        for req, n, _continues in batch:
            if not cfg.radix_cache:  # maybe_evict_swa at the extend's allocation (schedule_batch.py:4105-4122)
                self._evict_window(req, req.kv_len, 1)
            end = req.kv_len + n
            pages = ceil_div(end, cfg.page) - ceil_div(req.kv_len, cfg.page)
            d.alloc_shortfall_pages += self._alloc(pages, pages)
            req.own_full += pages
            req.own_swa += pages
            if req.done_before > req.kv_len:
                d.recomputed_tokens += min(end, req.done_before) - req.kv_len
            d.step_batch.add_prefill(req.kv_len, n)
            req.kv_len = end
            d.prefill_tokens += n
        return d

    def _decode_need(self, reqs: list[Req]) -> int:
        p = self.cfg.page
        return [r.kv_len % p for r in reqs].count(0)

    def _fits(self, reqs: list[Req]) -> bool:
        """check_decode_mem (schedule_batch.py:3432-3449, allocator/base.py:171-185, swa.py:210-220)."""
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

    def _decode_events(self, req: Req, kv: int, d: Decision) -> None:
        """One request's decode step at ``kv_len`` = ``kv`` when something may happen: the SWA freeing
        past its mark, a new page at a page boundary. It then sets ``decode_due``, the next length at which
        either can: the pages are the running request's alone (only this loop moves its kv_len and swa_from
        while it runs; joining and retraction reset ``decode_due``), so the steps before it only count."""
        cfg = self.cfg
        page, window, sharing = cfg.page, cfg.window, cfg.radix_cache
        if req.swa_mark_for != req.swa_from:  # the gate (schedule_batch.py:4063-4066) and the first freeing length
            req.swa_mark_for = req.swa_from
            req.swa_mark = max(req.swa_from + window + EVICTION_INTERVAL,
                               next_change(req.swa_from, window, page, sharing))
        if kv >= req.swa_mark and req.decode_idx >= 1:
            self._evict_window(req, kv, 1)
            if req.swa_mark_for != req.swa_from:
                req.swa_mark_for = req.swa_from
                req.swa_mark = max(req.swa_from + window + EVICTION_INTERVAL,
                                   next_change(req.swa_from, window, page, sharing))
        if kv % page == 0:
            d.alloc_shortfall_pages += self._alloc(1, 1)
            req.own_full += 1
            req.own_swa += 1
        req.decode_idx += 1
        req.decode_due = min((kv // page + 1) * page, req.swa_mark)

    def advance_accepted(self, req: Req, n: int, d: Decision) -> None:
        """Speculative decoding (``SglangRuntime`` with drafts): ``n`` accepted draft tokens of ``req`` join
        its KV after the verify step, position by position as ``_decode`` places one (the same page and
        window events); its output grows by ``n`` before ``complete`` adds the sampled token."""
        for _ in range(n):
            kv = req.kv_len
            if kv >= req.decode_due:
                self._decode_events(req, kv, d)
            req.kv_len = kv + 1
        req.out += n

    def _decode(self) -> Decision:
        d = Decision("decode")
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
                d.aborted.append(batch[last].rid)
            for i in gone:
                r = batch[i]
                r.retractions += 1
                r.done_before = max(r.done_before, r.kv_len)
                r.prefix_len = r.kv_len = r.swa_from = r.decode_idx = r.decode_due = 0
                d.retracted.append(r.rid)
                self.waiting.append(r)  # the back of the queue (scheduler.py:3493)
            batch = [batch[i] for i in kept]  # filter_batch(keep_indices=...) keeps this order
            self.running = batch
            self.ratio = ratio_after_retract([(r.out, r.max_new) for r in batch])
        else:
            self.ratio = self.rule.decayed(self.ratio)
        for req in batch:
            kv = req.kv_len
            if kv >= req.decode_due:
                self._decode_events(req, kv, d)
            req.kv_len = kv + 1
        n = len(batch)
        d.batch = list(zip(batch, repeat(1, n), repeat(False, n)))
        return d
