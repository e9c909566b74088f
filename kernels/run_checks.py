"""The checks behind ``csa-plan run-gpu``: kernels vs oracle, decode vs recompute, plan vs device.

``run_checks`` takes admitted descriptors and a backend and returns the report
(the ``--json`` document). Device-memory checks need CuPy's memory pool and
cudaMemGetInfo; under the emulated backend they are marked not applicable.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from csa_plan.planner.layout import ZERO, group_bytes
from csa_plan.planner.ledger import Ledger, OutOfMemoryError
from csa_plan.kernels import oracle as O
from csa_plan.kernels.harness import DeviceLayer, Group

OUTPUT_ATOL = 1e-3  # max |kernel - oracle| on attention outputs (values are O(1))
SCORE_RTOL = 1e-4  # index scores, relative to max |score|
RECOMPUTE_ATOL = 0.0  # decode and full recompute run the same kernels on the same bytes
BYTE_AGREEMENT = 0.999  # fraction of record / key bytes equal to the oracle's emission
POOL_ROUND = 512  # CuPy's memory pool rounds every allocation up to 512 bytes
DEVICE = 0


@dataclass
class Check:
    name: str
    status: str  # pass | fail | n/a
    detail: str
    layer: int | None = None
    value: float | int | None = None

    def as_dict(self) -> dict:
        return {"name": self.name, "layer": self.layer, "status": self.status, "detail": self.detail,
                "value": self.value}


@dataclass
class Run:
    checks: list[Check] = field(default_factory=list)
    timings: list[dict] = field(default_factory=list)

    def add(self, name, ok, detail, layer=None, value=None, applicable=True):
        self.checks.append(Check(name, "n/a" if not applicable else ("pass" if ok else "fail"), detail, layer, value))


def prefill_length(max_seq_len: int, steps: int) -> int:
    """A prefill length whose decode steps cross a ratio-128 boundary (and many ratio-4 ones)."""
    last = max_seq_len - 1
    if last - steps < 1:
        return 1
    boundary = (last // 128) * 128  # the largest multiple of 128 not past the end
    pre = boundary - steps // 2
    if pre < 1 or pre + steps > max_seq_len:
        pre = max(1, max_seq_len - steps)
    return pre


class DeviceMemory:
    """CuPy pool and driver free-memory readings (None under emulation)."""

    def __init__(self, backend) -> None:
        self.cupy = getattr(backend, "cupy", None)

    @property
    def real(self) -> bool:
        return self.cupy is not None

    def reading(self) -> dict | None:
        if not self.real:
            return None
        cp = self.cupy
        cp.cuda.runtime.deviceSynchronize()
        pool = cp.get_default_memory_pool()
        free, total = cp.cuda.runtime.memGetInfo()
        return {"pool_used": int(pool.used_bytes()), "pool_total": int(pool.total_bytes()), "free": int(free)}

    def release_cache(self) -> None:
        if self.real:
            self.cupy.get_default_memory_pool().free_all_blocks()


def _rounded(nbytes: int) -> int:
    return -(-nbytes // POOL_ROUND) * POOL_ROUND


def _reset(dl: DeviceLayer) -> None:
    """Return a group's buffers to their empty state in place (addresses unchanged)."""
    b, g = dl.buf, dl.g
    for a in b.arrays():
        a[...] = 0
    if g.ratio == 4:
        b.carry[:4, 1] = -np.inf
        b.index_carry[:4, 1] = -np.inf
    dl.tokens = 0


