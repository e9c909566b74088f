"""Capture the expected figures of tests/simulate/test_vllm_runtime.py from vLLM 0.33.0's own Scheduler (outside CI).

Run in the cross-check virtualenv (see tools/crosscheck_vllm_runtime.py); writes
tests/fixtures/vllm_runtime_expected.json (vLLM 0.33.0 installed) or
tests/fixtures/vllm034_runtime_expected.json (vLLM 0.34.0 installed: the same cases plus DeepSeek-V4.1-Flash ones,
for tests/simulate/test_vllm034_runtime.py): per case the step count, a digest of every step's
figures (tokens per request, running, waiting, preempted, free blocks, prefix-hit tokens) and
every request's admission / first token / finish times and preemptions.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import crosscheck_vllm_runtime as x  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CASES = [  # name, model, trace, requests, skip, kv GiB, mnbt, seqs, caching, async[, MTP draft tokens]
    ("mooncake40-flash-8g-cache", "deepseek-v4-flash", "examples/traces/mooncake_conversation_head200.jsonl", 40, 0,
     8, 8192, 1024, True, True),
    ("mooncake40-flash-8g-nocache", "deepseek-v4-flash", "examples/traces/mooncake_conversation_head200.jsonl", 40, 0,
     8, 8192, 1024, False, True),
    ("azure30-flash-40g-seqs8-sync", "deepseek-v4-flash", "examples/traces/azure_llm_inference_2023_conv.csv", 30,
     1000, 40, 2048, 8, True, False),
    ("mooncake30-pro-10g-cache", "deepseek-v4-pro", "examples/traces/mooncake_conversation_head200.jsonl", 30, 40,
     10, 8192, 1024, True, True),
    # MTP with prefix caching (lookahead block hashes)
    ("mooncake60-flash-8g-cache-mtp1", "deepseek-v4-flash", "examples/traces/mooncake_conversation_head200.jsonl",
     60, 0, 8, 8192, 1024, True, True, 1),
    ("mooncake30-pro-10g-cache-mtp3-sync", "deepseek-v4-pro", "examples/traces/mooncake_conversation_head200.jsonl",
     30, 40, 10, 2048, 1024, True, False, 3),
    ("azure30-flash-40g-seqs8-cache-mtp2", "deepseek-v4-flash", "examples/traces/azure_llm_inference_2023_conv.csv",
     30, 12000, 40, 2048, 8, True, True, 2),
]
# DeepSeek-V4.1-Flash (vLLM 0.34.0 capture): rings, bounded replay, DSpark drafts; the card after the model name
CASES_V41 = [
    ("mooncake40-v41flash-h200-0.7g-cache", "deepseek-v4.1-flash@h200",
     "examples/traces/mooncake_conversation_head200.jsonl", 40, 0, 0.7, 8192, 1024, True, True),
    ("mooncake40-v41flash-b200-0.5g-cache-dspark5-sync", "deepseek-v4.1-flash@b200",
     "examples/traces/mooncake_conversation_head200.jsonl", 40, 0, 0.5, 2048, 1024, True, False, 5),
]


def digest(log: list[dict]) -> str:
    canon = [[sorted(s["sched"].items()), s["running"], s["waiting"], s["preempted"], s["free"], s["hit"]]
             for s in log]
    return hashlib.sha256(json.dumps(canon).encode()).hexdigest()


def main() -> int:
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.replay.loop import replay
    from csa_plan.planner.steptime.model import StepTime

    import vllm
    from crosscheck_engines import installed_vllm_release

    release = installed_vllm_release()
    if release not in ("vllm-0.33", "vllm-0.34"):
        raise SystemExit(f"the installed vLLM is {vllm.__version__}: capture from 0.33.0 or 0.34.0")
    cases = CASES + (CASES_V41 if release == "vllm-0.34" else [])
    fixture = "vllm_runtime_expected.json" if release == "vllm-0.33" else "vllm034_runtime_expected.json"
    out = {"release": f"vllm {vllm.__version__} (its own v1/core/sched/scheduler.py Scheduler / AsyncScheduler)",
           "cases": {}}
    for name, model_ref, path, n, skip, kv, mnbt, seqs, caching, async_on, *rest in cases:
        spec = rest[0] if rest else 0
        model_name, _, gpu = model_ref.partition("@")
        trace = x.load_trace(os.path.join(ROOT, path), n, skip)
        model = load_model(model_name, max_seq_len=131072)
        sched, _, hb = x.build_scheduler(model, 131072, int(kv * (1 << 30)), mnbt, seqs, async_on, spec, caching,
                                         release, gpu or "h200")
        ref = x.VllmReference(sched, trace, hb, 131072, spec, caching)
        res = replay(ref, trace, StepTime(20.0, 10_000.0), compiled=False)
        out["cases"][name] = {"model": model_name, "gpu": gpu or None, "trace": path, "requests": n, "skip": skip, "kv_gib": kv,
                              "max_num_batched_tokens": mnbt, "max_num_seqs": seqs, "prefix_caching": caching,
                              "async_scheduling": async_on, "num_speculative_tokens": spec,
                              "steps": len(ref.log), "step_digest": digest(ref.log),
                              "admitted_ns": res.admitted_ns, "first_token_ns": res.first_token_ns,
                              "finished_ns": res.finished_ns, "preemptions": res.preemptions,
                              "prefix_hit_tokens": res.prefix_hit_tokens}
        print(name, len(ref.log), "steps", sum(res.preemptions), "preemptions", res.prefix_hit_tokens, "hit", flush=True)
    with open(os.path.join(ROOT, "tests", "fixtures", fixture), "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
