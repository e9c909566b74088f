"""Throughput model of the tensor-core decode kernels on an H200, before a GPU measures them.

For HCA attention, CSA attention and the indexer at a given context, batch and head count,
and for the multi-block top-k (below), it predicts the share of the 4.8 TB/s HBM peak the
kernel reaches:

    share = compulsory bytes / (4.8e12 B/s x predicted time)

Predicted time = launches x LAUNCH_S + max(memory, SM, latency) + the merge pass, where
- memory  = bytes the kernel moves from HBM / 4.8e12 (DRAM sectors of 32 B: an indexed
            583-byte row touches 19.2 sectors on average, a contiguous one 18.2; the second
            and later 32-head groups of a row read it from L2, not HBM);
- SM      = the busiest SM's tiles x cycles per tile / clock, cycles per tile = the largest
            of issue (warp instructions / 4 per clock), tensor (HMMA.16816 / (1 per clock x
            MMA_SYNC_EFFICIENCY)) and shared memory (LDS/STS wavefronts, 1 per clock); the
            instruction counts are read from the kernel's SASS hot loop (kernels/sass.py:
            every instruction of the loop body once per pass, taken branches or not; inner
            loops — attention's per-lane bulk-copy loop, FP8-block dequantizer and RoPE
            tails, the indexer's cp.async loop — weighted by their trip counts; out-of-line
            slow paths count as their CALL), or from benchmarks/sass_counts.json recorded
            from it (python benchmarks/throughput_model.py --record);
- latency = the busiest SM's bytes / (resident blocks x bytes in flight per block / LOADED
            LATENCY) — Little's law for the copy pipeline (STAGES - 1 tiles in flight);
- the merge: two-pass (attn_tc_partial + attn_merge), a second launch and the partial states
            written to and read back from HBM; fused (attn_tc_fused<C>, the split
            tc_geometry.attn_split picks), one launch, and per block its output tile written to
            its own shared memory, the other blocks' slices read over distributed shared memory
            (DSMEM_BYTES_PER_S_PER_SM) and two cluster barriers (CLUSTER_BARRIER_S).
Assumptions, not measurements: the clock, MMA_SYNC_EFFICIENCY (legacy mma.sync below wgmma's
peak on Hopper), the loaded DRAM latency, the per-launch overhead and the cluster's costs.
When a GPU is lent, benchmarks/bench_kernels.py measures the kernels and these constants are
corrected.

Top-k (topk_mb_hist / topk_mb_count / topk_mb_write over the context / 4 index scores of each
request, B = tc_geometry.topk_blocks blocks per request) has two rows per batch and k: unfused
(hist passes 0, 1, 2, count and write, each over the scores: 5 launches, 5 reads) and
hist+seg (hist0 from the indexer's epilogue — its cost is in the indexer+hist row — and
segments that fit: pass 1 over the scores, compacting, then pass 2, count and write over the
segments: 4 launches, one read; the launch run-gpu makes). Predicted time = launches x
LAUNCH_S + the sum over launches of max(memory, SM, latency), where
- memory  = the launch's HBM bytes / 4.8e12; the launches' bytes add up to traffic.topk's moved
            bytes exactly (the work header's zeroing and reading charged to the first launch,
            the segment entries, 8 bytes each, written by pass 1 and read by the three others,
            counted although L2 would serve them, as traffic.topk counts them);
- SM      = the busiest SM's blocks x trips x the larger of issue (8 warps x the loop's SASS
            instructions / 4) and shared-memory wavefronts (ATOMS as ATOMS_WAVEFRONTS), plus for
            topk_mb_hist zeroing and merging its 2,048 (pass 2: 1,024) shared bins as the
            indexer's flush is charged (its SASS loop with global reductions);
- latency = per block, trips x the loaded DRAM latencies each trip waits: a scan trip issues
            CSA_TK_INFLIGHT 16-byte loads per thread (topk.cu) and waits once for all the
            loads issued before the first use of any of them, again for loads issued after a
            use — _load_waits counts these waits in the loop's SASS (so the loads in flight
            per thread are the 128-bit loads per trip / waits, what ptxas's schedule gives,
            not what the source asks for); a segment round (32 bytes of entries) waits one;
            the busiest SM's resident blocks overlap. Little's law, rounded up to whole trips
            (a segment of fewer entries than a round still waits one latency).
The per-key loop of each pass is read from topk.cu's SASS (_topk_loop_counts says how each is
recognised); trips = the block's slice (tc_geometry.topk_slice_ids) / (256 threads x 4 keys x
the loop's 128-bit loads per trip), or for a segment ceil(entries per block / (256 x 4)).
Approximations, stated: the segments' entry count is the probe's draw (TOPK_SEG_ENTRIES, from
docs/throughput-model.md; data-dependent), spread evenly over the blocks, none overflowing; every instruction
of a loop counts once per trip, taken or not — the atomics of passes 1 and 2, which only keys
matching the prefix so far take (in pass 0 every key does), and the segment rounds' scalar
fallbacks (so the SM term is an upper bound: the worst-case atomics make the histogram passes,
pass 1's compaction included, SM-bound at batch 16); ATOMS (ATOMS.POPC.INC, which merges lanes
on one address) as the indexer's worst case of 16 wavefronts. Not modelled (so the time is a
lower bound there): each block's re-derivation of the selection so far before its loop
(topk_mb_state: thread 0 walks the earlier histograms' groups, data-dependent, through shared
memory and L2), the write's prefix over the earlier slices' counts, topk_mb_count's block sums,
the launch that zeroes the work header, and a slice's last partial trip, run one float4 or one
round at a time (each waiting a latency) but charged as one main trip — the modelled slices
(4,096 and 16,384 keys) are whole trips, so no row has one.

Each row also gives the ceiling of any design under the same constants: the compulsory bytes
over the time of one launch plus the larger of moving them at the HBM peak and doing the
useful tensor work (one BF16 term per operand: 2 x 2 x 512 FLOP per row and head for
attention, 2 x 128 per key and index head for the indexer) at the full dense BF16 peak. It
says where a target is out of reach whatever the kernel: 128 query heads do about 450 FLOP
per 583-byte row, above the H200's ridge of about 206, so attention there is compute-bound
(report FLOP/s, as the spec says), and one step at batch 16 of CSA's 1,152 rows per request
(11.8 MB) is shorter than the launch.

    python benchmarks/throughput_model.py            # the table (1M tokens, batch 1/16, 16/128 heads, top-k)
    python benchmarks/throughput_model.py --json
    python benchmarks/throughput_model.py --record   # re-read the SASS into sass_counts.json (needs nvcc)
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

COUNTS_FILE = Path(__file__).resolve().parent / "sass_counts.json"

# H200 SXM (the spec sheet) and the model's assumptions
SMS = 132
CLOCK_HZ = 1.83e9  # boost clock of the 989 TFLOP/s dense BF16 figure (132 x 1.83 GHz x 4096 FLOP/clk)
HBM_BYTES_PER_S = 4.8e12
ISSUE_PER_CLK = 4  # warp instructions per SM per clock (4 schedulers, one each)
SCHEDULERS = 4
# A scheduler with one warp cannot issue every clock: each instruction waits on the ones it
# depends on (about 4 clocks for fixed-latency ALU results, ~30 for shared-memory loads), so
# one warp is assumed to issue one instruction every 2 clocks (the ILP of the dequantizer and
# softmax code hides about half); a scheduler with w warps issues min(1, w x this) a clock.
SINGLE_WARP_IPC = 0.5
HMMA_PER_CLK = 1.0  # HMMA.16816 (4096 FLOP) per SM per clock at the dense peak
MMA_SYNC_EFFICIENCY = 0.6  # assumed share of that peak legacy mma.sync reaches on Hopper
LSU_WAVEFRONTS_PER_CLK = 1  # shared-memory requests per SM per clock
ATOMS_WAVEFRONTS = 16  # a shared atomic (ATOMS) as its worst case: the indexer's 16 storing lanes on one bin
LOADED_LATENCY_S = 1.0e-6  # DRAM latency under load (assumed)
LAUNCH_S = 2.0e-6  # per kernel launch in a decode step (assumed; less inside a CUDA graph)
# SM-to-SM (distributed shared memory) throughput: Luo et al., "Benchmarking and Dissecting the
# Nvidia Hopper GPU Architecture" (2024), about 3.3 TB/s for the whole GPU, taken as each SM's
# share (assumed); one cluster barrier (arrive + wait) about two SM-to-SM latencies (assumed).
DSMEM_BYTES_PER_S_PER_SM = 3.3e12 / SMS
CLUSTER_BARRIER_S = 0.25e-6
LSU_BYTES_PER_CLK = 128  # one shared-memory wavefront
L2_BYTES = 50 * 2**20

REC = 583
KEY = 68
D = 512
WINDOW = 128
TOPK = 1024


@dataclass(frozen=True)
class LoopCounts:
    """Warp instructions of one pass through the hot loop, by class, with inner loops
    counted once (as in the SASS) and listed separately for their trip counts."""

    total: int
    hmma: int
    lsu_wavefronts: int
    inner: dict  # name -> {"total": n, "lsu_wavefronts": n}
    registers: int  # ptxas, per thread
    static_smem: int
    # the indexer's fused top-k histogram merge after the tile loop: the largest loop with global
    # reductions, {"total": instructions, "bins_per_trip": its REDs} (empty: no such loop)
    flush: dict = field(default_factory=dict)
    # top-k's per-key loops: the loop's global loads, {"wide": 128-bit loads, "key_words": 32-bit
    # loads of segment keys, "waits": loaded latencies a trip waits (_load_waits)} (empty for
    # the tensor-core kernels)
    loads: dict = field(default_factory=dict)
    # the tensor-core kernels' tile loop cut at its block barriers (BAR.SYNC): one entry per
    # phase in program order, the phase that wraps around the loop's back edge last, each
    # {"total", "hmma", "lsu_wavefronts", "inner": [kinds of the inner loops it holds]}; the
    # phases add up to total / hmma / lsu_wavefronts (empty: the loop has no barrier)
    phases: list = field(default_factory=list)


def _lsu_wavefronts(ops) -> int:
    n = 0
    for op in ops:
        if op.startswith(("LDS", "STS")) and not op.startswith("LDSM"):
            n += 4 if ".128" in op else 2 if ".64" in op else 1
        elif op.startswith("ATOMS"):
            n += ATOMS_WAVEFRONTS
    return n


def read_counts() -> dict[str, LoopCounts]:
    """From the SASS (needs nvcc and cuobjdump)."""
    from csa_plan.kernels import sass as S

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for cu, name in (("attn_tc.cu", "attn_tc_partial"), ("index_tc.cu", "index_tc_scores")):
            k = S.kernels_of(cu, Path(tmp))[name]
            a, b = k.hot_loop()
            ops = k.opcodes((a, b))
            inner = {}
            loops = k.inner_loops()
            for lp in loops:  # in program order
                iops = k.opcodes(lp)
                if any(S.is_bulk_copy(o) for o in iops):
                    kind = "loader"  # a bulk copy per row: ptxas loops over the warp's issuing lanes
                elif any(o.startswith("LDGSTS") for o in iops):
                    kind = "loader_tail" if "loader" in inner else "loader"
                elif any(o.startswith(("HMUL2", "HFMA2")) for o in iops):
                    kind = "dequant"  # FP8 blocks: packed BF16 scale multiplies
                elif any(o.startswith("STS.128") for o in iops):
                    kind = "tail"  # the BF16 RoPE tails, realigned
                else:
                    kind = f"loop@{lp[0]}"
                if kind in inner:
                    raise ValueError(f"{name}: two inner loops of kind {kind}; the model needs their trip counts")
                inner[kind] = {"total": len(iops), "lsu_wavefronts": _lsu_wavefronts(iops)}
            flush = {}
            for lp in k.loops():
                reds = sum(o.startswith(("RED", "ATOMG")) for o in k.opcodes(lp))
                if lp[0] > b and reds and len(k.opcodes(lp)) > flush.get("total", 0):
                    flush = {"total": len(k.opcodes(lp)), "bins_per_trip": reds}
            kinds = {lp[0]: kind for lp, kind in zip(loops, inner)}
            out[name] = LoopCounts(total=len(ops), hmma=sum(S.is_tensor(o) for o in ops),
                                   lsu_wavefronts=_lsu_wavefronts(ops), inner=inner,
                                   registers=k.resources.registers, static_smem=k.resources.smem_bytes, flush=flush,
                                   phases=_phases(k, S, a, b, kinds))
        out.update(_topk_loop_counts(S, S.kernels_of("topk.cu", Path(tmp))))
    return out


def _phases(k, S, a: int, b: int, inner_at: dict[int, str]) -> list[dict]:
    """The loop body [a, b] cut after each BAR.SYNC: a block's warps all wait there, so what lies
    between two barriers (a phase) cannot overlap the next. The span before the first barrier
    joins the one after the last (the loop is a cycle). inner_at: an inner loop's first
    instruction -> its kind."""
    bars = [j for j in range(a, b + 1) if k.instrs[j].opcode.startswith("BAR.SYNC")]
    if len(bars) < 2:
        return []
    spans = [list(range(bars[i] + 1, bars[i + 1] + 1)) for i in range(len(bars) - 1)]
    spans.append(list(range(bars[-1] + 1, b + 1)) + list(range(a, bars[0] + 1)))
    out = []
    for span in spans:
        ops = [k.instrs[j].opcode for j in span]
        out.append({"total": len(ops), "hmma": sum(S.is_tensor(o) for o in ops), "lsu_wavefronts": _lsu_wavefronts(ops),
                    "inner": [inner_at[j] for j in span if j in inner_at]})
    return out


# A segment entry is 64 bits, id low and key high: the keys of a round's four entries are the
# words at byte offsets 4, 12, 20 and 28 of its 32 bytes.
_KEY_WORD = re.compile(r"\[[^\]]*\+0x(4|c|14|1c)\]")
_REG = re.compile(r"\bR(\d+)(\.64)?\b")


def _load_waits(S, ins) -> int:
    """How many times one trip through a loop body ins waits for its global loads: walking the
    SASS in order, a load adds its destination registers (one per 32 bits) to the pending set;
    the first instruction that reads a pending register waits (one loaded DRAM latency) for
    every load issued so far, and the set empties. So the loads a body issues before its first
    use share one latency; a load issued after a use waits again. The body is walked twice and
    the second walk counted, so a load whose use is in the next trip (a prefetch) is seen.
    Straight-line: both sides of a branch count, as the instruction counts do."""
    def regs(text):
        out = set()
        for m in _REG.finditer(text):
            r = int(m.group(1))
            out |= {r, r + 1} if m.group(2) else {r}
        return out

    pending, waits = set(), 0
    for walk in range(2):
        for i in ins:
            ops = i.operands.split(",")
            no_dest = i.opcode.startswith(("ST", "RED", "BAR"))  # every register operand a source
            srcs = regs(i.operands if no_dest else ",".join(ops[1:]))
            if srcs & pending:
                waits += walk
                pending.clear()
            if S.is_global_load(i.opcode) and (m := _REG.match(ops[0].strip())):
                r = int(m.group(1))
                pending |= set(range(r, r + max(1, S.load_width_bits(i.opcode) // 32)))
    return waits


# topk.cu's per-key loops the model charges (read_counts: which SASS loop each is, by what it holds)
TOPK_LOOPS = ("topk_mb_hist/scan", "topk_mb_hist/compact", "topk_mb_hist/segment", "topk_mb_count/scan",
              "topk_mb_count/segment", "topk_mb_write/scan", "topk_mb_write/segment")


def _topk_loop_counts(S, kernels) -> dict[str, LoopCounts]:
    """The per-key loop of each top-k pass, told apart by what its SASS holds (topk.cu):
    - topk_mb_hist/scan: topk_mb_scan's main float4 loop (pass 0; pass 1 and 2 without
      segments): CSA_TK_INFLIGHT (>= 2) 128-bit loads a trip, shared atomics, no ballot;
    - topk_mb_hist/compact: pass 1 with segments, topk_mb_rounds' main loop (CSA_TK_INFLIGHT
      rounds a trip) + topk_mb_rank: >= 2 128-bit loads, warp ballots (VOTE) and the segment's
      global stores;
    - topk_mb_hist/segment, topk_mb_count/segment: topk_mb_seg_rounds, no 128-bit load — every
      global load a 32-bit load of a key word (the ids are not used, so ptxas loads only the keys);
    - topk_mb_count/scan: topk_mb_scan's main float4 loop: >= 2 128-bit loads, no ballot;
    - topk_mb_write/scan: topk_mb_rounds' main loop over the slice: >= 2 128-bit loads, ballots,
      no other global load (its scalar fallback is in the one-round loop after it);
    - topk_mb_write/segment: topk_mb_seg_rounds: two 128-bit loads (ids and keys), ballots and
      the 32-bit loads of its partial-round fallback.
    The one-round (one 128-bit load) loops after the main loops, for the last rounds and
    unaligned slices, are not charged (a partial trip is charged as a whole main trip; the
    modelled slices are whole trips). Each must be exactly one loop; inner loops count once
    inside it. loads["waits"]: _load_waits of the loop body (how many loaded latencies a trip
    waits). topk_mb_hist's flush: its loop with global reductions (the merge of the shared
    histogram into the request's)."""

    def facts(k, lp):
        ins = k.instrs[lp[0]:lp[1] + 1]
        gl = [i for i in ins if S.is_global_load(i.opcode)]
        return {"wide": sum(S.load_width_bits(i.opcode) == 128 for i in gl),
                "key_words": sum(S.load_width_bits(i.opcode) == 32 and bool(_KEY_WORD.search(i.operands)) for i in gl),
                "loads": len(gl), "atoms": sum(i.opcode.startswith("ATOMS") for i in ins),
                "ballots": sum(i.opcode.startswith("VOTE") for i in ins),
                "stores": sum(i.opcode.startswith("STG") for i in ins),
                "reds": sum(i.opcode.startswith(("RED", "ATOMG")) for i in ins),
                "waits": _load_waits(S, ins)}

    rules = {
        "topk_mb_hist/scan": lambda f: f["wide"] >= 2 and f["atoms"] and not f["ballots"],
        "topk_mb_hist/compact": lambda f: f["wide"] >= 2 and f["ballots"] and f["stores"],
        "topk_mb_hist/segment": lambda f: f["atoms"] and not f["wide"] and f["loads"] and f["key_words"] == f["loads"],
        "topk_mb_count/scan": lambda f: f["wide"] >= 2 and not f["ballots"],
        "topk_mb_count/segment": lambda f: not f["wide"] and f["loads"] and f["key_words"] == f["loads"],
        "topk_mb_write/scan": lambda f: f["wide"] >= 2 and f["ballots"] and f["loads"] == f["wide"],
        "topk_mb_write/segment": lambda f: f["wide"] == 2 and f["ballots"] and f["loads"] > f["wide"],
    }
    out = {}
    for key in TOPK_LOOPS:
        kname = key.split("/")[0]
        k = kernels[kname]
        found = [lp for lp in k.loops() if rules[key](facts(k, lp))]
        if len(found) != 1:
            raise ValueError(f"{key}: {len(found)} SASS loops match (want one): {found}")
        lp = found[0]
        f = facts(k, lp)
        flush = {}
        if kname == "topk_mb_hist":
            merges = [m for m in k.loops() if facts(k, m)["reds"]]
            if len(merges) != 1:
                raise ValueError(f"{kname}: {len(merges)} loops with global reductions (want one)")
            flush = {"total": len(k.opcodes(merges[0])), "bins_per_trip": facts(k, merges[0])["reds"]}
        ops = k.opcodes(lp)
        out[key] = LoopCounts(total=len(ops), hmma=0, lsu_wavefronts=_lsu_wavefronts(ops), inner={},
                              registers=k.resources.registers, static_smem=k.resources.smem_bytes, flush=flush,
                              loads={"wide": f["wide"], "key_words": f["key_words"], "waits": f["waits"]})
    return out


