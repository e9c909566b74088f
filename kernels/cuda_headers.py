"""Where CuPy will find the CUDA runtime headers and NVRTC, said before the first compile.

CuPy 14 compiles every RawModule with NVRTC and ``-I`` the folder that holds
``cuda_runtime.h``, which it takes from ``cuda.pathfinder.find_nvidia_header_directory("cudart")``
alone (cupy/_core/core.pyx): NVIDIA wheels in site-packages (``nvidia-cuda-runtime``:
``nvidia/cu13/include``; ``nvidia-cuda-runtime-cu12``: ``nvidia/cuda_runtime/include``), a
conda prefix, then ``CUDA_PATH`` / ``CUDA_HOME``. A toolkit in ``/usr/local/cuda`` is not
looked at unless one of those names it, and the NVRTC wheel ships ``nvrtc.h`` but not
``cuda_runtime.h``; without a hit the first compile raises "Failed to find CUDA headers"
(NVIDIA/cuda-python#1707). CuPy 13 still found a toolkit through ``CUDA_PATH``, ``nvcc``'s
location or ``/usr/local/cuda``.

``lookup()`` answers as the installed CuPy will (pathfinder itself when it is importable);
``missing_reason()`` is the one line run-gpu, the probe and the GPU check exit 5 with, the
fix named. ``python -m csa_plan.kernels.cuda_headers`` prints the lookup as JSON (the GPU
check's facts step) and exits 5 with that line when the headers are not found.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import sys
from dataclasses import asdict, dataclass

RUNTIME_HEADER = "cuda_runtime.h"
# the runtime wheels' include folders, CUDA 13 then CUDA 12 (what pathfinder scans in site-packages)
WHEEL_INCLUDE_DIRS = ("nvidia/cu13/include", "nvidia/cuda_runtime/include")
TOOLKIT_ROOTS = ("/usr/local/cuda",)  # where a system toolkit usually is; CuPy 14 does not look here
FIX = ("pip install 'csa-plan[gpu-cuda13]' (brings the headers wheel nvidia-cuda-runtime; [gpu-cuda12]: "
       "nvidia-cuda-runtime-cu12), or export CUDA_PATH=<a CUDA toolkit root with include/cuda_runtime.h>")


@dataclass(frozen=True)
class HeaderLookup:
    """Where the installed CuPy's compile will take the runtime headers from, and NVRTC."""

    cupy_version: str | None
    rule: str  # "cuda.pathfinder" (CuPy >= 14), "pathfinder order, emulated" or "cupy 13"
    header_dir: str | None  # the folder holding cuda_runtime.h CuPy will pass with -I; None: none
    found_via: str  # site-packages, conda, CUDA_PATH, CUDA_HOME, ... ("" when not found)
    toolkit_roots: tuple[str, ...]  # roots with include/cuda_runtime.h that CUDA_PATH could name
    nvrtc: str | None  # the libnvrtc CuPy loads (pathfinder), else the one kernels/nvrtc.py would
    error: str = ""  # what pathfinder raised, if it did

    def as_dict(self) -> dict:
        return asdict(self)


def _has_header(folder: str | None) -> bool:
    return bool(folder) and os.path.isfile(os.path.join(folder, RUNTIME_HEADER))


def _site_dirs() -> list[str]:
    dirs: list[str] = []
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # some virtualenv layouts
        pass
    try:
        dirs.append(site.getusersitepackages())
    except AttributeError:
        pass
    dirs += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    return list(dict.fromkeys(dirs))


def toolkit_roots() -> tuple[str, ...]:
    """System toolkits whose headers are there: /usr/local/cuda and nvcc's own root."""
    roots = list(TOOLKIT_ROOTS)
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    return tuple(r for r in dict.fromkeys(roots) if _has_header(os.path.join(r, "include")))


def _pathfinder_order() -> tuple[str | None, str]:
    """pathfinder's search for the cudart headers, without pathfinder: wheels, conda, env."""
    for sp in _site_dirs():
        for sub in WHEEL_INCLUDE_DIRS:
            if _has_header(os.path.join(sp, sub)):
                return os.path.join(sp, sub), "site-packages"
    conda = os.environ.get("CONDA_PREFIX")
    if conda:
        for sub in ("include", "targets/x86_64-linux/include"):
            if _has_header(os.path.join(conda, sub)):
                return os.path.join(conda, sub), "conda"
    for var in ("CUDA_PATH", "CUDA_HOME"):
        root = os.environ.get(var)
        if root and _has_header(os.path.join(root, "include")):
            return os.path.join(root, "include"), var
    return None, ""


