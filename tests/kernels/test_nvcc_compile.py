"""Every kernel compiles for sm_90 with nvcc; ptxas registers and spills are recorded; spills fail.

Both compile paths use one option set: CupyBackend hands NVRTC ``NVRTC_OPTIONS`` (CuPy adds
``CUPY_NVRTC_EXTRA``: -ftz=true, --device-as-default-execution-space, -arch=sm_XX) and these
tests give nvcc ``NVCC_OPTIONS`` (the same defines, include path, C++ standard, -ftz=true
and -arch=sm_90; nvcc has no --device-as-default-execution-space and needs none: every
function in the sources is marked __device__ or __global__). The module test compiles
``module_source()``, the very string CupyBackend passes to RawModule, from a directory
without the header beside it, so the -I path is what resolves csa_common.cuh, as under
NVRTC. When libnvrtc is found (CSA_PLAN_NVRTC=/path/libnvrtc.so, the CUDA toolkit, or the
nvidia-cuda-nvrtc pip wheel) the same string is compiled by NVRTC itself with CuPy's options (kernels/nvrtc.py loads it, libnvrtc-builtins first).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from csa_plan.kernels.backends import (CU_FILES, CUPY_NVRTC_EXTRA, KERNEL_DIR, KERNEL_NAMES, NVCC_OPTIONS,
                                       NVRTC_OPTIONS, STATIC_SHARED_LIMIT, cache_dir, module_source,
                                       parse_signatures)

NVCC = os.environ.get("NVCC") or shutil.which("nvcc") or next(
    (p for p in ("/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc") if Path(p).exists()), None)
RESOURCES = Path(os.environ.get("CSA_PLAN_PTXAS_REPORT", cache_dir() / "ptxas_sm90.json"))

pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not found (set NVCC=/path/to/nvcc)")

ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(sm_\d+)'")
SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
REGS = re.compile(r"Used (\d+) registers")
SMEM = re.compile(r"(\d+) bytes smem")


def ptxas_usage(cu: str, tmp_path: Path, src: Path | None = None) -> dict[str, dict[str, int]]:
    proc = subprocess.run([NVCC, "-cubin", "-Xptxas", "-v", *NVCC_OPTIONS,
                           "-o", str(tmp_path / (cu + ".cubin")), str(src or KERNEL_DIR / cu)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    usage: dict[str, dict[str, int]] = {}
    current = None
    for line in proc.stderr.splitlines():
        if m := ENTRY.search(line):
            current = m.group(1)
            usage[current] = {}
        elif current and (m := SPILL.search(line)):
            usage[current].update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        elif current and (m := REGS.search(line)):
            usage[current]["registers"] = int(m.group(1))
            if sm := SMEM.search(line):
                usage[current]["smem"] = int(sm.group(1))
    return usage


@pytest.mark.parametrize("cu", CU_FILES)
def test_kernel_compiles_for_sm90_without_spills(cu, tmp_path, record_property):
    usage = ptxas_usage(cu, tmp_path)
    assert usage, f"no entry functions in {cu}"
    for name, u in usage.items():
        assert name in KERNEL_NAMES
        assert {"registers", "spill_stores", "spill_loads"} <= set(u), u
        record_property(f"{name}_registers", u["registers"])
        assert u["spill_stores"] == 0 and u["spill_loads"] == 0, f"{name} spills: {u}"
        assert 0 < u["registers"] <= 255
        assert u.get("smem", 0) <= STATIC_SHARED_LIMIT, f"{name}: static shared memory {u['smem']} B"
    try:  # keep the figures for the report; a read-only checkout just skips the file
        data = json.loads(RESOURCES.read_text()) if RESOURCES.exists() else {}
        data.update(usage)
        RESOURCES.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    except OSError:
        pass


def test_every_kernel_is_compiled():
    """Every extern "C" kernel in the sources is listed, and the launchers' parser reads each."""
    text = "\n".join((KERNEL_DIR / cu).read_text() for cu in CU_FILES)
    found = set(re.findall(r'extern "C" __global__ void\s+(?:__cluster_dims__\([^)]*\)\s+)?'
                           r'(?:__launch_bounds__\(\d+(?:,\s*\d+)?\)\s+)?(\w+)\(', text))
    assert len(found) == text.count('extern "C" __global__') and found == set(KERNEL_NAMES)
    assert set(parse_signatures(text)) == found


def test_nvcc_and_nvrtc_options_agree():
    """NVCC_OPTIONS = NVRTC_OPTIONS + what CuPy adds, spelled for nvcc (nothing else)."""
    spelled = []
    for o in NVRTC_OPTIONS:
        spelled += ["-I", o[2:]] if o.startswith("-I") else [o]
    extra = [o for o in CUPY_NVRTC_EXTRA if o != "--device-as-default-execution-space"]
    assert list(NVCC_OPTIONS) == spelled + extra
    assert not any(o.startswith("-arch") for o in NVRTC_OPTIONS)  # CuPy adds -arch for the device


def test_module_source_compiles_with_nvcc(tmp_path):
    src = tmp_path / "csa_module.cu"  # no csa_common.cuh beside it: -I must find it
    src.write_text(module_source())
    usage = ptxas_usage("module", tmp_path, src)
    assert set(usage) == set(KERNEL_NAMES)
    assert all(u["spill_stores"] == 0 and u["spill_loads"] == 0 for u in usage.values()), usage


def test_module_source_compiles_with_nvrtc_and_cupys_options():
    """With only the pip NVRTC wheel too (kernels/nvrtc.py preloads libnvrtc-builtins, as CuPy's loader does)."""
    import ctypes

    from csa_plan.kernels.nvrtc import NvrtcUnavailable, load_nvrtc

    try:
        lib, path = load_nvrtc()
    except NvrtcUnavailable as exc:
        pytest.skip(str(exc))
    prog = ctypes.c_void_p()
    src = module_source().encode()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"csa_module.cu", 0, None, None) == 0
    opts = [o.encode() for o in NVRTC_OPTIONS + CUPY_NVRTC_EXTRA]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    assert rc == 0, f"{path}: " + log.value.decode(errors="replace")
    cubin = ctypes.c_size_t()
    assert lib.nvrtcGetCUBINSize(prog, ctypes.byref(cubin)) == 0 and cubin.value > 0
    for name in KERNEL_NAMES:  # extern "C": the symbol names get_function looks up
        assert name.encode() in _cubin(lib, prog, cubin.value)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))


def test_nvrtc_loader_names_a_missing_builtins_library(tmp_path, monkeypatch):
    from csa_plan.kernels import nvrtc

    lone = tmp_path / "libnvrtc.so.13"
    lone.write_bytes(b"")  # never loaded: the builtins check comes first
    monkeypatch.setenv("CSA_PLAN_NVRTC", str(lone))
    monkeypatch.setattr(nvrtc, "_pathfinder_candidate", lambda: [])
    with pytest.raises(nvrtc.NvrtcUnavailable, match=r"libnvrtc-builtins\.so\.\* is not beside .*libnvrtc\.so\.13"):
        nvrtc.load_nvrtc()


def _cubin(lib, prog, n: int) -> bytes:
    import ctypes

    buf = ctypes.create_string_buffer(n)
    assert lib.nvrtcGetCUBIN(prog, buf) == 0
    return buf.raw
