"""SGLang 0.5.23's scheduler behind the one replay loop's ``EngineRuntime`` protocol.

The pools are the ones ``check --engine sglang-0.5.23`` sizes (``SglangPlan.pool_config``): the
full pool's ``max_total_num_tokens`` and the SWA pool's tokens, in 256-token pages. Token identity
for the radix cache: a trace's prefix-block ids (Mooncake ``hash_ids``, one per 512 prompt tokens)
make equal pages of equal ids (``page_keys``); a page without ids, any page holding output tokens,
and the prompt's partial last page are the request's own.

What the server does before scheduling: ``max_req_len`` = min(context_len - 1, max_total_num_tokens - 1)
and ``max_req_input_len`` = max_req_len - 5 (``managers/tp_worker.py:535-575``); a prompt of
max_req_input_len tokens or more is refused (``managers/utils.py:259-287``); max_new_tokens is clipped to
max_req_len - prompt - 1 and then to max_total_num_tokens - ceil_page(prompt) - page - 1
(``init_req_max_new_tokens``, ``managers/scheduler.py:2693-2735``; ``mem_cache/allocator/base.py:88-105``).
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING, Callable, Hashable

from csa_plan.planner.engines.sglang.scheduler import Decision, Req, SchedulerConfig, SglangScheduler
from csa_plan.planner.replay.protocol import Completion, EngineRuntime, Step

if TYPE_CHECKING:
    from csa_plan.planner.replay.protocol import CompiledReplay, RuntimeTrace

_RID = attrgetter("rid")
POOLS = ("full pages (c4 KV + indexer + c128 KV)", "SWA pages (+ c4 state rows)")


def page_keys(ids, id_block_tokens: int, prompt: int, page: int) -> tuple[Hashable, ...]:
    """Keys of the prompt's full pages that the block ids determine: a page's tokens are fixed by
    the ids of the blocks it overlaps and its offset in the first (equal ids = equal tokens)."""
    if ids is None or len(ids) == 0:
        return ()
    covered = min(prompt, len(ids) * id_block_tokens)
    keys = []
    for j in range(covered // page):
        lo, hi = j * page, (j + 1) * page
        first, last = lo // id_block_tokens, (hi - 1) // id_block_tokens
        keys.append((tuple(int(x) for x in ids[first:last + 1]), lo - first * id_block_tokens))
    return tuple(keys)


class SglangRuntime(EngineRuntime):
    pools = POOLS
    pipeline_depth = 1
    preemption_word = "retract"  # scheduler.py:4493 retract_decode

    def __init__(self, cfg: SchedulerConfig, trace: "RuntimeTrace", label: str,
                 compiled: "Callable[[SglangRuntime], CompiledReplay | None] | None" = None,
                 pools: tuple[str, str] | None = None, drafts: int = 0, acceptance: float = 1.0) -> None:
        self.cfg, self.trace, self.label = cfg, trace, label
        if pools is not None:  # what the two pools hold for this model (V4.1: the kv sources' records and keys)
            self.pools = pools
        # EAGLE (top-k 1): each decode step verifies speculative_num_draft_tokens = drafts + 1 tokens a request and
        # keeps the accepted drafts (planner/replay/draft_acceptance.py: the same integer credits as vLLM's replay)
        self.drafts = drafts
        self.acceptance = acceptance
        self.credit: dict[int, int] = {}
        if drafts:
            from csa_plan.planner.replay.draft_acceptance import milli_table

            self.accept_milli = milli_table(acceptance, drafts)
        self.compiled = compiled  # the compiled twin's provider, handed in by the engine plan
        self.sched = SglangScheduler(cfg)
        self.usable_units = cfg.full_pages + cfg.swa_pages
        self.pool_units = (cfg.full_pages, cfg.swa_pages)
        self.capacity = cfg.full_pages * cfg.page  # max_total_num_tokens
        self.max_req_len = min(cfg.context_len - 1, self.capacity - 1)
        self.max_input = self.max_req_len - 5
        self.retractions = 0
        self.retracted_requests: set[int] = set()
        self.aborted: list[int] = []

    def refuse(self, r: int) -> str | None:
        prompt = int(self.trace.prompt_tokens[r])
        if prompt < 1:  # nothing to prefill: refused before scheduling, never counted as served
            return "an empty prompt (0 tokens): refused up front (SGLang has no prompt token to prefill)"
        if prompt >= self.max_input:
            return (f"prompt of max_req_input_len ({self.max_input:,}) tokens or more: SGLang refuses it "
                    "(\"Input length exceeds the maximum allowed length\")")
        return None

    def add(self, r: int) -> None:
        prompt = int(self.trace.prompt_tokens[r])
        p = self.cfg.page
        max_new = min(int(self.trace.output_tokens[r]), self.max_req_len - prompt - 1)
        max_new = min(max_new, self.capacity - -(-prompt // p) * p - p - 1)
        max_new = max(0, max_new)  # 0 reserves nothing and finishes at its prefill (scheduler.py:2710-2735)
        keys = page_keys(self.trace.ids_of(r), self.trace.id_block_tokens, prompt, self.cfg.page) \
            if self.cfg.radix_cache else ()
        self.sched.add(Req(rid=r, prompt=prompt, max_new=max_new, keys=keys))

    def use_micro_batches(self, count: int, pp_size: int) -> None:
        """``--pp``: SGLang's pipeline micro-batches (``SglangScheduler.use_micro_batches``), scheduled in turn, one
        a call to ``schedule``; the loop applies each one's result one turn before its next turn
        (``PipelineTiming.micro_batch_turns``)."""
        self.sched.use_micro_batches(count, pp_size)
        self.turn = 0

    def schedule(self) -> Step:
        if self.sched.mbs is None:
            d = self.sched.schedule()
        else:  # for mb_id in range(pp_loop_size): every call is the next micro-batch's turn (event_loop_pp :130-131)
            d = self.sched.schedule(self.turn % len(self.sched.mbs))
            self.turn += 1
        s = Step(payload=d)
        if d.kind == "idle":
            return s
        if d.kind == "decode":  # one token each (with drafts: the verified ones), in the running batch's order
            running = self.sched.running
            s.requests = list(map(_RID, running))
            verify = 1 + self.drafts
            s.tokens = [verify] * len(s.requests)
            s.batch.add_decodes(len(running), verify * len(running), sum([r.prompt + r.out for r in running]))
        else:
            s.batch = d.step_batch
            s.requests = [req.rid for req, _n, _c in d.batch]
            s.tokens = [n for _req, n, _c in d.batch]
        s.prefill_tokens = d.prefill_tokens
        s.admitted = d.admitted
        s.preempted = d.retracted
        s.recomputed_tokens = d.recomputed_tokens
        s.prefix_hit_tokens = d.hit_tokens
        s.admission_hit = d.hits
        s.prefix_query_tokens = d.query_tokens
        self.retractions += len(d.retracted)
        self.retracted_requests.update(d.retracted)
        self.aborted += d.aborted
        return s

    def complete(self, step: Step) -> Completion:
        d: Decision = step.payload
        if self.drafts and d.kind == "decode":
            from csa_plan.planner.replay.draft_acceptance import accept

            for req, _n, _c in d.batch:  # each keeps its accepted drafts, at most up to its last token
                taken, self.credit[req.rid] = accept(self.credit.get(req.rid, 0), self.drafts, self.accept_milli)
                taken = min(taken, max(0, req.max_new - req.out - 1))
                if taken:
                    self.sched.advance_accepted(req, taken, d)
        o = self.sched.complete(d)
        return Completion(first_token=o.first_token, finished=o.finished)

    def used_units(self) -> tuple[int, ...]:
        """Pages held, the radix cache's evictable pages not counted — SGLang's own "token usage"
        (``max_total_num_tokens - (available + evictable)``, managers/scheduler_components/pool_stats_observer.py:235-246)."""
        s = self.sched
        return (s.req_full + s.tree.locked, s.req_swa + s.tree.swa_locked)

    def load_tokens(self) -> int:
        """``num_total_tokens`` of the rank's load snapshot (scheduler_components/load_inquirer.py:143-147): KV
        tokens in use, the larger of the full and SWA pools' (pool_stats_observer.py:84-93), plus every
        waiting request's length (``seqlen``: prompt and output so far), what SGLang's ``total_tokens``
        balancer compares."""
        full, swa = self.used_units()
        return max(full, swa) * self.cfg.page + sum(r.fill_len for r in self.sched.waiting)

    def running(self) -> int:
        s = self.sched
        return s.all_running() + s.pending + (1 if s.chunked is not None else 0)

    def waiting(self) -> int:
        return len(self.sched.waiting)

    def stranded(self) -> tuple[int, ...]:
        return tuple(r.rid for r in self.sched.stranded())

    def hold_on_finish(self) -> None:
        """A prefill server (``--disaggregation-mode prefill``): a finished request waits in
        ``disagg_prefill_inflight_queue`` with its pages and request row until its transfer ends."""
        self.sched.held = {}

    def free_held(self, r: int) -> None:
        self.sched.free_held(r)

    def compiled_replay(self) -> "CompiledReplay | None":
        """The compiled loop (``compiled.py``, ``csglang.c``) as the engine plan handed it in, when built and
        every setting is in its range; else None (the loop steps the methods above, its checked twin)."""
        if self.drafts or self.sched.held is not None or self.sched.mbs is not None:  # the compiled twin has no
            # drafts, holds nothing and runs no micro-batches
            return None
        return None if self.compiled is None else self.compiled(self)

    def notes(self) -> tuple[str, ...]:
        notes = [
            f"{self.label}: scheduler stepped as its source does (PrefillAdder with SWAPrefillBudget, new-token "
            f"ratio, FCFS, prefill steps before decode steps, retraction by length); radix cache "
            f"{'on (page-granular, SWA tombstones, LRU)' if self.cfg.radix_cache else 'off (--disable-radix-cache)'}",
            "not modelled: the overlap scheduler's one-step lag, HiCache, priority scheduling, speculative "
            "decoding at run time, mixed prefill/decode chunks (off by default)"
            if not self.drafts else
            f"speculative decoding: EAGLE (top-k 1), {self.drafts + 1} tokens verified a decode step per request, "
            f"each draft accepted at {self.acceptance:g} given the ones before (credits, as vLLM's replay); the "
            "accepted drafts' KV placed after the step (not reserved up front as SGLang's check_decode_mem "
            "does); not modelled: the overlap scheduler's one-step lag, HiCache, priority scheduling, mixed chunks",
        ]
        if self.aborted:
            notes.append(f"{len(self.aborted)} request(s) aborted: out of memory even alone in the decode batch")
        return tuple(notes)
