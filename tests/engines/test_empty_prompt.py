"""A zero-token prompt is refused up front by both engine replays, with a reason (issue 36 item 4).

Before, a trace row with ``ContextTokens`` 0 went through the vLLM replay as a served request and
the prefix cache reported ``-1 of 100 prompt tokens looked up were hits`` (``"hit_tokens": -1``).
vLLM's server refuses an empty prompt ("The decoder prompt cannot be empty"); both runtimes now
refuse it at arrival, in the Python twins and in the compiled loops alike, and no count is negative.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest

from csa_plan.planner.engines.sglang.runtime import SglangRuntime
from csa_plan.planner.engines.sglang.compiled import replay_for
from csa_plan.planner.engines.sglang.scheduler import SchedulerConfig
from csa_plan.planner.engines.vllm.kv_cache_manager import GroupSpec
from csa_plan.planner.engines.vllm.scheduler import VllmRuntime
from csa_plan.planner.engines.vllm.compiled import compiled_replay
from csa_plan.planner.replay.loop import replay
from csa_plan.planner.replay.protocol import RuntimeTrace
from csa_plan.planner.steptime.model import StepTime
from helpers import EXAMPLES

TIME = StepTime(20.0, 10_000.0)
PROMPTS = [300, 0, 120, 0, 900]


def _trace() -> RuntimeTrace:
    n = len(PROMPTS)
    return RuntimeTrace(np.arange(n, dtype=np.int64) * 10**8, np.array(PROMPTS, dtype=np.int64),
                        np.full(n, 5, dtype=np.int64))


def _vllm(trace):
    return VllmRuntime(trace, (GroupSpec(16, None),), ("a",), 200, 4096, 2048, 8, True, 0, 0, compiled=compiled_replay)


def _sglang(trace):
    return SglangRuntime(SchedulerConfig(full_pages=200, swa_pages=200, page=16, window=16), trace, "sglang-0.5.23", compiled=replay_for)


@pytest.mark.parametrize("compiled", [False, None], ids=["python", "compiled-where-built"])
@pytest.mark.parametrize("make, word", [(_vllm, "vLLM refuses it"), (_sglang, "refused up front")],
                         ids=["vllm", "sglang"])
def test_an_empty_prompt_is_refused_with_a_reason(make, word, compiled):
    trace = _trace()
    res = replay(make(trace), trace, TIME, compiled=compiled)
    assert sorted(res.refused) == [1, 3]
    assert all(reason.startswith("an empty prompt (0 tokens)") and word in reason for reason in res.refused.values())
    assert [int(f) >= 0 for f in res.finished_ns] == [True, False, True, False, True]  # never served
    assert res.prefix_hit_tokens >= 0 and res.prefix_query_tokens >= 0


def test_the_cli_refuses_it_and_reports_no_negative_count(csa, tmp_path):
    rows = list(csv.reader((EXAMPLES / "traces" / "azure_conv_sample_200.csv").open()))[:101]
    rows[5][1] = "0"
    path = tmp_path / "t.csv"
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    for engine, word in (("vllm-0.33", "vLLM refuses it"), ("sglang-0.5.23", "refused up front")):
        r = csa("simulate", str(path), "--model", "deepseek-v4-flash", "--engine", engine, "--device-memory", "h200",
                "--tp", "2", "--json")
        assert r.code == 3, r.err
        rt = r.json()["runtime"]
        assert rt["served"] == 99 and len(rt["refused"]) == 1 and rt["refused"][0]["requests"] == 1
        assert rt["refused"][0]["reason"].startswith("an empty prompt (0 tokens)") and word in rt["refused"][0]["reason"]
        assert rt["prefix_cache"]["hit_tokens"] >= 0
