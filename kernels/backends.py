"""Launch the CUDA C kernels: on a GPU through cupy.RawModule, or on the CPU under cuda_emu.h.

Both backends expose the same methods with the same arguments (arrays of their own
``xp``), so one harness body drives either. The emulator library is compiled with g++
once per source hash and cached; the CuPy module is compiled once per process.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from csa_plan.kernels.tc_geometry import (ATTN_TC_FUSED_KERNELS, ATTN_TC_MAX_IDS, FUSED_CLUSTERS, H200_SMS,
                                          TopkLayout, attn_tc_fused_kernel, attn_tc_launch, index_tc_blocks,
                                          topk_layout)
from csa_plan.planner.errors import CsaPlanError, ExitCode
from csa_plan.kernels.kernel_limits import HEAD_DIM, INDEX_DIM, KernelGeometryError, check_launch_geometry

KERNEL_DIR = Path(__file__).resolve().parent
# Compiled and tested against the oracle, launched only when asked for (kernel="simt"): the fp32
# SIMT kernels that attn_tc_partial and index_tc_scores replaced, kept as second implementations.
REFERENCE_KERNELS = ("attn_partial", "index_scores")
CU_FILES = ("emit.cu", "index.cu", "topk.cu", "attn.cu", "attn_tc.cu", "index_tc.cu")
HEADERS = ("csa_common.cuh", "csa_ptx.cuh", "cuda_emu.h")
KERNEL_NAMES = ("emit_records", "emit_index_keys", "index_scores", "topk_radix", "topk_mb_hist", "topk_mb_count",
                "topk_mb_write", "attn_partial", "attn_merge",
                "attn_tc_partial", "index_tc_scores") + ATTN_TC_FUSED_KERNELS
EMIT_RECORD_THREADS = 512
EMIT_INDEX_THREADS = 128
INDEX_THREADS = 256
INDEX_TC_THREADS = 128
INDEX_TC_TILE = 128  # keys per pipeline stage (index_tc.cu's CSA_IX_TILE)
INDEX_TC_STAGES = 4  # pipeline stages, STAGES - 1 tiles in flight (index_tc.cu's CSA_IX_STAGES)
TOPK_THREADS = 256
MERGE_THREADS = 128
ATTN_MAX_WARPS = 16
# Kernels that read their vector width from blockDim.x (one channel per thread).
FIXED_BLOCK = {"emit_records": 512, "emit_index_keys": 128}
# Pointer parameters a launch may pass as null: attn_partial's idx (use_idx == 0: never read),
# index_tc_scores' hist (no fused top-k histogram).
NULLABLE = ("idx", "hist")
MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535
STATIC_SHARED_LIMIT = 48 * 1024
# Kernels launched with dynamic shared memory (size per launch; sm_90 opts in up to 227 KB).
DYNAMIC_SHARED = ("attn_tc_partial",) + ATTN_TC_FUSED_KERNELS
DYNAMIC_SHARED_LIMIT = 227 * 1024

# The options CupyBackend gives cupy.RawModule (NVRTC). CuPy 13/14 appends its own:
# "-ftz=true" and "--device-as-default-execution-space" always, and "-arch=sm_XX" for the
# current device (compute_XX when NVRTC is older than the device), so we must not pass
# -arch ourselves. tests/kernels/test_nvcc_compile.py compiles module_source() with
# exactly NVRTC_OPTIONS + CUPY_NVRTC_EXTRA (NVRTC when found) and NVCC_OPTIONS (nvcc).
NVRTC_OPTIONS = ("-std=c++17", f"-I{KERNEL_DIR}")
CUPY_NVRTC_EXTRA = ("-ftz=true", "--device-as-default-execution-space", "-arch=sm_90")
NVCC_OPTIONS = ("-std=c++17", "-I", str(KERNEL_DIR), "-ftz=true", "-arch=sm_90")


class EmulationUnavailable(CsaPlanError, RuntimeError):
    """No C++ compiler (or the build failed): the emulated backend cannot run."""

    exit_code = ExitCode.NO_GPU


class CudaHeadersMissing(CsaPlanError, RuntimeError):
    """CuPy's first compile found no CUDA runtime headers: no usable GPU (exit 5), the fix named."""

    exit_code = ExitCode.NO_GPU


def source_text(name: str) -> str:
    return (KERNEL_DIR / name).read_text()


def module_source() -> str:
    """The one source string CupyBackend compiles: every .cu file, headers by -I.

    The first line carries the hash of every .cu/.cuh file: CuPy's kernel cache is keyed
    on the source string and options only, so without it an edited csa_common.cuh would
    silently reuse a stale cubin from ~/.cupy/kernel_cache.
    """
    return f"// csa-plan kernels, sources {_sources_hash()}\n" + "\n".join(source_text(f) for f in CU_FILES)


