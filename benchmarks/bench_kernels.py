"""GPU benchmark: HCA sparse attention and the indexer score scan at 1M-token context.

Many requests (64 by default) so the data far exceeds the 50 MB L2; 16 query heads per
device (V4-Pro at tensor parallel 8). Reports achieved bytes/s against the H200's
4.8 TB/s HBM3e peak, and the same computation written with plain CuPy arrays
(dequantize, matmul, softmax) as the baseline.

    python benchmarks/bench_kernels.py                      # needs CuPy and a GPU
    python benchmarks/bench_kernels.py --requests 128 --json

Bytes counted are the compulsory ones: every packed record (583 B) or index key (68 B)
read once, plus queries and outputs. A second HCA run with all 128 query heads on one
device reports FLOP/s (4 * head_dim per head and row: q.k and p.v). Before allocating
anything it prints the planned device bytes (kernel buffers plus the plain-CuPy
baseline's largest temporaries) and refuses (exit 3) when they exceed the device's free
memory (or 141 GB, an H200). --plan-only prints that plan and exits without a GPU.
Exit 5, with one line saying why, without a usable GPU.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

PEAK_BYTES_PER_S = 4.8e12
D = 512
REC = 583
KEY = 68
H200_BYTES = 141 * 10**9
FLOP_HEADS = 128


def plan_bytes(a) -> dict[str, int]:
    """Device bytes per phase (phases run one after another; the peak is the largest)."""
    R, W, C, I = a.requests, a.window, a.chunks, a.index_heads
    n_hca, n_csa = a.context // 128, a.context // 4
    rows = n_hca + W
    hca = {}
    for H in (a.heads, FLOP_HEADS):
        kern = (R * rows * REC * 2  # records + ring (a tiled copy alive while they are built)
                + R * H * D * 4 * 2 + R * C * H * (2 + D) * 4 + H * 4)
        # plain CuPy: int32 LUT indices, dequantized nope, the [R, rows, 512] rows, logits/exp
        base = R * rows * (448 * 4 * 3 + D * 4 * 2) + R * H * rows * 4 * 3
        hca[H] = kern + base
    keys = R * n_csa * KEY * 2 + R * I * 129 * 4 + R * n_csa * 4 + R * a.topk * 4
    # plain CuPy: int32 nibble indices (2), decoded nibbles (2), stacked, scaled keys, and [R, n, I] scores (2)
    idx_base = R * n_csa * (64 * 4 * 2 + 64 * 4 * 2 + 128 * 4 * 2) + R * n_csa * I * 4 * 2
    return {f"hca_attention ({a.heads} heads)": hca[a.heads], f"hca_attention ({FLOP_HEADS} heads, FLOP/s)": hca[FLOP_HEADS],
            "indexer_scan + top-k": keys + idx_base}


def _time(cp, fn, iters: int) -> float:
    fn()  # warm up (and compile)
    cp.cuda.runtime.deviceSynchronize()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) / iters * 1e-3  # seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--context", type=int, default=1 << 20)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--heads", type=int, default=16, help="query heads per device")
    ap.add_argument("--index-heads", type=int, default=64)
    ap.add_argument("--topk", type=int, default=1024)
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--chunks", type=int, default=16, help="record-range splits per (request, head group)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plan-only", action="store_true", help="print the planned device bytes and exit (no GPU)")
    args = ap.parse_args(argv)
    if args.requests < 64:
        print("bench_kernels: use at least 64 requests so the working set exceeds L2", file=sys.stderr)
    if args.heads > 64 * 16 or args.index_heads > 64 or args.context < 4096 or args.topk > args.context // 4:
        ap.error("need --index-heads <= 64, --context >= 4096 and --topk <= context/4")

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

    from csa_plan.kernels import oracle as O
    from csa_plan.kernels.backends import CupyBackend

    be = CupyBackend()
    R, H_dev, I, W = args.requests, args.heads, args.index_heads, args.window
    n_hca = args.context // 128
    n_csa = args.context // 4
    rng = np.random.default_rng(0)
    results = []

    # ---------------------------------------------------------------- HCA attention
    # valid packed rows: random records packed once on the host, tiled on the device
    proto = cp.asarray(O.pack_fp8_record(rng.standard_normal((256, D)).astype(np.float32)))
    records = cp.tile(proto, (R * n_hca // 256 + 1, 1))[: R * n_hca].reshape(R, n_hca, REC).copy()
    ring = cp.tile(proto, (R * W // 256 + 1, 1))[: R * W].reshape(R, W, REC).copy()
    inv = cp.asarray(O.INV_FREQ)
    lut = cp.asarray(O.E4M3)
    C = args.chunks
    pos = 0  # RoPE at position 0 is the identity, so the plain-CuPy baseline computes the same thing

    def dequant(rows):  # [R, n, 583] -> [R, n, 512] float32
        blocks = rows[..., : 7 * 65].reshape(*rows.shape[:-1], 7, 65)
        scale = cp.exp2((blocks[..., 0].astype(cp.int32) - 127).astype(cp.float32))
        nope = (cp.take(lut, blocks[..., 1:].astype(cp.int32)) * scale[..., None]).reshape(*rows.shape[:-1], 448)
        tail = (rows[..., 455:].copy().view(cp.uint16).astype(cp.uint32) << 16).view(cp.float32)
        return cp.concatenate([nope, tail], axis=-1)

    hca_err = {}
    for H in (H_dev, FLOP_HEADS):
        q = cp.asarray(rng.standard_normal((R, H, D)).astype(np.float32))
        sink = cp.asarray(rng.standard_normal(H).astype(np.float32))
        ml = cp.zeros(R * C * H * 2, cp.float32)
        po = cp.zeros(R * C * H * D, cp.float32)
        y = cp.zeros((R, H, D), cp.float32)

        def hca_kernel():
            be.attention(q, ring, W, records, None, n_hca, H, pos, inv, sink, ml, po, y, C, requests=R,
                         ring_stride=W * REC, rec_stride=n_hca * REC)

        def hca_cupy():
            kv = dequant(cp.concatenate([ring, records], axis=1))  # [R, n, D]
            logits = cp.einsum("rhd,rnd->rhn", q, kv) * cp.float32(D ** -0.5)
            m = cp.maximum(logits.max(axis=-1), sink)
            e = cp.exp(logits - m[..., None])
            den = e.sum(-1) + cp.exp(sink - m)
            return cp.einsum("rhn,rnd->rhd", e, kv) / den[..., None]

        hca_bytes = R * ((n_hca + W) * REC + 2 * H * D * 4)  # every row once, q in, y out
        flops = R * H * (n_hca + W) * 4 * D  # q.k and p.v per head and row
        for name, fn in ((f"hca_attention/{H}h/kernels", hca_kernel), (f"hca_attention/{H}h/cupy", hca_cupy)):
            t = _time(cp, fn, args.iters)
            results.append({"name": name, "seconds": t, "bytes": hca_bytes, "bytes_per_s": hca_bytes / t,
                            "fraction_of_peak": hca_bytes / t / PEAK_BYTES_PER_S, "flop_per_s": flops / t})
        ref = hca_cupy()
        hca_kernel()
        hca_err[H] = float(cp.abs(ref - y).max())
        results[-2]["speedup_vs_cupy"] = results[-1]["seconds"] / results[-2]["seconds"]
    records = ring = None  # back to the pool before the indexer phase
    err = max(hca_err.values())

    # ---------------------------------------------------------------- indexer scan + top-k
    kproto = cp.asarray(O.pack_fp4_key(rng.standard_normal((4096, 128)).astype(np.float32)))
    keys = cp.tile(kproto, (R * n_csa // 4096 + 1, 1))[: R * n_csa].reshape(R, n_csa, KEY).copy()
    iq = cp.asarray(rng.standard_normal((R, I, 128)).astype(np.float32))
    iw = cp.asarray(rng.standard_normal((R, I)).astype(np.float32))
    scores = cp.zeros((R, n_csa), cp.float32)
    ids = cp.zeros((R, args.topk), cp.int32)

    def index_kernel():
        be.index_scores(keys, iq, iw, I, n_csa, scores, requests=R, key_stride=n_csa * KEY, score_stride=n_csa)

    def topk_kernel():
        be.topk(scores, n_csa, args.topk, ids, requests=R, score_stride=n_csa, out_stride=args.topk)

    e2m1 = cp.asarray(O.E2M1)

    def index_cupy():
        blocks = keys.reshape(R, n_csa, 4, 17)
        scale = cp.exp2((blocks[..., 0].astype(cp.int32) - 127).astype(cp.float32))
        lo = cp.take(e2m1, (blocks[..., 1:] & 15).astype(cp.int32))
        hi = cp.take(e2m1, (blocks[..., 1:] >> 4).astype(cp.int32))
        nib = cp.stack([lo, hi], axis=-1).reshape(R, n_csa, 4, 32)
        k = (nib * scale[..., None]).reshape(R, n_csa, 128)
        return cp.einsum("rnh,rh->rn", cp.maximum(cp.einsum("rnd,rhd->rnh", k, iq), 0), iw)

    idx_bytes = R * (n_csa * KEY + I * 129 * 4 + n_csa * 4)
    for name, fn in (("indexer_scan/kernels", index_kernel), ("indexer_scan/cupy", index_cupy)):
        t = _time(cp, fn, args.iters)
        results.append({"name": name, "seconds": t, "bytes": idx_bytes, "bytes_per_s": idx_bytes / t,
                        "fraction_of_peak": idx_bytes / t / PEAK_BYTES_PER_S})
    results[-2]["speedup_vs_cupy"] = results[-1]["seconds"] / results[-2]["seconds"]
    index_kernel()
    sref = index_cupy()
    score_err = float(cp.abs(sref - scores).max() / cp.abs(sref).max())
    topk_bytes = R * n_csa * 4 * 5  # four histogram passes and the output scan read every score
    t = _time(cp, topk_kernel, args.iters)
    results.append({"name": "topk_radix/kernels", "seconds": t, "bytes": topk_bytes, "bytes_per_s": topk_bytes / t,
                    "fraction_of_peak": topk_bytes / t / PEAK_BYTES_PER_S})
    t = _time(cp, lambda: cp.argpartition(-scores, args.topk, axis=1)[:, : args.topk], args.iters)
    results.append({"name": "topk/cupy-argpartition", "seconds": t, "bytes": topk_bytes,
                    "bytes_per_s": topk_bytes / t, "fraction_of_peak": topk_bytes / t / PEAK_BYTES_PER_S})

    doc = {"context": args.context, "requests": R, "heads": H_dev, "flop_heads": FLOP_HEADS, "planned_bytes": plan, "index_heads": I, "peak_bytes_per_s": PEAK_BYTES_PER_S,
           "hca_max_abs_err_vs_cupy": err, "index_score_rel_err_vs_cupy": score_err, "results": results}
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"context {args.context:,}  requests {R}  heads/device {H_dev}  peak {PEAK_BYTES_PER_S / 1e12:.1f} TB/s")
        for r in results:
            extra = (f"  {r['flop_per_s'] / 1e12:7.2f} TFLOP/s" if "flop_per_s" in r else "") + \
                (f"  x{r['speedup_vs_cupy']:.1f} vs cupy" if "speedup_vs_cupy" in r else "")
            print(f"  {r['name']:<30} {r['seconds'] * 1e3:9.3f} ms  {r['bytes'] / 1e9:8.3f} GB  "
                  f"{r['bytes_per_s'] / 1e9:9.1f} GB/s  {r['fraction_of_peak']:6.1%} of peak{extra}")
        print(f"  check: HCA max |kernel - cupy| {err:.2e}; index score rel err {score_err:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
