"""Speculative decoding as each method costs a step: MTP, EAGLE and DSpark, as the engines spell them.

Why per method: the three run the same checkpoint drafter (its ``is_mtp`` layers: V4's one MTP
layer, V4.1's three DSpark blocks) in different shapes, and the shape is what a step pays for. An
MTP or EAGLE chain of k drafts runs the drafter k times, one position a request each time (each
pass reads the drafter's weights and the LM head again); DSpark drafts its whole block of k
positions in one pass (semi-autoregressive: ``vllm/models/deepseek_v41/nvidia/dspark.py:1-11``,
``config/speculative.py:1580-1600`` sets ``parallel_drafting`` and takes k from the checkpoint's
``dspark_block_size``). Every method then verifies k + 1 tokens a request in the main model.
``physics.draft_rows`` costs a ``DraftPlan``; the acceptance is the replay's (each draft accepted
with probability p given the ones before it were: ``planner/replay/draft_acceptance.py``).

Each method's published default acceptance, per draft given the ones before:

* ``mtp`` (vLLM ``--speculative-config '{"method": "mtp", ...}'``): 0.65, the middle of the published
  DeepSeek MTP rates 0.57-0.70 (docs/steptime.md).
* ``EAGLE`` (SGLang ``--speculative-algorithm EAGLE``, top-k 1 on DeepSeek-V4: the MTP layer as a
  chain, ``arg_groups/deepseek_v4_hook.py:148-158``): the MTP layer's 0.65.
* ``DSPARK`` (SGLang ``--speculative-algorithm DSPARK``, vLLM ``"method": "dspark"``): 0.90, from the
  SGLang cookbook's note that the shipped DSpark recipe accepts 4.678 tokens a step (the V4-Pro GB300
  DSPARK rows of benchmarks/published_serving.csv); at DeepSeek-V4.1's block of 5 (DEEPSEEK_V41.md)
  1 + p + ... + p^5 = 4.68 at p = 0.90. The block of the V4 checkpoints' DSpark is not published.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class DraftMethod(str, Enum):
    MTP = "mtp"
    EAGLE = "EAGLE"
    DSPARK = "DSPARK"


@dataclass(frozen=True)
class MethodFacts:
    chain: bool  # one drafter pass per draft token (MTP, EAGLE) or one pass for the block (DSpark)
    default_acceptance: float
    source: str


METHODS: dict[DraftMethod, MethodFacts] = {
    DraftMethod.MTP: MethodFacts(True, 0.65, "the middle of the published DeepSeek MTP rates 0.57-0.70"),
    DraftMethod.EAGLE: MethodFacts(True, 0.65, "SGLang's EAGLE on DeepSeek-V4 chains the MTP layer (top-k 1): "
                                               "the MTP rate"),
    DraftMethod.DSPARK: MethodFacts(False, 0.90, "the SGLang cookbook: the shipped DSpark recipe accepts 4.678 "
                                                 "tokens a step; p at V4.1's block of 5"),
}


@dataclass(frozen=True)
class DraftPlan:
    """How a step drafts: ``passes`` runs of the drafter, each over ``tokens_per_request`` positions of
    every decoding request; ``drafts`` (k) tokens proposed a request, k + 1 verified."""

    method: str
    drafts: int
    passes: int
    tokens_per_request: int

    @property
    def verify(self) -> int:
        return self.drafts + 1

    def label(self) -> str:
        shape = (f"{self.passes} drafter pass{'es' if self.passes != 1 else ''} of 1 position" if self.passes != 1
                 or self.tokens_per_request == 1 else f"1 drafter pass of a {self.tokens_per_request}-position block")
        return f"{self.method} k={self.drafts}: {shape} a request, {self.verify} tokens verified"


def draft_plan(method: DraftMethod | str, drafts: int) -> DraftPlan | None:
    """The step shape of ``method`` proposing ``drafts`` tokens a request (None: no drafts)."""
    if drafts <= 0:
        return None
    m = DraftMethod(method)
    if METHODS[m].chain:
        return DraftPlan(m.value, drafts, drafts, 1)
    return DraftPlan(m.value, drafts, 1, drafts)


def accepted_per_step(rate: float, drafts: int) -> float:
    """Tokens a request gains a verify step on average: 1 + p + ... + p^k."""
    return sum(rate ** j for j in range(drafts + 1))
