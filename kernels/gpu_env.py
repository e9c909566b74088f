"""Is there a usable GPU? One line saying why not (run-gpu exits 5 with it).

Usable means CuPy sees a device and will find the CUDA runtime headers at its first
compile (kernels/cuda_headers.py): CuPy 14 refuses to compile without them, so a machine
with a GPU but no headers where CuPy looks is told so, with the fix, before anything runs.
"""

from __future__ import annotations

CUDA_ERROR_INSUFFICIENT_DRIVER = 35
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_INITIALIZATION = 3

NO_CUPY = ("no usable GPU: CuPy not installed (pip install 'csa-plan[gpu-cuda13]', or [gpu-cuda12] on CUDA 12), "
           "or use --backend emulate")
NO_DRIVER = "no usable GPU: no NVIDIA driver (libcuda could not be loaded or initialized)"
OLD_DRIVER = "no usable GPU: NVIDIA driver too old for this CUDA runtime (cudaErrorInsufficientDriver)"
NO_DEVICE = "no usable GPU: no CUDA device visible (check CUDA_VISIBLE_DEVICES)"


def classify_cuda_error(status: int | None, message: str, driver_version: int | None = None) -> str:
    """Map a CUDA runtime failure to one of the fixed one-line reasons.

    The CUDA runtime reports cudaErrorInsufficientDriver (35) both for an old driver and
    for no driver at all (libcuda missing: cudaDriverGetVersion then gives 0), so a
    driver version of 0 means no driver whatever the status says.
    """
    text = message or ""
    if driver_version == 0:
        return NO_DRIVER
    if status == CUDA_ERROR_INSUFFICIENT_DRIVER or "InsufficientDriver" in text:
        return OLD_DRIVER
    if status == CUDA_ERROR_NO_DEVICE or "NoDevice" in text:
        return NO_DEVICE
    return NO_DRIVER


def gpu_unavailable_reason() -> str | None:
    """None when CuPy sees at least one device; otherwise the one-line reason."""
    try:
        import cupy
    except ImportError:
        return NO_CUPY
    except Exception as exc:  # a broken CuPy install (for example a missing libcuda at import)
        return classify_cuda_error(getattr(exc, "status", None), str(exc))
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError, or OSError/ImportError from loading the driver
        return classify_cuda_error(getattr(exc, "status", None), f"{type(exc).__name__}: {exc}",
                                   _driver_version(cupy))
    if count < 1:
        return NO_DEVICE
    from csa_plan.kernels.cuda_headers import missing_reason

    return missing_reason()


def _driver_version(cupy) -> int | None:
    """cudaDriverGetVersion: 0 when no driver is installed; None when it cannot be asked."""
    try:
        return int(cupy.cuda.runtime.driverGetVersion())
    except Exception:
        return None
