"""Launch geometry of the tensor-core kernels (attn_tc.cu), shared by the launchers and the
throughput model: block shape, dynamic shared memory, and the split of the row list.

The constants mirror the #defines of attn_tc.cu (a test compares them).
"""

from __future__ import annotations

from dataclasses import dataclass

from csa_plan.planner.units import ceil_div, round_up

ATTN_TC_TILE = 32  # rows per pipeline stage
ATTN_TC_STAGES = 3
ATTN_TC_ROW_SMEM = 608  # 38 aligned 16-byte chunks: a 583-byte row at any offset
ATTN_TC_KPITCH = 520  # bf16 per dequantized row
ATTN_TC_MAX_IDS = 2048  # rows of one split when the rows come from an index list
ATTN_TC_HEADS_PER_MTILE = 16
ATTN_TC_MAX_MTILES = 2  # at most 32 heads per block (Q fragments stay in registers)
PART_FLOATS_PER_HEAD = 2 + 512  # (max, sum) + the partial output
H200_SMS = 132


@dataclass(frozen=True)
class AttnTcLaunch:
    head_groups: int
    m_tiles: int
    threads: int
    smem_bytes: int


def attn_tc_smem_bytes(m_tiles: int) -> int:
    stages = ATTN_TC_STAGES * ATTN_TC_TILE * ATTN_TC_ROW_SMEM
    ktile = ATTN_TC_TILE * ATTN_TC_KPITCH * 2
    partial_s = m_tiles * (4 * 4 * 32 * 16 + 4 * 16 * 4)  # partial S by lane (then the P tile), row maxima
    # + each row's lead and offset, one 8-byte mbarrier per stage, and a zero row
    return stages + ktile + partial_s + ATTN_TC_MAX_IDS + 4 * ATTN_TC_MAX_IDS + 8 * ATTN_TC_STAGES + ATTN_TC_ROW_SMEM


def attn_tc_launch(heads: int) -> AttnTcLaunch:
    """Heads <= 16: one 16-head m-tile (128 threads); more: blocks of 32 heads (256 threads)."""
    m_tiles = 1 if heads <= ATTN_TC_HEADS_PER_MTILE else ATTN_TC_MAX_MTILES
    per_block = ATTN_TC_HEADS_PER_MTILE * m_tiles
    return AttnTcLaunch(head_groups=ceil_div(heads, per_block), m_tiles=m_tiles, threads=128 * m_tiles,
                        smem_bytes=attn_tc_smem_bytes(m_tiles))


def attn_splits(rows: int, requests: int, head_groups: int, capacity: int, *, sm_count: int = H200_SMS) -> int:
    """Chunks of the row list for the two-pass path: the count that gives the busiest SM the
    fewest 32-row tiles (blocks on one SM share its issue slots, so its time is blocks x tiles
    per block; the smallest such count on ties, fewer partial states to write and merge), at
    most what the planned workspace holds, and at most ATTN_TC_MAX_IDS rows per chunk (the
    kernel keeps a table of every row of its split). Indexed (CSA) and contiguous (HCA) row
    lists follow the same rule."""
    lo = ceil_div(max(rows, 1), ATTN_TC_MAX_IDS)
    hi = max(1, min(max(1, capacity), ceil_div(max(rows, 1), ATTN_TC_TILE)))
    if lo >= hi:
        return lo
    best, best_cost = lo, None
    for n in range(lo, hi + 1):
        cost = _busiest_sm_tiles(rows, requests, head_groups, n, sm_count)
        if best_cost is None or cost < best_cost:
            best, best_cost = n, cost
    return best


FUSED_CLUSTERS = (1, 2, 4, 8)  # attn_tc_fused1/2/4/8: a cluster of that many chunks merges in the launch


def attn_tc_fused_kernel(chunks: int) -> str:
    """The fused attention kernel whose thread block cluster is `chunks` blocks (attn_tc.cu)."""
    return f"attn_tc_fused{chunks}"