def load_counts() -> dict[str, LoopCounts]:
    data = json.loads(COUNTS_FILE.read_text())
    return {k: LoopCounts(**v) for k, v in data["kernels"].items()}


@dataclass(frozen=True)
class Prediction:
    kernel: str
    batch: int
    heads: int
    blocks: int
    chunks: int
    compulsory_bytes: int
    hbm_bytes: int
    memory_us: float
    sm_us: float
    latency_us: float
    fixed_us: float
    total_us: float
    bound: str
    share_of_peak: float
    path: str  # attention: "two-pass" or "fused<C>"; the indexer: "one pass"
    ceiling: float  # the share any one-launch design could reach (see the docstring)
    tensor_share: float  # useful tensor FLOP/s (one BF16 term per operand) over the dense BF16 peak


def issue_rate(warps_per_scheduler: float) -> float:
    """Warp instructions one scheduler issues per clock with that many warps to pick from."""
    return min(1.0, warps_per_scheduler * SINGLE_WARP_IPC)


def _tile_phases(c: LoopCounts, warps: int, trips: dict[str, float]) -> list[tuple[float, float, float]]:
    """(issue, tensor, shared-memory) clocks of one block's tile, per barrier-separated phase
    (c.phases; the whole loop as one phase when it has none), issue at one instruction per
    scheduler per clock; each inner loop's extra trips charged to the phase that holds it."""
    phases = c.phases or [{"total": c.total, "hmma": c.hmma, "lsu_wavefronts": c.lsu_wavefronts,
                           "inner": list(c.inner)}]
    if sum(p["total"] for p in phases) != c.total or sum(p["hmma"] for p in phases) != c.hmma:
        raise ValueError("the phases do not add up to the loop")
    for kind in c.inner:
        if kind not in trips:
            raise ValueError(f"no trip count for the inner loop {kind!r}")
    out = []
    for p in phases:
        instr, lsu = float(p["total"]), float(p["lsu_wavefronts"])
        for kind in p["inner"]:  # the static count holds each inner body once
            extra = max(0.0, trips[kind] - 1.0)
            instr += extra * c.inner[kind]["total"]
            lsu += extra * c.inner[kind]["lsu_wavefronts"]
        out.append((warps * instr / ISSUE_PER_CLK, warps * p["hmma"] / (HMMA_PER_CLK * MMA_SYNC_EFFICIENCY),
                    warps * lsu / LSU_WAVEFRONTS_PER_CLK))
    return out


