"""Find and load libnvrtc the way a pip-only CUDA install needs it (no toolkit, no LD_LIBRARY_PATH).

libnvrtc opens ``libnvrtc-builtins.so.<major>.<minor>`` by its soname at the first compile.
The pip wheel (``nvidia-cuda-nvrtc``, files under ``site-packages/nvidia/cu13/lib`` or
``nvidia/cuda_nvrtc/lib``) puts it beside libnvrtc, where the dynamic loader does not look,
so a bare ``ctypes.CDLL(libnvrtc)`` fails with "failed to open libnvrtc-builtins.so.13.0"
although CuPy compiles fine (CuPy's loader, cuda-pathfinder, preloads it). ``load_nvrtc``
does the same: it loads the builtins from libnvrtc's own folder first (RTLD_GLOBAL, so the
later dlopen by soname finds the loaded copy), then libnvrtc. Search order: $CSA_PLAN_NVRTC,
cuda-pathfinder's answer when it is installed (the path CuPy itself loads), the CUDA toolkit,
the pip wheels on sys.path.
"""

from __future__ import annotations

import ctypes
import glob
import os
import site
import sys
from pathlib import Path


class NvrtcUnavailable(RuntimeError):
    """No usable libnvrtc: the message says which file is missing and where it was looked for."""


def _pathfinder_candidate() -> list[str]:
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib  # CuPy 14's loader
    except Exception:
        return []
    try:
        return [str(load_nvidia_dynamic_lib("nvrtc").abs_path)]
    except Exception:
        return []


def nvrtc_candidates() -> list[str]:
    cands = [os.environ.get("CSA_PLAN_NVRTC", "")] + _pathfinder_candidate()
    for root in ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"):
        cands += sorted(glob.glob(f"{root}/libnvrtc.so*"))
    dirs = []
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # some virtualenv layouts
        pass
    dirs += [p for p in sys.path if p.endswith("site-packages")]
    for sp in dict.fromkeys(dirs):
        for sub in ("nvidia/cuda_nvrtc/lib", "nvidia/cu13/lib", "nvidia/cu12/lib"):
            cands += sorted(glob.glob(f"{sp}/{sub}/libnvrtc.so*"))
    return [c for c in dict.fromkeys(cands)
            if c and Path(c).is_file() and "builtins" not in Path(c).name and ".alt." not in Path(c).name]


def builtins_beside(lib: str) -> list[str]:
    return [b for b in sorted(glob.glob(str(Path(lib).parent / "libnvrtc-builtins.so*"))) if ".alt." not in b]


def load_nvrtc() -> tuple[ctypes.CDLL, str]:
    """(libnvrtc, its path), with libnvrtc-builtins preloaded from the same folder."""
    cands = nvrtc_candidates()
    if not cands:
        raise NvrtcUnavailable("libnvrtc not found (set CSA_PLAN_NVRTC=/path/to/libnvrtc.so.13, or pip install "
                               "nvidia-cuda-nvrtc)")
    path = cands[0]
    builtins = builtins_beside(path)
    if not builtins:
        raise NvrtcUnavailable(f"libnvrtc-builtins.so.* is not beside {path}: NVRTC would fail at the first compile "
                               f"with 'failed to open libnvrtc-builtins'")
    for b in builtins:
        ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
    return ctypes.CDLL(path), path
