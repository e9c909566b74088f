"""The checks behind ``csa-plan run-gpu``: kernels vs oracle, decode vs recompute, plan vs device.

``run_checks`` takes a ``RunPlan`` (kernels/run_plan.py) and a backend and returns the
checks (``run_report`` wraps them into the ``--json`` document). Device-memory checks
need CuPy's memory pool and cudaMemGetInfo; under the emulated backend they are n/a.

What is verified at long contexts (up to 1,048,576 tokens), and what is sampled:

* every byte the kernels write is compared with the oracle's own emission, complete:
  all records, index keys and ring rows after the prefill and after every decode step
  (the prefill runs in host chunks of ``oracle.PREFILL_CHUNK`` tokens, so host memory is
  bounded by a chunk, not by the context);
* positions: the oracle draws queries only at the decode positions (``--steps`` of
  them, crossing ratio-4 and ratio-128 record boundaries) and checks the output of every
  head there; the prefill's positions are checked through their bytes, not through a
  query each (a query per position is 256 GiB at 1M tokens and 128 heads);
* heads: all of them at every decode step (the oracle's cost per query is the indexer
  scan over every visible key, not the heads);
* decode = full recompute: a second group is reset and prefilled from position 0 at
  every step up to ``RECOMPUTE_ALL_STEPS_MAX`` tokens; beyond that at the first, the
  middle and the last step (each recompute is a whole prefill of the context).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from csa_plan.planner.layout import group_bytes
from csa_plan.planner.ledger import Ledger, OutOfMemoryError
from csa_plan.planner.units import MiB
from csa_plan.kernels import oracle as O
from csa_plan.kernels.harness import DeviceLayer, Group

OUTPUT_ATOL = 1e-3  # max |kernel - oracle| on attention outputs (values are O(1))
SCORE_RTOL = 1e-4  # index scores, relative to max |score|
RECOMPUTE_ATOL = 0.0  # decode and full recompute run the same kernels on the same bytes
BYTE_AGREEMENT = 0.999  # fraction of record / key bytes equal to the oracle's emission
POOL_ROUND = 512  # CuPy's memory pool rounds every allocation up to 512 bytes
DRIVER_PAGE = 2 * MiB  # cudaMalloc reserves device memory in pages of up to 2 MiB per allocation
RECOMPUTE_ALL_STEPS_MAX = 32768  # recompute at every step up to this many tokens (each is a whole prefill)
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
    on_check: Callable[[Check], None] | None = None  # told each check as it is decided (emulate: minutes)

    def add(self, name, ok, detail, layer=None, value=None, applicable=True):
        check = Check(name, "n/a" if not applicable else ("pass" if ok else "fail"), detail, layer, value)
        self.checks.append(check)
        if self.on_check is not None:
            self.on_check(check)


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


def pool_check(planned: int, arrays: list, base: dict, after: dict) -> tuple[bool, str, int]:
    """Check 1: the pool's bookkeeping. used_bytes grows by exactly planned + the 512-B rounding (tolerance 0 B)."""
    used = after["pool_used"] - base["pool_used"]
    rounding = sum(_rounded(int(a.nbytes)) - int(a.nbytes) for a in arrays)
    ok = used == planned + rounding
    return ok, (f"planned {planned:,} B; pool used delta {used:,} B = planned + rounding to {POOL_ROUND} B "
                f"({rounding:,} B) {'exactly' if ok else 'NOT'} (tolerance 0 B)"), used


def driver_check(arrays: list, base: dict, after: dict) -> tuple[bool, str, int]:
    """Check 2: the driver. cudaMemGetInfo's free memory drops by what the pool reserved, give or take one
    allocation page per buffer (the driver's own rounding, reported apart)."""
    reserved = after["pool_total"] - base["pool_total"]
    driver = base["free"] - after["free"]
    tol = len(arrays) * DRIVER_PAGE
    rounding = driver - reserved
    ok = abs(rounding) <= tol
    return ok, (f"driver free-memory delta {driver:,} B vs pool reserved delta {reserved:,} B: driver rounding "
                f"{rounding:+,} B (tolerance +-{tol:,} B = {len(arrays)} buffers x {DRIVER_PAGE // MiB} MiB; "
                f"other processes on the device would show here too)"), driver


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


