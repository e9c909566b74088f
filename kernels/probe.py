"""The 1M-token kernel probe: the decode kernels at V4-Flash and V4-Pro geometry, checked and timed.

    python -m csa_plan.kernels.probe --json probe.json            # on a GPU (needs CuPy)
    python -m csa_plan.kernels.probe --small                      # seconds: the compute-sanitizer probe

At ``--context`` tokens (default 1,048,576) and for each batch in ``--batches`` (1 and 16):

* the indexer scan over 262,144 FP4 keys per request (64 index heads) and top-k of them
  (512 for V4-Flash, 1024 for V4-Pro);
* CSA attention over the 128-row window plus the k selected records, and HCA attention
  over the window plus all 8,192 records, for 16 heads (V4-Pro at --tp 8), 64 (V4-Flash)
  and 128 (V4-Pro), split over ``--chunks`` row ranges (multi-chunk merges by attn_merge),
  then fused (attn_tc_fused: the split tc_geometry.attn_split picks when it is fused, else
  clusters of 8 chunks merged in distributed shared memory), query RoPE at position
  context - 1 (the large-angle path).

Records and keys are gathered (per request, at random) from a pool of distinct random ones
(65,536 at 1M tokens, ``pool_rows``: context / 16, so --small packs 512), so about 4 copies
of each key sit in a request: top-k meets exact ties and
must break them toward the lower id. Checks: index scores against the oracle on the first
and the last request of a batch (relative error <= 1e-4; an oracle scan is a few seconds
per request on the host), top-k ids exactly equal to the oracle's top-k of the kernel's own
scores for every request, attention against the oracle for every request (<= 1e-3), and
every output bit-identical on a second launch. Timings (``Timer``): the device time per
call from ``--hot`` calls replayed from one CUDA graph (or issued back to back) between
events, the host's time per call apart, and a cold call (L2 flushed by writing
``FLUSH_BYTES`` first), with each kernel's compulsory and moved bytes (kernels/traffic.py) and
the device-to-device copy rate measured on the same device as the ceiling.

Exit 0 when every check passes, 4 when one fails, 5 (one line) without a usable GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from csa_plan.kernels import oracle as O
from csa_plan.kernels import traffic as T
from csa_plan.kernels.tc_geometry import (FUSED_CLUSTERS, attn_split, attn_tc_launch, topk_blocks,
                                          topk_entry_room, topk_work_words)

CONTEXT = 1 << 20
WINDOW = 128
INDEX_HEADS = 64
POOL = 65536
GEOMETRIES = {"v4-pro-tp8": (16, 1024), "v4-flash": (64, 512), "v4-pro": (128, 1024)}  # heads, top-k
FLUSH_BYTES = 256 << 20  # twice the H200's 50 MB L2, and then some
COPY_BYTES = 1 << 30
ATTN_ATOL = 1e-3
SCORE_RTOL = 1e-4
EXIT_OK, EXIT_FAILED, EXIT_NO_GPU = 0, 4, 5


def _parse(argv):
    ap = argparse.ArgumentParser(prog="python -m csa_plan.kernels.probe", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--context", type=int, default=CONTEXT)
    ap.add_argument("--batches", default="1,16", help="comma-separated request counts")
    ap.add_argument("--geometries", default=",".join(GEOMETRIES), help=f"of {', '.join(GEOMETRIES)}")
    ap.add_argument("--chunks", type=int, default=16, help="attention row-range splits")
    ap.add_argument("--hot", type=int, default=20,
                    help="calls per timing (one CUDA graph, or back to back); 0: the checks only, no timings")
    ap.add_argument("--index-heads", type=int, default=INDEX_HEADS, help="indexer heads (64 in V4)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--position", type=int, default=None,
                    help="the query's RoPE position [default: context - 1]; e.g. 1048575 at a short context "
                         "reaches RoPE's large-angle path cheaply (the emulator's GPU-numerics test)")
    ap.add_argument("--small", action="store_true", help="context 8192, batch 1 and 2, 16 heads (sanitizers)")
    ap.add_argument("--json", metavar="FILE", help="write the document here ('-': stdout)")
    a = ap.parse_args(argv)
    if a.small:
        a.context, a.batches, a.geometries, a.hot = 8192, "1,2", "v4-pro-tp8", 1
    a.batches = [int(b) for b in a.batches.split(",") if b]
    a.geometries = [g for g in a.geometries.split(",") if g]
    bad = [g for g in a.geometries if g not in GEOMETRIES]
    if (bad or a.context < 4096 or a.context % 128 or not a.batches or min(a.batches) < 1 or a.chunks < 1 or a.hot < 0
            or not 1 <= a.index_heads <= 64 or (a.position is not None and not a.context - 1 <= a.position < 1 << 20)):
        ap.error("need known --geometries, --context >= 4096 and a multiple of 128, batches >= 1, chunks >= 1, "
                 "1 <= --index-heads <= 64, context - 1 <= --position < 1,048,576, --hot >= 0")
    if max(GEOMETRIES[g][1] for g in a.geometries) > a.context // 4:
        ap.error("top-k exceeds the CSA records of --context")
    return a


class Timer:
    """Kernel time, not Python's: a probe call is a few launches behind ~70 us of Python
    argument checks, against a few us of decode kernel, so one call between two events times
    the host. ``measure`` reports apart:

    * device: ``hot`` calls captured into one CUDA graph (no Python between the launches),
      launched between two events: device time per call = elapsed / hot. Where the capture
      fails (an older CuPy, a call that allocates), the ``hot`` calls issued back to back
      between two events instead: the device time per call unless the host issues them more
      slowly than the device runs them, which ``host_bound`` flags (then it is an upper bound);
    * host: the wall time of issuing those back-to-back calls / hot (argument checks + launch);
    * cold: one call after flushing L2 (writing ``FLUSH_BYTES``), between events, host included.
    """

    def __init__(self, cp, graphs: bool = True) -> None:
        self.cp = cp
        self.graphs = graphs and hasattr(cp.cuda, "Stream")
        self.flush = cp.zeros(FLUSH_BYTES // 4, dtype=cp.float32)

    def _events(self):
        return self.cp.cuda.Event(), self.cp.cuda.Event()

    def once(self, fn, cold: bool = False) -> float:
        """ms of one call between events (its host overhead included)."""
        cp = self.cp
        if cold:
            self.flush[...] = 1.0
        cp.cuda.runtime.deviceSynchronize()
        start, stop = self._events()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        return float(cp.cuda.get_elapsed_time(start, stop))

    def back_to_back(self, fn, n: int) -> tuple[float, float]:
        """(device ms per call, host us per call) of n calls issued back to back between events."""
        cp = self.cp
        cp.cuda.runtime.deviceSynchronize()
        start, stop = self._events()
        start.record()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        host_s = time.perf_counter() - t0
        stop.record()
        stop.synchronize()
        return float(cp.cuda.get_elapsed_time(start, stop)) / n, host_s / n * 1e6

    def graph(self, fn, n: int) -> float | None:
        """Device ms per call of n calls replayed from one CUDA graph, or None (no capture)."""
        if not self.graphs:
            return None
        cp = self.cp
        cp.cuda.runtime.deviceSynchronize()
        stream = cp.cuda.Stream(non_blocking=True)
        try:
            with stream:
                stream.begin_capture()
                try:
                    for _ in range(n):
                        fn()
                finally:
                    g = stream.end_capture()
            g.launch(stream)  # once untimed: the graph's own upload
            start, stop = self._events()
            start.record(stream)
            g.launch(stream)
            stop.record(stream)
            stop.synchronize()
        except Exception:  # not capturable here: the back-to-back figure stands
            self.graphs = False
            cp.cuda.runtime.deviceSynchronize()
            return None
        return float(cp.cuda.get_elapsed_time(start, stop)) / n

    def measure(self, fn, hot: int) -> dict:
        hot = max(1, hot)
        cold = self.once(fn, cold=True)
        b2b_ms, host_us = self.back_to_back(fn, hot)
        graph_ms = self.graph(fn, hot)
        device_ms = graph_ms if graph_ms is not None else b2b_ms
        return {"cold_ms": cold, "device_ms": device_ms, "device_us": device_ms * 1e3,
                "method": "graph" if graph_ms is not None else "back-to-back", "launches_timed": hot,
                "back_to_back_ms": b2b_ms, "host_us": host_us,
                "host_bound": graph_ms is None and host_us >= 0.9 * b2b_ms * 1e3}


def copy_ceiling(cp, timer: Timer, nbytes: int) -> dict:
    """Device-to-device copy of nbytes: read + written bytes per second (3 back to back)."""
    src = cp.zeros(nbytes // 4, dtype=cp.float32)
    dst = cp.zeros(nbytes // 4, dtype=cp.float32)

    def copy():
        dst[...] = src

    copy()
    ms, _host = timer.back_to_back(copy, 3)
    del src, dst
    return {"bytes": nbytes, "ms": ms, "bytes_per_s": 2 * nbytes / (ms * 1e-3) if ms > 0 else None}


def pool_rows(context: int) -> int:
    """Distinct random records and keys gathered from: about 4 copies of each in a request's
    context / 4 index keys (ties for top-k), at most POOL (packed on the host once)."""
    return max(1, min(POOL, context // 16))


def machine_facts(cp) -> dict:
    rt = cp.cuda.runtime
    dev = cp.cuda.Device().id
    props = rt.getDeviceProperties(dev)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    facts = {"device": name, "total_bytes": int(props["totalGlobalMem"]),
             "driver_version": int(rt.driverGetVersion()), "runtime_version": int(rt.runtimeGetVersion()),
             "cupy": getattr(cp, "__version__", "unknown")}
    for k in ("clockRate", "memoryClockRate", "memoryBusWidth", "multiProcessorCount", "l2CacheSize", "major", "minor"):
        if k in props:
            facts[k] = int(props[k])
    return facts


def _bits(a) -> np.ndarray:
    h = a.get() if hasattr(a, "get") else np.asarray(a)
    return np.ascontiguousarray(h).view(np.uint8)


class Probe:
    def __init__(self, cp, be, a) -> None:
        self.cp, self.be, self.a = cp, be, a
        self.timer = Timer(cp)
        self.checks: list[dict] = []
        self.timings: list[dict] = []
        self.rng = np.random.default_rng(a.seed)
        self.g = O.Geometry(ratio=4, num_heads=1, max_seq_len=a.context)
        self.pool = pool_rows(a.context)
        self.rec_pool = O.pack_fp8_record(self.rng.standard_normal((self.pool, 512), dtype=np.float32))
        self.key_pool = O.pack_fp4_key(self.rng.standard_normal((self.pool, 128), dtype=np.float32))
        self.inv = cp.asarray(O.INV_FREQ)

    def check(self, name: str, ok: bool, detail: str, value=None) -> None:
        self.checks.append({"name": name, "status": "pass" if ok else "fail", "detail": detail, "value": value})

    def time(self, case: str, fn, traffic: T.Traffic, **info) -> None:
        """One timing row: the kernel's device time per call (Timer.measure), rates from it."""
        if self.a.hot == 0:  # checks only
            return
        m = self.timer.measure(fn, self.a.hot)
        row = {"case": case, **info, **traffic.as_dict(), **m}
        dev = m["device_ms"]
        for what in ("compulsory", "moved"):
            b = row[f"{what}_bytes"]
            row[f"hot_{what}_bytes_per_s"] = b / (dev * 1e-3) if dev > 0 else None
        ceiling = self.ceiling["bytes_per_s"]
        row["hot_fraction_of_copy_ceiling"] = (row["hot_compulsory_bytes_per_s"] / ceiling
                                               if ceiling and row["hot_compulsory_bytes_per_s"] else None)
        self.timings.append(row)

    def run(self) -> None:
        self.ceiling = (copy_ceiling(self.cp, self.timer, max(1 << 24, min(COPY_BYTES, self.a.context * 1024)))
                        if self.a.hot else {"bytes": 0, "ms": None, "bytes_per_s": None})
        for R in self.a.batches:
            self.batch(R)

    def batch(self, R: int) -> None:
        cp, be, a, rng = self.cp, self.be, self.a, self.rng
        n_csa, n_hca, W, I = a.context // 4, a.context // 128, WINDOW, a.index_heads
        pos = a.position if a.position is not None else a.context - 1
        rec = self.g.record_bytes
        P = self.pool
        key_ids = rng.integers(0, P, (R, n_csa), dtype=np.int32)
        csa_ids = rng.integers(0, P, (R, n_csa), dtype=np.int32)
        hca_ids = rng.integers(0, P, (R, n_hca))
        ring_ids = rng.integers(0, P, (R, W))
        keys = cp.zeros((R, n_csa, 68), dtype=cp.uint8)
        csa = cp.zeros((R, n_csa, rec), dtype=cp.uint8)
        hca = cp.zeros((R, n_hca, rec), dtype=cp.uint8)
        ring = cp.zeros((R, W, rec), dtype=cp.uint8)
        for r in range(R):  # one request's bytes on the host at a time
            keys[r] = cp.asarray(self.key_pool[key_ids[r]])
            csa[r] = cp.asarray(self.rec_pool[csa_ids[r]])
            hca[r] = cp.asarray(self.rec_pool[hca_ids[r]])
            ring[r] = cp.asarray(self.rec_pool[ring_ids[r]])
        iq_h = O.bf16_round(rng.standard_normal((R, I, 128), dtype=np.float32))  # the indexer's BF16 operand
        iw_h = rng.standard_normal((R, I), dtype=np.float32)
        iq, iw = cp.asarray(iq_h), cp.asarray(iw_h)
        scores = [cp.zeros((R, n_csa), dtype=cp.float32) for _ in range(2)]

        def scan(i):
            be.index_scores(keys, iq, iw, I, n_csa, scores[i], requests=R, key_stride=n_csa * 68, score_stride=n_csa)

        tag = f"R={R}"
        scan(0)
        scan(1)
        be.synchronize()
        s_host = scores[0].get()
        same = np.array_equal(_bits(scores[0]), _bits(scores[1]))
        worst = 0.0
        for r in sorted({0, R - 1}):
            ref = O.index_scores(self.key_pool[key_ids[r]], iq_h[r], iw_h[r])
            worst = max(worst, float(np.abs(ref - s_host[r]).max() / max(1e-30, float(np.abs(ref).max()))))
        self.check(f"indexer scan vs oracle ({tag})", worst <= SCORE_RTOL and same,
                   f"{n_csa:,} keys x {I} heads per request; rel err {worst:.1e} on requests {sorted({0, R - 1})} "
                   f"(tol {SCORE_RTOL:g}); second launch bit-identical: {same}", worst)
        self.time(f"indexer/{tag}", lambda: scan(1), T.index_scores(R, n_csa, I, sm_count=be.sm_count), kind="CSA", requests=R, n=n_csa)

        for k in sorted({GEOMETRIES[gname][1] for gname in a.geometries}):
            ids = [cp.zeros((R, k), dtype=cp.int32) for _ in range(2)]
            # room for n / 16 entries, at least 4 k (keys of the threshold bin and above) past the header
            work = cp.zeros(R * topk_work_words(topk_blocks(n_csa, R, be.sm_count), topk_entry_room(n_csa, k)),
                            dtype=cp.uint32)

            def sel(i, k=k, ids=ids, work=work):
                be.topk(scores[0], n_csa, k, ids[i], requests=R, score_stride=n_csa, out_stride=k, work=work)

            sel(0)
            sel(1)
            be.synchronize()
            got = ids[0].get()
            tw = be.topk_work(work, n_csa, R)
            seg = segment_use(work, tw)
            exact = sum(np.array_equal(O.topk_ids(s_host[r], k), got[r]) for r in range(R))
            same = np.array_equal(_bits(ids[0]), _bits(ids[1]))
            ties = int(sum(len(s_host[r]) - len(np.unique(s_host[r])) for r in range(R)))
            self.check(f"top-{k} of {n_csa:,} ({tag})", exact == R and same,
                       f"ids equal the oracle's top-k of the kernel scores in {exact}/{R} requests "
                       f"({ties:,} tied scores to break); second launch bit-identical: {same}", R - exact)
            self.time(f"topk{k}/{tag}", lambda: sel(1), T.topk(R, n_csa, k, be.sm_count, **seg), kind="CSA",
                      requests=R, n=n_csa, k=k, entries=seg["fitting_entries"],
                      overflowing_blocks=seg["overflowing_blocks"], seg_capacity=seg["seg_capacity"])
            if tw is not None:
                self.fused(keys, iq, iw, I, n_csa, R, k, work, scores, s_host, got, seg, tag)
            for gname in a.geometries:
                H, gk = GEOMETRIES[gname]
                if gk == k:
                    self.attention(gname, H, R, "CSA", ring, csa, ids[0], got, k, ring_ids, csa_ids, pos)
            del ids, work
        for gname in a.geometries:
            H, _ = GEOMETRIES[gname]
            self.attention(gname, H, R, "HCA", ring, hca, None, None, n_hca, ring_ids, hca_ids, pos)

    def fused(self, keys, iq, iw, I, n, R, k, work, scores, s_host, got, seg, tag) -> None:
        """The indexer with top-k's first histogram in its epilogue, then top-k from it (four
        reads fewer of the scores than unfused and uncompacted: hist0 fused; pass 2, the count and
        the write on the segments): the same score bits and ids as the separate launches, and
        both pairs timed."""
        be = self.be
        ids = self.cp.zeros((R, k), dtype=self.cp.int32)

        def both(fuse):
            tw = be.topk_work(work, n, R)
            f = be.index_scores(keys, iq, iw, I, n, scores[1], requests=R, key_stride=n * 68, score_stride=n,
                                topk_work=tw if fuse else None)
            be.topk(scores[1], n, k, ids, requests=R, score_stride=n, out_stride=k, work=f if fuse else tw)
            return f is not None and f.hist0_filled

        filled = both(True)
        be.synchronize()
        same = np.array_equal(_bits(scores[1]), np.ascontiguousarray(s_host).view(np.uint8))
        ok = np.array_equal(ids.get(), got) and filled
        self.check(f"indexer+top-{k} fused ({tag})", same and ok,
                   f"hist0 from the indexer's epilogue: {filled}; scores bit-identical to the unfused indexer: "
                   f"{same}; ids equal the unfused top-k's: {ok}", int(not (same and ok)))
        for fuse in (False, True):
            ti = T.index_scores(R, n, I, sm_count=be.sm_count, hist0_fused=fuse)
            tk = T.topk(R, n, k, be.sm_count, hist0_fused=fuse, **seg)
            pair = T.Traffic("index_scores+topk_radix", ti.compulsory_bytes + tk.compulsory_bytes - R * n * 4 * 2,
                             ti.moved_bytes + tk.moved_bytes)  # the scores are an intermediate: not compulsory
            self.time(f"indexer+topk{k}{' fused' if fuse else ''}/{tag}", lambda fuse=fuse: both(fuse), pair,
                      kind="CSA", requests=R, n=n, k=k, fused=fuse, entries=seg["fitting_entries"],
                      overflowing_blocks=seg["overflowing_blocks"])
        del ids

    def attention(self, gname, H, R, kind, ring, records, ids_dev, ids_host, n_sel, ring_ids, rec_ids, pos) -> None:
        """Two passes over --chunks (attn_tc_partial + attn_merge), then the fused launch: the
        split attn_split picks when it is fused, else clusters of the largest size."""
        cp, rng = self.cp, self.rng
        W, C = WINDOW, self.a.chunks
        q_h = rng.standard_normal((R, H, 512), dtype=np.float32)
        sink_h = rng.standard_normal(H, dtype=np.float32)
        q, sink = cp.asarray(q_h), cp.asarray(sink_h)
        rows = W + n_sel
        split = attn_split(rows, R, attn_tc_launch(H).head_groups, C, sm_count=self.be.sm_count)
        fused_chunks = split.chunks if split.fused else FUSED_CLUSTERS[-1]
        g = O.Geometry(ratio=4 if kind == "CSA" else 128, num_heads=H, max_seq_len=self.a.context)
        refs = []  # the oracle once per request, for both paths
        for r in range(R):
            sel = ids_host[r] if ids_host is not None else np.arange(n_sel)
            rows_r = np.concatenate([self.rec_pool[ring_ids[r]], self.rec_pool[rec_ids[r][sel]]], axis=0)
            refs.append(O.attend(g, q_h[r], rows_r, sink_h, pos))
        for chunks, fused in ((C, False), (fused_chunks, True)):
            self._attend(gname, H, R, kind, ring, records, ids_dev, n_sel, pos, refs, q, sink, chunks, fused)

    def _attend(self, gname, H, R, kind, ring, records, ids_dev, n_sel, pos, refs, q, sink, C, fused) -> None:
        cp, be = self.cp, self.be
        W, rec = WINDOW, self.g.record_bytes
        n_rec = records.shape[1]
        ml = None if fused else cp.zeros(2 * R * C * H, dtype=cp.float32)
        po = None if fused else cp.zeros(R * C * H * 512, dtype=cp.float32)
        ys = [cp.zeros((R, H, 512), dtype=cp.float32) for _ in range(2)]

        def attend(i):
            be.attention(q, ring, W, records, ids_dev, n_sel, H, pos, self.inv, sink, ml, po, ys[i], C, requests=R,
                         ring_stride=W * rec, rec_stride=n_rec * rec, idx_stride=n_sel if ids_dev is not None else 0,
                         fused=fused)

        attend(0)
        attend(1)
        be.synchronize()
        y = ys[0].get()
        same = np.array_equal(_bits(ys[0]), _bits(ys[1]))
        worst = max(float(np.abs(refs[r] - y[r]).max()) for r in range(R))
        path = "fused" if fused else "two-pass"
        tag = f"{gname} {kind} H={H} R={R}"
        self.check(f"attention {path} vs oracle ({tag})", worst <= ATTN_ATOL and same,
                   f"{W} window + {n_sel:,} {'selected' if ids_dev is not None else 'all'} rows, {C} chunks merged "
                   f"{'in the cluster' if fused else 'by attn_merge'}, position {pos:,}; max |err| {worst:.2e} over "
                   f"all {R} requests (tol {ATTN_ATOL:g}); second launch bit-identical: {same}", worst)
        self.time(f"attention{'-fused' if fused else ''}/{tag}", lambda: attend(1),
                  T.attention(R, H, W + n_sel, n_sel if ids_dev is not None else 0, C, fused=fused), kind=kind,
                  requests=R, heads=H, rows=W + n_sel, chunks=C, fused=fused, geometry=gname)