ATTN_TC_FUSED_KERNELS = tuple(attn_tc_fused_kernel(c) for c in FUSED_CLUSTERS)
# A fused split is taken when its busiest SM runs at most this much more tile time than the best
# two-pass split: the two-pass path also pays a second launch and writes and reads back its
# partial states, which the throughput model puts at an eighth or more of the pass-1 time
# wherever the two are this close (benchmarks/throughput_model.py).
FUSE_TILE_SLACK = 9 / 8


@dataclass(frozen=True)
class AttnSplit:
    """The row list's chunks, and whether they merge inside the launch (attn_tc_fused<chunks>:
    one thread block cluster per request and head group, no partial states in memory) or in
    attn_merge, a second launch over partial states in the planned scratch."""

    chunks: int
    fused: bool


def _busiest_sm_tiles(rows: int, requests: int, head_groups: int, n: int, sm_count: int) -> int:
    return ceil_div(requests * head_groups * n, sm_count) * ceil_div(ceil_div(max(rows, 1), n), ATTN_TC_TILE)


def attn_split(rows: int, requests: int, head_groups: int, capacity: int, *, sm_count: int = H200_SMS) -> AttnSplit:
    """The fused split with the fewest busiest-SM tiles (chunks in FUSED_CLUSTERS, at most
    ATTN_TC_MAX_IDS rows each; no scratch needed) when it is within FUSE_TILE_SLACK of the
    best two-pass split (attn_splits, within the planned scratch), else that two-pass split."""
    two = attn_splits(rows, requests, head_groups, capacity, sm_count=sm_count)
    fits = [n for n in FUSED_CLUSTERS if ceil_div(max(rows, 1), n) <= ATTN_TC_MAX_IDS]
    if fits:
        cost = {n: _busiest_sm_tiles(rows, requests, head_groups, n, sm_count) for n in fits}
        best = min(fits, key=lambda n: (cost[n], n))
        if cost[best] <= FUSE_TILE_SLACK * _busiest_sm_tiles(rows, requests, head_groups, two, sm_count):
            return AttnSplit(best, True)
    return AttnSplit(two, False)


@dataclass(frozen=True)
class PartialCapacity:
    """How many chunks' partial states fit the planned scratch of one decode row (floats):
    same: (max, sum) and outputs together in the attention workspace; spare: outputs in the
    index-score workspace (dead after top-k), (max, sum) in the attention workspace."""

    same: int
    spare: int

    @property
    def chunks(self) -> int:
        return max(self.same, self.spare)


