"""GPU benchmark of the decode kernels at 1M-token context: CSA and HCA, batch 1 and 16.

    python benchmarks/bench_kernels.py                      # needs CuPy and a GPU
    python benchmarks/bench_kernels.py --requests 16 --json   # batches 1 and 16 (the GPU check)
    python benchmarks/bench_kernels.py --plan-only          # the device-memory plan, no GPU
    python benchmarks/bench_kernels.py --from-probe probe.json --json   # report a probe run (the GPU check)

It runs the kernel probe (kernels/probe.py) with --iters calls per timing: the indexer scan over
262,144 FP4 keys per request (64 index heads), top-k (512 and 1024), CSA attention over
the window plus the selected records and HCA attention over the window plus all 8,192
records, for 16 heads (V4-Pro at --tp 8), 64 (V4-Flash) and 128 (V4-Pro), at batch 1 and
16 and --requests (64 by default: at batch 64 even HCA's records outgrow the 50 MB L2), query position 1,048,575 (RoPE's large-angle path), attention split into
--chunks row ranges.

For every kernel it reports two byte counts (kernels/traffic.py): *compulsory* (every input
read once, every output written once: top-k reads its scores once) and *moved* (what these
kernels read and write as written: top-k's six passes over the scores, index_scores' query
staging per block, each head group re-reading the rows, and the attention partials written
and read back), the device-time rate of each against the device-to-device copy rate measured on the
same GPU (the achievable ceiling) and against the H200's 4.8 TB/s nominal peak, and cold
and device times. The device time per call is the probe's (kernels/probe.py ``Timer``): --iters
calls replayed from one CUDA graph between two events (or issued back to back where a graph
cannot be captured, flagged host-bound when the host could not keep up), the host's own time
per call (Python argument checks and the launch) reported apart, never added in.

Beside each attention and indexer timing it prints the throughput model's prediction for the
same configuration (benchmarks/throughput_model.py: the same context, batch, heads and
attention split) and measured / model from the device time, so a GPU run says at once which
of the model's assumed constants to correct. --from-probe reports a probe document already
written (the GPU check's probe step) instead of running the kernels again. Top-k rows have no prediction (the probe's top-k runs are
compacted without the fused histogram, a configuration the model does not price).

It gates on correctness: every probe check (indexer scores against the oracle, top-k ids
equal to the oracle's top-k of the kernel scores, attention against the oracle, a second
launch bit-identical) must pass, or it exits 4 after printing the figures. Before
allocating anything it prints the planned device bytes and refuses (exit 3) a plan over the
device's free memory (or 141 GB, an H200); --plan-only prints it without a GPU. Exit 5,
with one line saying why, without a usable GPU.
"""

from __future__ import annotations

import argparse
import json
import sys

PEAK_BYTES_PER_S = 4.8e12
H200_BYTES = 141 * 10**9
FLOP_HEADS = 128


def plan_bytes(a) -> dict[str, int]:
    """Device bytes of the benchmark's largest batch (the probe's buffers; the copy ceiling runs alone)."""
    from csa_plan.kernels.probe import COPY_BYTES, plan_bytes as probe_plan

    heads = max(a.heads, FLOP_HEADS)
    kernels = probe_plan(a.context, a.requests, heads, a.index_heads, a.topk, a.window, a.chunks)
    return {f"kernels at batch {a.requests} ({heads} heads)": kernels, "copy ceiling": 2 * COPY_BYTES}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--context", type=int, default=1 << 20)
    ap.add_argument("--requests", type=int, default=64,
                    help="the largest batch: batches 1, 16 and this (64: HCA's records exceed L2 hot)")
    ap.add_argument("--heads", type=int, default=16, help="query heads of the smallest geometry (16: V4-Pro at --tp 8)")
    ap.add_argument("--index-heads", type=int, default=64)
    ap.add_argument("--topk", type=int, default=1024)
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--chunks", type=int, default=16, help="attention row-range splits per (request, head group)")
    ap.add_argument("--iters", type=int, default=20, help="calls per timing (one CUDA graph, or back to back)")
    ap.add_argument("--geometries", default="v4-pro-tp8,v4-flash,v4-pro")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plan-only", action="store_true", help="print the planned device bytes and exit (no GPU)")
    ap.add_argument("--from-probe", metavar="FILE", help="report this probe --json document (no kernel runs)")
    args = ap.parse_args(argv)
    if args.index_heads > 64 or args.context < 4096 or args.topk > args.context // 4 or args.window != 128:
        ap.error("need --index-heads <= 64, --context >= 4096, --topk <= context/4 and --window 128")

    if args.from_probe:
        return from_probe(args)
    plan = plan_bytes(args)
    peak = max(plan.values())
    if not args.plan_only:
        from csa_plan.kernels.gpu_env import gpu_unavailable_reason

        reason = gpu_unavailable_reason()
        if reason:
            print(f"bench_kernels: {reason}", file=sys.stderr)
            return 5
    print(f"bench_kernels: planned device bytes (peak of the phases): {peak:,} B = {peak / 1e9:.2f} GB; "
          + "; ".join(f"{k} {v / 1e9:.2f} GB" for k, v in plan.items()), file=sys.stderr)
    if args.plan_only:
        return 0 if peak <= H200_BYTES else 3
    import cupy as cp

    free, _total = cp.cuda.runtime.memGetInfo()
    if peak > min(int(free), H200_BYTES):
        print(f"bench_kernels: refused: the plan needs {peak:,} B, the device has {int(free):,} B free; "
              f"lower --requests or --context", file=sys.stderr)
        return 3
    return run(args, cp)


