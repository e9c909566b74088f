"""The plan harness: state-group buffers reserved through the ledger, driven by the kernels.

Every group's device buffers are charged first and allocated second (freed first and
released second), with exactly the buffers ``planner.layout`` sizes: compressed records,
carry, index keys, index carry, dense ring and each scratch workspace (max(size, 1) bytes).
``DeviceLayer`` runs prefill and token-by-token decode on one group with a backend
(CuPy on a GPU, or the CPU emulator), using the scratch workspaces for the index query,
index scores, top-k ids and the attention partial states.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from csa_plan.planner.layout import GroupBytes, StateClass, group_bytes, scratch_workspaces
from csa_plan.kernels import oracle as O
from csa_plan.kernels.tc_geometry import H200_SMS, attn_split, attn_tc_launch, partial_capacity

D_PLUS_2 = 514


@dataclass
class GroupBuffers:
    records: object
    carry: object
    ring: object
    index_keys: object | None
    index_carry: object | None
    scratch: list

    def by_class(self) -> dict[StateClass, int]:
        def nb(a):
            return 0 if a is None else int(a.nbytes)

        return {
            StateClass.COMPRESSED: nb(self.records),
            StateClass.CARRY: nb(self.carry),
            StateClass.INDEX: nb(self.index_keys),
            StateClass.INDEX_CARRY: nb(self.index_carry),
            StateClass.DENSE_RING: nb(self.ring),
            StateClass.SCRATCH: sum(nb(a) for a in self.scratch),
        }

    def arrays(self) -> list:
        return [a for a in (self.records, self.carry, self.ring, self.index_keys, self.index_carry) if a is not None] \
            + list(self.scratch)

    def addresses(self) -> tuple[int, ...]:
        return tuple(_address(a) for a in self.arrays())


def _address(a) -> int:
    if isinstance(a, np.ndarray):
        return int(a.ctypes.data)
    return int(a.data.ptr)


def allocate(xp, d, g: O.Geometry, query_len: int = 1) -> GroupBuffers:
    """Allocate one group's buffers (batch 1) exactly as the planner lays them out."""
    if d.batch != 1:
        raise ValueError("the harness runs one sequence per group (batch 1)")
    carry = xp.zeros((g.carry_slots, 2, g.carry_width), dtype=xp.float32)
    index_keys = index_carry = None
    if g.ratio == 4:
        carry[: g.ratio, 1] = -np.inf
        index_keys = xp.zeros((g.records, g.index_key_bytes), dtype=xp.uint8)
        index_carry = xp.zeros((8, 2, g.index_width), dtype=xp.float32)
        index_carry[:4, 1] = -np.inf
    scratch = [xp.zeros(max(size, 1), dtype=xp.uint8) for size in scratch_workspaces(d, query_len)]
    return GroupBuffers(records=xp.zeros((g.records, g.record_bytes), dtype=xp.uint8), carry=carry,
                        ring=xp.zeros((g.window, g.record_bytes), dtype=xp.uint8), index_keys=index_keys,
                        index_carry=index_carry, scratch=scratch)


