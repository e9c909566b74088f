"""SASS checks of the tensor-core kernels (nvcc 13, sm_90): what their hot loops issue.

For attn_tc_partial and index_tc_scores the tile loop (the loop with the most tensor-core
instructions) must use mma.sync (HMMA.16816.F32.BF16), bring its rows/keys in with bulk
copies (UBLKCP, attention: one per row on an mbarrier) or 128-bit asynchronous copies
(LDGSTS.E.BYPASS.128, the indexer), issue no narrower global load and no local-memory
access; ptxas must report no spills and registers/shared memory that give the occupancy the
design assumes (kernels.tc_geometry / the launchers: attention two 128-thread blocks per SM
at 16 heads, one 256-thread block at 32 heads per block; the indexer two 128-thread blocks).
Skipped, saying which tool is missing, without nvcc or cuobjdump (the CUDA toolkit, or the
nvidia-cuda-cuobjdump wheel).
"""

from __future__ import annotations

from collections import Counter

import pytest

from csa_plan.kernels import sass as S
from csa_plan.kernels.backends import INDEX_TC_THREADS
from csa_plan.kernels.tc_geometry import ATTN_TC_FUSED_KERNELS, attn_tc_launch

MISSING = S.missing_sass_tools()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    out = tmp_path_factory.mktemp("sass")
    ks = {}
    for cu in ("attn_tc.cu", "index_tc.cu"):
        ks.update(S.kernels_of(cu, out))
    return ks


# kernel -> [(threads, dynamic shared bytes, blocks per SM the design needs)]
ATTN_DESIGN = [(attn_tc_launch(16).threads, attn_tc_launch(16).smem_bytes, 2),
               (attn_tc_launch(128).threads, attn_tc_launch(128).smem_bytes, 1)]
FUSED = ATTN_TC_FUSED_KERNELS
DESIGN = {"attn_tc_partial": ATTN_DESIGN, "index_tc_scores": [(INDEX_TC_THREADS, 0, 2)]} | {k: ATTN_DESIGN for k in FUSED}


@pytest.mark.parametrize("name", sorted(DESIGN))
def test_hot_loop_uses_tensor_cores_and_128_bit_async_loads(kernels, name, record_property):
    k = kernels[name]
    ops = Counter(k.opcodes(k.hot_loop()))
    record_property("hot_loop_mix", dict(ops.most_common(12)))
    assert ops["HMMA.16816.F32.BF16"] > 0, ops
    async128 = [op for op in ops if (op.startswith("LDGSTS") and ".128" in op) or S.is_bulk_copy(op)]
    assert async128, f"{name}: no 128-bit cp.async or bulk copy in the tile loop: {ops}"
    if name.startswith("attn_tc"):  # rows arrive by cp.async.bulk (one per row, on the stage's mbarrier)
        assert any(S.is_bulk_copy(op) for op in ops) and any(op.startswith("SYNCS") for op in ops), ops
    narrow = [op for op in ops if S.is_global_load(op) and S.load_width_bits(op) < 128]
    assert not narrow, f"{name}: global loads narrower than 128 bits in the tile loop: {narrow}"
    local = [op for op in ops if op.startswith(("LDL", "STL"))]
    assert not local, f"{name}: local memory in the tile loop: {local}"


@pytest.mark.parametrize("name", sorted(DESIGN))
def test_no_spills_and_occupancy_as_designed(kernels, name, record_property):
    r = kernels[name].resources
    record_property("registers", r.registers)
    assert r.spill_stores == 0 and r.spill_loads == 0, r
    assert r.registers <= 255
    for threads, dyn, need in DESIGN[name]:
        smem = r.smem_bytes + dyn
        assert smem <= 227 * 1024, (name, smem)
        got = S.blocks_per_sm(r.registers, threads, smem)
        assert got >= need, f"{name}: {got} blocks/SM at {threads} threads, {smem} B shared; the design needs {need}"


@pytest.mark.parametrize("name", FUSED[1:])
def test_fused_clusters_merge_over_the_cluster_barrier_and_distributed_shared_memory(kernels, name):
    """attn_tc_fused2/4/8: the merge's cluster barrier (UCGABAR arrive and wait, twice) and
    generic loads of the other blocks' shared memory (LD.E after mapa); the tile loop is the
    same as attn_tc_partial's."""
    k = kernels[name]
    ops = Counter(k.opcodes())
    assert ops["UCGABAR_ARV"] == 2 and ops["UCGABAR_WAIT"] == 2, ops
    assert any(o.startswith("LD.E") for o in ops), ops
    part = kernels["attn_tc_partial"]
    assert Counter(k.opcodes(k.hot_loop()))["HMMA.16816.F32.BF16"] == Counter(
        part.opcodes(part.hot_loop()))["HMMA.16816.F32.BF16"]


