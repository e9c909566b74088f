"""The prefill time of one long prompt per deployment shape, under the shipped physics step time.

    python tools/tp_scaling.py [--model deepseek-v4-flash] [--gpu b200] [--tokens 131072,1044301]

One prompt alone, prefilled in chunks of 8,192 tokens (vLLM's max_num_batched_tokens of the published
long-context runs), each chunk one step of the physics clock for one rank of the shape: TP 1/2/4/8 (the
MoE over TP, and TP8 with EP8) and one rank of DP8 with EP8. The curve the replay's TTFT follows for a
lone long prompt (docs/steptime.md), from the same shard rules the weight budget reads.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.placement import Placement
    from csa_plan.planner.serving.step_source import model_inputs
    from csa_plan.planner.steptime.model import StepBatch, batch_ns
    from csa_plan.planner.steptime.physics import physics_step_time
    from csa_plan.planner.weights.rules import RULES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="deepseek-v4-flash")
    ap.add_argument("--gpu", default="b200")
    ap.add_argument("--tokens", default="131072,1044301")
    ap.add_argument("--chunk", type=int, default=8192)
    args = ap.parse_args(argv)
    spec = load_model(args.model)
    data, inv = model_inputs(spec)
    shapes = [("TP1", Placement(tp=1)), ("TP2", Placement(tp=2)), ("TP4", Placement(tp=4)),
              ("TP8", Placement(tp=8)), ("TP8+EP8", Placement(tp=8, ep=8)), ("DP8+EP8 (a rank)", Placement(dp=8, ep=8))]
    print(f"{args.model} on {args.gpu}, vLLM 0.33 shard rules, one prompt, {args.chunk:,}-token chunks")
    print(f"{'shape':18} " + " ".join(f"{int(n):>11,} tok  speed-up" for n in args.tokens.split(",")))
    base = {}
    for name, p in shapes:
        t = physics_step_time(spec, data, inv, args.gpu, p, "vllm", "vLLM 0.33.0", RULES["vllm-0.33"])
        cells = []
        for n in (int(x) for x in args.tokens.split(",")):
            ns = 0
            for start in range(0, n, args.chunk):
                b = StepBatch()
                b.add_prefill(start, min(args.chunk, n - start))
                ns += batch_ns(b, t)
            base.setdefault(n, ns)
            cells.append(f"{ns / 1e9:>13.2f} s  x{base[n] / ns:5.2f}")
        print(f"{name:18} " + " ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
