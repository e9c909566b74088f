"""A refusal names the option that fixes it, with the value (issue 36 item 5).

Before, SGLang's SWA pool cap refused V4-Pro at 1M tokens on 8 x H200 (and V4-Flash on 2 x H20)
as "(--kv-memory; ...)", an option the user never gave. The cap grows with
--max-running-requests: the refusal now names that option and the largest value that leaves room
for a request of max_seq_len, and that value is checked here to pass where one more does not.
"""

from __future__ import annotations

import pytest

CASES = [("deepseek-v4-pro", "h200", "8", "1M"), ("deepseek-v4-flash", "h20", "2", "1M")]


@pytest.mark.parametrize("model, gpu, tp, length", CASES, ids=["pro-8xh200", "flash-2xh20"])
def test_the_swa_cap_refusal_names_max_running_requests_and_its_value(csa, model, gpu, tp, length):
    base = ("check", model, "--max-seq-len", length, "--device-memory", gpu, "--tp", tp, "--engine", "sglang-0.5.23")
    r = csa(*base, "--json")
    assert r.code == 3, r.err
    (refusal,) = [x for x in r.json()["all_refusals"] if x["type"] == "EngineRefused"]
    assert refusal["setting"] == "--max-running-requests" and refusal["actual"] == "256"
    value = int(refusal["expected"].removeprefix("<= ").replace(",", ""))
    assert f"--max-running-requests {value:,} (or fewer) leaves room for a request of 1,048,576 tokens" \
        in refusal["message"]
    assert "(--max-running-requests; the refusal says why)" in csa(*base).out
    fixed = csa(*base, "--max-running-requests", str(value), "--json")
    assert fixed.code == 0 and fixed.json()["fit"]["requests_that_fit"] >= 1, fixed.out[-400:]
    assert csa(*base, "--max-running-requests", str(value + 1)).code == 3  # the largest that does