def run_report(backend, plan, *, model: str, limit: int, tp: int, seed: int, tiny: bool,
               on_check: Callable[[Check], None] | None = None) -> dict:
    """The csa-plan/run-gpu/v1 document (the CLI adds ``exit_code``); ``on_check`` is told each check
    as it is decided."""
    from csa_plan.kernels.backends import device_name

    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.reports.vocabulary import device_limit, model_info

    result = run_checks(backend, plan, limit=limit, seed=seed, on_check=on_check)
    ds = plan.descriptors
    spec = load_model(model, max_seq_len=ds[0].max_seq_len)  # its name and source, as every document gives them
    return {
        "schema": "csa-plan/run-gpu/v1",
        "model": model,
        "model_info": model_info(spec.name, spec.source),
        "device_limit": device_limit(limit),
        "backend": backend.name,
        "device": device_name(backend),
        "options": {"layers": [d.layer_id for d in ds], "requests": plan.requests,
                    "max_seq_len": ds[0].max_seq_len, "steps": plan.steps, "limit_bytes": limit,
                    "tp": tp, "seed": seed, "tiny": tiny},
        "layers": [{"layer_id": d.layer_id, "ratio": d.compression_ratio, "num_heads": d.num_heads,
                    "window": d.window, "index_num_heads": d.index_num_heads, "index_topk": d.index_topk,
                    "planned": planned_for(d).as_dict()} for d in ds],
        **result,
    }


