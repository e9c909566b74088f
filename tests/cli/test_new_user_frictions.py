"""What a new user still hit (issue 36 items 8-11): each line says what is true, in words that add up.

Each test is one item of the issue, as the user saw it on the old main and as it reads now.
"""

from __future__ import annotations

import re

from helpers import EXAMPLES

SAMPLE = str(EXAMPLES / "traces" / "azure_conv_sample_200.csv")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def test_kv_memory_is_said_to_replace_the_budget_not_summed_wrongly(csa):
    """Item 8: `usable 135,679,338,086 - weights 39,982,633,308 - reserves 536,870,912 = 12,884,901,888 B`
    did not add up: --kv-memory replaced the steps. Now the line says so, as check does."""
    args = ("simulate", SAMPLE, "--model", "deepseek-v4-flash", "--engine", "vllm-0.33", "--device-memory", "h200",
            "--tp", "2")
    given = _one_line(csa(*args, "--kv-memory", "12GiB").out)
    assert ("device limit = the state pool per GPU (vllm-0.33): --kv-memory 12,884,901,888 B "
            "(replaces usable - weights - reserves)") in given
    assert "usable" not in given.split("device limit =")[1].split("replaces")[0]
    derived = _one_line(csa(*args).out)
    m = re.search(r"usable ([\d,]+) - weights ([\d,]+) - reserves ([\d,]+) = ([\d,]+) B", derived)
    usable, weights, reserves, pool = (int(g.replace(",", "")) for g in m.groups())
    assert usable - weights - reserves == pool  # the sum shown is the sum
