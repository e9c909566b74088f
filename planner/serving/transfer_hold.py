"""A disaggregated prefill's blocks held until their transfer ends, in the prefill scheduler's admission.

Both engines keep a finished prefill's KV until the decode side has read it. vLLM: the NIXL producer's
``request_finished`` returns ``delay_free_blocks`` (``distributed/kv_transfer/kv_connector/v1/nixl/
pull_scheduler.py:248-278``) and ``_free_request`` then skips ``_free_blocks`` (``v1/core/sched/
scheduler.py:3040-3059``) until the consumer's notification. SGLang: the request waits in
``disagg_prefill_inflight_queue`` with its pages and its ``req_to_token`` row, and ``release_kv_cache``
runs only when the sender polls ``KVPoll.Success`` (``srt/disaggregation/prefill.py:1151-1228``). While held,
those blocks are not free: the prefill scheduler admits, and its prefix cache evicts, against a smaller pool.
Each engine runtime holds them as its engine does (``EngineRuntime.hold_on_finish``/``free_held``: vLLM's
blocks stay allocated, SGLang's pages stay the request's and its row stays taken); ``TransferHoldRuntime``
frees each at its transfer's end, at the first scheduling point at or after it (``loop.replay`` asks
``release_due`` before every step, and waits for it as for an arrival), as both engines poll between steps.

**Why rounds, and why the answer is exact.** A transfer's end depends on its prefill's end and on the link
queue (every earlier transfer of its prefill rank and of its decode rank, first come first served:
``disaggregation.schedule_transfers``); a prefill's end depends on the holds released before it. Every
dependency points strictly forward in time (a hold ends at its transfer's end, at least a nanosecond after
its prefill's end), so the deployment has exactly one trajectory, and a set of release times that reproduces
itself (the prefill pool replayed with each hold ending at R; the transfers of its prefill ends end at R) is
that trajectory. The link couples the prefill ranks through the decode ranks' links, and the ranks are
replayed one after another (``replicas``), so the link is not timed inside one replay: round 0 replays
without holds (the compiled loop where it has one), round k holds each request until the transfer end round
k - 1 computed, until a round reproduces its own release times. Each round agrees with the true trajectory
up to a later time than the one before (a release before that time was computed from events before it), so
the rounds reach it; ``HOLD_ROUNDS`` bounds them, and a run that did not get there says so
(``converged`` false, and the notes).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from csa_plan.planner.replay.protocol import Completion, EngineRuntime, Step, WrappedRuntime

if TYPE_CHECKING:
    from csa_plan.planner.replay.result import RuntimeResult
    from csa_plan.planner.serving.serve import RuntimeSetup

HOLD_ROUNDS = 16  # rounds of the prefill replay before a run says it did not reach its own release times


class TransferHoldRuntime(WrappedRuntime):
    """The prefill engine's runtime (``inner``) holding each finished request's memory until ``release_ns[r]``
    (its transfer's end; freed at once where that is not after the finish: -1, or a round's earlier guess)."""

    def __init__(self, inner: EngineRuntime, release_ns: list[int]) -> None:
        super().__init__(inner)
        inner.hold_on_finish()
        self._release = release_ns
        self._due: list[tuple[int, int]] = []  # (release ns, request), soonest first

    def complete(self, step: Step) -> Completion:
        c = self.inner.complete(step)
        for r in c.finished:
            heapq.heappush(self._due, (self._release[r], r))
        return c

    def release_due(self, now_ns: int) -> int | None:
        due = self._due
        while due and due[0][0] <= now_ns:
            self.inner.free_held(heapq.heappop(due)[1])
        return due[0][0] if due else None


@dataclass(frozen=True)
class HeldPrefill:
    """The prefill pool replayed with its transfer holds (``result``), the transfers that hold reproduces
    (``start_ns``, ``end_ns``), the rounds run, whether the last reproduced its own release times, and round
    0's replay (no hold: what the prefill side does when its blocks are freed at the finish)."""

    result: "RuntimeResult"
    start_ns: Any
    end_ns: Any
    rounds: int
    converged: bool
    unheld: "RuntimeResult"

    def admitted_later(self) -> int:
        """Requests the prefill side admitted later than it would without the hold."""
        import numpy as np

        held = np.asarray(self.result.admitted_ns, dtype=np.int64)
        free = np.asarray(self.unheld.admitted_ns, dtype=np.int64)
        return int(((held > free) & (free >= 0)).sum())

    def note(self) -> str:
        if self.rounds == 0:
            return "no prefill finished: nothing held for a transfer"
        reached = (f"the release times reproduced themselves after {self.rounds} round(s) of the prefill replay"
                   if self.converged else
                   f"NOT converged after {self.rounds} rounds (HOLD_ROUNDS): the last round's figures are shown")
        return (f"prefill blocks held until each transfer ends, in the prefill scheduler's admission (vLLM "
                f"delay_free_blocks, SGLang's inflight queue; serving/transfer_hold.py): {reached}; "
                f"{self.admitted_later():,} request(s) admitted later than without the hold")


def prefill_with_holds(setup: "RuntimeSetup", trace: Any,
                       transfers_of: Callable[[Any], tuple[Any, Any]]) -> HeldPrefill:
    """The prefill pool over ``trace`` (its requests prefill-only) with each request's memory held until its
    transfer ends; ``transfers_of(finished_ns)`` times the transfers of a round's prefill ends (-1: none) and
    returns (start_ns, end_ns). Rounds as the module docstring says."""
    import numpy as np

    from csa_plan.planner.serving.replicas import split_round_robin
    from csa_plan.planner.serving.serve import serve_trace, together

    unheld = serve_trace(setup, trace)
    done = np.asarray(unheld.finished_ns, dtype=np.int64)
    start, end = transfers_of(done)
    if not (done >= 0).any():
        return HeldPrefill(unheld, start, end, 0, True, unheld)
    whole = np.arange(len(trace), dtype=np.int64)
    # which requests each rank's runtime indexes: its round-robin share, or (ranks replayed together under
    # the engine's balancer, serve.together) the whole trace, each rank handed the requests it is picked for
    owners = [idx for _, idx in split_round_robin(trace, setup.dp)] if setup.dp > 1 and not together(setup) else \
        [whole] * max(setup.dp, 1)
    result = unheld
    for rounds in range(1, HOLD_ROUNDS + 1):
        release = np.asarray(end, dtype=np.int64)

        def layer(rt: EngineRuntime, k: int, release: Any = release) -> EngineRuntime:
            return TransferHoldRuntime(rt, release[owners[k]].tolist())

        result = serve_trace(setup, trace, layer=layer)
        start, end = transfers_of(np.asarray(result.finished_ns, dtype=np.int64))
        if np.array_equal(np.asarray(end, dtype=np.int64), release):
            return HeldPrefill(result, start, end, rounds, True, unheld)
    return HeldPrefill(result, start, end, HOLD_ROUNDS, False, unheld)
