"""SGLang DP attention at start-up: --max-running-requests per worker, and EP = TP under the spanning A2A backends.

sglang-0.5.23 sizes every DP-attention worker's pools for ``max(1, max_running_requests // dp_size)``
requests (model_executor/pool_configurator.py:956, :1141-1145; mem_cache/kv_cache_configurator.py:3128)
and sets ``ep_size = tp_size`` under deepep and the other spanning backends (arg_groups/overrides.py:1578-1620).
csa-plan's --dp is SGLang's --dp-size with --enable-dp-attention, and SGLang's tp_size is csa-plan's tp x dp.
"""

from __future__ import annotations

import re

import pytest

from csa_plan.planner.budget.deployment import Deployment, engine_settings_for
from csa_plan.planner.budget.startup import SGLANG_EP_SPANNING_A2A, sglang_placement
from csa_plan.planner.engines.engine import EngineRefused
from csa_plan.planner.engines.registry import get_engine
from csa_plan.planner.engines.settings import EngineSettings
from csa_plan.planner.placement import Placement
from csa_plan.planner.units import GiB

SGLANG = get_engine("sglang-0.5.23")


@pytest.mark.parametrize("requested, dp, per_worker", [(256, 8, 32), (256, 1, 256), (7, 8, 1), (100, 3, 33)])
def test_max_running_requests_is_divided_per_worker(flash, requested, dp, per_worker):
    plan = SGLANG.configure(flash, EngineSettings(gpu="b200", max_running_requests=requested,
                                                  dp_attention_size=dp), 1 << 20)
    assert plan.resolved.max_running_requests == per_worker
    # the worker's pools are exactly those of a server asked for that many requests without DP attention
    alone = SGLANG.configure(flash, EngineSettings(gpu="b200", max_running_requests=per_worker), 1 << 20)
    assert plan.pool_config(60 * GiB) == alone.pool_config(60 * GiB)
    assert plan.size_pool(60 * GiB).log_lines == alone.size_pool(60 * GiB).log_lines


def test_the_refusal_names_the_per_worker_figures_and_the_server_value_that_fits(flash):
    plan = SGLANG.configure(flash, EngineSettings(gpu="h200", max_running_requests=8192, dp_attention_size=8), 64_000)
    with pytest.raises(EngineRefused) as err:
        plan.size_pool(6 * GiB)
    msg = err.value.refusal.message
    assert "Per DP-attention worker: 8192 // 8 = 1,024 requests" in msg
    fits, most = (int(x.replace(",", "")) for x in
                  re.search(r"([\d,]+) per worker leaves room.*--max-running-requests ([\d,]+) \(or fewer\)", msg).groups())
    assert most // 8 == fits and (most + 1) // 8 == fits + 1  # the largest server value that gives `fits` per worker
    ok = SGLANG.configure(flash, EngineSettings(gpu="h200", max_running_requests=most, dp_attention_size=8), 64_000)
    assert ok.size_pool(6 * GiB).tokens > 0
    over = SGLANG.configure(flash, EngineSettings(gpu="h200", max_running_requests=most + 1, dp_attention_size=8),
                            64_000)
    assert ok.pool_config(6 * GiB)["full"] >= 64_000 > over.pool_config(6 * GiB)["full"]  # one more: no room


def test_dp_reaches_sglang_only():
    s = EngineSettings(max_running_requests=256)
    assert engine_settings_for("sglang-0.5.23", s, Deployment(dp=8)).dp_attention_size == 8
    assert engine_settings_for("sglang-0.5.23", s, Deployment(dp=1)).dp_attention_size is None
    assert engine_settings_for("vllm-0.33", EngineSettings(), Deployment(dp=8)).dp_attention_size is None
    assert "dp_attention_size" not in engine_settings_for("sglang-0.5.23", s, Deployment(dp=8)).given()


@pytest.mark.parametrize("backend, tp, dp, ep, expected", [
    ("deepep", 1, 8, None, 8), ("deepep", 2, 4, 2, 8), ("deepep", 8, 1, None, 8), ("mooncake", 4, 1, 1, 4),
    ("none", 1, 8, None, None), (None, 8, 1, None, None),
])
def test_ep_is_sglangs_tp_size_under_the_spanning_backends(backend, tp, dp, ep, expected):
    placed = sglang_placement(Placement(tp=tp, dp=dp, ep=ep), "sglang-0.5.23", backend)
    assert placed.ep == (expected if expected is not None else ep)
    assert sglang_placement(Placement(tp=tp, dp=dp, ep=ep), "vllm-0.33", backend).ep == ep
    assert "deepep" in SGLANG_EP_SPANNING_A2A and "none" not in SGLANG_EP_SPANNING_A2A


def test_the_published_tp8_dp8_deployment_plans_32_requests_a_worker_with_ep_8(csa):
    """SGLang --tp 8 --dp 8 --enable-dp-attention --moe-a2a-backend deepep on 8 x B200 (csa-plan: --tp 1 --dp 8)."""
    r = csa("check", "deepseek-v4-flash", "--engine", "sglang-0.5.23", "--device-memory", "b200", "--tp", "1",
            "--dp", "8", "--max-seq-len", "1M", "--moe-a2a-backend", "deepep", "--max-running-requests", "256")
    assert r.code == 0, r.err
    assert "max_running_requests=32," in r.out and "tp 1 pp 1 dp 8 ep 8" in r.out


def test_simulate_replays_each_dp_attention_worker_with_its_share(csa):
    r = csa("simulate", "examples/traces/mooncake_conversation_head200.jsonl", "--model", "deepseek-v4-flash",
            "--engine", "sglang-0.5.23", "--device-memory", "h200", "--tp", "4", "--dp", "2",
            "--max-running-requests", "64")
    assert r.code == 0, r.err
    assert "--max-running-requests 32;" in r.out.replace("\n", " ")  # 64 // 2 a worker
