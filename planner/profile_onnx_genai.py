"""``onnx-genai-b6``: what the reference runtime's CSA buffer manager reserves today.

Source: justinchuby/onnx-genai, crates/onnx-runtime-ep-cuda/src/kernels/csa_device_state.rs
(commit 2a7703a469a562795a39438b031add72234f944e), ``CsaBufferLayout::from_values``:
it computes ``records4 = ceil(max_seq_len/4)`` and ``records128 = ceil(max_seq_len/128)``
and sizes all seven buffers for every node, whatever the node's own ratio:
``attention_r4``, ``attention_r4_carry``, ``attention_r128``, ``attention_r128_carry``,
``index_r4``, ``index_r4_carry`` and ``dense_ring``. Its pooled workspaces are the
CONTRACT §2 scratch formulas with the top-k hard-coded to 512 (CONTRACT §2 note).

Class mapping: both attention buffers -> compressed; both attention carries -> carry;
index_r4 -> index; index_r4_carry -> index_carry; dense_ring -> dense_ring;
workspaces -> scratch. Nothing is padding: the excess over ``exact`` is
over-reservation (unneeded buffers), reported as such by ``compare``.
"""

from __future__ import annotations

from csa_plan.planner.descriptor import Descriptor
from csa_plan.planner.layout import FP32_BYTES, GroupBytes, scratch_workspaces, swa_ring_bytes
from csa_plan.planner.profile import LayoutProfile
from csa_plan.planner.units import ceil_div

_SRC = "justinchuby/onnx-genai crates/onnx-runtime-ep-cuda/src/kernels/csa_device_state.rs @2a7703a4"

ATTN_WIDTH_BYTES = 583  # csa_device_state.rs: const ATTN_WIDTH: usize = 583
INDEX_WIDTH_BYTES = 68  # csa_device_state.rs: const INDEX_WIDTH: usize = 68
DENSE_WIDTH_BYTES = 583  # csa_device_state.rs: const DENSE_WIDTH: usize = 583
R4_CARRY_SHAPE = (8, 2, 1024)  # csa_device_state.rs: attention_r4_carry_bytes = bytes(&[batch, 8, 2, 1024], 4)
R128_CARRY_SHAPE = (128, 2, 512)  # csa_device_state.rs: attention_r128_carry_bytes = bytes(&[batch, 128, 2, 512], 4)
INDEX_CARRY_SHAPE = (8, 2, 256)  # csa_device_state.rs: index_r4_carry_bytes = bytes(&[batch, 8, 2, 256], 4)
RUNTIME_TOPK = 512  # CONTRACT §2: "The reference runtime hard-codes a top-k of 512" (its scratch formulas)


def _prod(shape: tuple[int, ...]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


def b6_group_bytes(d: Descriptor, query_len: int = 1) -> GroupBytes:
    """All seven fixed buffers for any node, plus the runtime's scratch (top-k 512)."""
    b, length = d.batch, d.max_seq_len
    records4, records128 = ceil_div(length, 4), ceil_div(length, 128)
    scratch_d = d.with_(index_topk=RUNTIME_TOPK) if d.compression_ratio == 4 else d
    return GroupBytes(
        compressed_bytes=b * (records4 + records128) * ATTN_WIDTH_BYTES,
        carry_bytes=b * (_prod(R4_CARRY_SHAPE) + _prod(R128_CARRY_SHAPE)) * FP32_BYTES,
        index_bytes=b * records4 * INDEX_WIDTH_BYTES,
        index_carry_bytes=b * _prod(INDEX_CARRY_SHAPE) * FP32_BYTES,
        dense_ring_bytes=b * d.window * DENSE_WIDTH_BYTES,
        scratch_bytes=sum(max(size, 1) for size in scratch_workspaces(scratch_d, query_len)),
    )


ONNX_GENAI_B6 = LayoutProfile(
    name="onnx-genai-b6",
    summary="reference runtime today: ratio-4 and ratio-128 buffers on every node, 583-B records, top-k 512 scratch",
    group_bytes=b6_group_bytes,
    swa_bytes=swa_ring_bytes,  # SWA-only layers are not CSA nodes; their ring is as in exact
    sources=(_SRC, "CONTRACT §2 (scratch formulas, fixed top-k 512)"),
)