def test_sass_reader_sees_loops_and_widths():
    assert S.load_width_bits("LDG.E.128") == 128 and S.load_width_bits("LDG.E.U8") == 32
    assert S.load_width_bits("LDGSTS.E.BYPASS.128.ZFILL") == 128
    assert S.is_tensor("HMMA.16816.F32.BF16") and not S.is_tensor("FFMA")
    # 255 registers x 128 threads: 8 warps of 8192 registers -> 2 blocks in 64K
    assert S.blocks_per_sm(255, 128, 0) == 2 and S.blocks_per_sm(128, 512, 0) == 1
    assert S.blocks_per_sm(96, 128, 108 * 1024) == 2  # shared memory decides


@pytest.fixture(scope="module")
def topk_kernels(tmp_path_factory):
    return S.kernels_of("topk.cu", tmp_path_factory.mktemp("sass_topk"))


@pytest.mark.parametrize("name", ["topk_mb_hist", "topk_mb_count", "topk_mb_write"])
def test_multi_block_topk_scans_with_128_bit_loads_no_spills(topk_kernels, name, record_property):
    """Each topk_mb kernel's scan over the scores is a loop with 128-bit global loads
    (LDG.E.128: the float4 path for 16-byte aligned slices); no spills or local memory;
    two 256-thread blocks fit an SM (the grid is sized for two per SM)."""
    k = topk_kernels[name]
    wide = [lp for lp in k.loops() if any(S.is_global_load(o) and S.load_width_bits(o) == 128
                                          for o in k.opcodes(lp))]
    assert wide, f"{name}: no loop with a 128-bit global load"
    assert not [o for o in k.opcodes() if o.startswith(("LDL", "STL"))]
    r = k.resources
    record_property("registers", r.registers)
    assert r.spill_stores == 0 and r.spill_loads == 0, r
    assert S.blocks_per_sm(r.registers, 256, r.smem_bytes) >= 2


def _wide_loads_before_first_use(k, lp) -> int:
    """128-bit global loads a loop body issues before any instruction reads a register one of
    them writes (walking the SASS in order from the loop's top)."""
    import re

    reg = re.compile(r"\bR(\d+)\b")
    pending, n = set(), 0
    for ins in k.instrs[lp[0]:lp[1] + 1]:
        ops = ins.operands.split(",")
        srcs = ins.operands if ins.opcode.startswith(("ST", "RED", "BAR")) else ",".join(ops[1:])
        if {int(m.group(1)) for m in reg.finditer(srcs)} & pending:
            break
        if S.is_global_load(ins.opcode) and S.load_width_bits(ins.opcode) == 128:
            r = int(reg.match(ops[0].strip()).group(1))
            pending |= set(range(r, r + 4))
            n += 1
    return n


@pytest.mark.parametrize("name", ["topk_mb_hist", "topk_mb_count", "topk_mb_write"])
def test_multi_block_topk_scans_keep_several_16_byte_loads_in_flight(topk_kernels, name, record_property):
    """Each topk_mb kernel's main scan over the scores (topk_mb_scan / topk_mb_rounds: 4
    float4 per thread per trip, CSA_TK_INFLIGHT) issues at least two LDG.E.128 before the
    first instruction that uses any of them, so a thread has >= 2 16-byte loads in flight; the
    compaction's loop (topk_mb_hist, with ballots) too. Scan loops: every global load 128-bit
    (the scalar and partial-round fallbacks are in the one-round loops after them)."""
    k = topk_kernels[name]
    best = {}
    for lp in k.loops():
        ops = k.opcodes(lp)
        wide = sum(S.is_global_load(o) and S.load_width_bits(o) == 128 for o in ops)
        if wide < 2 or wide != sum(S.is_global_load(o) for o in ops):
            continue  # not a scan of the scores (a segment round also loads 32-bit words)
        kind = "ballots" if any(o.startswith("VOTE") for o in ops) else "plain"
        best[kind] = max(best.get(kind, 0), _wide_loads_before_first_use(k, lp))
    record_property("in_flight", best)
    want = {"topk_mb_hist": ("plain", "ballots"), "topk_mb_count": ("plain",), "topk_mb_write": ("ballots",)}[name]
    for kind in want:
        assert best.get(kind, 0) >= 2, (name, kind, best)


def test_index_tc_fused_histogram_counts_in_shared_memory_inside_the_tile_loop(kernels):
    """The fused top-k histogram (hist != null) adds shared-memory atomics to the tile loop
    (one per stored score, ATOMS) and merges into the request's hist0 with global reductions
    only after it (RED/ATOMG outside the loop: one per non-empty bin per block)."""
    k = kernels["index_tc_scores"]
    a, b = k.hot_loop()
    ops = k.opcodes((a, b))
    assert any(op.startswith("ATOMS") for op in ops), ops
    assert not [op for op in ops if op.startswith(("RED", "ATOMG"))]
    assert any(op.startswith(("RED", "ATOMG")) for op in k.opcodes()[b + 1:])