def run_checks(backend, descriptors, *, requests: int, steps: int, limit: int, seed: int) -> dict:
    run = Run()
    mem = DeviceMemory(backend)
    xp = backend.xp
    ledger = Ledger(limits={DEVICE: limit} if limit else None)
    need_one_request = sum((planned_for(d) for d in descriptors), ZERO)
    n_groups = len(descriptors) * (requests + 1)  # every request, plus the recompute request
    need = need_one_request.total_bytes * (requests + 1)

    mem.release_cache()
    base = mem.reading()
    groups: dict[tuple[int, int], Group] = {}
    rids = [ledger.next_request_id() for _ in range(requests)]
    recompute_rid = ledger.next_request_id()
    for rid in rids + [recompute_rid]:
        for d in descriptors:
            groups[(rid, d.layer_id)] = Group(ledger, rid, DEVICE, d, xp)
    after = mem.reading()

    # -- plan vs allocation -------------------------------------------------------------
    for d in descriptors:
        grp = groups[(rids[0], d.layer_id)]
        planned = grp.planned.by_class()
        allocated = grp.buffers.by_class()
        ok = planned == allocated
        run.add("buffers laid out as planned", ok,
                f"planned {grp.planned.total_bytes:,} B = allocated {sum(allocated.values()):,} B "
                f"({', '.join(f'{c.value} {allocated[c]:,}' for c in planned)})", d.layer_id, grp.planned.total_bytes)
    all_arrays = [a for g in groups.values() for a in g.buffers.arrays()]
    planned_total = sum(g.planned.total_bytes for g in groups.values())
    if mem.real:
        used = after["pool_used"] - base["pool_used"]
        rounding = sum(_rounded(int(a.nbytes)) - int(a.nbytes) for a in all_arrays)
        run.add("device bytes = planned + pool rounding", used == planned_total + rounding,
                f"planned {planned_total:,} B, pool used delta {used:,} B (rounding to {POOL_ROUND} B: {rounding:,} B); "
                f"pool reserved {after['pool_total'] - base['pool_total']:,} B; "
                f"driver free-memory delta {base['free'] - after['free']:,} B", value=used)
    else:
        run.add("device bytes = planned + pool rounding", True,
                f"planned {planned_total:,} B in {len(all_arrays)} buffers; no device (emulated)", applicable=False)

    # -- requests do not cross in the ledger ------------------------------------------------
    ok = all(ledger.resident_for(rid, DEVICE) == need_one_request for rid in rids + [recompute_rid])
    ok = ok and ledger.resident_bytes(DEVICE) == need and ledger.active_group_count == n_groups
    run.add("requests isolated in the ledger", ok,
            f"{requests + 1} requests x {need_one_request.total_bytes:,} B each; resident {ledger.resident_bytes(DEVICE):,} B; "
            f"{ledger.active_group_count} live charges")

    # -- kernels vs oracle, decode vs recompute, workspaces stable ----------------------
    prefill = prefill_length(descriptors[0].max_seq_len, steps)
    for li, d in enumerate(descriptors):
        _run_layer(run, backend, d, groups, rids, recompute_rid, prefill, steps, seed + 1009 * li)

    # -- a limit below the need is refused before any device memory changes ---------------
    d0 = descriptors[0]
    one = planned_for(d0)
    tight = Ledger(limits={DEVICE: one.total_bytes - 1})
    before = mem.reading()
    refused = False
    try:
        Group(tight, tight.next_request_id(), DEVICE, d0, xp).close()
    except OutOfMemoryError as exc:
        refused = exc.refusal is not None
    after_refusal = mem.reading()
    unchanged = before == after_refusal
    ok = refused and tight.charge_failures == 1 and tight.resident_bytes() == 0 and tight.active_group_count == 0
    run.add("limit below the need refused", ok and unchanged,
            f"limit {one.total_bytes - 1:,} B < need {one.total_bytes:,} B: "
            + ("refused" if refused else "NOT refused")
            + (f"; device memory unchanged: {unchanged}" if mem.real else "; ledger untouched (no device)"),
            d0.layer_id)

    # -- teardown ----------------------------------------------------------------------------
    for g in groups.values():
        g.close()
    groups.clear()
    del all_arrays
    teardown = mem.reading()
    ok = ledger.resident_bytes() == 0 and ledger.active_group_count == 0
    detail = f"ledger resident {ledger.resident_bytes()} B, {ledger.active_group_count} live charges, peak {ledger.peak_bytes():,} B"
    if mem.real:
        ok = ok and teardown["pool_used"] == base["pool_used"]
        mem.release_cache()
        final = mem.reading()
        detail += (f"; pool used back to baseline ({teardown['pool_used'] - base['pool_used']:+,} B); "
                   f"driver free memory {final['free'] - base['free']:+,} B vs baseline")
    run.add("teardown back to baseline", ok, detail)

    # -- an unlimited ledger accounts everything and never refuses ---------------------------
    free = Ledger()
    charges = [free.try_charge(free.next_request_id(), DEVICE, planned_for(d)) for d in descriptors for _ in range(requests)]
    huge = free.try_charge(free.next_request_id(), DEVICE, one.scaled(1 << 20))
    total = sum(c.total_bytes for c in charges) + huge.total_bytes
    ok = free.resident_bytes(DEVICE) == total and free.peak_bytes() == total and free.charge_failures == 0
    for c in charges + [huge]:
        c.release()
    ok = ok and free.resident_bytes() == 0 and free.get_limit(DEVICE) == 0
    run.add("unlimited ledger accounts without refusing", ok,
            f"charged {total:,} B (incl. {huge.total_bytes:,} B) with no limit; peak {total:,} B; released to 0")

    failed = sum(c.status == "fail" for c in run.checks)
    return {"checks": [c.as_dict() for c in run.checks], "timings": run.timings, "failed": failed,
            "planned_bytes": planned_total, "prefill_len": prefill, "steps": steps}


