"""NumPy reference of the DeepSeek-V4 compressed-attention decode path (both ratios).

This is the naive reference the CUDA kernels are checked against. It keeps its
state in exactly the device layout the planner sizes (CONTRACT §2): 583-byte FP8
records, 68-byte FP4 index keys, fp32 carries of [slots, {kv, score}, width], a
dense ring of 583-byte rows. Everything is float32, like the kernels.

Inputs are the projected per-token tensors of the ONNX op (CONTRACT §4): query,
current kv, compressor kv/gate, indexer query/weights, index compressor kv/gate,
drawn from a seed together with the learned per-layer tensors (ape, norms, sink).

Choices written down (the spec is silent on them):
- Window rows are the token's kv with RoPE at its own position, FP8-packed like a
  record (no RMSNorm: ``current_kv`` arrives normalized).
- The carry stores ``score + ape[pos % R]``; the ratio-4 carry keeps the previous
  block in slots 0..3 (score -inf while there is none) and the current block in 4..7.
- Index keys: pool (overlapping, width 128), RMSNorm, Hadamard (x 128^-0.5), FP4.
  The index query gets the same Hadamard and is rounded to BF16 (nearest even: the
  indexer's tensor-core operand; the keys are exact in BF16); head weights are scaled by
  index_head_dim^-0.5 x index_num_heads^-0.5. No RoPE on index keys.
- Top-k ties break toward the lower record id; selections are returned sorted. Ranking is
  by order_keys (bits, not float arithmetic): NaN lowest, -0 == +0, denormals kept.
- E4M3 codes 0x7F/0xFF are NaN (E4M3FN), in this table and in csa_e4m3_decode alike.
- RoPE uses theta 160000 with YaRN (factor 16, original 65536, beta 32/1) always.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

F32 = np.float32
RMS_EPS = 1e-6
AMAX_FLOOR = 1e-4
FP8_MAX = 448.0
FP4_MAX = 6.0
FP8_BLOCK = 64
FP4_BLOCK = 32
NEG_INF = np.float32(-np.inf)


# --------------------------------------------------------------------------- geometry


@dataclass(frozen=True)
class Geometry:
    ratio: int  # 4 (CSA) or 128 (HCA)
    num_heads: int
    max_seq_len: int
    head_dim: int = 512
    rope_dim: int = 64
    window: int = 128
    index_heads: int = 0
    index_dim: int = 128
    index_topk: int = 0

    @property
    def nope_dim(self) -> int:
        return self.head_dim - self.rope_dim

    @property
    def record_bytes(self) -> int:
        return self.nope_dim // FP8_BLOCK * (1 + FP8_BLOCK) + self.rope_dim * 2

    @property
    def index_key_bytes(self) -> int:
        return self.index_dim // FP4_BLOCK * (1 + FP4_BLOCK // 2)

    @property
    def records(self) -> int:
        return -(-self.max_seq_len // self.ratio)

    @property
    def carry_slots(self) -> int:
        return 2 * self.ratio if self.ratio == 4 else self.ratio

    @property
    def carry_width(self) -> int:
        return 2 * self.head_dim if self.ratio == 4 else self.head_dim

    @property
    def carry_cur0(self) -> int:
        """Slot of the first token of the block being filled."""
        return self.ratio if self.ratio == 4 else 0

    @property
    def index_width(self) -> int:
        return 2 * self.index_dim

    @property
    def has_indexer(self) -> bool:
        return self.ratio == 4


def geometry_from_descriptor(d) -> Geometry:
    return Geometry(ratio=d.compression_ratio, num_heads=d.num_heads, max_seq_len=d.max_seq_len,
                    head_dim=d.head_dim, rope_dim=d.qk_rope_head_dim, window=d.window,
                    index_heads=d.index_num_heads, index_dim=d.index_head_dim or 128, index_topk=d.index_topk)


# --------------------------------------------------------------------------- RoPE


def yarn_inv_freq(rope_dim: int = 64, base: float = 160000.0, factor: float = 16.0, original: int = 65536,
                  beta_fast: float = 32.0, beta_slow: float = 1.0) -> np.ndarray:
    """Per-pair inverse frequencies (DeepSeek's precompute_freqs_cis with YaRN), float32."""
    freqs = 1.0 / (base ** (np.arange(0, rope_dim, 2, dtype=np.float64) / rope_dim))

    def corr(rot: float) -> float:
        return rope_dim * math.log(original / (rot * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(corr(beta_fast)), 0)
    high = min(math.ceil(corr(beta_slow)), rope_dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(rope_dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    smooth = 1 - ramp
    freqs = freqs / factor * (1 - smooth) + freqs * smooth
    return freqs.astype(F32)


INV_FREQ = yarn_inv_freq()


def rope(x: np.ndarray, pos, inverse: bool = False, rope_dim: int = 64) -> np.ndarray:
    """Rotate interleaved pairs of the last ``rope_dim`` dims of x[..., D] at pos (scalar or [...])."""
    x = np.array(x, dtype=F32, copy=True)
    pos = np.asarray(pos, dtype=F32)
    ang = pos[..., None] * INV_FREQ[: rope_dim // 2]  # float32 product, like the kernels
    if inverse:
        ang = -ang
    c, s = np.cos(ang).astype(F32), np.sin(ang).astype(F32)
    tail = x[..., -rope_dim:]
    x0, x1 = tail[..., 0::2].copy(), tail[..., 1::2].copy()
    if c.ndim < x0.ndim:
        c, s = np.broadcast_to(c, x0.shape), np.broadcast_to(s, x0.shape)
    tail[..., 0::2] = x0 * c - x1 * s
    tail[..., 1::2] = x0 * s + x1 * c
    return x


def rms_norm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    x = x.astype(F32)
    ms = np.mean(x * x, axis=-1, keepdims=True, dtype=F32)
    return (x / np.sqrt(ms + F32(RMS_EPS)) * w).astype(F32)


def hadamard(n: int) -> np.ndarray:
    h = np.ones((1, 1), dtype=F32)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return (h * F32(n ** -0.5)).astype(F32)


# --------------------------------------------------------------------------- quantization


def pow2_exponent(ratio: np.ndarray) -> np.ndarray:
    """ceil(log2(r)) exactly, for positive float32 r."""
    m, e = np.frexp(np.asarray(ratio, dtype=F32))
    return np.where(m == 0.5, e - 1, e).astype(np.int32)


def e4m3_encode(y: np.ndarray) -> np.ndarray:
    """Round |y| <= 448 to the nearest E4M3FN code (ties to even)."""
    y = np.asarray(y, dtype=F32)
    a = np.abs(y)
    sub = np.rint(a * F32(512.0))
    m, e = np.frexp(np.maximum(a, F32(2.0 ** -6)))
    e = e - 1  # a = (2m) * 2^(e)
    mant = np.rint((np.ldexp(a, -e) - F32(1.0)) * F32(8.0))
    normal = (e + 7) * 8 + mant
    code = np.where(a < F32(2.0 ** -6), sub, normal).astype(np.uint8)
    return code | np.where(y < 0, np.uint8(0x80), np.uint8(0))


def _e4m3_table() -> np.ndarray:
    t = np.zeros(256, dtype=F32)
    for c in range(256):
        s = -1.0 if c & 0x80 else 1.0
        e, m = (c >> 3) & 15, c & 7
        v = m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        t[c] = np.nan if (c & 0x7F) == 0x7F else s * v
    return t


E4M3 = _e4m3_table()
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=F32)


def e2m1_encode(y: np.ndarray) -> np.ndarray:
    """Nearest E2M1 code of |y| <= 6, ties to the even code; sign in bit 3."""
    a = np.abs(np.asarray(y, dtype=F32))
    code = ((a > 0.25).astype(np.uint8) + (a >= 0.75) + (a > 1.25) + (a >= 1.75) + (a > 2.5) + (a >= 3.5) + (a > 5.0))
    return code.astype(np.uint8) | np.where(np.asarray(y) < 0, np.uint8(8), np.uint8(0))


def bf16_bytes(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 -> bfloat16, as little-endian bytes [..., 2*n]."""
    bits = np.ascontiguousarray(x, dtype=F32).view(np.uint32)
    r = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & 1)) >> 16).astype("<u2")
    return r.view(np.uint8).reshape(*x.shape[:-1], x.shape[-1] * 2)


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 rounded to the nearest BF16 (ties to even), as float32."""
    x = np.ascontiguousarray(x, dtype=F32)
    return bf16_decode(bf16_bytes(x)).reshape(x.shape)


def bf16_decode(b: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(b).view("<u2").astype(np.uint32) << 16
    return u.view(F32)


def pack_fp8_record(x: np.ndarray, rope_dim: int = 64) -> np.ndarray:
    """[..., D] float32 -> [..., 583] bytes: per 64-block an E8M0 scale then 64 E4M3, then BF16 RoPE tail."""
    x = np.asarray(x, dtype=F32)
    lead = x.shape[:-1]
    nope = x[..., :-rope_dim].reshape(*lead, -1, FP8_BLOCK)
    amax = np.maximum(np.max(np.abs(nope), axis=-1), F32(AMAX_FLOOR))
    e = pow2_exponent(amax / F32(FP8_MAX))
    codes = e4m3_encode(np.ldexp(nope, -e[..., None]).astype(F32))
    scale = (e + 127).astype(np.uint8)[..., None]
    blocks = np.concatenate([scale, codes], axis=-1).reshape(*lead, -1)
    return np.concatenate([blocks, bf16_bytes(x[..., -rope_dim:])], axis=-1)


def unpack_fp8_record(b: np.ndarray, head_dim: int = 512, rope_dim: int = 64) -> np.ndarray:
    b = np.asarray(b, dtype=np.uint8)
    lead = b.shape[:-1]
    nb = (head_dim - rope_dim) // FP8_BLOCK
    blocks = b[..., : nb * (FP8_BLOCK + 1)].reshape(*lead, nb, FP8_BLOCK + 1)
    scale = np.ldexp(F32(1.0), blocks[..., 0].astype(np.int32) - 127).astype(F32)
    nope = (E4M3[blocks[..., 1:]] * scale[..., None]).reshape(*lead, nb * FP8_BLOCK)
    tail = bf16_decode(b[..., nb * (FP8_BLOCK + 1):]).reshape(*lead, rope_dim)
    return np.concatenate([nope, tail], axis=-1).astype(F32)


def pack_fp4_key(x: np.ndarray) -> np.ndarray:
    """[..., 128] float32 -> [..., 68] bytes: per 32-block an E8M0 scale then 16 bytes (even elem low nibble)."""
    x = np.asarray(x, dtype=F32)
    lead = x.shape[:-1]
    blk = x.reshape(*lead, -1, FP4_BLOCK)
    amax = np.maximum(np.max(np.abs(blk), axis=-1), F32(AMAX_FLOOR))
    e = pow2_exponent(amax / F32(FP4_MAX))
    codes = e2m1_encode(np.ldexp(blk, -e[..., None]).astype(F32))
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    scale = (e + 127).astype(np.uint8)[..., None]
    return np.concatenate([scale, packed.astype(np.uint8)], axis=-1).reshape(*lead, -1)


def unpack_fp4_key(b: np.ndarray, dim: int = 128) -> np.ndarray:
    b = np.asarray(b, dtype=np.uint8)
    lead = b.shape[:-1]
    blocks = b.reshape(*lead, dim // FP4_BLOCK, 1 + FP4_BLOCK // 2)
    scale = np.ldexp(F32(1.0), blocks[..., 0].astype(np.int32) - 127).astype(F32)
    lo, hi = E2M1[blocks[..., 1:] & 15], E2M1[blocks[..., 1:] >> 4]
    vals = np.stack([lo, hi], axis=-1).reshape(*lead, dim // FP4_BLOCK, FP4_BLOCK)
    return (vals * scale[..., None]).reshape(*lead, dim).astype(F32)


# --------------------------------------------------------------------------- weights and inputs


@dataclass
class LayerWeights:
    ape: np.ndarray  # [R, CW]
    norm: np.ndarray  # [D]
    sink: np.ndarray  # [H]
    index_ape: np.ndarray | None = None  # [4, 256]
    index_norm: np.ndarray | None = None  # [128]


@dataclass
class Inputs:
    """Per-token projected tensors for positions 0..T-1."""

    q: np.ndarray  # [T, H, D]
    kv: np.ndarray  # [T, D]
    ckv: np.ndarray  # [T, CW]
    cgate: np.ndarray  # [T, CW]
    iq: np.ndarray | None = None  # [T, I, 128]
    iw: np.ndarray | None = None  # [T, I]
    ickv: np.ndarray | None = None  # [T, 256]
    icgate: np.ndarray | None = None  # [T, 256]

    @property
    def length(self) -> int:
        return self.q.shape[0]


INPUT_BLOCK = 4096  # positions per random block of a per-token tensor


class LazyTensor:
    """One per-token input tensor [tokens, *row], drawn on demand, block by block.

    Block b (positions b*block .. +block-1) comes from ``default_rng([seed, tensor, b])``,
    so any position's row is the same whichever slice asks for it, and memory is that of
    the slice asked for (never the whole context: at 1M tokens and 128 heads the query
    alone would be 256 GiB). Indexing: an int, a slice with step 1, or an int array.
    The last block drawn is kept (sequential decode reads the same block again).
    """

    def __init__(self, seed: int, tensor: int, tokens: int, row: tuple[int, ...], block: int = INPUT_BLOCK) -> None:
        self.seed, self.tensor, self.row, self.block = seed, tensor, tuple(row), block
        self.shape = (tokens,) + self.row
        self._cache: tuple[int, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.shape[0]

    def _draw(self, b: int) -> np.ndarray:
        if self._cache is not None and self._cache[0] == b:
            return self._cache[1]
        n = min(self.block, self.shape[0] - b * self.block)
        a = np.random.default_rng([self.seed, self.tensor, b]).standard_normal((n,) + self.row, dtype=F32)
        self._cache = (b, a)
        return a

    def _rows(self, lo: int, hi: int) -> np.ndarray:
        out = np.empty((hi - lo,) + self.row, dtype=F32)
        p = lo
        while p < hi:
            b = p // self.block
            blk = self._draw(b)
            q = min(hi, (b + 1) * self.block)
            out[p - lo: q - lo] = blk[p - b * self.block: q - b * self.block]
            p = q
        return out

    def __getitem__(self, key):
        T = self.shape[0]
        if isinstance(key, (int, np.integer)):
            k = int(key) + (T if key < 0 else 0)
            if not 0 <= k < T:
                raise IndexError(f"position {key} outside 0..{T - 1}")
            return self._rows(k, k + 1)[0]
        if isinstance(key, slice):
            lo, hi, step = key.indices(T)
            if step != 1:
                raise IndexError("LazyTensor slices take step 1")
            return self._rows(lo, max(lo, hi))
        idx = np.asarray(key)
        if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
            raise IndexError("LazyTensor takes an int, a slice or a 1-D int array")
        if len(idx) == 0:
            return np.empty((0,) + self.row, dtype=F32)
        if len(idx) and (idx.min() < 0 or idx.max() >= T):
            raise IndexError("position outside the tensor")
        lo, hi = int(idx.min()), int(idx.max()) + 1
        return self._rows(lo, hi)[idx - lo]


def make_layer(g: Geometry, tokens: int, seed: int) -> tuple[LayerWeights, Inputs]:
    """Random weights and (lazily drawn) inputs for one layer; the same seed gives the same tensors."""
    rng = np.random.default_rng(seed)

    def n(*shape, s=1.0):
        return (rng.standard_normal(shape, dtype=F32) * F32(s)).astype(F32)

    D, H, CW = g.head_dim, g.num_heads, g.carry_width
    w = LayerWeights(ape=n(g.ratio, CW, s=0.5), norm=(1 + n(D, s=0.1)).astype(F32), sink=n(H))
    qblock = max(1, INPUT_BLOCK * D // (H * D))  # about the rows of a kv block
    inp = Inputs(q=LazyTensor(seed, 0, tokens, (H, D), qblock), kv=LazyTensor(seed, 1, tokens, (D,)),
                 ckv=LazyTensor(seed, 2, tokens, (CW,)), cgate=LazyTensor(seed, 3, tokens, (CW,)))
    if g.has_indexer:
        I, W2 = g.index_heads, g.index_width
        w.index_ape = n(4, W2, s=0.5)
        w.index_norm = (1 + n(g.index_dim, s=0.1)).astype(F32)
        inp.iq = LazyTensor(seed, 4, tokens, (I, g.index_dim), max(1, INPUT_BLOCK // I))
        inp.iw = LazyTensor(seed, 5, tokens, (I,))
        inp.ickv, inp.icgate = LazyTensor(seed, 6, tokens, (W2,)), LazyTensor(seed, 7, tokens, (W2,))
    return w, inp


# --------------------------------------------------------------------------- record finishing


def pool(kv: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Per-channel softmax pooling over candidates (axis -2); -inf scores are absent."""
    m = np.max(score, axis=-2, keepdims=True)
    e = np.exp(score - m).astype(F32)
    return (np.sum(e * kv, axis=-2, dtype=F32) / np.sum(e, axis=-2, dtype=F32)).astype(F32)


def candidates(tok: np.ndarray, cur0: np.ndarray | int, ratio: int, width: int):
    """kv and score candidates of records whose current block starts at row cur0 of tok[rows, 2, CW].

    Ratio 4 (overlap): channels [:width] of the previous block's rows and [width:] of the current
    block's rows, 2R candidates. Ratio 128: the R current rows.
    """
    cur0 = np.atleast_1d(np.asarray(cur0))
    cur = tok[cur0[:, None] + np.arange(ratio)]  # [n, R, 2, CW]
    if ratio != 4:
        return cur[:, :, 0], cur[:, :, 1]
    prev = tok[cur0[:, None] - ratio + np.arange(ratio)]
    kv = np.concatenate([prev[:, :, 0, :width], cur[:, :, 0, width:]], axis=1)
    sc = np.concatenate([prev[:, :, 1, :width], cur[:, :, 1, width:]], axis=1)
    return kv, sc


def finish_record(pooled: np.ndarray, norm: np.ndarray, record_ids: np.ndarray, ratio: int) -> np.ndarray:
    """RMSNorm, RoPE at the block start c*R, FP8 pack -> [n, 583]."""
    x = rms_norm(pooled, norm)
    x = rope(x, np.asarray(record_ids) * ratio)
    return pack_fp8_record(x)


HADAMARD_128 = hadamard(128)


def finish_index_key(pooled: np.ndarray, norm: np.ndarray) -> np.ndarray:
    x = rms_norm(pooled, norm)
    return pack_fp4_key((x @ HADAMARD_128).astype(F32))


def token_rows(kv: np.ndarray, gate: np.ndarray, ape: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """[n, 2, CW]: what a token writes into its carry slot (score carries the ape bias)."""
    return np.stack([kv, (gate + ape[positions % ape.shape[0]]).astype(F32)], axis=1).astype(F32)


def window_rows(kv: np.ndarray, positions: np.ndarray) -> np.ndarray:
    return pack_fp8_record(rope(kv, positions))


# --------------------------------------------------------------------------- state


@dataclass
class State:
    """One group's state, in the planner's byte layout (batch 1)."""

    g: Geometry
    records: np.ndarray  # [records, 583] uint8
    carry: np.ndarray  # [slots, 2, CW] f32
    ring: np.ndarray  # [window, 583] uint8
    index_keys: np.ndarray | None = None  # [records, 68] uint8
    index_carry: np.ndarray | None = None  # [8, 2, 256] f32
    tokens: int = 0
    selections: list = field(default_factory=list)

    @classmethod
    def empty(cls, g: Geometry) -> "State":
        carry = np.zeros((g.carry_slots, 2, g.carry_width), dtype=F32)
        if g.ratio == 4:
            carry[: g.ratio, 1] = NEG_INF
        st = cls(g, np.zeros((g.records, g.record_bytes), np.uint8), carry,
                 np.zeros((g.window, g.record_bytes), np.uint8))
        if g.has_indexer:
            st.index_keys = np.zeros((g.records, g.index_key_bytes), np.uint8)
            st.index_carry = np.zeros((8, 2, g.index_width), dtype=F32)
            st.index_carry[:4, 1] = NEG_INF
        return st

    @property
    def completed(self) -> int:
        return self.tokens // self.g.ratio


def padded_rows(rows: np.ndarray, ratio: int) -> np.ndarray:
    """Prefix R absent rows (kv 0, score -inf) so record 0's 'previous block' exists."""
    pad = np.zeros((ratio,) + rows.shape[1:], dtype=F32)
    pad[:, 1] = NEG_INF
    return np.concatenate([pad, rows], axis=0)


PREFILL_CHUNK = 16384  # tokens per host chunk of a prefill (a multiple of 128)


@dataclass(frozen=True)
class Chunk:
    """Token rows of one prefill chunk, laid out for emit_records / emit_index_keys.

    ``tok`` rows [cur0 + n_records * R, 2, CW]: for ratio 4 the R rows before the chunk
    (the previous block of its first record; absent rows before position 0) then the
    chunk's rows; ``index_tok`` the same for the indexer (ratio 4 only).
    """

    first_record: int
    n_records: int
    cur0: int
    tok: np.ndarray
    index_tok: np.ndarray | None = None


def _rows_with_previous(kv, gate, ape, a: int, b: int, ratio: int) -> np.ndarray:
    rows = token_rows(kv[a:b], gate[a:b], ape, np.arange(a, b))
    if ratio != 4:
        return np.ascontiguousarray(rows)
    if a == 0:
        return np.ascontiguousarray(padded_rows(rows, 4))
    prev = token_rows(kv[a - 4: a], gate[a - 4: a], ape, np.arange(a - 4, a))
    return np.ascontiguousarray(np.concatenate([prev, rows], axis=0))


def prefill_chunks(g: Geometry, w: LayerWeights, inp: Inputs, S: int, chunk: int = PREFILL_CHUNK):
    """The completed records of a prefill of S tokens, as host chunks of at most ``chunk`` tokens."""
    R = g.ratio
    if chunk <= 0 or chunk % R:
        raise ValueError(f"prefill chunk {chunk} must be a positive multiple of the ratio {R}")
    end = (S // R) * R
    for a in range(0, end, chunk):
        b = min(end, a + chunk)
        tok = _rows_with_previous(inp.ckv, inp.cgate, w.ape, a, b, R)
        itok = _rows_with_previous(inp.ickv, inp.icgate, w.index_ape, a, b, 4) if g.has_indexer else None
        yield Chunk(a // R, (b - a) // R, R if R == 4 else 0, tok, itok)


def emit_chunk(g: Geometry, w: LayerWeights, st: State, ch: Chunk) -> None:
    """The oracle's records (and index keys) of one prefill chunk, into st."""
    ids = np.arange(ch.first_record, ch.first_record + ch.n_records)
    kv, sc = candidates(ch.tok, ch.cur0 + np.arange(ch.n_records) * g.ratio, g.ratio, g.head_dim)
    st.records[ids] = finish_record(pool(kv, sc), w.norm, ids, g.ratio)
    if g.has_indexer:
        kv, sc = candidates(ch.index_tok, 4 + np.arange(ch.n_records) * 4, 4, g.index_dim)
        st.index_keys[ids] = finish_index_key(pool(kv, sc), w.index_norm)


def prefill_tail(g: Geometry, w: LayerWeights, inp: Inputs, S: int):
    """What a prefill of S tokens leaves besides records: carry rows, ring rows, index carry.

    Returns (carry updates, ring positions, index-carry updates), each update a list of
    (slot array, rows) to assign.
    """
    def rows_at(kv, gate, ape, lo, hi):
        return token_rows(kv[lo:hi], gate[lo:hi], ape, np.arange(lo, hi))

    def carry_updates(kv, gate, ape, ratio, cur0):
        n = S // ratio
        ups = []
        if S > n * ratio:
            ups.append((cur0 + np.arange(S - n * ratio), rows_at(kv, gate, ape, n * ratio, S)))
        if ratio == 4 and n:
            ups.append((np.arange(4), rows_at(kv, gate, ape, (n - 1) * 4, n * 4)))
        return ups

    carry = carry_updates(inp.ckv, inp.cgate, w.ape, g.ratio, g.carry_cur0)
    icarry = carry_updates(inp.ickv, inp.icgate, w.index_ape, 4, 4) if g.has_indexer else []
    wn = min(g.window, S)
    return carry, np.arange(S - wn, S), icarry


def prefill(g: Geometry, w: LayerWeights, inp: Inputs, S: int, chunk: int = PREFILL_CHUNK) -> State:
    """Process tokens 0..S-1 from an empty state, chunk by chunk (host memory bounded by the chunk)."""
    st = State.empty(g)
    for ch in prefill_chunks(g, w, inp, S, chunk):
        emit_chunk(g, w, st, ch)
    finish_prefill(g, w, inp, st, S)
    return st


def finish_prefill(g: Geometry, w: LayerWeights, inp: Inputs, st: State, S: int) -> None:
    carry, wpos, icarry = prefill_tail(g, w, inp, S)
    for slots, rows in carry:
        st.carry[slots] = rows
    st.ring[wpos % g.window] = window_rows(inp.kv[wpos], wpos)
    for slots, rows in icarry:
        st.index_carry[slots] = rows
    st.tokens = S


def append_token(g: Geometry, w: LayerWeights, inp: Inputs, st: State) -> None:
    """Decode bookkeeping for the next token: ring, carry, record and index-key emission."""
    p = st.tokens
    st.ring[p % g.window] = window_rows(inp.kv[p: p + 1], np.array([p]))[0]
    row = token_rows(inp.ckv[p: p + 1], inp.cgate[p: p + 1], w.ape, np.array([p]))[0]
    st.carry[g.carry_cur0 + p % g.ratio] = row
    if (p + 1) % g.ratio == 0:
        c = p // g.ratio
        kv, sc = candidates(st.carry, g.carry_cur0, g.ratio, g.head_dim)
        st.records[c] = finish_record(pool(kv, sc), w.norm, np.array([c]), g.ratio)[0]
        if g.ratio == 4:
            st.carry[:4] = st.carry[4:]
    if g.has_indexer:
        irow = token_rows(inp.ickv[p: p + 1], inp.icgate[p: p + 1], w.index_ape, np.array([p]))[0]
        st.index_carry[4 + p % 4] = irow
        if (p + 1) % 4 == 0:
            c = p // 4
            kv, sc = candidates(st.index_carry, 4, 4, g.index_dim)
            st.index_keys[c] = finish_index_key(pool(kv, sc), w.index_norm)[0]
            st.index_carry[:4] = st.index_carry[4:]
    st.tokens = p + 1


# --------------------------------------------------------------------------- selection and attention


def index_query(g: Geometry, inp: Inputs, p: int) -> tuple[np.ndarray, np.ndarray]:
    """Hadamard-rotated index query [I, 128] and scaled head weights [I] for position p."""
    q = bf16_round((inp.iq[p] @ HADAMARD_128).astype(F32))
    wts = (inp.iw[p] * F32(g.index_dim ** -0.5 * g.index_heads ** -0.5)).astype(F32)
    return q, wts


def index_scores(keys: np.ndarray, q: np.ndarray, wts: np.ndarray) -> np.ndarray:
    """score[c] = sum_h relu(q_h . k_c) * w_h over FP4 keys [n, 68]."""
    k = unpack_fp4_key(keys)
    return (np.maximum(k @ q.T, F32(0)) @ wts).astype(F32)


def order_keys(scores: np.ndarray) -> np.ndarray:
    """uint32 keys whose unsigned order is the ranking topk_radix uses, from the bits alone.

    Larger score, larger key; -0 ranks as +0; denormals keep their order (no flush to
    zero, whatever -ftz does to arithmetic); every NaN gets key 0, below -inf.
    """
    u = np.ascontiguousarray(scores, dtype=F32).view(np.uint32).copy()
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    u[u == np.uint32(0x80000000)] = 0
    neg = (u & np.uint32(0x80000000)) != 0
    key = np.where(neg, ~u, u | np.uint32(0x80000000)).astype(np.uint32)
    key[nan] = 0
    return key


def topk_ids(scores: np.ndarray, k: int) -> np.ndarray:
    """The k largest (order_keys order: NaN lowest), ties toward the lower id, returned ascending."""
    keys = order_keys(scores).astype(np.int64)
    order = np.lexsort((np.arange(len(keys)), -keys))
    return np.sort(order[:k]).astype(np.int32)


def select(g: Geometry, st: State, inp: Inputs, p: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Record ids the query at p attends to (and the index scores for ratio 4)."""
    visible = (p + 1) // g.ratio
    if g.ratio != 4:
        return np.arange(visible, dtype=np.int32), None
    q, wts = index_query(g, inp, p)
    scores = index_scores(st.index_keys[:visible], q, wts)
    return topk_ids(scores, min(g.index_topk, visible)), scores


def attention_rows(g: Geometry, st: State, selected: np.ndarray) -> np.ndarray:
    """Rows the query attends to, in kernel order: valid ring slots, then selected records."""
    wn = min(g.window, st.tokens)
    return np.concatenate([st.ring[:wn], st.records[selected]], axis=0)


def attend(g: Geometry, q: np.ndarray, rows: np.ndarray, sink: np.ndarray | None, p: int,
           return_parts: bool = False):
    """Multi-query attention of q [H, D] (RoPE applied here at p) over packed rows, sink in the denominator."""
    qr = rope(q, p)
    kv = unpack_fp8_record(rows, g.head_dim, g.rope_dim)  # [n, D]
    logits = (qr @ kv.T).astype(F32) * F32(1.0 / math.sqrt(g.head_dim))  # [H, n]
    m = np.max(logits, axis=1)
    if sink is not None:
        m = np.maximum(m, sink)
    e = np.exp(logits - m[:, None]).astype(F32)
    denom = np.sum(e, axis=1, dtype=F32)
    if sink is not None:
        denom = denom + np.exp(sink - m).astype(F32)
    out = ((e @ kv) / denom[:, None]).astype(F32)
    out = rope(out, p, inverse=True)
    if return_parts:
        return out, m, denom
    return out


def output_at(g: Geometry, w: LayerWeights, inp: Inputs, st: State, p: int) -> tuple[np.ndarray, np.ndarray]:
    """Attention output of the query at p = st.tokens - 1, and the selected record ids."""
    sel, _ = select(g, st, inp, p)
    return attend(g, inp.q[p], attention_rows(g, st, sel), w.sink, p), sel


def decode_step(g: Geometry, w: LayerWeights, inp: Inputs, st: State) -> tuple[np.ndarray, np.ndarray]:
    """Append token p = st.tokens and attend with its query."""
    append_token(g, w, inp, st)
    return output_at(g, w, inp, st, st.tokens - 1)


def full_recompute(g: Geometry, w: LayerWeights, inp: Inputs, p: int) -> tuple[np.ndarray, np.ndarray, State]:
    """Prefill 0..p from nothing and attend with the query at p."""
    st = prefill(g, w, inp, p + 1)
    out, sel = output_at(g, w, inp, st, p)
    return out, sel, st


def states_equal(a: State, b: State) -> bool:
    """Byte-exact equality of every state buffer (carries compared where written)."""
    g = a.g
    live = live_carry_slots(g.ratio, a.tokens)
    same = (np.array_equal(a.records, b.records) and np.array_equal(a.ring, b.ring)
            and np.array_equal(a.carry[live], b.carry[live]) and a.tokens == b.tokens)
    if g.has_indexer:
        ilive = live_carry_slots(4, a.tokens)
        same = same and np.array_equal(a.index_keys, b.index_keys) and np.array_equal(a.index_carry[ilive],
                                                                                    b.index_carry[ilive])
    return bool(same)


def live_carry_slots(ratio: int, tokens: int) -> np.ndarray:
    """Carry slots that hold data a later record needs (others may keep stale tokens)."""
    tail = np.arange(tokens % ratio)
    if ratio == 4:
        return np.concatenate([np.arange(4), 4 + tail])
    return tail
