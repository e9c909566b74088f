"""A runtime seen through ``loop.replay``: every call goes to the wrapped engine runtime, and a
subclass overrides the calls it logs or checks (``schedule``, ``complete``)."""

from __future__ import annotations


class RuntimeSpy:
    def __init__(self, rt):
        self.rt, self.log = rt, []
        # the loop reads these as attributes of the runtime it steps
        self.pools, self.usable_units, self.pipeline_depth, self.label = (rt.pools, rt.usable_units,
                                                                          rt.pipeline_depth, rt.label)

    def __getattr__(self, name):
        return getattr(self.rt, name)


class VllmStepLog(RuntimeSpy):
    """Our runtime, logging each step as ``tools/capture_vllm_runtime_cases.py`` logs vLLM's own scheduler."""

    def schedule(self):
        step = self.rt.schedule()
        self.log.append([sorted(zip(step.requests, step.tokens)), self.rt.running(), self.rt.waiting(),
                         sorted(step.preempted), self.rt.kv.pool.num_free(), step.prefix_hit_tokens])
        return step


def assert_replay_equals_captured(rt, trace, time, case: dict) -> None:
    """Replay ``rt`` with the Python twin, logged step by step, and compare every figure a captured case of
    vLLM's own scheduler holds: the step count and digest, and each request's admission, first token,
    finish, preemptions and prefix-hit tokens."""
    import hashlib
    import json

    from csa_plan.planner.replay.loop import replay

    logged = VllmStepLog(rt)
    res = replay(logged, trace, time, compiled=False)
    assert len(logged.log) == case["steps"]
    assert hashlib.sha256(json.dumps(logged.log).encode()).hexdigest() == case["step_digest"]
    assert res.admitted_ns == case["admitted_ns"]
    assert res.first_token_ns == case["first_token_ns"]
    assert res.finished_ns == case["finished_ns"]
    assert res.preemptions == case["preemptions"]
    assert res.prefix_hit_tokens == case["prefix_hit_tokens"]
