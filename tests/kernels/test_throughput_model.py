"""benchmarks/throughput_model.py: its SASS counts are the kernels' own, its bytes are exact.

The recorded instruction counts (benchmarks/sass_counts.json) must equal a fresh read of
the SASS when nvcc and cuobjdump are present (so the model cannot drift from the kernels);
the compulsory bytes follow the layout exactly; every share is a fraction of the peak.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import asdict

import pytest

from helpers import ROOT

from csa_plan.kernels import sass as S

spec = importlib.util.spec_from_file_location("throughput_model", ROOT / "benchmarks" / "throughput_model.py")
M = importlib.util.module_from_spec(spec)
sys.modules.setdefault("throughput_model", M)  # dataclasses look their module up
spec.loader.exec_module(M)


@pytest.mark.skipif(S.missing_sass_tools() is not None, reason=f"re-reading the SASS {S.missing_sass_tools()}")
def test_recorded_counts_are_the_current_sass():
    fresh = {k: asdict(v) for k, v in M.read_counts().items()}
    recorded = {k: asdict(v) for k, v in M.load_counts().items()}
    assert fresh == recorded, "kernels changed: run python benchmarks/throughput_model.py --record"


def test_table_covers_the_cases_with_exact_compulsory_bytes():
    rows = M.table(M.load_counts())
    got = {(r.kernel, r.batch, r.heads) for r in rows}
    for b in (1, 16):
        assert {("HCA attention", b, 16), ("HCA attention", b, 128), ("CSA attention", b, 16),
                ("CSA attention", b, 128), ("indexer", b, 64)} <= got
    by = {(r.kernel, r.batch, r.heads): r for r in rows}
    hca = by[("HCA attention", 16, 16)]
    assert hca.compulsory_bytes == 16 * ((128 + 8192) * 583 + 16 * 512 * 4 * 2)
    csa = by[("CSA attention", 16, 16)]
    assert csa.compulsory_bytes == 16 * ((128 + 1024) * 583 + 16 * 512 * 4 * 2)
    assert by[("indexer", 16, 64)].compulsory_bytes == 16 * (262144 * 68 + 64 * 129 * 4 + 262144 * 4)
    for r in rows:
        assert 0 < r.share_of_peak <= 1 and r.total_us >= r.fixed_us
        assert r.hbm_bytes >= r.compulsory_bytes * 0.99


def test_cli_prints_the_table(capsys):
    assert M.main([]) == 0
    out = capsys.readouterr().out
    assert "HCA attention" in out and "indexer" in out and "not measured" in out


def test_indexer_geometry_is_the_kernel_s():
    """The model's indexer tile, stages and threads are index_tc.cu's #defines."""
    import re

    from csa_plan.kernels import backends as B
    from csa_plan.kernels.tc_geometry import INDEX_TC_KEYS_PER_TILE

    src = (B.KERNEL_DIR / "index_tc.cu").read_text()
    got = {k: int(v) for k, v in re.findall(r"^#define CSA_IX_(TILE|STAGES|THREADS) (\d+)", src, re.M)}
    assert got == {"TILE": B.INDEX_TC_TILE, "STAGES": B.INDEX_TC_STAGES, "THREADS": B.INDEX_TC_THREADS}
    assert INDEX_TC_KEYS_PER_TILE == B.INDEX_TC_TILE


def test_fused_split_and_the_ceiling_of_any_design():
    """At batch 16 the 16-head cases take the fused split (one launch, no partial states in
    HBM); no row beats the ceiling of any one-launch design under the same constants, and
    128-head HCA attention's ceiling is under half the HBM peak (compute-bound)."""
    by = {(r.kernel, r.batch, r.heads): r for r in M.table(M.load_counts())}
    for kind in ("HCA attention", "CSA attention"):
        r = by[(kind, 16, 16)]
        assert r.path == f"fused{r.chunks}" and r.chunks in (1, 2, 4, 8)
        assert r.hbm_bytes < r.compulsory_bytes * 1.1  # no partial round trip
    for r in by.values():
        assert 0 < r.share_of_peak <= r.ceiling <= 1, r
    assert by[("HCA attention", 16, 128)].ceiling < 0.5
    # the fused merge: one launch plus the cluster's costs, more with more chunks
    assert M.cluster_merge_s(16, 1, 1) < M.cluster_merge_s(16, 2, 1) < M.cluster_merge_s(16, 8, 1)