def sm_tile_clocks(c: LoopCounts, warps: int, trips: dict[str, float], resident: int) -> tuple[float, float]:
    """(chain, pipes): clocks per tile of one block on its own — its phases one after another
    (the barriers between them), each phase as long as the largest of its issue (at the issue
    rate of the block's own warps per scheduler), tensor and shared-memory work — and the
    clocks per tile of `resident` co-resident blocks' pipes shared (their phases may overlap
    each other's): the largest of the summed issue (at the rate of all their warps), tensor
    and shared-memory work."""
    ph = _tile_phases(c, warps, trips)
    own = issue_rate(warps / SCHEDULERS)
    chain = sum(max(i / own, t, m) for i, t, m in ph)
    shared = issue_rate(resident * warps / SCHEDULERS)
    pipes = max(sum(p[0] for p in ph) / shared, sum(p[1] for p in ph), sum(p[2] for p in ph))
    return chain, pipes


def sm_seconds(c: LoopCounts, warps: int, trips: dict[str, float], busiest: int, resident: int, tiles: int,
               extra_clocks_per_block: float = 0.0) -> float:
    """The busiest SM's time over its `busiest` blocks of `tiles` tiles, `resident` at a time:
    at least its blocks' tiles through the shared pipes, and at least the chains of the
    blocks that run one after another (ceil(busiest / resident) of them)."""
    chain, pipes = sm_tile_clocks(c, warps, trips, resident)
    waves = math.ceil(busiest / resident)
    clocks = max(busiest * (tiles * pipes + extra_clocks_per_block),
                 waves * (tiles * chain + extra_clocks_per_block / issue_rate(warps / SCHEDULERS)))
    return clocks / CLOCK_HZ