_C_TYPES = {"float*": ("p", np.dtype(np.float32)), "unsignedchar*": ("p", np.dtype(np.uint8)),
            "int*": ("p", np.dtype(np.int32)), "unsigned*": ("p", np.dtype(np.uint32)), "int": ("i", None), "longlong": ("l", None), "float": ("f", None)}
_KERNEL_RE = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__cluster_dims__\(([\d,\s]+)\)\s+)?'
                        r'(?:__launch_bounds__\((\d+)(?:\s*,\s*\d+)?\)\s+)?(\w+)\s*\(([^)]*)\)')
_MACRO_RE = re.compile(r"^#define\s+(\w+)[ \t]+((?:[^\n]*\\\n)*[^\n]*)", re.M)


@dataclass(frozen=True)
class KernelSignature:
    name: str
    launch_bounds: int
    params: tuple[tuple[str, str, np.dtype | None], ...]  # (C name, kind p/i/l/f, pointee dtype)
    cluster: tuple[int, int, int] = (1, 1, 1)  # __cluster_dims__: blocks per thread block cluster


def parse_signatures(code: str) -> dict[str, KernelSignature]:
    """The extern "C" __global__ signatures in CUDA C text, as launch-argument kinds (a
    parameter list may use object-like macros defined in the text)."""
    macros = {m.group(1): m.group(2).replace("\\\n", " ") for m in _MACRO_RE.finditer(code)}
    out = {}
    for cluster, bounds, name, params in _KERNEL_RE.findall(code):
        for _ in range(4):  # macros that name macros
            params = re.sub(r"\b\w+\b", lambda m: macros.get(m.group(0), m.group(0)), params)
        ps = []
        for p in params.split(","):
            p = " ".join(p.replace("__restrict__", " ").replace("const", " ").split())
            m = re.fullmatch(r"(.*?)\s*\b(\w+)", p)
            ctype = m.group(1).replace(" ", "")
            if ctype not in _C_TYPES:
                raise ValueError(f"{name}: parameter {p!r} has a type the launchers do not handle")
            ps.append((m.group(2),) + _C_TYPES[ctype])
        dims = tuple(int(x) for x in cluster.split(",")) if cluster else (1, 1, 1)
        out[name] = KernelSignature(name, int(bounds) if bounds else 1024, tuple(ps), dims)
    return out


@lru_cache(maxsize=1)
def kernel_signatures() -> dict[str, KernelSignature]:
    return parse_signatures("\n".join(source_text(f) for f in CU_FILES))


def check_launch(kernel: str, grid, block: int, args: list, sig: dict[str, KernelSignature] | None = None) -> None:
    """Fail before launching what the kernel would misread: argument count, kinds, pointee
    dtypes, scalar ranges, contiguity, and the launch shape the kernel assumes."""
    s = (sig or kernel_signatures())[kernel]
    if len(args) != len(s.params):
        raise TypeError(f"{kernel} takes {len(s.params)} arguments, launcher passes {len(args)}")
    for (cname, kind, dtype), (k, v) in zip(s.params, args):
        if k != kind:
            raise TypeError(f"{kernel}({cname}): kernel expects kind {kind!r}, launcher passes {k!r}")
        if kind == "p":
            if v is None:
                if cname not in NULLABLE:
                    raise TypeError(f"{kernel}({cname}): null pointer")
                continue
            if getattr(v, "dtype", None) != dtype:
                raise TypeError(f"{kernel}({cname}): expects a {dtype} array, got {getattr(v, 'dtype', type(v))}")
            if not v.flags.c_contiguous:
                raise ValueError(f"{kernel}({cname}): array is not C-contiguous")
        elif kind == "i" and not -2**31 <= int(v) < 2**31:
            raise OverflowError(f"{kernel}({cname}) = {v} does not fit a C int")
        elif kind == "l" and not -2**63 <= int(v) < 2**63:
            raise OverflowError(f"{kernel}({cname}) = {v} does not fit a long long")
    if not (len(grid) == 3 and all(isinstance(g, int) and g >= 1 for g in grid)):
        raise ValueError(f"{kernel}: grid {grid} must be three positive ints")
    if grid[0] > MAX_GRID_X or grid[1] > MAX_GRID_YZ or grid[2] > MAX_GRID_YZ:
        raise ValueError(f"{kernel}: grid {grid} exceeds the CUDA limits")
    if not (isinstance(block, int) and 32 <= block <= min(1024, s.launch_bounds) and block % 32 == 0):
        raise ValueError(f"{kernel}: block {block} must be a multiple of 32 within __launch_bounds__({s.launch_bounds})")
    if any(g % c for g, c in zip(grid, s.cluster)):
        raise ValueError(f"{kernel}: grid {grid} is not a whole number of its {s.cluster} clusters")
    if kernel in FIXED_BLOCK and block != FIXED_BLOCK[kernel]:
        raise ValueError(f"{kernel} needs blockDim.x == {FIXED_BLOCK[kernel]}, got {block}")