def partial_capacity(heads: int, attn_floats: int, score_floats: int = 0) -> PartialCapacity:
    same = attn_floats // (heads * PART_FLOATS_PER_HEAD)
    spare = min(attn_floats // (2 * heads), score_floats // (heads * 512)) if score_floats else 0
    return PartialCapacity(same=same, spare=spare)


INDEX_TC_KEYS_PER_TILE = 128  # index_tc.cu's CSA_IX_TILE (backends.INDEX_TC_TILE)


def index_tc_blocks(n: int, requests: int, sm_count: int = H200_SMS, blocks_per_sm: int = 2) -> int:
    """Blocks per request of index_tc_scores: the resident slots (blocks_per_sm per SM) shared
    by the requests, rounded down so no SM runs a third block, at most one per key tile."""
    tiles = ceil_div(max(n, 1), INDEX_TC_KEYS_PER_TILE)
    return max(1, min(tiles, sm_count * blocks_per_sm // max(1, requests)))


TOPK_MB_MIN_KEYS = 16384  # below this one 256-thread block per request (topk_radix) is enough
TOPK_MB_KEYS_PER_BLOCK = 4096  # at least 16 keys per thread of a topk_mb block
TOPK_MB_HIST_WORDS = 5120  # topk.cu: hist0[2048] hist1[2048] hist2[1024], then the slice counts
TOPK_MB_HIST0_BINS = 2048  # csa_common.cuh's CSA_TK_BINS0: the first digit, 11 bits
TOPK_MB_CAND_SHARE = 16  # callers that allocate the work (the probe): room for n / 16 entries, at least 4 k


def topk_blocks(n: int, requests: int, sm_count: int = H200_SMS, blocks_per_sm: int = 2) -> int:
    """Blocks per request of the multi-block radix select (1: the single-block topk_radix):
    the resident slots shared by the requests, at least TOPK_MB_KEYS_PER_BLOCK keys each."""
    if n < TOPK_MB_MIN_KEYS:
        return 1
    return max(1, min(ceil_div(n, TOPK_MB_KEYS_PER_BLOCK), sm_count * blocks_per_sm // max(1, requests)))


def topk_slice_ids(n: int, blocks: int) -> int:
    """Ids per block's slice (topk.cu's topk_mb_slice: a multiple of 4)."""
    return round_up(ceil_div(n, blocks), 4)


def topk_header_words(blocks: int) -> int:
    """uint32 words before the segments: the histograms, two counts and one entry count per
    slice, rounded up to 4 words (the segments start 16-byte aligned)."""
    return round_up(TOPK_MB_HIST_WORDS + 3 * blocks, 4)


def topk_work_words(blocks: int, cand_capacity: int = 0) -> int:
    """uint32 words of work one request's multi-block select needs: the header and room for
    about cand_capacity (id, key) entries in all, as one segment per block of an even count
    (every segment and every request's slice stays 16-byte aligned)."""
    return topk_header_words(blocks) + 2 * blocks * round_up(ceil_div(cand_capacity, blocks), 2)


def topk_entry_room(n: int, k: int) -> int:
    """Entries a caller that allocates the work gives all segments together: n / 16, at least
    4 k (a segment holds its slice's keys of the threshold bin and above: k - 1 chosen keys at
    most above the bin, plus the bin's own), at most n."""
    return min(n, max(n // TOPK_MB_CAND_SHARE, 4 * k))


@dataclass(frozen=True)
class TopkLayout:
    """One request's slice of a lent top-k work buffer (topk.cu): `words` per request, the
    header (histograms, slice counts, entry counts) then one segment of seg_capacity (id, key)
    entries per block. With seg_capacity 0 nothing is compacted (every pass reads the scores)."""

    blocks: int
    seg_capacity: int

    @property
    def header_words(self) -> int:
        return topk_header_words(self.blocks)

    @property
    def words(self) -> int:
        return self.header_words + 2 * self.blocks * self.seg_capacity

    @property
    def cand_capacity(self) -> int:
        return self.blocks * self.seg_capacity

    def entries_word(self, block: int) -> int:
        """How many keys block `block`'s pass 1 found for its segment (stored or not)."""
        return TOPK_MB_HIST_WORDS + 2 * self.blocks + block

    def segment_word(self, block: int) -> int:
        return self.header_words + 2 * self.seg_capacity * block


def topk_layout(n: int, requests: int, work_words: int, sm_count: int = H200_SMS,
                blocks: int | None = None) -> TopkLayout | None:
    """How a lent buffer of work_words uint32 words serves `requests` multi-block selects of n
    scores (None: the single-block topk_radix, too few keys or too small a buffer): the blocks
    topk_blocks gives (or `blocks`), and per block a segment of as many entries as the rest
    holds, at most its slice's ids (all of them in one bin: then nothing overflows), even."""
    b = blocks or topk_blocks(n, requests, sm_count)
    per = work_words // max(1, requests)
    if b <= 1 or per < topk_header_words(b):
        return None
    room = (per - topk_header_words(b)) // (2 * b)
    return TopkLayout(blocks=b, seg_capacity=min(round_up(topk_slice_ids(n, b), 2), room) // 2 * 2)
