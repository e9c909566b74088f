"""A host KV tier beneath the replayed prefix cache (issue 46): capacity from each engine's own flags, what
enters the tier and when, what a hit reloads and what it costs in the clock, the refusals, and a tier that
never hits leaving the replay exactly as without one."""

from __future__ import annotations

import json

import numpy as np
import pytest

from csa_plan.planner.cards import CARDS, HOSTS
from csa_plan.planner.engines.host_tier import HostTier, HostTierFlags, HostTierRuntime, resolve_tier
from csa_plan.planner.errors import BadInput
from csa_plan.planner.replay.protocol import Completion, EngineRuntime, RuntimeTrace, Step

from helpers import EXAMPLES

MOONCAKE = str(EXAMPLES / "traces" / "mooncake_conversation_head200.jsonl")
PRO = ("--model", "deepseek-v4-pro", "--device-memory", "h200", "--tp", "8")


class _Plan:
    """Footprint of ``t`` tokens: 10 bytes per token (a plan without windows)."""

    max_seq_len = 1 << 20

    def footprint(self, tokens, phase=None):
        class F:
            total_bytes = 10 * tokens
        return F()


class _Inner(EngineRuntime):
    """Admits each request alone with the HBM hit scripted, its whole prompt in one chunk."""

    pools = ("p",)
    usable_units = 1000
    label = "inner"

    def __init__(self, hits):
        self.hits, self.queue = hits, []

    def refuse(self, r):
        return None

    def add(self, r):
        self.queue.append(r)

    def schedule(self):
        s = Step()
        if self.queue:
            r = self.queue.pop(0)
            h = self.hits[r]
            s.admitted, s.requests, s.tokens = [r], [r], [PROMPT[r] - h]
            s.prefix_hit_tokens = h
            s.batch.add_prefill(h, PROMPT[r] - h)
            s.prefill_tokens = PROMPT[r] - h
        return s

    def complete(self, step):
        return Completion()

    def used_units(self):
        return (0,)

    def running(self):
        return 0

    def waiting(self):
        return len(self.queue)


PROMPT = [1024, 1100, 1024]


def _trace(ids):
    offs = np.concatenate([[0], np.cumsum([len(i) for i in ids])]).astype(np.int64)
    return RuntimeTrace(np.zeros(3, dtype=np.int64), np.array(PROMPT, dtype=np.int64), np.ones(3, dtype=np.int64),
                        np.concatenate(ids).astype(np.int64), offs, 512)


def test_a_host_hit_beyond_hbm_is_reloaded_not_computed_by_hand():
    tier = HostTier("t", 0, 512 * 4, 10.0, "pcie5", 1e9, "")
    trace = _trace([[1, 2], [1, 2, 3], [1, 9]])
    rt = HostTierRuntime(_Inner({0: 0, 1: 256, 2: 0}), trace, tier, _Plan())
    for r in range(3):
        rt.add(r)
    s0, s1, s2 = (rt.schedule() for _ in range(3))
    assert (s0.batch.prefill, s0.extra_ns) == (1024, 0)  # empty tier; blocks 1, 2 stored after
    # request 1: HBM holds 256 tokens, the tier 1,024 (ids 1, 2): positions 257..1024 reloaded, 768 x 10 B at 1 GB/s
    assert (s1.batch.prefill, s1.extra_ns, s1.prefill_tokens) == (1100 - 256 - 768, 7680, 76)
    assert s1.batch.prefill_pos == float(sum(range(1025, 1101)))
    # request 2: id 1 hits (512 tokens), id 9 does not
    assert (s2.batch.prefill, s2.extra_ns) == (512, 5120)
    assert (rt.host_hit_tokens, rt.reload_bytes, rt.reload_ns) == (768 + 512, 12800, 12800)
    assert list(rt.lru) == [2, 1, 9]  # only full blocks enter (id 3 holds 76 tokens); LRU order, last used at the end


def test_the_tier_evicts_least_recently_used():
    tier = HostTier("t", 0, 512 * 2, 10.0, "pcie5", 1e9, "")
    trace = _trace([[1, 2], [3, 4, 5], [1, 2]])
    rt = HostTierRuntime(_Inner({0: 0, 1: 0, 2: 0}), trace, tier, _Plan())
    for r in range(3):
        rt.add(r)
    steps = [rt.schedule() for _ in range(3)]
    assert steps[2].extra_ns == 0 and rt.host_hit_tokens == 0  # 1 and 2 were evicted by 3 and 4 (2 blocks)
    assert (rt.stored_blocks, rt.evicted_blocks) == (6, 4)