def test_fused_top_k_histogram_keeps_the_indexer_at_half_of_peak():
    """index_tc_scores with top-k's first histogram in its epilogue (the harness's launch):
    the merge loop is read from the SASS and charged per block, hist0's bytes are counted,
    and at batch 16 the modelled share stays at least 50 % (never above the unfused row)."""
    counts = M.load_counts()
    assert counts["index_tc_scores"].flush["bins_per_trip"] >= 1
    for batch in (1, 16):
        fused = M.indexer(counts, 1 << 20, batch)
        plain = M.indexer(counts, 1 << 20, batch, hist0_fused=False)
        assert fused.kernel == "indexer+hist" and fused.sm_us > plain.sm_us
        assert fused.hbm_bytes == plain.hbm_bytes + batch * 2048 * 4
        assert fused.share_of_peak <= plain.share_of_peak
    assert M.indexer(counts, 1 << 20, 16).share_of_peak >= 0.5


def test_topk_rows_exist_with_exact_bytes_and_below_their_ceiling():
    """Top-k at 1M tokens (262,144 scores per request), batch 1 and 16, k 1024 and 512,
    unfused and with the fused histogram and fitting segments: compulsory bytes are the scores
    and the ids once, the modelled bytes are traffic.topk's, and no share beats its ceiling."""
    from csa_plan.kernels import traffic as T

    rows = M.table(M.load_counts())
    by = {(r.kernel, r.batch, r.path): r for r in rows}
    n = 262144
    for b in (1, 16):
        for k in (1024, 512):
            un, fu = by[(f"top-{k}", b, "unfused")], by[(f"top-{k}", b, "hist+seg")]
            for r in (un, fu):
                assert r.compulsory_bytes == b * (n * 4 + k * 4)
                assert 0 < r.share_of_peak <= r.ceiling <= 1, r
                assert r.ceiling == M.ceiling_share(r.compulsory_bytes, 0)
                assert r.total_us >= r.fixed_us
            assert un.hbm_bytes == T.topk(b, n, k, M.SMS).moved_bytes
            assert un.hbm_bytes == b * (5 * n * 4 + k * 4 + T.topk_header_words(un.chunks) * 8)
            entries = M.TOPK_SEG_ENTRIES[k]
            assert fu.hbm_bytes == b * (n * 4 + k * 4 + T.topk_header_words(fu.chunks) * 8 + entries * 8 * 4)
    assert by[("top-1024", 16, "unfused")].compulsory_bytes == 16 * (262144 * 4 + 1024 * 4)


def test_topk_fused_path_makes_fewer_launches_and_moves_fewer_bytes():
    """hist+seg: 4 launches, one of them over the scores; unfused: 5, each over the scores;
    the per-key trips are the slices' (16 blocks of 16,384 keys at batch 16: 4 trips of
    4,096 keys, four 128-bit loads per thread per trip) and a segment's one round."""
    counts = M.load_counts()
    assert set(M.TOPK_LOOPS) <= set(counts)
    n = 262144
    for b in (1, 16):
        for k in (1024, 512):
            un = M.topk_launches(counts, n, b, k, fused=False)
            fu = M.topk_launches(counts, n, b, k, fused=True)
            assert len(fu) == 4 < len(un) == 5
            assert sum(x.hbm_bytes >= b * n * 4 for x in un) == 5
            assert sum(x.hbm_bytes >= b * n * 4 for x in fu) == 1
            assert sum(x.hbm_bytes for x in fu) < sum(x.hbm_bytes for x in un)
            pu, pf = M.topk(counts, 1 << 20, b, k, fused=False), M.topk(counts, 1 << 20, b, k, fused=True)
            assert pf.hbm_bytes < pu.hbm_bytes and pf.total_us < pu.total_us
            assert pf.fixed_us == 4 * M.LAUNCH_S * 1e6 and pu.fixed_us == 5 * M.LAUNCH_S * 1e6
    trips = {x.kernel: x.trips for x in M.topk_launches(counts, n, 16, 1024, fused=False)}
    assert trips == {"topk_mb_hist pass 0": 4, "topk_mb_hist pass 1": 4, "topk_mb_hist pass 2": 4,
                     "topk_mb_count": 4, "topk_mb_write": 4}
    for x in M.topk_launches(counts, n, 16, 1024, fused=False):  # latency: trips x the SASS's waits
        assert x.latency_us == pytest.approx(x.trips * counts[x.loop].loads["waits"] * M.LOADED_LATENCY_S * 1e6)
    assert all(x.trips == 1 for x in M.topk_launches(counts, n, 16, 1024, fused=True)[1:])