def _cupy13_order() -> tuple[str | None, str]:
    """CuPy 13: CUDA_PATH, else nvcc's root, else /usr/local/cuda; then the wheels."""
    root = os.environ.get("CUDA_PATH")
    via = "CUDA_PATH"
    if not root:
        nvcc = shutil.which("nvcc")
        root, via = (os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "nvcc") if nvcc else \
            ("/usr/local/cuda", "/usr/local/cuda")
    if _has_header(os.path.join(root, "include")):
        return os.path.join(root, "include"), via
    found, how = _pathfinder_order()
    return (found, how) if how == "site-packages" else (None, "")


def _nvrtc_path() -> str | None:
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib  # what CuPy 14 loads

        return str(load_nvidia_dynamic_lib("nvrtc").abs_path)
    except Exception:
        pass
    from csa_plan.kernels.nvrtc import nvrtc_candidates

    cands = nvrtc_candidates()
    return cands[0] if cands else None


def _major(version: str | None) -> int | None:
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return None


def lookup(cupy_version: str | None = None) -> HeaderLookup:
    """Answer as the CuPy of that version (default: the installed one) will at its first compile."""
    if cupy_version is None:
        cupy_version = _installed_cupy_version()
    major = _major(cupy_version)
    error = ""
    if major is not None and major < 14:
        rule = "cupy 13"
        folder, via = _cupy13_order()
    else:
        try:
            from cuda import pathfinder

            rule = "cuda.pathfinder"
            if hasattr(pathfinder, "locate_nvidia_header_directory"):
                hit = pathfinder.locate_nvidia_header_directory("cudart")
                folder, via = (hit.abs_path, str(hit.found_via)) if hit and hit.abs_path else (None, "")
            else:
                folder = pathfinder.find_nvidia_header_directory("cudart")
                via = "cuda.pathfinder" if folder else ""
        except ImportError:
            rule = "pathfinder order, emulated"
            folder, via = _pathfinder_order()
        except Exception as exc:  # pathfinder raised: CuPy's compile would too
            rule, folder, via = "cuda.pathfinder", None, ""
            error = f"{type(exc).__name__}: {exc}"[:300]
    if folder and not _has_header(folder):
        folder, via = None, ""
    return HeaderLookup(cupy_version, rule, folder, via, toolkit_roots(), _nvrtc_path(), error)


def _installed_cupy_version() -> str | None:
    mod = sys.modules.get("cupy")
    if mod is not None and getattr(mod, "__version__", None):
        return str(mod.__version__)
    import importlib.metadata as md

    for dist in ("cupy-cuda13x", "cupy-cuda12x", "cupy"):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return None


def missing_reason(found: HeaderLookup | None = None) -> str | None:
    """None when CuPy will find the headers; otherwise the one-line no-GPU reason with the fix."""
    found = found or lookup()
    if found.header_dir:
        return None
    hint = f" (headers found at {', '.join(found.toolkit_roots)}: export CUDA_PATH={found.toolkit_roots[0]})" \
        if found.toolkit_roots else ""
    return (f"no usable GPU: CuPy {found.cupy_version or '?'} cannot compile the kernels: it finds no "
            f"{RUNTIME_HEADER} (it looks in NVIDIA wheels, a conda prefix, CUDA_PATH and CUDA_HOME only){hint}; "
            f"fix: {FIX}")


def is_header_error(exc: BaseException) -> bool:
    """CuPy's compile failing on the header lookup: CuPy 14's "Failed to find CUDA headers", its
    older "auto-detect CUDA", or NVRTC's own "cannot open source file cuda_runtime.h"."""
    text = str(exc)
    return "CUDA headers" in text or "auto-detect CUDA" in text or "cuda_runtime.h" in text


def main() -> int:
    found = lookup()
    print(json.dumps({"cuda_headers": found.as_dict()}, indent=1))
    reason = missing_reason(found)
    if reason:
        print(f"cuda_headers: {reason}", file=sys.stderr)
        return 5
    return 0


if __name__ == "__main__":
    sys.exit(main())
