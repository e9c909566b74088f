"""One decode step of the physics clock at a long context, layer by layer (planner/steptime/breakdown.py).

    python tools/steptime_layers.py [--model deepseek-v4.1-flash] [--gpu h200] [--tp 8] [--ep 8]
                                    [--engine sglang-0.5.23] [--context 131072] [--requests 1]

The records are read at the engine's widths: SGLang 0.5.23 on this card and attention TP
(planner/engines/sglang/v41.py), vLLM 0.33's defaults (planner/engines/vllm/startup.py), the Engram rows where the release keeps them (planner/weights/engram.py).
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from csa_plan.planner.cards import CARDS, HOSTS
    from csa_plan.planner.engines.sglang import v41
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.placement import Placement
    from csa_plan.planner.serving.step_source import model_inputs
    from csa_plan.planner.steptime.breakdown import decode_breakdown
    from csa_plan.planner.steptime.roles import ReadFormats, engram_read, flat_config, is_shared
    from csa_plan.planner.weights.rules import rules_for

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="deepseek-v4.1-flash")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--ep", type=int, default=8)
    ap.add_argument("--engine", default="sglang-0.5.23")
    ap.add_argument("--context", type=int, default=131072)
    ap.add_argument("--requests", type=int, default=1)
    args = ap.parse_args(argv)
    spec = load_model(args.model)
    data, inventory = model_inputs(spec)
    card = CARDS[args.gpu]
    placement = Placement(tp=args.tp, ep=args.ep)
    rules = rules_for(args.engine, None, card.capability)
    formats = engram = None
    if is_shared(spec.layers):
        if args.engine.startswith("sglang"):
            backend, _ = v41.attention_backend(True, card.capability, "fp8_e4m3", args.tp)
            win, rec = v41.layouts(backend)
            formats = ReadFormats(rec.bytes_per_token, win.bytes_per_token, v41.LOW_RATIO_INDEX_BYTES,
                                  f"{args.engine} {rec.name} records, {win.name} windows ({backend})")
        else:  # vLLM 0.33's defaults: nvfp4_ds_mla records and MXFP8 windows on SM100, else fp8_ds_mla; FP8 keys
            from csa_plan.planner.engines.vllm import startup as vs

            sm100 = card.capability[0] == 10
            win_b = vs.V41_SWA_BYTES[sm100]
            key = vs.index_key_bytes(128, False)
            rec_b = vs.V41_NVFP4_BYTES if sm100 else win_b
            formats = ReadFormats(rec_b, win_b, key, f"{args.engine} defaults ({rec_b} B records, {win_b} B windows, "
                                                     f"{key} B keys)")
        engram = engram_read(flat_config(data), args.engine, args.tp, 1, HOSTS.get(args.gpu))
    family = "sglang" if args.engine.startswith("sglang") else "vllm"
    rows = decode_breakdown(spec, data, inventory, args.gpu, placement, family, rules, args.context,
                            args.requests, formats, engram)
    print(f"{spec.name} on {args.gpu} TP{args.tp} EP{args.ep} ({args.engine}): one decode step, "
          f"{args.requests} request(s) at {args.context:,} tokens, one rank"
          + (f"; records: {formats.source}" if formats else "") + (f"; {engram.label}" if engram else ""))
    print(f"{'layer':>5}  {'role':<58} {'weights MB':>10} {'state KB':>9} {'GFLOP':>7} {'us':>8}")
    for r in rows:
        name = "rest" if r.layer is None else str(r.layer)
        print(f"{name:>5}  {r.role:<58} {r.weight_bytes / 1e6:>10.2f} {r.state_bytes / 1e3:>9.1f} "
              f"{r.flops / 1e9:>7.3f} {r.seconds * 1e6:>8.1f}")
    print(f"{'step':>5}  {'':<58} {sum(r.weight_bytes for r in rows) / 1e6:>10.2f} "
          f"{sum(r.state_bytes for r in rows) / 1e3:>9.1f} {sum(r.flops for r in rows) / 1e9:>7.3f} "
          f"{sum(r.seconds for r in rows) * 1e6:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