def test_topk_loops_are_the_passes_per_key_loops():
    """The recorded top-k loops hold what their passes do: the scans of the scores four
    128-bit loads per trip (CSA_TK_INFLIGHT), all issued before their first use — one wait a
    trip (_load_waits) —, the
    hist and count segment rounds only 32-bit key-word loads, the write's segment round two
    128-bit loads (ids and keys); the histogram passes their shared atomics and the merge of
    their bins."""
    c = M.load_counts()
    for scan in ("topk_mb_hist/scan", "topk_mb_hist/compact", "topk_mb_count/scan", "topk_mb_write/scan"):
        assert c[scan].loads["wide"] == 4, scan
        assert c[scan].loads["waits"] == 1, scan
    for seg in ("topk_mb_hist/segment", "topk_mb_count/segment"):
        assert c[seg].loads["wide"] == 0 and c[seg].loads["key_words"] >= 4
    assert c["topk_mb_write/segment"].loads["wide"] == 2
    for h in ("topk_mb_hist/scan", "topk_mb_hist/compact", "topk_mb_hist/segment"):
        assert c[h].lsu_wavefronts >= 4 * M.ATOMS_WAVEFRONTS and c[h].flush["bins_per_trip"] >= 1
    # the compaction's ballot-ranked append is the longest hist loop
    assert c["topk_mb_hist/compact"].total > c["topk_mb_hist/scan"].total


def test_cli_prints_the_topk_rows(capsys):
    assert M.main([]) == 0
    out = capsys.readouterr().out
    assert "top-1024" in out and "top-512" in out and "hist+seg" in out and "unfused" in out


def test_attention_phases_are_summed_and_a_lone_warp_issues_at_half_rate():
    """attn_tc's tile loop is cut at its block barriers (BAR.SYNC) into phases that cannot overlap
    — dequantization, S = QK^T, the softmax's two halves, O += PV — so a tile costs the sum of
    the phases, each the largest of its issue, tensor and shared-memory clocks, not the largest
    of the loop's totals; and a 4-warp block alone on its SM (one warp per scheduler) issues at
    SINGLE_WARP_IPC, not one instruction a clock."""
    counts = M.load_counts()
    c = counts["attn_tc_partial"]
    assert len(c.phases) >= 4
    assert sum(p["total"] for p in c.phases) == c.total and sum(p["hmma"] for p in c.phases) == c.hmma
    assert sum(1 for p in c.phases if p["hmma"]) == 2  # the two products, in different phases
    assert [p for p in c.phases if "dequant" in p["inner"]][0]["hmma"] == 0
    trips = M.attention_trips(128)
    ph = M._tile_phases(c, 4, trips)
    overlapped = max(sum(p[i] for p in ph) for i in range(3))  # the old model: every phase overlapped
    chain, pipes = M.sm_tile_clocks(c, 4, trips, resident=1)
    assert chain == pytest.approx(sum(max(i / 0.5, t, m) for i, t, m in ph)) and chain > 2 * overlapped * 0.9
    assert pipes >= overlapped  # alone, the block's issue is capped too
    assert M.issue_rate(1) == M.SINGLE_WARP_IPC < M.issue_rate(2) == 1.0
    # HCA attention at 16 heads, batch 16: one 4-warp block per SM; well under the 72.4 % of the
    # overlapped, full-issue model
    hca = M.attention(counts, 128, 1 << 20, 16, 16)
    assert hca.blocks <= M.SMS and hca.share_of_peak < 0.5
    # the indexer keeps two blocks per SM: their 8 warps issue at the full rate
    assert M.indexer(counts, 1 << 20, 16).share_of_peak >= 0.5


def test_cli_prints_the_phases(capsys):
    assert M.main(["--phases"]) == 0
    out = capsys.readouterr().out
    assert "attention, 16 heads per block" in out and "phase 5" in out and "indexer" in out