class Group:
    """One state group: charged in the ledger, then allocated; freed, then released."""

    def __init__(self, ledger, request: int, device: int, d, xp, query_len: int = 1) -> None:
        self.descriptor = d
        self.geometry = O.geometry_from_descriptor(d)
        self.planned: GroupBytes = group_bytes(d, query_len)
        self.request = request
        self.charge = ledger.try_charge(request, device, self.planned)  # raises before any allocation
        try:
            self.buffers: GroupBuffers | None = allocate(xp, d, self.geometry, query_len)
        except BaseException:
            self.charge.release()
            raise

    def close(self) -> None:
        self.buffers = None  # the arrays go back to the allocator first ...
        self.charge.release()  # ... then the bytes go back to the ledger (idempotent)

    def __enter__(self) -> "Group":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class DeviceLayer:
    """Prefill and decode of one layer on one group's buffers with a kernel backend."""

    def __init__(self, backend, group: Group, w: O.LayerWeights, inp: O.Inputs) -> None:
        self.be, self.xp = backend, backend.xp
        self.g, self.buf, self.w, self.inp = group.geometry, group.buffers, w, inp
        xp = self.xp
        self.norm = xp.asarray(w.norm)
        self.sink = xp.asarray(w.sink)
        self.inv_freq = xp.asarray(O.INV_FREQ)
        self.index_norm = xp.asarray(w.index_norm) if w.index_norm is not None else None
        self.tokens = 0
        self.y = xp.zeros((self.g.num_heads, self.g.head_dim), dtype=xp.float32)
        s = self.buf.scratch
        if self.g.ratio == 4:
            self.ws_iq, self.ws_scores, self.ws_topk, self.ws_attn = s
        else:
            (self.ws_attn,) = s
        self.last_selected: np.ndarray | None = None
        self.last_nchunks = 0
        self.last_fused = False
        self.sm_count = int(getattr(backend, "sm_count", H200_SMS))
        self.last_scores: np.ndarray | None = None

    # -- state updates -------------------------------------------------------------

    def _window(self, positions: np.ndarray) -> None:
        g, xp = self.g, self.xp
        tok = np.zeros((len(positions), 2, g.head_dim), dtype=np.float32)
        tok[:, 0] = self.inp.kv[positions]
        self.be.emit_records(xp.asarray(tok), 0, 1, False, self.norm, False, self.inv_freq, int(positions[0]),
                             len(positions), self.buf.ring, ring_rows=g.window, rope_dim=g.rope_dim,
                             head_dim=g.head_dim)

    def prefill(self, S: int) -> None:
        """Tokens 0..S-1 from the empty state, in host chunks (oracle.prefill_chunks)."""
        for ch in O.prefill_chunks(self.g, self.w, self.inp, S):
            self.emit_chunk(ch)
        self.finish_prefill(S)

    def emit_chunk(self, ch: O.Chunk) -> None:
        """The kernels' records (and index keys) of one prefill chunk."""
        g, xp = self.g, self.xp
        self.be.emit_records(xp.asarray(ch.tok), ch.cur0, g.ratio, g.ratio == 4, self.norm, True, self.inv_freq,
                             ch.first_record, ch.n_records, self.buf.records, rope_dim=g.rope_dim,
                             head_dim=g.head_dim)
        if g.has_indexer:
            self.be.emit_index_keys(xp.asarray(ch.index_tok), 4, self.index_norm, ch.first_record, ch.n_records,
                                    self.buf.index_keys)

    def finish_prefill(self, S: int) -> None:
        g, xp = self.g, self.xp
        carry, wpos, icarry = O.prefill_tail(g, self.w, self.inp, S)
        for slots, rows in carry:  # slots are consecutive
            self.buf.carry[int(slots[0]): int(slots[-1]) + 1] = xp.asarray(np.ascontiguousarray(rows))
        if len(wpos):
            self._window(wpos)
        for slots, rows in icarry:
            self.buf.index_carry[int(slots[0]): int(slots[-1]) + 1] = xp.asarray(np.ascontiguousarray(rows))
        self.tokens = S

    def append(self) -> None:
        g, xp, inp, w, p = self.g, self.xp, self.inp, self.w, self.tokens
        self._window(np.array([p]))
        row = O.token_rows(inp.ckv[p: p + 1], inp.cgate[p: p + 1], w.ape, np.array([p]))[0]
        self.buf.carry[g.carry_cur0 + p % g.ratio] = xp.asarray(row)
        if (p + 1) % g.ratio == 0:
            self.be.emit_records(self.buf.carry, g.carry_cur0, g.ratio, g.ratio == 4, self.norm, True, self.inv_freq,
                                 p // g.ratio, 1, self.buf.records, rope_dim=g.rope_dim, head_dim=g.head_dim)
            if g.ratio == 4:
                self.buf.carry[:4] = self.buf.carry[4:].copy()
        if g.has_indexer:
            irow = O.token_rows(inp.ickv[p: p + 1], inp.icgate[p: p + 1], w.index_ape, np.array([p]))[0]
            self.buf.index_carry[4 + p % 4] = xp.asarray(irow)
            if (p + 1) % 4 == 0:
                self.be.emit_index_keys(self.buf.index_carry, 4, self.index_norm, p // 4, 1, self.buf.index_keys)
                self.buf.index_carry[:4] = self.buf.index_carry[4:].copy()
        self.tokens = p + 1

    # -- the query ---------------------------------------------------------------------

    def attend(self) -> np.ndarray:
        """Select and attend with the query at p = tokens - 1; returns the output [H, D] on the host."""
        g, xp, p = self.g, self.xp, self.tokens - 1
        visible = (p + 1) // g.ratio
        idx = None
        n_sel = visible
        if g.ratio == 4:
            q, wts = O.index_query(g, self.inp, p)
            iq = self.ws_iq.view(xp.float32)
            iq[: q.size] = xp.asarray(q.reshape(-1))
            scores = self.ws_scores.view(xp.float32)
            # the attention workspace is free until attention runs: top-k's work buffer, laid
            # out before the indexer so its epilogue fills top-k's first histogram (None: the
            # single-block top-k, nothing fused)
            work = self.ws_attn.view(xp.uint32) if self.ws_attn.nbytes >= 4 else None
            tw = self.be.topk_work(work, visible) if visible > 0 else None
            tw = self.be.index_scores(self.buf.index_keys, iq, xp.asarray(wts), g.index_heads, visible, scores,
                                      topk_work=tw)
            n_sel = min(g.index_topk, visible)
            idx = self.ws_topk.view(xp.int32) if self.ws_topk.nbytes >= 4 else None
            self.be.topk(scores, visible, n_sel, idx, work=tw if tw is not None else work)
            self.last_scores = np.array(_host(scores[:visible]))
            self.last_selected = np.array(_host(idx[:n_sel])) if n_sel else np.zeros(0, np.int32)
        else:
            self.last_selected = np.arange(visible, dtype=np.int32)
        n_win = min(g.window, self.tokens)
        ws = self.ws_attn.view(xp.float32) if self.ws_attn.nbytes >= 4 else None
        nchunks, fused, part_ml, part_o = self._partials(ws, n_win + n_sel)
        self.last_nchunks, self.last_fused = nchunks, fused
        self.be.attention(xp.asarray(self.inp.q[p]), self.buf.ring, n_win, self.buf.records,
                          idx if n_sel else None, n_sel, g.num_heads, p, self.inv_freq, self.sink,
                          part_ml, part_o, self.y, nchunks, rope_dim=g.rope_dim, head_dim=g.head_dim,
                          fused=fused)
        return np.array(_host(self.y))

    def _partials(self, ws, rows: int):
        """The split (tc_geometry.attn_split): fused, its chunks merge inside the launch and need
        no scratch (chunks, True, None, None). Otherwise the partial softmax states live in
        planned scratch: (max, sum) in the attention workspace, the partial outputs there too
        or, for ratio 4, in the index-scores workspace, whose scores are dead once top-k has
        read them (same stream, so the order holds); the chunk count fills the SMs within what
        those bytes hold; with one chunk the partial output goes straight to the output buffer
        (merged in place)."""
        H = self.g.num_heads
        xp = self.xp
        floats = 0 if ws is None else int(ws.size)
        spare = None
        if self.g.ratio == 4 and self.ws_scores.nbytes >= 4:
            spare = self.ws_scores.view(xp.float32)
        pc = partial_capacity(H, floats, int(spare.size) if spare is not None else 0)
        cap_same, cap_spare, cap = pc.same, pc.spare, pc.chunks
        lay = attn_tc_launch(H)
        split = attn_split(rows, 1, lay.head_groups, cap, sm_count=self.sm_count)
        nchunks = split.chunks
        if split.fused:
            return nchunks, True, None, None
        if cap >= 2 and nchunks >= 2:
            if cap_spare >= nchunks and cap_spare >= cap_same:
                return nchunks, False, ws[: 2 * H * nchunks], spare[: H * nchunks * 512]
            return nchunks, False, ws[: 2 * H * nchunks], ws[2 * H * nchunks: 2 * H * nchunks + H * nchunks * 512]
        return 1, False, ws[: 2 * H], self.y

    def decode(self) -> np.ndarray:
        self.append()
        return self.attend()

    def state(self) -> O.State:
        """The group's buffers as an oracle State (host copies)."""
        g, b = self.g, self.buf
        st = O.State(g, np.array(_host(b.records)), np.array(_host(b.carry)), np.array(_host(b.ring)))
        if g.has_indexer:
            st.index_keys = np.array(_host(b.index_keys))
            st.index_carry = np.array(_host(b.index_carry))
        st.tokens = self.tokens
        return st


def _host(a):
    if isinstance(a, np.ndarray):
        return a
    return a.get()
