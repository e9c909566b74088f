"""tc_geometry's split rules: the two-pass split (attn_splits) and the fused choice (attn_split)."""

from __future__ import annotations

from csa_plan.kernels.tc_geometry import (ATTN_TC_MAX_IDS, ATTN_TC_TILE, FUSE_TILE_SLACK, FUSED_CLUSTERS, AttnSplit,
                                          attn_split, attn_splits)
from csa_plan.planner.units import ceil_div


def _tiles(rows, requests, groups, n, sms=132):
    return ceil_div(requests * groups * n, sms) * ceil_div(ceil_div(rows, n), ATTN_TC_TILE)


def test_two_pass_split_fills_the_sms_within_the_scratch():
    assert attn_splits(8320, 1, 1, 16) == 16  # the scratch holds 16 chunks' partial states
    assert attn_splits(8320, 1, 1, 1000) > 16
    assert attn_splits(100, 1, 1, 0) == 1  # no scratch: one chunk
    assert ceil_div(70000, attn_splits(70000, 1, 1, 1)) <= ATTN_TC_MAX_IDS  # the row table bounds a chunk


def test_fused_when_a_cluster_split_is_within_the_slack_of_the_best_two_pass():
    for rows, requests, groups, cap in [(1152, 16, 1, 16), (8320, 16, 1, 16), (1152, 16, 4, 16), (192, 1, 1, 16),
                                        (1152, 1, 1, 16), (8320, 1, 1, 16), (8320, 1, 4, 0), (50, 3, 2, 0)]:
        got = attn_split(rows, requests, groups, cap)
        two = attn_splits(rows, requests, groups, cap)
        fits = [n for n in FUSED_CLUSTERS if ceil_div(rows, n) <= ATTN_TC_MAX_IDS]
        best = min(fits, key=lambda n: (_tiles(rows, requests, groups, n), n))
        if _tiles(rows, requests, groups, best) <= FUSE_TILE_SLACK * _tiles(rows, requests, groups, two):
            assert got == AttnSplit(best, True), (rows, requests, groups, cap)
        else:
            assert got == AttnSplit(two, False), (rows, requests, groups, cap)
    # the 1M-token cases at batch 16 fuse; one request's long HCA list keeps more chunks in two passes
    assert attn_split(1152, 16, 1, 16) == AttnSplit(8, True)
    assert attn_split(8320, 1, 1, 16) == AttnSplit(16, False)
    # no scratch: a one-chunk two-pass split is never better than the fused one (one launch fewer)
    assert attn_split(100, 1, 1, 0).fused


def test_rows_beyond_eight_full_row_tables_cannot_fuse():
    rows = 8 * ATTN_TC_MAX_IDS + 1
    split = attn_split(rows, 1, 1, 64)
    assert not split.fused and ceil_div(rows, split.chunks) <= ATTN_TC_MAX_IDS