def test_capacity_from_each_engines_flags():
    from csa_plan.planner.engines.host_tier import marginal_bytes_per_token

    plan, h200 = _Plan(), CARDS["h200"]
    assert marginal_bytes_per_token(plan) == 10.0
    t = resolve_tier(plan, None, 8, h200, offloading_gib=100)
    assert (t.host_bytes_per_gpu, t.capacity_tokens) == (100 * 2**30 // 8, 100 * 2**30 // 8 // 10)
    t = resolve_tier(plan, None, 8, h200, hicache_gb=50)
    assert (t.host_bytes_per_gpu, t.capacity_tokens) == (50 * 10**9, 5 * 10**9)

    class Sizing:
        tokens = 123_457
    t = resolve_tier(plan, Sizing(), 8, h200)
    assert t.capacity_tokens == 246_914 and t.link_bytes_s == HOSTS["h200"].link_bytes_s
    assert resolve_tier(plan, None, 4, CARDS["gb200"], hicache_gb=1).link == "nvlink-c2c"
    with pytest.raises(BadInput, match="more than the 250,000,000,000 B per GPU"):
        resolve_tier(plan, None, 8, h200, offloading_gib=3000)


@pytest.mark.parametrize("flags, engine, field", [
    (HostTierFlags(kv_offloading_size_gib=10), "sglang-0.5.23", "--kv-offloading-size"),
    (HostTierFlags(enable_hierarchical_cache=True), "vllm-0.33", "--enable-hierarchical-cache"),
    (HostTierFlags(hicache_size_gb=10), "sglang-0.5.23", "--hicache-size"),
])
def test_a_flag_the_engine_lacks_is_refused(flags, engine, field):
    with pytest.raises(BadInput) as exc:
        flags.check_for(engine, None)
    assert exc.value.field == field


@pytest.mark.parametrize("args, field", [
    (("--kv-offloading-size", "10"), "--kv-offloading-size"),
    (("--engine", "vllm-0.33", "--kv-offloading-size", "10", "--no-enable-prefix-caching"), "--kv-offloading-size"),
    (("--engine", "sglang-0.5.23", "--kv-offloading-size", "10"), "--kv-offloading-size"),
    (("--engine", "vllm-0.33", "--kv-offloading-size", "5000"), "--kv-offloading-size"),
])
def test_bad_host_tier_input_is_one_line(csa, args, field):
    r = csa("simulate", MOONCAKE, *PRO, *args)
    assert r.code == 2 and field in r.err and len(r.err.strip().splitlines()) == 1, (r.code, r.err)


def _runtime(csa, *args):
    r = csa("simulate", MOONCAKE, *PRO, "--engine", "vllm-0.33", *args, "--json")
    assert r.code == 0, r.err
    return json.loads(r.out)["runtime"]


def test_a_tier_that_never_hits_changes_nothing(csa):
    plain = _runtime(csa)
    tiny = _runtime(csa, "--kv-offloading-size", "0.001")  # smaller than one prefix block: never holds one
    assert tiny["host_tier"]["host_hit_tokens"] == 0 and tiny["host_tier"]["capacity_tokens"] < 512
    for key in ("ttft", "tpot", "queue_wait", "e2e", "prefix_cache", "preemptions", "steps"):
        assert tiny[key] == plain[key], key


def test_host_hits_are_counted_apart_and_cost_their_reload(csa):
    plain = _runtime(csa)
    tier = _runtime(csa, "--kv-offloading-size", "1000")
    h = tier["host_tier"]
    assert h["host_hit_tokens"] > 0 and h["reload_bytes"] > 0
    assert h["hbm_hit_tokens"] == tier["prefix_cache"]["hit_tokens"]
    assert h["reload_s"] == pytest.approx(h["reload_bytes"] / h["link_bytes_s"], rel=1e-6)
    assert tier["ttft"]["mean_s"] != plain["ttft"]["mean_s"]


def test_check_states_the_tiers_capacity_in_tokens(csa):
    r = csa("check", "deepseek-v4-pro", "--engine", "vllm-0.33", "--device-memory", "h200", "--tp", "8",
            "--kv-offloading-size", "1000", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    h = doc["host_tier"]
    assert h["host_bytes_per_gpu"] == 1000 * 2**30 // 8
    assert h["capacity_tokens"] == int(h["host_bytes_per_gpu"] // h["bytes_per_token"])
    sim = _runtime(csa, "--kv-offloading-size", "1000")["host_tier"]
    assert (sim["capacity_tokens"], sim["bytes_per_token"]) == (h["capacity_tokens"], h["bytes_per_token"])
