"""vLLM 0.33.0's scheduler for DeepSeek-V4, stepped by the one replay loop (``planner/replay``).

File:line pointers into vllm-0.33.0 ``v1/core/sched/scheduler.py`` unless named otherwise.
The paths ``vllm serve`` takes for DeepSeek-V4 are modelled: FCFS policy, chunked prefill,
no KV connector / LoRA / encoder / Mamba, ``long_prefill_token_threshold`` 0,
``prefill_schedule_interval`` 1, the V2 model runner, pipeline parallel 1.

One step (``schedule``, :699-1660):

* RUNNING first, in order (:787-1040): a request gets
  ``min(num_tokens_with_spec + placeholders - num_computed, token_budget,
  max_model_len - num_computed - 1)`` tokens (:833-858); under async scheduling a request
  whose in-flight output already reaches its max_tokens is skipped (:799-813); if
  ``allocate_slots`` fails, the last running request is preempted (``running.pop()``,
  :955) — freed, ``num_computed_tokens = 0``, back to the FRONT of the waiting queue
  (``_preempt_request`` :1799-1843) — until the allocation fits or the request preempted
  itself; a failed request ends the running loop.
* WAITING next, only if nothing was preempted this step (:1052), while the token budget
  lasts and ``len(running) < max_num_seqs`` (:1062-1076): a preempted request whose
  in-flight output is still undelivered is skipped this step (:1086-1091); the prefix-cache
  hit (``get_computed_blocks``, ``prefix_caching``), the chunk
  ``min(num_tokens - hit, budget)``, and ``allocate_slots`` with the full sequence required
  to fit (:1434-1451); a failure ends the waiting loop (FCFS: nothing behind it is tried).
* ``_update_after_schedule`` (:1845-1877): ``num_computed_tokens += scheduled``; with async
  scheduling (``async_scheduler.py:24-56``) a request past its prompt gets one output
  placeholder (plus its drafts).

``update_from_output`` (:2259-2540) with a fabricated model output: every scheduled request
whose chunk reached the end of its tokens samples one token (plus every scheduled draft,
accepted at ``acceptance``: ``draft_acceptance.py``, rejected drafts rolled back as
:2345-2366 does); a request stops at max_tokens or max_model_len (``sched/utils.py``
``check_stop`` :98-119) and its blocks are freed; a preempted request's stale in-flight
output is still appended on return (:2316-2323).

Requests the server refuses (``renderers/params.py:535-548``: a prompt longer than
max_model_len) never reach the scheduler; an output that would pass max_model_len is
clamped to ``max_model_len - prompt`` (``entrypoints/serve/utils/api_utils.py:234-262``
``get_max_tokens``).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Callable

from csa_plan.planner.replay.draft_acceptance import accept, milli_table
from csa_plan.planner.engines.vllm.kv_cache_manager import GroupSpec, KvCacheManager
from csa_plan.planner.replay.protocol import Completion, EngineRuntime, Step

if TYPE_CHECKING:
    from csa_plan.planner.replay.protocol import CompiledReplay, RuntimeTrace

WAITING, RUNNING, PREEMPTED, FINISHED = 0, 1, 2, 3



class Req:
    """The fields of ``v1/request.py`` Request the scheduler reads."""

    __slots__ = ("rid", "num_prompt", "max_tokens", "num_output", "num_computed", "num_in_flight", "placeholders",
                 "status", "spec", "preemptions", "stale", "prefill_chunk", "ever_computed", "hashes", "spb",
                 "next_slot", "next_free", "slot_th", "free_th", "cache_n", "credit")

    def __init__(self, rid: int, prompt: int, max_tokens: int) -> None:
        self.rid, self.num_prompt, self.max_tokens = rid, prompt, max_tokens
        self.num_output = self.num_computed = self.num_in_flight = self.placeholders = 0
        self.status = WAITING
        self.spec = 0  # len(spec_token_ids)
        self.preemptions = 0
        self.stale = 0  # num_stale_output_tokens
        self.prefill_chunk = True
        self.ever_computed = 0  # tokens computed before the last preemption (for recomputation counts)
        self.hashes = None  # prefix_caching: this request's token identity, built on first lookup
        self.spb = 0  # shared_prefix_boundary (kv_cache_manager.py get_computed_blocks)
        self.next_slot = -1  # kv_cache_manager fast path: -1 = no tables yet
        self.next_free = 0
        self.slot_th: list[int] = []
        self.free_th: list[int] = []
        self.cache_n = -1  # prefix_caching: the tokens last cached (rounded), -1 = none since the last free
        self.credit = 0  # draft_acceptance: accepted drafts owed, in thousandths

    @property
    def num_tokens(self) -> int:
        return self.num_prompt + self.num_output


class VllmRuntime(EngineRuntime):
    """Scheduler + KVCacheManager of vLLM 0.33.0 over one trace (``EngineRuntime`` protocol)."""

    def __init__(self, trace: "RuntimeTrace", specs: tuple[GroupSpec, ...], pool_names: tuple[str, ...],
                 num_blocks: int, max_model_len: int, max_num_batched_tokens: int, max_num_seqs: int,
                 async_scheduling: bool, num_spec_tokens: int, lookahead: int, prefill_lookahead: int = 0,
                 prefix=None,
                 label: str = "vLLM 0.33.0", acceptance: float = 1.0,
                 compiled: "Callable[[VllmRuntime], CompiledReplay | None] | None" = None,
                 prefix_replay_tokens: int = 0) -> None:
        self.trace = trace
        # DeepSeek-V4.1's SWA bounded replay (sched/scheduler.py:298-314): a prefix hit's last window is
        # recomputed for the window groups, which are not prefix-cached; 0 for every other model
        self.replay_tokens = prefix_replay_tokens
        self.compiled = compiled  # the compiled twin's provider, handed in by the engine plan
        self.pools = pool_names
        self.usable_units = num_blocks - 1
        self.pipeline_depth = 2 if async_scheduling else 1
        self.label = label
        self.kv = KvCacheManager(specs, num_blocks, max_model_len, prefix)
        self.max_model_len = max_model_len
        self.budget = max_num_batched_tokens
        self.max_seqs = max_num_seqs
        self.async_on = async_scheduling
        # --pp above 1 with async scheduling (Model Runner V2): a request that sampled may decode again only
        # decode_stagger scheduler steps later (v1/core/sched/async_scheduler.py :18-22, :51-56; the check in
        # scheduler.py :816-820; current_step counts every schedule() call, :700). 1: no stagger (pp 1).
        self.decode_stagger = 1
        self.step_no = 0
        self.eligible: dict[int, int] = {}
        self.num_spec = num_spec_tokens
        self.acceptance = acceptance  # each draft's acceptance rate (draft_acceptance.py)
        self.accept_milli = None if acceptance >= 1.0 else milli_table(acceptance, max(num_spec_tokens, 1))
        self.lookahead = lookahead
        self.prefill_lookahead = prefill_lookahead
        self.prefix = prefix
        self.align = prefix.align if prefix is not None else 0  # scheduler_block_size (prefix_caching.block_sizes)
        self.wait_q: deque[Req] = deque()
        self.run_q: list[Req] = []
        self.reqs: dict[int, Req] = {}
        self._prompt = trace.prompt_tokens.tolist()
        self._output = trace.output_tokens.tolist()
        # a disaggregated prefill (hold_on_finish): finished requests whose blocks wait for their transfer
        self.held: dict[int, Req] | None = None

    # -- arrivals ------------------------------------------------------------------------------

    def refuse(self, r: int) -> str | None:
        p = self._prompt[r]
        if p < 1:  # nothing to prefill or sample from: the server refuses it before scheduling
            return "an empty prompt (0 tokens): vLLM refuses it (\"The decoder prompt cannot be empty\")"
        if p >= self.max_model_len:
            return (f"prompt of {p:,} tokens: vLLM refuses a prompt that leaves no room below max_model_len "
                    f"{self.max_model_len:,} (renderers/params.py _token_len_check, api_utils.py get_max_tokens)")
        return None

    def add(self, r: int) -> None:
        """add_request (:2931-2962): appended to the waiting queue."""
        max_tokens = min(self._output[r], self.max_model_len - self._prompt[r])
        req = Req(r, self._prompt[r], max_tokens)
        self.reqs[r] = req
        self.wait_q.append(req)

    # -- one step --------------------------------------------------------------------------------

    def schedule(self) -> Step:
        step = Step()
        kv = self.kv
        token_budget = self.budget
        mml = self.max_model_len
        preempted: list[Req] = []
        running = self.run_q
        prefill_scheduled = False  # :735, set by the running loop only (:1017)
        fast = kv.fast
        lookahead, pl, prefix, num_spec = self.lookahead, self.prefill_lookahead, self.prefix, self.num_spec
        sched_reqs: list[Req] = []  # scheduled requests in order, their tokens and step drafts (parallel)
        sched_n: list[int] = []
        sched_spec: list[int] = []
        i = 0
        self.step_no += 1
        stagger = self.decode_stagger
        while i < len(running) and token_budget > 0:
            req = running[i]
            nc, ph = req.num_computed, req.placeholders
            if ph > 0 and nc + 2 - ph >= req.num_prompt + req.max_tokens:
                i += 1
                continue
            if stagger > 1 and self.step_no < self.eligible.get(req.rid, 0):
                i += 1
                continue
            ntok = req.num_prompt + req.num_output
            n = ntok + req.spec + ph - nc
            if n > token_budget:
                n = token_budget
            if n > mml - nc - 1:
                n = mml - nc - 1
            if pl:  # _reserve_prefill_lookahead (:678-697)
                remaining = ntok - nc - n
                if 0 < remaining < pl:
                    n -= pl - remaining
            if n <= 0:
                i += 1
                continue
            if fast and req.next_slot >= 0:
                # allocate_slots' fast path inlined (KvCacheManager.allocate_slots, the same outcome)
                total = nc if nc < mml else mml
                need_slot = total + n + lookahead
                if need_slot > mml:
                    need_slot = mml
                processed = total - req.num_in_flight
                if processed < 0:
                    processed = 0
                ok = True
                if need_slot > req.next_slot or processed >= req.next_free:
                    ok = kv._touched_groups(req, need_slot, processed, nc)
                if ok and prefix is not None:
                    c = total + n if total + n < ntok else ntok
                    if c - c % self.align != req.cache_n:
                        prefix.cache_blocks(kv, req, c)
            else:
                ok = kv.allocate_slots(req, n, lookahead=lookahead)
            while not ok:
                victim = running.pop()
                self._preempt(victim)
                preempted.append(victim)
                if victim is req:
                    break
                ok = kv.allocate_slots(req, n, lookahead=lookahead)
            if not ok:
                break
            sched_reqs.append(req)
            sched_n.append(n)
            prefill_scheduled = prefill_scheduled or req.prefill_chunk
            token_budget -= n
            i += 1
            if req.spec:
                spec_scheduled = n + nc - ntok - ph
                req.spec = 0
                sched_spec.append(spec_scheduled if spec_scheduled > 0 else 0)
            else:
                sched_spec.append(0)
        any_running = bool(sched_reqs)  # scheduled_running_reqs: the running loop's, before admissions
        if not preempted:
            skipped: list[Req] = []
            while token_budget > 0 and self.wait_q:
                if len(running) >= self.max_seqs:
                    break
                req = self.wait_q[0]
                if req.stale:
                    skipped.append(self.wait_q.popleft())
                    continue
                hit_blocks, hit = (None, 0)
                if req.num_computed == 0 and self.prefix is not None:
                    hit_blocks, hit = self.prefix.computed_blocks(kv, req)
                replay = 0
                if self.replay_tokens and hit:
                    if hit <= self.replay_tokens:  # :1222-1236: a hit within one window saves nothing
                        hit_blocks, hit = None, 0
                    else:  # _mark_prefix_replay (:3447-3465): recompute the hit's last window
                        replay = self.replay_tokens
                computed = hit - replay
                n = req.num_tokens - computed
                pad = False
                if self.num_spec and n == 1 and not prefill_scheduled and (any_running or computed > 0):
                    padded = 1 + self.num_spec
                    if computed + padded + 1 <= mml:
                        if padded > token_budget:
                            break
                        n, pad = padded, True
                n = min(n, token_budget)
                n = self._reserve_prefill_lookahead(req, computed, n)
                if n == 0:
                    skipped.append(self.wait_q.popleft())
                    continue
                # :1432-1434: the replayed tokens are in the adopted hit; only the tokens past it need slots
                if not kv.allocate_slots(req, max(n - replay, 0), hit, hit_blocks, self.lookahead,
                                         full_sequence_must_fit=True):
                    break
                self.wait_q.popleft()
                running.append(req)
                step.admitted.append(req.rid)
                if self.prefix is not None:  # the tokens not recomputed: a bounded replay's window is
                    step.prefix_hit_tokens += computed
                    step.admission_hit[req.rid] = computed
                    step.prefix_query_tokens += req.num_tokens
                req.status = RUNNING
                req.num_computed = computed
                sched_reqs.append(req)
                sched_n.append(n)
                sched_spec.append(self.num_spec if pad else 0)
                token_budget -= n
            if skipped:
                self.wait_q.extendleft(reversed(skipped))
        # _update_after_schedule (:1845-1877) + AsyncScheduler._update_after_schedule
        rows = []
        async_on = self.async_on
        prefill_tokens = recomputed = 0
        batch = step.batch
        decode_reqs = decode_tokens = decode_ctx = 0  # the decodes summed here, added once (add_decodes)
        for req, n, spec in zip(sched_reqs, sched_n, sched_spec):
            before = req.num_computed
            nc = req.num_computed = before + n
            req.num_in_flight += n
            ntok = req.num_prompt + req.num_output
            samples = nc >= ntok + req.placeholders
            req.prefill_chunk = not samples
            if async_on and samples:
                req.placeholders += 1 + spec
                req.spec = num_spec
                if stagger > 1:
                    self.eligible[req.rid] = self.step_no + stagger
            if before < ntok - 1:  # a prompt (or recomputation) chunk, not a decode
                prefill_tokens += n
                batch.add_prefill(before, n)
            else:
                decode_reqs += 1
                decode_tokens += n
                decode_ctx += before
            if req.ever_computed > before:
                recomputed += min(req.ever_computed, nc) - before
            rows.append((req, n, samples, spec))
        batch.add_decodes(decode_reqs, decode_tokens, decode_ctx)
        step.prefill_tokens = prefill_tokens
        step.recomputed_tokens = recomputed
        step.requests = [r.rid for r in sched_reqs]
        step.tokens = sched_n
        step.preempted = [r.rid for r in preempted]
        step.payload = rows
        return step

    def _reserve_prefill_lookahead(self, req: Req, computed: int, n: int) -> int:
        """_reserve_prefill_lookahead (:678-697): no chunk ends within the MTP runway of the prompt's end."""
        remaining = req.num_tokens - computed - n
        if 0 < remaining < self.prefill_lookahead:
            n -= self.prefill_lookahead - remaining
        return max(n, 0)

    def _preempt(self, req: Req) -> None:
        """_preempt_request (:1799-1843)."""
        self.kv.free(req)
        req.ever_computed = max(req.ever_computed, req.num_computed)
        req.status = PREEMPTED
        req.num_computed = 0
        req.spec = 0
        req.stale = req.num_in_flight
        req.placeholders = 0
        req.preemptions += 1
        self.wait_q.appendleft(req)

    # -- the fabricated model output -------------------------------------------------------------

    def complete(self, step: Step) -> Completion:
        """update_from_output (:2259-2540): one sampled token per request past its prompt."""
        c = Completion()
        sync_drafts = self.num_spec and not self.async_on
        prefix, mml, num_spec = self.prefix, self.max_model_len, self.num_spec
        milli = self.accept_milli
        check_cache = prefix is not None and not self.kv.fast
        for req, n, samples, spec in step.payload:
            req.num_in_flight -= n
            stale = req.stale > 0
            if stale:
                req.stale -= n
            if not samples or req.status == FINISHED:
                continue
            if spec and milli is not None:  # rejected drafts roll back (:2345-2366); a stale count does not apply
                accepted, req.credit = accept(req.credit, spec, milli)
                if not stale and spec > accepted:
                    if req.num_computed > 0:
                        req.num_computed -= spec - accepted
                    if req.placeholders > 0:
                        req.placeholders -= spec - accepted
                spec = accepted
            tokens = 1 + spec
            stopped = False
            had_placeholders = req.placeholders > 0
            running_before = req.status == RUNNING
            if req.num_output == 0:
                c.first_token.append(req.rid)
            if tokens == 1:  # no drafts: the loop below for one token, which rolls nothing back
                req.num_output += 1
                stopped = req.num_prompt + req.num_output >= mml or req.num_output >= req.max_tokens
            else:
                for k in range(1, tokens + 1):
                    req.num_output += 1
                    if req.num_prompt + req.num_output >= mml or req.num_output >= req.max_tokens:
                        stopped = True
                        if not stale:
                            req.num_computed -= tokens - k
                        break
            if not stale and had_placeholders:
                req.placeholders -= tokens
            if prefix is not None and not stale and running_before and (had_placeholders or num_spec):
                processed = req.num_computed - req.num_in_flight  # :2418-2425
                if check_cache or processed - processed % self.align != req.cache_n:
                    prefix.cache_blocks(self.kv, req, processed)
            if stopped:
                req.status = FINISHED
                if req in self.run_q:
                    self.run_q.remove(req)
                elif req in self.wait_q:  # a preempted request stopped by its stale output (:2546)
                    self.wait_q.remove(req)
                if self.held is None:
                    self.kv.free(req)
                else:  # the connector's delay_free_blocks: _free_request skips _free_blocks (:3057-3059)
                    self.held[req.rid] = req
                c.finished.append(req.rid)
        if sync_drafts:  # the engine core's update_draft_token_ids after the step (:2862-2881)
            for req, *_ in step.payload:
                if req.status != FINISHED:
                    req.spec = 0 if req.prefill_chunk else self.num_spec
        return c

    # -- observables -----------------------------------------------------------------------------

    def used_units(self) -> tuple[int, ...]:
        return self.kv.held()

    def running(self) -> int:
        return len(self.run_q)

    def waiting(self) -> int:
        return len(self.wait_q)

    def notes(self) -> tuple[str, ...]:
        same = "" if self.label == "vLLM 0.33.0" else f" ({self.label} runs the same code here: docs/vllm-runtime.md)"
        out = [f"vLLM 0.33.0's Scheduler + KVCacheManager step by step{same}: FCFS, chunked prefill, max_num_seqs, "
               "allocate_slots per KV cache group with window frees, preemption by recompute, "
               + ("async scheduling (2 batches in flight), " if self.async_on else "")
               + (("prefix caching (LRU" + (f", block hashes covering {self.prefix.lookahead} MTP lookahead "
                                             f"token{'s' if self.prefix.lookahead > 1 else ''}, no EAGLE block drop"
                                             if self.prefix.lookahead else "") + ")")
                  if self.prefix is not None else "no prefix caching"),
               "model output fabricated: one token per step per request past its prompt"
               + ((" plus every draft, all accepted" if self.accept_milli is None else
                   f" plus its accepted drafts: each accepted at {self.acceptance:g} given the ones before "
                   "(--spec-acceptance), rejected ones rolled back") if self.num_spec else "")]
        return tuple(out)

    def stranded(self) -> tuple[int, ...]:
        return tuple(r.rid for r in self.wait_q) + tuple(r.rid for r in self.run_q)

    def hold_on_finish(self) -> None:
        """A NIXL producer (``kv_role`` kv_producer): ``request_finished`` returns ``delay_free_blocks``
        (``distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py:248-278``), so ``_free_request`` leaves
        the blocks allocated (``v1/core/sched/scheduler.py:3040-3059``) until the consumer's notification frees
        them (``_free_blocks``); the request has left the running queue (``max_num_seqs`` does not count it)."""
        self.held = {}

    def free_held(self, r: int) -> None:
        self.kv.free(self.held.pop(r))

    def compiled_replay(self) -> "CompiledReplay | None":
        """The whole replay in C (``compiled``: the ``cvllm`` extension), this class its checked twin, as the
        engine plan handed it in; None when none was, the extension is not built or a setting is outside
        its integer types (``compiled.refusal``)."""
        if self.held is not None:  # the compiled twin frees at the finish: holding runs here
            return None
        if self.reqs or self.compiled is None:  # already stepped: the compiled loop replays a trace from its start
            return None
        return self.compiled(self)