def recompute_steps(tokens: int, steps: int) -> list[int]:
    """Decode steps (0-based) at which the full-recompute check runs."""
    if tokens <= RECOMPUTE_ALL_STEPS_MAX:
        return list(range(steps))
    return sorted({0, steps // 2, steps - 1})


def run_checks(backend, plan, *, limit: int, seed: int, on_check: Callable[[Check], None] | None = None) -> dict:
    descriptors, requests, steps = plan.descriptors, plan.requests, plan.steps
    run = Run(on_check=on_check)
    mem = DeviceMemory(backend)
    xp = backend.xp
    ledger = Ledger(limits={DEVICE: limit} if limit else None)
    need_one_request = plan.per_request
    n_groups = len(descriptors) * plan.groups_per_layer
    need = plan.need_bytes

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
        ok, detail, used = pool_check(planned_total, all_arrays, base, after)
        run.add("device bytes = planned + pool rounding", ok, detail, value=used)
        ok, detail, driver = driver_check(all_arrays, base, after)
        run.add("driver free memory = pool reservation", ok, detail, value=driver)
    else:
        run.add("device bytes = planned + pool rounding", True,
                f"planned {planned_total:,} B in {len(all_arrays)} buffers; no device (emulated)", applicable=False)

    # -- requests do not cross in the ledger ------------------------------------------------
    ok = all(ledger.resident_for(rid, DEVICE) == need_one_request for rid in rids + [recompute_rid])
    ok = ok and ledger.resident_bytes(DEVICE) == need and ledger.active_group_count == n_groups
    run.add("requests isolated in the ledger", ok,
            f"{requests} request(s) + 1 recompute request = {plan.groups_per_layer} x "
            f"{need_one_request.total_bytes:,} B each; resident {ledger.resident_bytes(DEVICE):,} B; "
            f"{ledger.active_group_count} live charges")

    # -- kernels vs oracle, decode vs recompute, workspaces stable ----------------------
    prefill = prefill_length(descriptors[0].max_seq_len, steps)
    coverage = []
    for li, d in enumerate(descriptors):
        coverage.append(_run_layer(run, backend, d, groups, rids, recompute_rid, prefill, steps, seed + 1009 * li))

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
    n_buffers = len(all_arrays)
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
        tol = n_buffers * DRIVER_PAGE
        back = final["free"] - base["free"]
        ok = ok and abs(back) <= tol
        detail += (f"; pool used back to baseline ({teardown['pool_used'] - base['pool_used']:+,} B) (tolerance 0 B); "
                   f"driver free memory {back:+,} B vs baseline (tolerance +-{tol:,} B)")
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
            "planned_bytes": planned_total, "prefill_len": prefill, "steps": steps, "coverage": coverage}


def _bytes_equal(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(a == b)) if a.size else 1.0


def _run_layer(run: Run, backend, d, groups, rids, recompute_rid, prefill: int, steps: int, seed: int) -> dict:
    L = d.layer_id
    g = groups[(rids[0], L)].geometry
    worst_out = worst_rec = 0.0
    sel_mismatch = lock_fail = 0
    min_bytes = 1.0
    bytes_compared = 0
    addr_ok = True
    score_err = 0.0
    total = prefill + steps
    rsteps = set(recompute_steps(total, steps))
    rc_err, rc_same, rc_n = 0.0, True, 0
    chunks_used: set[tuple[int, bool]] = set()  # (chunks, fused) of each step's attention
    sel_sizes: list[tuple[int, int]] = []
    boundaries = sorted({(p + 1) // g.ratio for p in range(prefill, total)})
    for r, rid in enumerate(rids):
        w, inp = O.make_layer(g, total, seed + r)
        dl = DeviceLayer(backend, groups[(rid, L)], w, inp)
        st = O.State.empty(g)
        for ch in O.prefill_chunks(g, w, inp, prefill):  # one host chunk feeds both
            O.emit_chunk(g, w, st, ch)
            dl.emit_chunk(ch)
        O.finish_prefill(g, w, inp, st, prefill)
        dl.finish_prefill(prefill)
        ds = dl.state()
        min_bytes = min(min_bytes, _bytes_equal(ds.records, st.records), _bytes_equal(ds.ring, st.ring))
        if g.has_indexer:
            min_bytes = min(min_bytes, _bytes_equal(ds.index_keys, st.index_keys))
        del ds
        addrs = dl.buf.addresses()
        rc = DeviceLayer(backend, groups[(recompute_rid, L)], w, inp) if r == 0 else None
        for step in range(steps):
            y = dl.decode()
            O.append_token(g, w, inp, st)
            p = st.tokens - 1
            so, oracle_scores = O.select(g, st, inp, p)
            yo = O.attend(g, inp.q[p], O.attention_rows(g, st, so), w.sink, p)
            worst_out = max(worst_out, float(np.abs(y - yo).max()))
            ds = dl.state()
            # every byte the kernels wrote, against the oracle's own emission
            min_bytes = min(min_bytes, _bytes_equal(ds.records, st.records), _bytes_equal(ds.ring, st.ring))
            bytes_compared += ds.records.size + ds.ring.size
            if g.has_indexer:
                min_bytes = min(min_bytes, _bytes_equal(ds.index_keys, st.index_keys))
                bytes_compared += ds.index_keys.size
                vis = len(dl.last_scores)
                # lockstep: the oracle applied to the device's own key bytes (the same scores when equal)
                if np.array_equal(ds.index_keys[:vis], st.index_keys[:vis]):
                    ref = oracle_scores
                else:
                    q, wts = O.index_query(g, inp, p)
                    ref = O.index_scores(ds.index_keys[:vis], q, wts)
                scale = max(1e-30, float(np.abs(ref).max())) if vis else 1.0
                score_err = max(score_err, float(np.abs(ref - dl.last_scores).max() / scale) if vis else 0.0)
                if not np.array_equal(O.topk_ids(dl.last_scores, len(dl.last_selected)), dl.last_selected):
                    lock_fail += 1
                sel_sizes.append((len(dl.last_selected), vis))
            chunks_used.add((dl.last_nchunks, dl.last_fused))
            ylock = O.attend(g, inp.q[p], O.attention_rows(g, ds, dl.last_selected), w.sink, p)
            worst_rec = max(worst_rec, float(np.abs(y - ylock).max()))
            if not np.array_equal(np.sort(dl.last_selected), so):
                sel_mismatch += 1
            addr_ok = addr_ok and dl.buf.addresses() == addrs
            if rc is not None and step in rsteps:
                _reset(rc)
                rc.prefill(dl.tokens)
                yr = rc.attend()
                rc_err = max(rc_err, float(np.abs(yr - y).max()))
                rc_same = rc_same and O.states_equal(rc.state(), ds) and np.array_equal(rc.last_selected,
                                                                                        dl.last_selected)
                rc_n += 1
            del ds
    kind = "CSA" if g.ratio == 4 else "HCA"
    k_of_n = ""
    if sel_sizes:
        k, n = sel_sizes[-1]
        k_of_n = f"; top-{k} of {n:,} records ({'k < n' if k < n else 'k = n: every record'})"
    merge = "; attention merged over " + "/".join(
        f"{c} chunk(s) {'in the launch (attn_tc_fused)' if f else 'by attn_merge'}" for c, f in sorted(chunks_used))
    steps_txt = f"{len(rids)} request(s) x {steps} steps from position {prefill} (records {boundaries[0]}..{boundaries[-1]})"
    run.add("output vs oracle", worst_out <= OUTPUT_ATOL,
            f"{kind}: max |err| {worst_out:.2e} over all {g.num_heads} heads (tol {OUTPUT_ATOL:g}); {steps_txt}"
            f"{merge}{k_of_n}", L, worst_out)
    run.add("kernels vs oracle on device bytes", worst_rec <= OUTPUT_ATOL and lock_fail == 0
            and min_bytes >= BYTE_AGREEMENT and score_err <= SCORE_RTOL,
            f"attention max |err| {worst_rec:.2e}; record/key bytes equal {min_bytes:.4%} (min {BYTE_AGREEMENT:.1%}; "
            f"every byte, {bytes_compared:,} compared)"
            + (f"; index scores rel err {score_err:.1e} (tol {SCORE_RTOL:g}); top-k of kernel scores exact in "
               f"{len(rids) * steps - lock_fail}/{len(rids) * steps} steps" if g.has_indexer else ""), L, worst_rec)
    run.add("decode = full recompute at every step", rc_err <= RECOMPUTE_ATOL and rc_same,
            f"{rc_n} of {steps} steps{' (all)' if rc_n == steps else ' (first, middle, last: each is a prefill of '}"
            f"{'' if rc_n == steps else f'{total:,} tokens)'}: max |decode - recompute| {rc_err:.2e}; "
            f"state bytes and selections identical: {rc_same}", L, rc_err)
    run.add("selected record sets", sel_mismatch == 0,
            f"{len(rids) * steps - sel_mismatch}/{len(rids) * steps} steps select the oracle's set"
            + (f" (top-{g.index_topk} of indexer scores)" if g.ratio == 4 else " (HCA: every completed record)"), L,
            sel_mismatch)
    run.add("workspace addresses stable", addr_ok, f"{len(dl.buf.arrays())} buffers per group, same addresses across "
            f"{steps} steps", L)
    _time_layer(run, backend, dl, g, L)
    k, n = sel_sizes[-1] if sel_sizes else (len(dl.last_selected), len(dl.last_selected))
    return {"layer": L, "ratio": g.ratio, "prefill": prefill, "steps": steps,
            "attention_chunks": sorted({c for c, _ in chunks_used}),
            "attention_fused": sorted({f for _, f in chunks_used}),
            "selected": k, "visible_records": n, "recompute_steps": rc_n}


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
    moved = {"attn_tc_partial": rows * g.record_bytes + g.num_heads * g.head_dim * 4,
             "index_tc_scores": ((dl.tokens) // 4) * g.index_key_bytes + g.index_heads * 132 * 4}
    for k, v in backend.times_ms.items():
        ms = float(np.median(v))
        b = moved.get(k)
        run.timings.append({"layer": L, "kernel": k, "ms": ms,
                            "bytes": b, "gb_per_s": (b / (ms * 1e-3) / 1e9) if b and ms > 0 else None})


def planned_for(d):
    return group_bytes(d, 1)