def run(args, cp) -> int:
    from csa_plan.kernels import probe

    batches = ",".join(str(b) for b in sorted({1, min(16, args.requests), args.requests}))
    _code, doc = probe.run(["--context", str(args.context), "--batches", batches, "--geometries", args.geometries,
                            "--chunks", str(args.chunks), "--hot", str(args.iters), "--index-heads",
                            str(args.index_heads)], cupy_module=cp)
    return report(args, doc)


def from_probe(args) -> int:
    """Report a probe document (its context and index heads, not the command line's)."""
    try:
        with open(args.from_probe) as f:
            doc = json.load(f)
        if doc.get("schema") != "csa-plan/probe/v1":
            raise ValueError(f"schema {doc.get('schema')!r}, want csa-plan/probe/v1")
        args.context = int(doc["context"])
        args.index_heads = int(doc.get("index_heads", args.index_heads))
        args.requests = max(doc["batches"])
    except FileNotFoundError:
        print(f"bench_kernels: --from-probe {args.from_probe}: no such file (did the probe step run?)",
              file=sys.stderr)
        return 4
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"bench_kernels: --from-probe {args.from_probe}: not a probe document: {exc}", file=sys.stderr)
        return 2
    return report(args, doc)


def _model():
    """benchmarks/throughput_model.py and its recorded SASS counts, or (None, None)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().with_name("throughput_model.py")
    spec = importlib.util.spec_from_file_location("throughput_model", path)
    if spec is None or spec.loader is None:
        return None, None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("throughput_model", mod)  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod, mod.load_counts()


def model_us(model, counts, context: int, index_heads: int, t: dict) -> float | None:
    """The model's time for a probe timing row's own configuration, or None (no such model)."""
    from csa_plan.kernels.tc_geometry import AttnSplit

    case = t["case"]
    if case.startswith("attention"):
        ratio = 4 if t["kind"] == "CSA" else 128
        split = AttnSplit(int(t["chunks"]), bool(t.get("fused")))
        return model.attention(counts, ratio, context, t["requests"], t["heads"], split=split).total_us
    if case.startswith("indexer/"):
        return model.indexer(counts, context, t["requests"], index_heads, hist0_fused=False).total_us
    return None


def report(args, doc: dict) -> int:
    """Print the figures of a probe document; exit 4 when any correctness check failed."""
    ceiling = doc["copy_ceiling"]["bytes_per_s"]
    model, counts = _model()
    results = []
    for t in doc["timings"]:
        dev_s = t["device_ms"] * 1e-3
        r = dict(t)
        r["fraction_of_peak"] = t["compulsory_bytes"] / dev_s / PEAK_BYTES_PER_S if dev_s > 0 else None
        r["moved_over_compulsory"] = t["moved_bytes"] / t["compulsory_bytes"]
        m = model_us(model, counts, args.context, args.index_heads, t) if model else None
        r["model_us"] = m
        # the kernel's device time against the model's (the host's time per call is not in it)
        r["measured_over_model"] = (t["device_us"] / m) if m and t["device_us"] > 0 else None
        results.append(r)
    out = {"schema": "csa-plan/bench-kernels/v3", "timer": doc.get("timer"), "context": args.context, "batches": doc["batches"],
           "machine": doc["machine"], "copy_ceiling": doc["copy_ceiling"], "peak_bytes_per_s": PEAK_BYTES_PER_S,
           "planned_bytes": plan_bytes(args), "checks": doc["checks"], "failed": doc["failed"], "results": results}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"context {args.context:,}  batches {doc['batches']}  copy ceiling "
              f"{(ceiling or 0) / 1e12:.2f} TB/s  nominal peak {PEAK_BYTES_PER_S / 1e12:.1f} TB/s")
        for r in results:
            rate = r["hot_compulsory_bytes_per_s"] or 0
            print(f"  {r['case']:<36} device {r['device_us']:9.2f} us ({r['method']}"
                  f"{', host-bound' if r['host_bound'] else ''})  host {r['host_us']:7.1f} us  "
                  f"cold {r['cold_ms']:9.3f} ms  compulsory "
                  f"{r['compulsory_bytes'] / 1e9:7.3f} GB ({rate / 1e9:7.1f} GB/s, "
                  f"{(r['hot_fraction_of_copy_ceiling'] or 0):6.1%} of copy)  moved {r['moved_bytes'] / 1e9:7.3f} GB "
                  f"(x{r['moved_over_compulsory']:.2f})"
                  + (f"  model {r['model_us']:8.2f} us (measured/model {r['measured_over_model']:.2f})"
                     if r["model_us"] and r["measured_over_model"] else ""))
        for c in doc["checks"]:
            print(f"  {c['status'].upper():4} {c['name']}: {c['detail']}")
    if doc["failed"]:
        print(f"bench_kernels: {doc['failed']} correctness check(s) FAILED: the figures above are not valid",
              file=sys.stderr)
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
