"""How many of a step's draft tokens the fabricated model output accepts (vLLM MTP, ``--spec-acceptance``).

Each draft is accepted with probability ``rate`` given the ones before it were, so a step that
verifies k drafts accepts ``rate + rate^2 + ... + rate^k`` of them on average. The replay is
deterministic: each request carries a credit in thousandths; a step adds the expected count for
its k drafts (``milli[k]``), accepts the whole drafts the credit holds (at most k) and keeps the
rest. Integers only, so the Python twin, the compiled loop and the cross-check's fabricated
output (``tools/crosscheck_vllm_runtime.py``) accept exactly the same drafts. At rate 1 every
draft is accepted (the replay before issue 35).
"""

from __future__ import annotations

MILLI = 1000
from csa_plan.planner.steptime.drafts import METHODS, DraftMethod

# the MTP default, stated once with every method's (planner/steptime/drafts.py): 0.65, the middle of the
# published DeepSeek MTP acceptance rates, 0.57-0.70 (docs/steptime.md)
DEFAULT_RATE = METHODS[DraftMethod.MTP].default_acceptance


def milli_table(rate: float, k_max: int) -> tuple[int, ...]:
    """milli[k]: the expected accepted drafts of k, in thousandths (k = 0 .. k_max)."""
    out, expected, term = [0], 0.0, 1.0
    for _ in range(k_max):
        term *= rate
        expected += term
        out.append(round(expected * MILLI))
    return tuple(out)


def accept(credit: int, k: int, milli: tuple[int, ...]) -> tuple[int, int]:
    """(drafts accepted of ``k``, the credit after) for a request holding ``credit``."""
    if k <= 0:
        return 0, credit
    credit += milli[min(k, len(milli) - 1)]
    taken = min(k, credit // MILLI)
    return taken, credit - taken * MILLI