def _sources_hash() -> str:
    h = hashlib.sha256()
    for name in CU_FILES + HEADERS + ("emu_driver.cpp",):
        h.update(name.encode())
        h.update((KERNEL_DIR / name).read_bytes())
    return h.hexdigest()[:16]


def cache_dir() -> Path:
    root = os.environ.get("CSA_PLAN_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache")), "csa-plan")
    path = Path(root)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        path = Path(tempfile.gettempdir()) / "csa-plan-cache"
        path.mkdir(parents=True, exist_ok=True)
    return path


EMU_NUMERICS = ("exact", "gpu")


def emu_numerics(numerics: str | None = None) -> str:
    """The emulator build to use: ``exact`` (correctly rounded fp32, no contraction) or ``gpu``
    (cuda_emu.h's GPU numerics: mma rounded toward zero, +-2 ulp on ex2/exp/sin/cos/rsqrt,
    FMA-contracted); default from CSA_PLAN_EMU_NUMERICS, else exact."""
    numerics = numerics or os.environ.get("CSA_PLAN_EMU_NUMERICS") or "exact"
    if numerics not in EMU_NUMERICS:
        raise EmulationUnavailable(f"CSA_PLAN_EMU_NUMERICS={numerics!r}: one of {', '.join(EMU_NUMERICS)}")
    return numerics


def _cpu_has_fma() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " fma" in line for line in f)
    except OSError:
        return False


