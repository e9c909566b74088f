"""Device-memory traffic of each decode kernel: the compulsory bytes and the bytes it moves.

*Compulsory* is what any implementation must move: every input byte read once, every
output byte written once. *Moved* is what these kernels read and write as written (the
launch shapes of kernels/backends.py), counting a re-read even when L2 would serve it:

* index scan (index_tc_scores, the launched kernel): each key once, as 16-byte aligned
  supersets of each 64-key tile (up to 16 bytes more per tile); every block stages all
  index queries and weights (blocks x heads x 129 floats; blocks per request as the
  launcher sizes them for ``sm_count`` SMs); scores written once. kernel="simt" models the
  reference index_scores (4,096-block grid-stride scan).
* topk_radix: six passes over the scores (four 8-bit histogram passes, the count pass and
  the write pass, topk.cu), ids written once. Compulsory: the scores once. The multi-block
  select (topk_mb_*): five passes (three histograms, count, write); one less when the indexer
  filled hist0 (hist0_fused); with segments (each block's keys of the threshold bin and
  above, 8 bytes each, written by pass 1) pass 2, the count and the write read a block's
  segment instead of its slice where it fit: one pass over the scores when fused and every
  segment fits. Its work header (histograms, slice counts, entry counts) is zeroed and read.
* attention pass 1 (attn_tc_partial, the launched kernel): each head group (up to 32 heads,
  one block; tc_geometry.attn_tc_launch) re-reads the rows, as 16-byte aligned supersets
  (up to 608 bytes per 583-byte row: an upper bound), and the ids; every chunk re-reads its
  heads' queries (kernel="simt": 16-head groups, 583 bytes per row); every chunk writes a
  partial (max, sum, 512 outputs) per head and the merge reads them back (the partial round
  trip), then writes the output. Fused (attn_tc_fused<chunks>): the same pass-1 reads, and the
  partial states stay in the cluster's shared memory: no round trip, each block writes its
  slice of the output. Compulsory: rows, ids, query and output once.

Byte counts are exact integers for a given geometry; rates divide them by measured time.
"""

from __future__ import annotations

from dataclasses import dataclass

from csa_plan.kernels.backends import INDEX_KEY_BYTES, INDEX_TC_TILE, INDEX_THREADS, attn_warps, record_bytes
from csa_plan.kernels.kernel_limits import HEAD_DIM, INDEX_DIM
from csa_plan.kernels.tc_geometry import (ATTN_TC_ROW_SMEM, H200_SMS, TOPK_MB_HIST0_BINS, attn_tc_fused_kernel,
                                          attn_tc_launch, index_tc_blocks, topk_blocks, topk_header_words,
                                          topk_slice_ids)

F32 = 4
I32 = 4
PARTIAL_FLOATS = 2 + HEAD_DIM  # max, sum, 512 outputs per (chunk, head)


@dataclass(frozen=True)
class Traffic:
    kernel: str
    compulsory_bytes: int
    moved_bytes: int

    def as_dict(self) -> dict:
        return {"kernel": self.kernel, "compulsory_bytes": self.compulsory_bytes, "moved_bytes": self.moved_bytes}


def index_blocks(n: int, requests: int = 1, kernel: str = "tc", sm_count: int = H200_SMS) -> int:
    """Blocks per request the launcher gives the index scan."""
    if kernel == "simt":
        return max(1, min(-(-n // (INDEX_THREADS // 32)), 4096))
    return index_tc_blocks(n, requests, sm_count)


def index_scores(requests: int, n: int, heads: int, kernel: str = "tc", sm_count: int = H200_SMS,
                 hist0_fused: bool = False) -> Traffic:
    q = heads * (INDEX_DIM + 1) * F32
    comp = requests * (n * INDEX_KEY_BYTES + q + n * F32)
    keys = n * INDEX_KEY_BYTES + (0 if kernel == "simt" else 16 * -(-n // INDEX_TC_TILE))
    moved = requests * (keys + index_blocks(n, requests, kernel, sm_count) * q + n * F32)
    if hist0_fused:
        moved += requests * TOPK_MB_HIST0_BINS * I32  # top-k's hist0, merged by atomics
    return Traffic("index_scores", comp, moved)


TOPK_SCORE_PASSES = 6  # topk_radix (one block per request): four histogram passes, count, write
TOPK_MB_SCORE_PASSES = 5  # topk_mb_*: three histogram passes (11/11/10 bits), count, write


def topk_score_passes(multi_block: bool, hist0_fused: bool = False, compacted: bool = False) -> int:
    """Reads of the whole scores: topk_radix 6; topk_mb 5, less the fused first histogram, less
    pass 2, the count and the write when every block reads its compacted segment instead."""
    if not multi_block:
        return TOPK_SCORE_PASSES
    return TOPK_MB_SCORE_PASSES - int(hist0_fused) - 3 * int(compacted)


def topk(requests: int, n: int, k: int, sm_count: int = H200_SMS, *, hist0_fused: bool = False,
         seg_capacity: int = 0, fitting_entries: int = 0, overflowing_blocks: int = 0) -> Traffic:
    """The launcher's choice (a work buffer lent): multi-block when topk_blocks > 1. With
    segments of seg_capacity entries (data-dependent, summed over the requests:
    fitting_entries, the entries of the segments that fit; overflowing_blocks, the blocks
    whose keys of the threshold bin and above did not fit theirs), pass 1 writes the
    segments (8 bytes an entry), and pass 2, the count and the write read a fitting segment
    or, for an overflowing block, its slice of the scores."""
    b = topk_blocks(n, requests, sm_count)
    mb = b > 1
    compact = mb and seg_capacity > 0
    passes = topk_score_passes(mb, hist0_fused, compact)
    work = requests * topk_header_words(b) * I32 * 2 if mb else 0  # zeroed + read
    if compact:
        work += fitting_entries * 8 * 4 + overflowing_blocks * seg_capacity * 8  # written, then read 3 times
        work += 3 * min(requests * n, overflowing_blocks * topk_slice_ids(n, b)) * F32  # the overflowing slices
    return Traffic("topk_radix", requests * (n * F32 + k * I32), requests * (passes * n * F32 + k * I32) + work)


def attention(requests: int, heads: int, rows: int, selected_ids: int, chunks: int, rope_dim: int = 64,
              kernel: str = "tc", fused: bool = False) -> Traffic:
    """rows = window rows + selected records; selected_ids = ids read (0 when all records are taken in order)."""
    rec = record_bytes(rope_dim)
    qy = heads * HEAD_DIM * F32
    comp = requests * (rows * rec + selected_ids * I32 + 2 * qy)
    if kernel == "simt":
        groups, row_bytes = -(-heads // attn_warps(heads)), rec
    else:
        groups, row_bytes = attn_tc_launch(heads).head_groups, ATTN_TC_ROW_SMEM
    partial = 0 if fused else chunks * heads * PARTIAL_FLOATS * F32
    sinks = heads * F32 * (chunks if fused else 1)  # fused: each block of a cluster reads its heads' sinks
    moved = requests * (groups * (rows * row_bytes + selected_ids * I32) + chunks * qy  # pass 1: every chunk reads q
                        + partial  # pass 1 writes the partials
                        + partial + qy  # pass 2 (or the cluster) reads them back and writes y
                        + sinks)
    return Traffic(attn_tc_fused_kernel(chunks) if fused else "attn_partial+attn_merge", comp, moved)
