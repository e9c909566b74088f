"""Pipeline stages (``--pp``) as the one replay loop times them: a value the serving floor builds
(``planner/serving/pipeline.py``) and hands to ``loop.replay`` — no second loop.

A step (one batch the engine's scheduler decides) passes ``stages`` pipeline stages in turn; each
stage lasts the clock's step time for that stage's layers (``stage_time``: the slowest stage's, the
per-layer terms scaled to its share of the layers), and between two stages the batch's activations
cross the link (``transfer_ns``). Two ways an engine runs that pipeline:

* ``in_flight`` > 1 (vLLM V1: ``max_concurrent_batches`` batches in flight,
  ``config/vllm.py`` VllmConfig.max_concurrent_batches :588-598): the next batch may enter the first
  stage when that stage is free, one ``interval`` later (the slowest stage, or the link if slower);
  a batch's output reaches the scheduler one ``latency`` after it started (every stage and every
  boundary transfer). The scheduler cannot schedule a request again until its batch returns
  (its tokens are not computed yet); with the queue full it blocks on the oldest batch
  (``v1/engine/core.py`` step_with_batch_queue :715-780).
* ``micro_batch_turns`` (SGLang 0.5.23's ``event_loop_pp``, ``srt/managers/scheduler_pp_mixin.py``
  :104-215): ``in_flight`` = ``pp_loop_size`` micro-batches (pp_size + pp_async_batch_depth,
  ``init_pp_loop_state`` :561-570), each its own running batch. Every scheduling call is the next
  micro-batch's turn (``for mb_id in range(self.pp_loop_size)`` :131): the runtime schedules that
  micro-batch alone (its running requests, or a prefill of new admissions in their place:
  ``engines/sglang/scheduler.py``); its batch enters the first stage when that stage is free (the same
  ``interval``); after the turn the batch launched ``in_flight - 1`` turns earlier — the next
  micro-batch's (``next_mb_id`` :137) — has its result processed (:188-204), the clock waiting for it
  (a synchronous receive from the last stage) — one turn before that micro-batch is scheduled again.
  An idle turn (nothing to run) still processes the next micro-batch's result.
* ``in_flight`` 1: one batch at a time, every stage in turn (``latency`` between steps).

With ``stages`` 1 nothing here applies (``loop.replay`` gets ``None``): today's replay, unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from csa_plan.planner.steptime.model import StepTime


@dataclass(frozen=True)
class PipelineTiming:
    stages: int  # pipeline stages (--pp), >= 2
    stage_time: StepTime  # the slowest stage's clock
    activation_bytes_per_token: int  # bytes each GPU sends per token across one stage boundary
    link_bytes_s: float  # the boundary link's bytes/s per GPU, one direction
    in_flight: int  # batches in flight (vLLM max_concurrent_batches; SGLang pp_loop_size micro-batches)
    micro_batch_turns: bool = False  # SGLang: each in-flight batch a micro-batch scheduled on its own turn

    def __post_init__(self) -> None:
        if self.stages < 2 or self.in_flight < 1 or self.link_bytes_s <= 0 or self.activation_bytes_per_token < 0:
            raise ValueError(f"a pipeline of {self.stages} stages, {self.in_flight} in flight, "
                             f"{self.link_bytes_s} B/s: not a pipeline")

    def transfer_ns(self, tokens: int) -> int:
        """One stage boundary's transfer of ``tokens`` tokens' activations, in whole ns (rounded up)."""
        return math.ceil(tokens * self.activation_bytes_per_token * 1e9 / self.link_bytes_s)

    def timing(self, stage_ns: int, tokens: int) -> tuple[int, int]:
        """``(interval_ns, latency_ns)`` of a step whose slowest stage lasts ``stage_ns``: when the next
        step may start, and when this one's output is back at the scheduler."""
        x = self.transfer_ns(tokens)
        latency = self.stages * stage_ns + (self.stages - 1) * x
        if self.in_flight == 1:
            return latency, latency
        return max(stage_ns, x), latency

    def as_dict(self) -> dict:
        return {"num_stages": self.stages, "in_flight": self.in_flight, "micro_batch_turns": self.micro_batch_turns,
                "activation_bytes_per_token": self.activation_bytes_per_token, "link_bytes_s": self.link_bytes_s}