def run(argv=None, cupy_module=None) -> tuple[int, dict | None]:
    a = _parse(argv)
    if cupy_module is None:
        from csa_plan.kernels.gpu_env import gpu_unavailable_reason

        reason = gpu_unavailable_reason()
        if reason:
            print(f"probe: {reason}", file=sys.stderr)
            return EXIT_NO_GPU, None
        import cupy as cupy_module
    from csa_plan.kernels.backends import CupyBackend

    from csa_plan.kernels.backends import CudaHeadersMissing

    cp = cupy_module
    t0 = time.perf_counter()
    try:
        be = CupyBackend(cp)
    except CudaHeadersMissing as exc:
        print(f"probe: {exc}", file=sys.stderr)
        return EXIT_NO_GPU, None
    compile_s = be.module_load_s  # CuPy's kernel cache hit after the GPU check's compile step: < 1 s
    p = Probe(cp, be, a)
    p.run()
    failed = sum(c["status"] == "fail" for c in p.checks)
    doc = {"schema": "csa-plan/probe/v1", "machine": machine_facts(cp), "context": a.context, "batches": a.batches,
           "index_heads": a.index_heads,
           "geometries": {g: {"heads": GEOMETRIES[g][0], "topk": GEOMETRIES[g][1]} for g in a.geometries},
           "chunks": a.chunks, "module_load_s": compile_s, "timer": {"cuda_graphs": p.timer.graphs, "calls": a.hot},
           "copy_ceiling": p.ceiling, "checks": p.checks,
           "timings": p.timings, "failed": failed, "seconds": time.perf_counter() - t0}
    return (EXIT_FAILED if failed else EXIT_OK), doc


