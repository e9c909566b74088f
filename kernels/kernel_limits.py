"""What the CUDA kernels hard-code, checked before any launch.

The kernels are written for one geometry; everything outside it is refused with a
message naming the value and the constant that fixes it, never read out of bounds:

==================  =========================  ==============================================
quantity            the kernels need           where it is hard-coded
==================  =========================  ==============================================
head_dim            == 512                     attn.cu ``CSA_ATTN_D`` (query/record stride),
                                               emit_records: one channel per thread, 512 threads
qk_rope_head_dim    even, 0 < r <= 64          ``inv_freq`` holds 32 pairs (oracle.INV_FREQ)
head_dim - rope     a multiple of 64           the FP8 block-64 pack (one E8M0 scale per 64)
cache format        fp8_e4m3_block64           every kernel reads/writes 583-byte records
index_head_dim      == 128 (ratio 4)           emit_index_keys blockDim 128, index_scores
                                               4 dims per lane x 32 lanes, 68-byte keys
index_num_heads     1..64 (ratio 4)            index.cu ``CSA_INDEX_MAX_HEADS`` (shared query)
num_heads, window   >= 1                       grid shapes
positions           < 2^24                     RoPE angles are ``(float)pos * inv_freq``: exact
                                               float positions (the oracle does the same)
==================  =========================  ==============================================

``geometry_problems`` lists every clause a layer breaks (all of them, like the gate);
``run-gpu`` turns a non-empty list into a typed refusal (exit 3) before it allocates
anything, and every launcher calls ``check_launch_geometry`` so a direct caller (tests,
the benchmark, the GPU check) gets a ``KernelGeometryError`` instead of a wrong read.
"""

from __future__ import annotations

from csa_plan.planner.errors import CsaPlanError, ExitCode

HEAD_DIM = 512
MAX_ROPE_DIM = 64
FP8_BLOCK = 64
INDEX_DIM = 128
MAX_INDEX_HEADS = 64
MAX_POSITION = 1 << 24
KERNEL_FORMAT = "fp8_e4m3_block64"
REFUSAL_TYPE = "KernelGeometry"


class KernelGeometryError(CsaPlanError, ValueError):
    """A launch asked for a geometry the kernels do not implement (a refusal: exit 3)."""

    exit_code = ExitCode.REFUSED


def geometry_problems(*, head_dim: int, rope_dim: int, num_heads: int = 1, window: int = 1, ratio: int = 128,
                      index_heads: int = 0, index_dim: int = 0, max_seq_len: int = 1,
                      cache_format: str = KERNEL_FORMAT) -> list[tuple[str, str]]:
    """(field, problem) for every hard-coded limit this layer breaks; empty when it can run."""
    out: list[tuple[str, str]] = []
    if head_dim != HEAD_DIM:
        out.append(("head_dim", f"is {head_dim}, the kernels hard-code {HEAD_DIM} (attn.cu CSA_ATTN_D, "
                                f"emit_records' 512 threads)"))
    if not (0 < rope_dim <= MAX_ROPE_DIM and rope_dim % 2 == 0):
        out.append(("qk_rope_head_dim", f"is {rope_dim}, the kernels need an even value in 1..{MAX_ROPE_DIM} "
                                        f"(inv_freq holds {MAX_ROPE_DIM // 2} pairs)"))
    if (head_dim - rope_dim) % FP8_BLOCK != 0:
        out.append(("qk_rope_head_dim", f"head_dim - qk_rope_head_dim = {head_dim - rope_dim} is not a multiple "
                                        f"of {FP8_BLOCK} (FP8 block-64 records)"))
    if cache_format != KERNEL_FORMAT:
        out.append(("cache_format", f"is {cache_format}, the kernels read and write {KERNEL_FORMAT} records only"))
    if num_heads < 1:
        out.append(("num_heads", f"is {num_heads}, need at least 1"))
    if window < 1:
        out.append(("window", f"is {window}, need at least 1"))
    if max_seq_len > MAX_POSITION:
        out.append(("max_seq_len", f"is {max_seq_len:,}, RoPE positions are exact floats only below "
                                   f"{MAX_POSITION:,}"))
    if ratio == 4:
        if index_dim != INDEX_DIM:
            out.append(("index_head_dim", f"is {index_dim}, the kernels hard-code {INDEX_DIM} "
                                          f"(emit_index_keys, index_scores)"))
        if not 1 <= index_heads <= MAX_INDEX_HEADS:
            out.append(("index_num_heads", f"is {index_heads} per device, index_scores takes 1..{MAX_INDEX_HEADS} "
                                           f"(CSA_INDEX_MAX_HEADS; raise --tp to split them)"))
    return out


def descriptor_problems(d) -> list[tuple[str, str]]:
    """geometry_problems of a planner Descriptor (after --tp and --tiny)."""
    return geometry_problems(head_dim=d.head_dim, rope_dim=d.qk_rope_head_dim, num_heads=d.num_heads,
                             window=d.window, ratio=d.compression_ratio, index_heads=d.index_num_heads,
                             index_dim=d.index_head_dim, max_seq_len=d.max_seq_len, cache_format=d.cache_format)


def check_launch_geometry(kernel: str, **fields) -> None:
    """Raise KernelGeometryError naming every broken clause (used by every launcher)."""
    problems = geometry_problems(**fields)
    if problems:
        raise KernelGeometryError(f"{kernel}: " + "; ".join(f"{f} {p}" for f, p in problems))