@lru_cache(maxsize=2)
def build_emulator(numerics: str = "exact") -> Path:
    """Compile emu_driver.cpp (which includes every .cu) with g++; cached by source hash and build.
    The ``gpu`` build adds -DCSA_EMU_GPU_NUMERICS=1 and FMA contraction (-mfma where the CPU has it)."""
    numerics = emu_numerics(numerics)
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise EmulationUnavailable("no C++ compiler (g++) found for --backend emulate")
    flags = []
    if numerics == "gpu":
        flags = ["-DCSA_EMU_GPU_NUMERICS=1", "-ffp-contract=fast"] + (["-mfma"] if _cpu_has_fma() else [])
    suffix = "" if numerics == "exact" else "_gpu" + ("fma" if "-mfma" in flags else "")
    lib = cache_dir() / f"libcsa_emu_{_sources_hash()}{suffix}.so"
    if lib.exists():
        return lib
    tmp = lib.with_suffix(f".{os.getpid()}.tmp")
    cmd = [cxx, "-O2", "-std=c++17", *flags, "-shared", "-fPIC", "-I", str(KERNEL_DIR),
           str(KERNEL_DIR / "emu_driver.cpp"), "-o", str(tmp)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise EmulationUnavailable(f"g++ failed to build the kernel emulator: {proc.stderr.strip()[:2000]}")
    os.replace(tmp, lib)
    return lib


def run_emulated(lib, kernel: str, grid, block: int, conv: list, smem: int = 0) -> int:
    """Launch `kernel` in the emulator library with its converted arguments; 0 or -1. The
    fused attention kernels share one entry, told the cluster size (their __cluster_dims__)."""
    conv = list(conv)
    entry = kernel
    if kernel in DYNAMIC_SHARED:
        conv.insert(0, smem)
    if kernel in ATTN_TC_FUSED_KERNELS:
        conv.insert(1, kernel_signatures()[kernel].cluster[1])
        entry = "attn_tc_fused"
    return getattr(lib, "emu_" + entry)(grid[0], grid[1], grid[2], block, *conv)


class EmulationError(CsaPlanError, RuntimeError):
    """A kernel misbehaved under emulation (for example a barrier reached by part of a block)."""

    exit_code = ExitCode.CHECK_FAILED


_P = ctypes.c_void_p
_I = ctypes.c_int
_L = ctypes.c_longlong
_U = ctypes.c_uint
_F = ctypes.c_float
_GRID = [_U, _U, _U, _U]
_SIGNATURES = {
    "emu_emit_records": _GRID + [_P, _I, _I, _I, _P, _I, _P, _I, _I, _P, _I],
    "emu_emit_index_keys": _GRID + [_P, _I, _P, _I, _P],
    "emu_index_scores": _GRID + [_P, _L, _P, _P, _I, _I, _P, _L],
    "emu_index_tc_scores": _GRID + [_P, _L, _P, _P, _I, _I, _P, _L, _P, _L],
    "emu_topk_radix": _GRID + [_P, _L, _I, _I, _P, _L],
    "emu_topk_mb_hist": _GRID + [_P, _L, _I, _I, _P, _L, _I, _I],
    "emu_topk_mb_count": _GRID + [_P, _L, _I, _I, _P, _L, _I],
    "emu_topk_mb_write": _GRID + [_P, _L, _I, _I, _P, _L, _I, _P, _L],
    "emu_attn_partial": _GRID + [_P, _P, _L, _I, _P, _L, _P, _I, _L, _I, _I, _I, _P, _I, _F, _P, _P],
    "emu_attn_tc_partial": _GRID + [_U, _P, _P, _L, _I, _L, _P, _L, _L, _P, _I, _L, _I, _I, _I, _P, _I, _F, _P, _P],
    "emu_attn_tc_fused": _GRID + [_U, _U, _P, _P, _L, _I, _L, _P, _L, _L, _P, _I, _L, _I, _I, _I, _P, _I, _F, _P, _P],
    "emu_attn_merge": _GRID + [_P, _P, _I, _I, _P, _I, _P, _I, _P],
    "emu_partial_barrier": [_U, _P],
    "emu_shuffle": [_U, _P, _P],
    "emu_ftz_probe": [_U, _P, _P],
    "csa_emu_set_ftz": [_I],
    "emu_mma_bf16": [_P, _P, _P],
    "emu_mma_e4m3": [_P, _P, _P],
    "emu_cp_async": [_P, _P, _P, _P, _I],
    "emu_bf16x2_prmt": [_P, _P, _P, _P, _P, _P, _I],
    "emu_bulk": [_P, _P, _P, _I, _I],
    "emu_cluster": [_U, _U, _P, _I, _I],
}


def emulator_library(numerics: str | None = None) -> ctypes.CDLL:
    """The emulator build ``numerics`` (emu_numerics: default CSA_PLAN_EMU_NUMERICS, else exact)."""
    return _emulator_library(emu_numerics(numerics))


@lru_cache(maxsize=2)
def _emulator_library(numerics: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(build_emulator(numerics)))
    for name, args in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = ctypes.c_int
    lib.csa_emu_last_error.restype = ctypes.c_char_p
    lib.csa_emu_barriers.restype = ctypes.c_longlong
    return lib


INDEX_KEY_BYTES = INDEX_DIM // 32 * 17


def record_bytes(rope_dim: int) -> int:
    """Bytes of one packed FP8 record (583 at rope 64): 64-blocks of scale + codes, then the BF16 tail."""
    return (HEAD_DIM - rope_dim) // 64 * 65 + 2 * rope_dim


def _need(kernel: str, name: str, a, elems: int) -> None:
    """The kernel will touch elems elements of a (in its own dtype): a smaller buffer is refused."""
    if a is None:
        return
    if int(a.size) < elems:
        raise KernelGeometryError(f"{kernel}({name}): the launch reads or writes {elems:,} elements, "
                                  f"the buffer holds {int(a.size):,}")


def _address(a) -> int:
    return int(a.ctypes.data) if isinstance(a, np.ndarray) else int(a.data.ptr)


@dataclass(frozen=True)
class TopkWork:
    """A lent uint32 work buffer laid out for the multi-block top-k of `requests` requests of
    n scores each (``layout.words`` per request: tc_geometry.TopkLayout). hist0_filled: the
    buffer came back from index_scores(topk_work=...), whose epilogue accumulated each
    request's first histogram (and zeroed the rest of the header), so topk skips that pass."""

    buf: object
    n: int
    requests: int
    layout: TopkLayout
    hist0_filled: bool = False


def attn_warps(heads: int) -> int:
    return max(1, min(heads, ATTN_MAX_WARPS))


class _Base:
    """Argument checking and grid shapes shared by both backends."""

    name = "base"
    xp = np
    sm_count = H200_SMS  # the grid sizes aim at this many SMs (CupyBackend reads the device's)

    def emit_records(self, tok, cur0: int, ratio: int, overlap: bool, norm, normalize: bool, inv_freq,
                     first_record: int, n_records: int, out, *, ring_rows: int = 0, rope_dim: int = 64,
                     head_dim: int = HEAD_DIM) -> None:
        if n_records <= 0:
            return
        check_launch_geometry("emit_records", head_dim=head_dim, rope_dim=rope_dim)
        rec = record_bytes(rope_dim)
        width = 2 * head_dim if overlap else head_dim
        _need("emit_records", "tok", tok, (cur0 + n_records * ratio) * 2 * width)
        if overlap and cur0 < ratio:
            raise KernelGeometryError(f"emit_records: cur0 {cur0} < ratio {ratio}: the previous block is not in tok")
        _need("emit_records", "norm", norm, head_dim)
        _need("emit_records", "inv_freq", inv_freq, rope_dim // 2)
        _need("emit_records", "out", out, (ring_rows if ring_rows > 0 else first_record + n_records) * rec)
        self._launch("emit_records", (n_records, 1, 1), EMIT_RECORD_THREADS,
                     [("p", tok), ("i", cur0), ("i", ratio), ("i", int(overlap)), ("p", norm), ("i", int(normalize)),
                      ("p", inv_freq), ("i", first_record), ("i", ring_rows), ("p", out), ("i", rope_dim)])

    def emit_index_keys(self, tok, cur0: int, norm, first_record: int, n_records: int, out) -> None:
        if n_records <= 0:
            return
        if cur0 < 4:
            raise KernelGeometryError(f"emit_index_keys: cur0 {cur0} < 4: the previous block is not in tok")
        _need("emit_index_keys", "tok", tok, (cur0 + n_records * 4) * 2 * 2 * INDEX_DIM)
        _need("emit_index_keys", "norm", norm, INDEX_DIM)
        _need("emit_index_keys", "out", out, (first_record + n_records) * INDEX_KEY_BYTES)
        self._launch("emit_index_keys", (n_records, 1, 1), EMIT_INDEX_THREADS,
                     [("p", tok), ("i", cur0), ("p", norm), ("i", first_record), ("p", out)])

    def topk_work(self, work, n: int, requests: int = 1, *, blocks: int | None = None,
                  compact: bool = True) -> TopkWork | None:
        """`work` (a uint32 scratch the caller lends) laid out for the multi-block top-k of n
        scores per request (tc_geometry.topk_layout: its blocks, and one segment per block of
        (id, key) entries in what the buffer holds past the header; compact=False: none), or
        None when the single-block topk_radix applies (too few keys, no buffer, or too small a one)."""
        if work is None or getattr(work, "dtype", None) != np.uint32:
            return None
        lay = topk_layout(n, requests, int(work.size), self.sm_count, blocks)
        if lay is None:
            return None
        if not compact:
            lay = TopkLayout(blocks=lay.blocks, seg_capacity=0)
        if _address(work) % 16:
            raise ValueError("topk(work): the buffer must be 16-byte aligned (16-byte segment loads)")
        return TopkWork(buf=work, n=n, requests=requests, layout=lay)

    def _zero_topk_header(self, tw: TopkWork) -> None:
        w = tw.buf[:tw.requests * tw.layout.words].reshape(tw.requests, tw.layout.words)
        w[:, :tw.layout.header_words] = 0  # histograms, slice counts, entry counts

    def index_scores(self, keys, q, w, heads: int, n: int, scores, *, requests: int = 1, key_stride: int = 0,
                     score_stride: int = 0, blocks: int | None = None, kernel: str = "tc",
                     topk_work: TopkWork | None = None) -> TopkWork | None:
        """The index scores of each request's n keys. With topk_work (from topk_work(), for
        these n and requests; the tensor-core kernel only) the epilogue also accumulates each
        request's first top-k histogram: the returned TopkWork, handed to topk(), skips top-k's
        first pass over the scores. Without it (or with kernel="simt": no fusion, the plain
        TopkWork back) nothing but the scores is written."""
        if n <= 0:
            return None
        if topk_work is not None:
            if not isinstance(topk_work, TopkWork) or topk_work.hist0_filled:
                raise ValueError("index_scores(topk_work): a fresh TopkWork from topk_work()")
            if (topk_work.n, topk_work.requests) != (n, requests):
                raise ValueError(f"index_scores(topk_work): laid out for {topk_work.requests} x {topk_work.n} "
                                 f"scores, launched for {requests} x {n}")
        check_launch_geometry("index_scores", head_dim=HEAD_DIM, rope_dim=64, ratio=4, index_heads=heads,
                              index_dim=INDEX_DIM)
        _need("index_scores", "keys", keys, (requests - 1) * key_stride + n * INDEX_KEY_BYTES)
        _need("index_scores", "q", q, requests * heads * INDEX_DIM)
        _need("index_scores", "w", w, requests * heads)
        _need("index_scores", "scores", scores, (requests - 1) * score_stride + n)
        if kernel == "simt":
            warps = INDEX_THREADS // 32
            gx = blocks or max(1, min(-(-n // warps), 4096))
            self._launch("index_scores", (gx, requests, 1), INDEX_THREADS,
                         [("p", keys), ("l", key_stride), ("p", q), ("p", w), ("i", heads), ("i", n), ("p", scores),
                          ("l", score_stride)])
            return topk_work
        if kernel != "tc":
            raise ValueError(f"index_scores kernel {kernel!r}: 'tc' or 'simt'")
        if _address(keys) % 16:
            raise ValueError("index_tc_scores(keys): the buffer must be 16-byte aligned (cp.async)")
        if n * INDEX_KEY_BYTES >= 2**31 - 16:
            raise ValueError("index_tc_scores: a request's keys must span less than 2 GiB (32-bit offsets)")
        # blocks over 64-key tiles: at most two resident blocks per SM across all requests
        # (rounded down, so no SM gets a third block: the busiest SM sets the time), each
        # looping over its tiles so the cp.async pipeline stays full
        gx = blocks or index_tc_blocks(n, requests, self.sm_count)
        hist = None
        if topk_work is not None:
            self._zero_topk_header(topk_work)
            hist = topk_work.buf
        self._launch("index_tc_scores", (gx, requests, 1), INDEX_TC_THREADS,
                     [("p", keys), ("l", key_stride), ("p", q), ("p", w), ("i", heads), ("i", n), ("p", scores),
                      ("l", score_stride), ("p", hist), ("l", topk_work.layout.words if topk_work else 0)])
        return None if topk_work is None else replace(topk_work, hist0_filled=True)

    def topk(self, scores, n: int, k: int, out, *, requests: int = 1, score_stride: int = 0,
             out_stride: int = 0, work=None, blocks: int | None = None) -> None:
        """Top-k ids of each request's scores, ascending. With `work` — a uint32 scratch the
        caller lends (the attention workspace is free while top-k runs), or the TopkWork that
        topk_work() laid out or index_scores(topk_work=...) returned with its first histogram
        filled — and n large enough, the multi-block radix select (topk_mb_*,
        tc_geometry.topk_blocks blocks per request, or `blocks`), each block compacting its
        slice's keys of the threshold bin and above into its segment where the buffer has room
        for one; otherwise the single-block topk_radix. All give oracle.topk_ids."""
        k = min(k, n)
        if k <= 0:
            return
        _need("topk_radix", "scores", scores, (requests - 1) * score_stride + n)
        _need("topk_radix", "out", out, (requests - 1) * out_stride + k)
        tw = work if isinstance(work, TopkWork) else self.topk_work(work, n, requests, blocks=blocks)
        if tw is not None:
            if (tw.n, tw.requests) != (n, requests) or (blocks and blocks != tw.layout.blocks):
                raise ValueError(f"topk(work): laid out for {tw.requests} x {tw.n} scores"
                                 f" ({tw.layout.blocks} blocks), launched for {requests} x {n}")
            b, ws, seg = tw.layout.blocks, tw.layout.words, tw.layout.seg_capacity
            args = [("p", scores), ("l", score_stride), ("i", n), ("i", k), ("p", tw.buf), ("l", ws)]
            if not tw.hist0_filled:
                self._zero_topk_header(tw)
            for p in range(1 if tw.hist0_filled else 0, 3):
                self._launch("topk_mb_hist", (b, requests, 1), TOPK_THREADS, args + [("i", p), ("i", seg)])
            self._launch("topk_mb_count", (b, requests, 1), TOPK_THREADS, args + [("i", seg)])
            self._launch("topk_mb_write", (b, requests, 1), TOPK_THREADS,
                         args + [("i", seg), ("p", out), ("l", out_stride)])
            return
        self._launch("topk_radix", (requests, 1, 1), TOPK_THREADS,
                     [("p", scores), ("l", score_stride), ("i", n), ("i", k), ("p", out), ("l", out_stride)])

    def attention(self, q, ring, n_win: int, records, idx, n_sel: int, heads: int, pos: int, inv_freq, sink,
                  part_ml, part_o, y, nchunks: int, *, requests: int = 1, ring_stride: int = 0,
                  rec_stride: int = 0, idx_stride: int = 0, rope_dim: int = 64, head_dim: int = HEAD_DIM,
                  kernel: str = "tc", fused: bool = False) -> None:
        """y = attention of every request's query over [ring rows, selected records]: pass 1 over
        nchunks chunks into part_ml/part_o, then attn_merge; or, fused (kernel "tc", nchunks in
        FUSED_CLUSTERS), one launch whose clusters of nchunks blocks merge in shared memory
        (part_ml and part_o are not touched and may be None)."""
        check_launch_geometry("attention", head_dim=head_dim, rope_dim=rope_dim, num_heads=heads,
                              max_seq_len=pos + 1)
        rec = record_bytes(rope_dim)
        _need("attention", "q", q, requests * heads * head_dim)
        _need("attention", "ring", ring, (requests - 1) * ring_stride + n_win * rec)
        if idx is None:
            _need("attention", "records", records, (requests - 1) * rec_stride + n_sel * rec)
        else:
            _need("attention", "idx", idx, (requests - 1) * idx_stride + n_sel)
        _need("attention", "inv_freq", inv_freq, rope_dim // 2)
        _need("attention", "sink", sink, heads)
        _need("attention", "y", y, requests * heads * head_dim)
        if fused:
            if kernel != "tc" or nchunks not in FUSED_CLUSTERS:
                raise ValueError(f"attention: a fused launch is the tc kernel over {FUSED_CLUSTERS} chunks, "
                                 f"got {kernel!r} over {nchunks}")
            self._attention_tc(q, ring, n_win, records, idx, n_sel, heads, pos, inv_freq, nchunks, requests,
                               ring_stride, rec_stride, idx_stride, rope_dim, head_dim,
                               attn_tc_fused_kernel(nchunks), [("p", sink), ("p", y)])
            return
        _need("attention", "part_ml", part_ml, 2 * requests * nchunks * heads)
        _need("attention", "part_o", part_o, requests * nchunks * heads * head_dim)
        if kernel == "simt":
            warps = attn_warps(heads)
            self._launch("attn_partial", (nchunks, -(-heads // warps), requests), warps * 32,
                         [("p", q), ("p", ring), ("l", ring_stride), ("i", n_win), ("p", records), ("l", rec_stride),
                          ("p", idx), ("i", int(idx is not None)), ("l", idx_stride),
                          ("i", n_sel), ("i", heads), ("i", pos), ("p", inv_freq), ("i", rope_dim),
                          ("f", 1.0 / float(np.sqrt(head_dim))), ("p", part_ml), ("p", part_o)])
        elif kernel == "tc":
            self._attention_tc(q, ring, n_win, records, idx, n_sel, heads, pos, inv_freq, nchunks, requests,
                               ring_stride, rec_stride, idx_stride, rope_dim, head_dim, "attn_tc_partial",
                               [("p", part_ml), ("p", part_o)])
        else:
            raise ValueError(f"attention kernel {kernel!r}: 'tc' or 'simt'")
        self._launch("attn_merge", (heads, requests, 1), MERGE_THREADS,
                     [("p", part_ml), ("p", part_o), ("i", nchunks), ("i", heads), ("p", sink), ("i", pos),
                      ("p", inv_freq), ("i", rope_dim), ("p", y)])

    def _attention_tc(self, q, ring, n_win, records, idx, n_sel, heads, pos, inv_freq, nchunks, requests,
                      ring_stride, rec_stride, idx_stride, rope_dim, head_dim, kernel: str, outputs: list) -> None:
        """The tensor-core kernel (attn_tc.cu; every head of a block shares each row load):
        pass 1 (outputs: the partial states) or fused (outputs: the sinks and y)."""
        if head_dim != 512:
            raise ValueError(f"{kernel} needs head_dim 512, got {head_dim}")
        if -(-(n_win + n_sel) // nchunks) > ATTN_TC_MAX_IDS:  # the kernel's per-split row table
            raise ValueError(f"{kernel}: {nchunks} chunks leave more than {ATTN_TC_MAX_IDS} rows per chunk")
        for name, a in (("ring", ring), ("records", records)):
            if _address(a) % 16:
                raise ValueError(f"{kernel}({name}): the buffer must be 16-byte aligned (cp.async)")
        lay = attn_tc_launch(heads)
        ring_bytes = int(ring_stride) if ring_stride else int(ring.nbytes)
        rec_bytes = int(rec_stride) if rec_stride else int(records.nbytes)
        if max(ring_bytes, rec_bytes) >= 2**31 - 16:
            raise ValueError(f"{kernel}: a request's rows must span less than 2 GiB (32-bit offsets)")
        self._launch(kernel, (lay.head_groups, nchunks, requests), lay.threads,
                     [("p", q), ("p", ring), ("l", ring_stride), ("i", n_win), ("l", ring_bytes), ("p", records),
                      ("l", rec_stride), ("l", rec_bytes), ("p", idx), ("i", int(idx is not None)),
                      ("l", idx_stride), ("i", n_sel), ("i", heads), ("i", pos), ("p", inv_freq), ("i", rope_dim),
                      ("f", 1.0 / float(np.sqrt(head_dim)))] + outputs,
                     smem=lay.smem_bytes)

    def synchronize(self) -> None:
        pass

    def _launch(self, kernel: str, grid: tuple[int, int, int], block: int, args: list, smem: int = 0) -> None:
        grid = tuple(int(g) for g in grid)
        check_launch(kernel, grid, int(block), args)
        if (smem > 0) != (kernel in DYNAMIC_SHARED) or not 0 <= smem <= DYNAMIC_SHARED_LIMIT:
            raise ValueError(f"{kernel}: dynamic shared memory {smem} B (kernels that take it: {DYNAMIC_SHARED})")
        self._run(kernel, grid, int(block), args, int(smem))

    def _run(self, kernel: str, grid: tuple[int, int, int], block: int, args: list, smem: int = 0) -> None:
        raise NotImplementedError


class EmulatedBackend(_Base):
    """The same CUDA C sources compiled with g++; every CUDA thread a fiber."""

    name = "emulate"
    xp = np

    def __init__(self, numerics: str | None = None) -> None:
        self.numerics = emu_numerics(numerics)
        self.lib = emulator_library(self.numerics)

    @staticmethod
    def _ptr(a) -> int | None:
        if a is None:
            return None
        if not isinstance(a, np.ndarray):
            raise TypeError(f"emulated kernels take numpy arrays, got {type(a).__name__}")
        if not a.flags.c_contiguous:
            raise ValueError("emulated kernels need C-contiguous arrays")
        return a.ctypes.data

    def _run(self, kernel, grid, block, args, smem=0):
        conv = []
        for kind, v in args:
            conv.append(self._ptr(v) if kind == "p" else (float(v) if kind == "f" else int(v)))
        rc = run_emulated(self.lib, kernel, grid, block, conv, smem)
        if rc != 0:
            raise EmulationError(f"{kernel}: {self.lib.csa_emu_last_error().decode()}")


class CupyBackend(_Base):
    """cupy.RawModule over the same .cu files (compiled by NVRTC on first use).

    Launch arguments follow cupy.RawKernel's rules: device arrays as cupy.ndarray (their
    data pointer is passed, so they must be C-contiguous: checked before every launch),
    scalars as NumPy scalars of the exact C type (np.int32 for int, np.int64 for long
    long, np.float32 for float; a Python int would go in as 8 bytes), a null pointer as
    np.uint64(0). grid and block are 3-tuples of Python ints. The kernels in DYNAMIC_SHARED
    take their shared memory at launch (opted in above 48 KB once per size); every other
    kernel's __shared__ arrays are static and under 48 KB. The fused attention kernels carry
    their cluster shape in the binary (__cluster_dims__), so a plain launch forms the clusters.
    """

    name = "cupy"

    def __init__(self, cupy_module=None) -> None:
        if cupy_module is None:
            import cupy as cupy_module

        cupy = cupy_module
        self.xp = cupy
        self.cupy = cupy
        t0 = time.perf_counter()
        self.module = cupy.RawModule(code=module_source(), options=NVRTC_OPTIONS, backend="nvrtc")
        try:  # CuPy compiles (or loads its kernel cache) at the first get_function
            self.functions = {k: self.module.get_function(k) for k in KERNEL_NAMES}
        except Exception as exc:
            from csa_plan.kernels.cuda_headers import FIX, is_header_error, missing_reason

            if is_header_error(exc):
                said = " ".join(str(exc).split())[:300]
                raise CudaHeadersMissing(missing_reason() or f"no usable GPU: CuPy's compile: {said}; fix: {FIX}") \
                    from None
            raise
        self.module_load_s = time.perf_counter() - t0
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        self.sm_count = int(props.get("multiProcessorCount", H200_SMS))
        self.times_ms: dict[str, list[float]] = {}
        self.timing = False

    @staticmethod
    def _arg(kind, v):
        if kind == "p":
            return np.uint64(0) if v is None else v
        if kind == "f":
            return np.float32(v)
        return np.int64(v) if kind == "l" else np.int32(v)

    def _run(self, kernel, grid, block, args, smem=0):
        cp = self.cupy
        conv = tuple(self._arg(kind, v) for kind, v in args)
        fn = self.functions[kernel]
        extra = {}
        if smem:  # opt in above 48 KB once per size
            if getattr(fn, "max_dynamic_shared_size_bytes", 0) < smem:
                fn.max_dynamic_shared_size_bytes = smem
            extra = {"shared_mem": smem}
        if self.timing:
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            fn(grid, (block, 1, 1), conv, **extra)
            stop.record()
            stop.synchronize()
            self.times_ms.setdefault(kernel, []).append(float(cp.cuda.get_elapsed_time(start, stop)))
        else:
            fn(grid, (block, 1, 1), conv, **extra)

    def synchronize(self) -> None:
        self.cupy.cuda.runtime.deviceSynchronize()


def make_backend(name: str):
    """``cupy`` (the GPU) or ``emulate`` (the CPU emulator)."""
    return CupyBackend() if name == "cupy" else EmulatedBackend()


def device_name(be) -> str:
    if getattr(be, "cupy", None) is None:
        return "CPU emulation (g++, one fiber per CUDA thread)"
    cp = be.cupy
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return f"{name} ({props['totalGlobalMem']:,} B)"