def segment_use(work, tw) -> dict:
    """What the last top-k left in its segments, summed over the requests (traffic.topk's
    arguments): the entries of the segments that fit them, the blocks that overflowed."""
    if tw is None or tw.layout.seg_capacity == 0:
        return {"seg_capacity": 0, "fitting_entries": 0, "overflowing_blocks": 0}
    lay = tw.layout
    rows = work[:tw.requests * lay.words].get().reshape(tw.requests, lay.words)
    counts = rows[:, lay.entries_word(0): lay.entries_word(0) + lay.blocks].astype(np.int64)
    fits = counts <= lay.seg_capacity
    return {"seg_capacity": lay.seg_capacity, "fitting_entries": int(counts[fits].sum()),
            "overflowing_blocks": int((~fits).sum())}


def plan_bytes(context: int, requests: int, heads: int, index_heads: int, topk: int, window: int,
               chunks: int) -> int:
    """Device bytes the probe holds at once for its largest batch (kernel buffers, L2 flush buffer)."""
    R, n_csa, n_hca, H = requests, context // 4, context // 128, heads
    rec = 583
    data = R * (n_csa * 68 + n_csa * rec + n_hca * rec + window * rec + index_heads * 129 * 4)
    sel = 2 * R * n_csa * 4 + 3 * R * topk * 4 \
        + R * topk_work_words(topk_blocks(n_csa, R), topk_entry_room(n_csa, topk)) * 4  # + top-k work, the fused ids
    attn = R * H * 512 * 4 * 3 + 2 * R * chunks * H * 4 + R * chunks * H * 512 * 4 + H * 4
    return data + sel + attn + FLUSH_BYTES


def main(argv=None) -> int:
    code, doc = run(argv)
    if doc is None:
        return code
    a = _parse(argv)
    text = json.dumps(doc, indent=2)
    if a.json == "-":
        print(text)
    elif a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    for c in doc["checks"]:
        print(f"{c['status'].upper():4}  {c['name']}: {c['detail']}", file=sys.stderr)
    for t in doc["timings"]:
        print(f"      {t['case']:<36} cold {t['cold_ms']:9.3f} ms  device {t['device_us']:9.2f} us/call ({t['method']}"
              f"{', host-bound' if t['host_bound'] else ''})  host {t['host_us']:8.1f} us/call  "
              f"compulsory {t['compulsory_bytes'] / 1e9:7.3f} GB  moved {t['moved_bytes'] / 1e9:7.3f} GB", file=sys.stderr)
    print(f"probe: {len(doc['checks']) - doc['failed']}/{len(doc['checks'])} checks passed (exit {code})",
          file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
