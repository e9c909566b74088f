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