def _run_layer(run: Run, backend, d, groups, rids, recompute_rid, prefill: int, steps: int, seed: int) -> None:
    L = d.layer_id
    g = groups[(rids[0], L)].geometry
    worst_out = worst_rec = 0.0
    sel_mismatch = lock_fail = 0
    min_bytes = 1.0
    addr_ok = True
    score_err = 0.0
    total = prefill + steps
    boundaries = sorted({(p + 1) // g.ratio for p in range(prefill, total)})
    for r, rid in enumerate(rids):
        w, inp = O.make_layer(g, total, seed + r)
        dl = DeviceLayer(backend, groups[(rid, L)], w, inp)
        st = O.prefill(g, w, inp, prefill)
        dl.prefill(prefill)
        addrs = dl.buf.addresses()
        rc = None
        if r == 0:
            rc = DeviceLayer(backend, groups[(recompute_rid, L)], w, inp)
        for _ in range(steps):
            y = dl.decode()
            yo, so = O.decode_step(g, w, inp, st)
            worst_out = max(worst_out, float(np.abs(y - yo).max()))
            ds = dl.state()
            # lockstep: the oracle applied to the device's own bytes
            min_bytes = min(min_bytes, float(np.mean(ds.records == st.records)), float(np.mean(ds.ring == st.ring)))
            if g.has_indexer:
                min_bytes = min(min_bytes, float(np.mean(ds.index_keys == st.index_keys)))
                q, wts = O.index_query(g, inp, dl.tokens - 1)
                ref = O.index_scores(ds.index_keys[: len(dl.last_scores)], q, wts)
                scale = max(1e-30, float(np.abs(ref).max())) if len(ref) else 1.0
                score_err = max(score_err, float(np.abs(ref - dl.last_scores).max() / scale) if len(ref) else 0.0)
                if not np.array_equal(O.topk_ids(dl.last_scores, len(dl.last_selected)), dl.last_selected):
                    lock_fail += 1
            ylock = O.attend(g, inp.q[dl.tokens - 1], O.attention_rows(g, ds, dl.last_selected), w.sink,
                             dl.tokens - 1)
            worst_rec = max(worst_rec, float(np.abs(y - ylock).max()))
            if not np.array_equal(np.sort(dl.last_selected), so):
                sel_mismatch += 1
            addr_ok = addr_ok and dl.buf.addresses() == addrs
            if rc is not None:
                _reset(rc)
                rc.prefill(dl.tokens)
                yr = rc.attend()
                err = float(np.abs(yr - y).max())
                same_state = O.states_equal(rc.state(), ds) and np.array_equal(rc.last_selected, dl.last_selected)
                run_recompute = getattr(run, "_rc", {})
                prev = run_recompute.get(L, (0.0, True, 0))
                run_recompute[L] = (max(prev[0], err), prev[1] and same_state, prev[2] + 1)
                run._rc = run_recompute
    kind = "CSA" if g.ratio == 4 else "HCA"
    steps_txt = f"{len(rids)} request(s) x {steps} steps from position {prefill} (records {boundaries[0]}..{boundaries[-1]})"
    run.add("output vs oracle", worst_out <= OUTPUT_ATOL,
            f"{kind}: max |err| {worst_out:.2e} (tol {OUTPUT_ATOL:g}); {steps_txt}", L, worst_out)
    run.add("kernels vs oracle on device bytes", worst_rec <= OUTPUT_ATOL and lock_fail == 0
            and min_bytes >= BYTE_AGREEMENT and score_err <= SCORE_RTOL,
            f"attention max |err| {worst_rec:.2e}; record/key bytes equal {min_bytes:.4%} (min {BYTE_AGREEMENT:.1%})"
            + (f"; index scores rel err {score_err:.1e} (tol {SCORE_RTOL:g}); top-k of kernel scores exact in "
               f"{len(rids) * steps - lock_fail}/{len(rids) * steps} steps" if g.has_indexer else ""), L, worst_rec)
    err, same, n = run._rc[L]
    run.add("decode = full recompute at every step", err <= RECOMPUTE_ATOL and same,
            f"{n} steps: max |decode - recompute| {err:.2e}; state bytes and selections identical: {same}", L, err)
    run.add("selected record sets", sel_mismatch == 0,
            f"{len(rids) * steps - sel_mismatch}/{len(rids) * steps} steps select the oracle's set"
            + (f" (top-{g.index_topk} of indexer scores)" if g.ratio == 4 else " (HCA: every completed record)"), L,
            sel_mismatch)
    run.add("workspace addresses stable", addr_ok, f"{len(dl.buf.arrays())} buffers per group, same addresses across "
            f"{steps} steps", L)
    _time_layer(run, backend, dl, g, L)


def _time_layer(run: Run, backend, dl: DeviceLayer, g: O.Geometry, L: int) -> None:
    if not hasattr(backend, "times_ms"):
        return
    backend.times_ms.clear()
    backend.timing = True
    try:
        for _ in range(3):
            dl.attend()
    finally:
        backend.timing = False
    rows = min(g.window, dl.tokens) + len(dl.last_selected)
    moved = {"attn_partial": rows * g.record_bytes + g.num_heads * g.head_dim * 4,
             "index_scores": ((dl.tokens) // 4) * g.index_key_bytes + g.index_heads * 132 * 4}
    for k, v in backend.times_ms.items():
        ms = float(np.median(v))
        b = moved.get(k)
        run.timings.append({"layer": L, "kernel": k, "ms": ms,
                            "bytes": b, "gb_per_s": (b / (ms * 1e-3) / 1e9) if b and ms > 0 else None})


def planned_for(d):
    return group_bytes(d, 1)