PEAK_FLOP_S = SMS * CLOCK_HZ * HMMA_PER_CLK * 4096  # dense BF16, about 989 TFLOP/s


def ceiling_share(compulsory: int, useful_flop: float) -> float:
    """The share of the HBM peak any one-launch design reaches: one launch, then the larger of
    moving the compulsory bytes at the peak and the useful tensor work at the dense peak."""
    return compulsory / (HBM_BYTES_PER_S * (LAUNCH_S + max(compulsory / HBM_BYTES_PER_S, useful_flop / PEAK_FLOP_S)))


def _finish(kernel, batch, heads, blocks, chunks, compulsory, hbm, sm_s, lat_s, fixed_s, path,
            useful_flop) -> Prediction:
    mem_s = hbm / HBM_BYTES_PER_S
    core = max(mem_s, sm_s, lat_s)
    bound = ("memory", "SM", "latency")[[mem_s, sm_s, lat_s].index(core)]
    total = fixed_s + core
    return Prediction(kernel, batch, heads, blocks, chunks, compulsory, hbm, mem_s * 1e6, sm_s * 1e6, lat_s * 1e6,
                      fixed_s * 1e6, total * 1e6, bound, compulsory / (HBM_BYTES_PER_S * total), path,
                      ceiling_share(compulsory, useful_flop), useful_flop / (PEAK_FLOP_S * total))


def cluster_merge_s(heads_per_block: int, chunks: int, blocks_per_sm: int) -> float:
    """The fused merge on the busiest SM: each of its blocks writes its fp32 output tile to its
    own shared memory and reads 1/chunks of every block's (the others' over DSMEM); two
    cluster barriers when the chunks form a cluster."""
    tile = heads_per_block * D * 4
    local_s = blocks_per_sm * (tile + tile / chunks) / LSU_BYTES_PER_CLK / CLOCK_HZ
    if chunks == 1:
        return local_s
    remote_s = blocks_per_sm * tile * (chunks - 1) / chunks / DSMEM_BYTES_PER_S_PER_SM
    return 2 * CLUSTER_BARRIER_S + local_s + remote_s


def attention_trips(threads: int) -> dict[str, float]:
    """Inner-loop trips per tile: the loader's per-lane bulk-copy loop (TILE / warps issuing lanes
    per warp, one row each); per thread the dequantizer's 7 FP8 blocks per row and the 2 RoPE-tail
    halves per row, over the block's threads."""
    from csa_plan.kernels.tc_geometry import ATTN_TC_TILE

    return {"loader": ATTN_TC_TILE / (threads // 32), "dequant": ATTN_TC_TILE * 7 / threads,
            "tail": ATTN_TC_TILE * 2 / threads}


def phase_table(counts: dict[str, LoopCounts]) -> list[dict]:
    """Per barrier-separated phase of a tile: its issue (at one instruction per scheduler per
    clock, and at the rate of a block alone on its SM), tensor and shared-memory clocks; for the
    attention block at 16 and 32 heads and the indexer block."""
    from csa_plan.kernels.backends import INDEX_TC_THREADS, INDEX_TC_TILE
    from csa_plan.kernels.tc_geometry import attn_tc_launch

    cases = [(f"attention, {h} heads per block", counts["attn_tc_partial"], attn_tc_launch(h).threads // 32,
              attention_trips(attn_tc_launch(h).threads)) for h in (16, 32)]
    cases.append(("indexer", counts["index_tc_scores"], INDEX_TC_THREADS // 32,
                  {"loader": (INDEX_TC_TILE * KEY + 16) / 16 / INDEX_TC_THREADS}))
    out = []
    for name, c, warps, trips in cases:
        rate = issue_rate(warps / SCHEDULERS)
        for i, (iss, ten, lsu) in enumerate(_tile_phases(c, warps, trips)):
            out.append({"tile": name, "phase": i + 1, "issue_clk": iss, "issue_alone_clk": iss / rate,
                        "tensor_clk": ten, "smem_clk": lsu, "phase_clk": max(iss / rate, ten, lsu)})
    return out


def attention(counts: dict[str, LoopCounts], ratio: int, context: int, batch: int, heads: int,
              split=None) -> Prediction:
    """attn_tc at the split tc_geometry.attn_split picks, or at a given AttnSplit (the one a
    benchmark ran, so its measurement and the model compare like for like)."""
    from csa_plan.kernels.sass import blocks_per_sm
    from csa_plan.kernels.tc_geometry import (ATTN_TC_ROW_SMEM, ATTN_TC_STAGES, ATTN_TC_TILE, attn_split,
                                              attn_tc_launch, partial_capacity)

    records = context // ratio
    selected = records if ratio == 128 else min(records, TOPK)
    rows = WINDOW + selected
    lay = attn_tc_launch(heads)
    # the planned scratch of one decode row (planner/layout.py): attention floats, and for
    # ratio 4 the index-score floats the partial outputs may reuse
    attn_floats = heads * rows
    cap = partial_capacity(heads, attn_floats, records if ratio == 4 else 0).chunks
    c = counts["attn_tc_partial"]
    occ = blocks_per_sm(c.registers, lay.threads, c.static_smem + lay.smem_bytes)
    split = split or attn_split(rows, batch, lay.head_groups, cap)
    chunks = split.chunks
    blocks = lay.head_groups * chunks * batch
    tiles_per_block = math.ceil(math.ceil(rows / chunks) / ATTN_TC_TILE)
    threads = lay.threads
    # per tile and warp: the loader's per-lane bulk-copy loop (TILE / warps issuing lanes per
    # warp, one row each); per thread: the dequantizer's 7 FP8 blocks per row and the 2
    # RoPE-tail halves per row, over the block's threads
    warps = threads // 32
    trips = attention_trips(threads)
    busiest = math.ceil(blocks / SMS)
    resident = max(1, min(occ, busiest))
    sm_s = sm_seconds(c, warps, trips, busiest, resident, tiles_per_block)
    row_hbm = REC if ratio == 128 else (REC - 1) / 32 * 32 + 32  # 32-byte sectors touched
    rows_bytes = batch * rows * row_hbm
    part = 0 if split.fused else batch * chunks * heads * (2 + D) * 4 * 2  # written by pass 1, read by the merge
    qy = batch * heads * D * 4 * 2
    hbm = int(rows_bytes + part + qy)
    compulsory = batch * (rows * REC + heads * D * 4 * 2)
    inflight = (ATTN_TC_STAGES - 1) * ATTN_TC_TILE * ATTN_TC_ROW_SMEM
    lat_s = (busiest * tiles_per_block * ATTN_TC_TILE * row_hbm / lay.head_groups) / (
        resident * inflight / LOADED_LATENCY_S)
    if split.fused:
        fixed = LAUNCH_S + cluster_merge_s(16 * lay.m_tiles, chunks, resident)
        path = f"fused{chunks}"
    else:
        fixed = 2 * LAUNCH_S + part / 2 / HBM_BYTES_PER_S
        path = "two-pass"
    name = "HCA attention" if ratio == 128 else "CSA attention"
    useful = batch * rows * heads * 2 * 2 * D  # S = QK^T and O = PV, one BF16 term each
    return _finish(name, batch, heads, blocks, chunks, compulsory, hbm, sm_s, lat_s, fixed, path, useful)


def indexer(counts: dict[str, LoopCounts], context: int, batch: int, index_heads: int = 64,
            hist0_fused: bool = True) -> Prediction:
    """index_tc_scores as the harness launches it: with top-k's first histogram fused into its
    epilogue (hist0_fused=False: the same kernel without the per-block histogram merge)."""
    from csa_plan.kernels.backends import INDEX_TC_STAGES, INDEX_TC_THREADS, INDEX_TC_TILE
    from csa_plan.kernels.sass import blocks_per_sm
    from csa_plan.kernels.tc_geometry import TOPK_MB_HIST0_BINS, index_tc_blocks

    n = context // 4
    tiles = math.ceil(n / INDEX_TC_TILE)
    gx = index_tc_blocks(n, batch, SMS)  # the launcher's own rule
    blocks = gx * batch
    tiles_per_block = math.ceil(tiles / gx)
    trips = {"loader": (INDEX_TC_TILE * KEY + 16) / 16 / INDEX_TC_THREADS}
    c = counts["index_tc_scores"]
    busiest = math.ceil(blocks / SMS)
    occ = blocks_per_sm(c.registers, INDEX_TC_THREADS, c.static_smem)
    resident = max(1, min(occ, busiest))
    # the fused top-k histogram (hist0_fused): its shared atomics are in the tile loop's counts
    # (a runtime branch: counted taken or not); per block, zeroing the 2048 shared bins (one
    # store each) and the merge loop (its SASS body per bins_per_trip bins), on every thread
    bins_per_thread = TOPK_MB_HIST0_BINS / INDEX_TC_THREADS
    flush = 0.0
    if hist0_fused and c.flush:
        flush = (INDEX_TC_THREADS // 32) * bins_per_thread * (c.flush["total"] / c.flush["bins_per_trip"] + 1) \
            / ISSUE_PER_CLK
    sm_s = sm_seconds(c, INDEX_TC_THREADS // 32, trips, busiest, resident, tiles_per_block, flush)
    keys_bytes = batch * n * KEY
    qw = batch * index_heads * (128 + 1) * 4
    hbm = keys_bytes + qw + batch * n * 4  # keys, query and weights, scores written
    compulsory = hbm
    if hist0_fused:
        hbm += batch * TOPK_MB_HIST0_BINS * 4  # hist0 (merged in L2; written back once)
    inflight = (INDEX_TC_STAGES - 1) * (INDEX_TC_TILE * KEY)
    lat_s = (busiest * tiles_per_block * INDEX_TC_TILE * KEY) / (resident * inflight / LOADED_LATENCY_S)
    return _finish("indexer+hist" if hist0_fused else "indexer", batch, index_heads, blocks, gx, compulsory, hbm,
                   sm_s, lat_s, LAUNCH_S, "one pass", batch * n * index_heads * 2 * 128)


# Keys per request in the top-k segments (hist0's threshold bin and above) for 262,144 scores
# drawn as the probe draws them (docs/throughput-model.md, "Top-k": 1,534 for top-1024, 540 for top-512; at most
# 109 in one of 16 segments of 1,024 and 38 in one of 64 of 256, so none overflows). Data-
# dependent: an assumption of the model, not a property of the kernel.
TOPK_SEG_ENTRIES = {1024: 1534, 512: 540}
TOPK_SEG_ROUND = 4  # entries per thread per round of topk_mb_seg_rounds (topk.cu)


@dataclass(frozen=True)
class TopkLaunch:
    """One launch of the multi-block top-k: which loop its blocks run, and its times."""

    kernel: str  # e.g. "topk_mb_hist pass 1"
    loop: str  # its TOPK_LOOPS entry
    blocks: int
    trips: int  # of its per-key loop, per block
    hbm_bytes: int
    memory_us: float
    sm_us: float
    latency_us: float

    @property
    def core_us(self) -> float:
        return max(self.memory_us, self.sm_us, self.latency_us)

    @property
    def bound(self) -> str:
        return ("memory", "SM", "latency")[[self.memory_us, self.sm_us, self.latency_us].index(self.core_us)]


def topk_launches(counts: dict[str, LoopCounts], n: int, batch: int, k: int, fused: bool) -> list[TopkLaunch]:
    """topk_mb_* as the launcher runs them (backends.topk): unfused, hist passes 0-2, count and
    write over the scores (no segments: 5 reads); fused, hist0 from the indexer's epilogue and
    segments that fit (the launch run-gpu makes): pass 1 over the scores (compacting), pass 2,
    count and write over the segments. Their HBM bytes add up to traffic.topk's moved bytes."""
    from csa_plan.kernels import traffic as T
    from csa_plan.kernels.backends import TOPK_THREADS
    from csa_plan.kernels.sass import blocks_per_sm
    from csa_plan.kernels.tc_geometry import (topk_blocks, topk_entry_room, topk_header_words, topk_layout,
                                              topk_slice_ids, topk_work_words)

    b = topk_blocks(n, batch, SMS)
    entries = TOPK_SEG_ENTRIES[k] if fused else 0
    seg_cap = 0
    if fused:  # the probe's room: n / 16 entries, at least 4 k
        lay = topk_layout(n, batch, batch * topk_work_words(b, topk_entry_room(n, k)), SMS)
        seg_cap = lay.seg_capacity
        if -(-entries // b) > seg_cap:
            raise ValueError("the model assumes every segment fits")
    moved = T.topk(batch, n, k, SMS, hist0_fused=fused, seg_capacity=seg_cap, fitting_entries=batch * entries,
                   overflowing_blocks=0).moved_bytes
    scores = batch * n * 4
    segs = batch * entries * 8
    header = batch * topk_header_words(b) * 4 * 2  # zeroed and read: charged to the first launch
    ids = batch * k * 4
    if fused:
        plan = [("topk_mb_hist pass 1", "topk_mb_hist/compact", scores + segs + header),
                ("topk_mb_hist pass 2", "topk_mb_hist/segment", segs),
                ("topk_mb_count", "topk_mb_count/segment", segs),
                ("topk_mb_write", "topk_mb_write/segment", segs + ids)]
    else:
        plan = [("topk_mb_hist pass 0", "topk_mb_hist/scan", scores + header),
                ("topk_mb_hist pass 1", "topk_mb_hist/scan", scores),
                ("topk_mb_hist pass 2", "topk_mb_hist/scan", scores),
                ("topk_mb_count", "topk_mb_count/scan", scores),
                ("topk_mb_write", "topk_mb_write/scan", scores + ids)]
    assert sum(p[2] for p in plan) == moved, "the launches' bytes are traffic.topk's"
    blocks = b * batch
    busiest = math.ceil(blocks / SMS)
    warps = TOPK_THREADS // 32
    slice_ids = topk_slice_ids(n, b)
    out = []
    for name, loop, hbm in plan:
        c = counts[loop]
        if loop.endswith("/segment"):  # one round: TOPK_SEG_ROUND entries per thread, 32 bytes in flight
            trips = math.ceil(math.ceil(entries / b) / (TOPK_SEG_ROUND * TOPK_THREADS))
        else:  # 4 keys per 128-bit load per trip
            trips = math.ceil(slice_ids / (4 * c.loads["wide"] * TOPK_THREADS))
        occ = blocks_per_sm(c.registers, TOPK_THREADS, c.static_smem)
        resident = max(1, min(occ, busiest))
        rate = issue_rate(resident * warps / SCHEDULERS)  # 8 warps a block: 2 per scheduler, the full rate
        issue = warps * c.total / ISSUE_PER_CLK / rate
        smem = warps * c.lsu_wavefronts / LSU_WAVEFRONTS_PER_CLK
        per_block = trips * max(issue, smem)
        if c.flush:  # zeroing the shared histogram and merging it into the request's (as the indexer's)
            bins = (1 << (11 if "pass 2" not in name else 10)) / TOPK_THREADS
            per_block += warps * bins * (c.flush["total"] / c.flush["bins_per_trip"] + 1) / ISSUE_PER_CLK / rate
        sm_s = busiest * per_block / CLOCK_HZ
        # a scan trip waits loads["waits"] latencies (its 128-bit loads issued before their first
        # use share one: _load_waits, from the SASS); a segment round one
        waits = 1 if loop.endswith("/segment") else c.loads["waits"]
        lat_s = math.ceil(busiest / resident) * trips * waits * LOADED_LATENCY_S
        out.append(TopkLaunch(name, loop, blocks, trips, hbm, hbm / HBM_BYTES_PER_S * 1e6, sm_s * 1e6, lat_s * 1e6))
    return out


def topk(counts: dict[str, LoopCounts], context: int, batch: int, k: int = TOPK, fused: bool = True) -> Prediction:
    """The multi-block top-k over the ratio-4 index scores (context / 4 keys per request):
    launches x LAUNCH_S plus, per launch, the largest of memory, SM and latency."""
    from csa_plan.kernels import traffic as T
    from csa_plan.kernels.tc_geometry import topk_blocks

    n = context // 4
    launches = topk_launches(counts, n, batch, k, fused)
    compulsory = T.topk(batch, n, k, SMS).compulsory_bytes
    hbm = sum(x.hbm_bytes for x in launches)
    fixed = len(launches) * LAUNCH_S * 1e6
    core = sum(x.core_us for x in launches)
    total = fixed + core
    by_bound = {bd: sum(x.core_us for x in launches if x.bound == bd) for bd in ("memory", "SM", "latency")}
    bound = max(by_bound, key=by_bound.get)
    return Prediction(f"top-{k}", batch, 0, launches[0].blocks, topk_blocks(n, batch, SMS), compulsory, hbm,
                      sum(x.memory_us for x in launches), sum(x.sm_us for x in launches),
                      sum(x.latency_us for x in launches), fixed, total, bound,
                      compulsory / (HBM_BYTES_PER_S * total * 1e-6), "hist+seg" if fused else "unfused",
                      ceiling_share(compulsory, 0), 0.0)


def table(counts: dict[str, LoopCounts], context: int = 1 << 20) -> list[Prediction]:
    out = []
    for batch in (1, 16):
        for heads in (16, 128):
            out.append(attention(counts, 128, context, batch, heads))
            out.append(attention(counts, 4, context, batch, heads))
        out.append(indexer(counts, context, batch, hist0_fused=False))
        out.append(indexer(counts, context, batch))
    for batch in (1, 16):
        for k in (TOPK, 512):
            for fused in (False, True):
                out.append(topk(counts, context, batch, k, fused))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--context", type=int, default=1 << 20)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--record", action="store_true", help="re-read the SASS (nvcc, cuobjdump) into sass_counts.json")
    ap.add_argument("--live", action="store_true", help="read the SASS now instead of sass_counts.json")
    ap.add_argument("--phases", action="store_true", help="print each tile's barrier-separated phases")
    args = ap.parse_args(argv)
    if args.record or args.live:
        try:
            counts = read_counts()
        except (FileNotFoundError, RuntimeError) as exc:
            print(f"throughput_model: cannot read the SASS: {exc}", file=sys.stderr)
            return 5
        if args.record:
            COUNTS_FILE.write_text(json.dumps({"source": "nvcc 13.0 -arch=sm_90, cuobjdump -sass; "
                                               "python benchmarks/throughput_model.py --record",
                                               "kernels": {k: asdict(v) for k, v in counts.items()}},
                                              indent=2, sort_keys=True) + "\n")
    else:
        counts = load_counts()
    if args.phases:
        print(f"Clocks per tile and phase (issue at 1/clock/scheduler; 'alone': at the rate of the block's own "
              f"warps, {SINGLE_WARP_IPC} per warp per clock)")
        for r in phase_table(counts):
            print(f"{r['tile']:<30} phase {r['phase']}  issue {r['issue_clk']:7.0f}  alone {r['issue_alone_clk']:7.0f}"
                  f"  tensor {r['tensor_clk']:6.0f}  smem {r['smem_clk']:6.0f}  -> {r['phase_clk']:7.0f}")
        return 0
    rows = table(counts, args.context)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return 0
    print(f"Modelled share of the H200's 4.8 TB/s at {args.context:,} tokens (not measured; see the docstring)")
    print(f"{'kernel':<14} {'batch':>5} {'heads':>5} {'path':>8} {'blocks':>6} {'chunks':>6} {'MB':>8} {'us':>7} "
          f"{'bound':>8} {'share':>6} {'ceiling':>7} {'TFLOP/s':>8} {'of peak':>7}")
    for r in rows:
        print(f"{r.kernel:<14} {r.batch:>5} {r.heads or '-':>5} {r.path:>8} {r.blocks:>6} {r.chunks:>6} "
              f"{r.compulsory_bytes / 1e6:>8.2f} {r.total_us:>7.2f} {r.bound:>8} {r.share_of_peak:>6.1%} "
              f"{r.ceiling:>7.1%} {r.tensor_share * PEAK_FLOP_S / 1e12:>8.0f} {r.tensor_share:>7.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
