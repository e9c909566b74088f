"""A small stand-in for the part of CuPy that CupyBackend, run_checks and run-gpu use.

Only these names exist (anything else the GPU path touches fails with AttributeError,
which is the point): ``ndarray`` (basic indexing, ``view``, ``reshape``), ``zeros``, ``asarray``, ``float32``, ``uint8``, ``uint32``,
``int32``, ``RawModule`` (and its ``get_function`` kernels), ``get_default_memory_pool``
(``used_bytes``, ``total_bytes``, ``free_all_blocks``), ``cuda.Event``,
``cuda.get_elapsed_time``, ``cuda.Device``, ``cuda.Stream`` (as a context, and graph capture:
``begin_capture``/``end_capture`` record the RawKernel launches into a graph that ``launch``
replays) and ``cuda.runtime`` (``getDeviceCount``,
``memGetInfo``, ``deviceSynchronize``, ``getDeviceProperties``, ``driverGetVersion``,
``runtimeGetVersion``). Their names and call shapes follow CuPy 14.2 (checked against an
installed CuPy by ``test_fake_names_exist_in_real_cupy`` when CuPy is importable).

Arrays are numpy buffers behind a wrapper that behaves like cupy.ndarray where it
matters: no implicit conversion to numpy (``__array__`` raises, like CuPy), setting a
slice from a host numpy array raises (CuPy does too), ``.get()`` copies to the host,
``.data.ptr`` is the address. Every allocation is charged to a pool model that rounds
to 512 bytes, counts live blocks in ``used_bytes`` and keeps freed blocks in
``total_bytes`` until ``free_all_blocks`` (CuPy's MemoryPool semantics, as a model).

Kernels are launched through the CPU emulator (the same .cu text under cuda_emu.h)
— or, with ``FAKE_CUPY_KERNELS=skip`` in the environment, checked and recorded but not
run (to measure the host side of a long run-gpu: the checks then fail, exit 4, since no
kernel wrote anything) —
after checking every argument the way cupy.RawKernel would need it: an array of the
pointee dtype, C-contiguous (CuPy passes the base pointer of any array), or a NumPy
scalar of the exact C type (a Python int would be passed as 8 bytes by CuPy); grid and
block tuples, the block within __launch_bounds__, dynamic shared memory only for the kernels
that declare it (backends.DYNAMIC_SHARED) and above 48 KB only after the kernel's
``max_dynamic_shared_size_bytes`` was raised to cover it (CuPy's RawKernel attribute). The
signatures are parsed from the code string handed to RawModule, not from the launcher.

Compiling needs the CUDA runtime headers, as in CuPy 14.2: the first ``get_function`` looks
for ``cuda_runtime.h`` the way cuda.pathfinder's ``find_nvidia_header_directory("cudart")``
does (NVIDIA wheels in site-packages, ``$CONDA_PREFIX``, ``$CUDA_PATH``, ``$CUDA_HOME``, never
/usr/local/cuda by itself) and raises CuPy's RuntimeError "Failed to find CUDA headers" when
none has it (``cuda_include_dir``; tests/kernels/conftest.py points CUDA_PATH at a folder with
the header for the tests that compile).
"""

from __future__ import annotations

import os
import time
import types
import weakref

import numpy as np

from csa_plan.kernels.backends import DYNAMIC_SHARED, emulator_library, parse_signatures, run_emulated

__version__ = "14.2.0"  # the CuPy this fake models
ROUND = 512
CAPACITY = 141 * 10**9
float32, uint8, int32, uint32 = np.float32, np.uint8, np.int32, np.uint32


class _Pool:
    def __init__(self) -> None:
        self.used = 0
        self.reserved = 0
        self.allocations = 0

    def used_bytes(self) -> int:
        return self.used

    def total_bytes(self) -> int:
        return self.reserved

    def free_all_blocks(self, stream=None) -> None:
        self.reserved = self.used

    def _malloc(self, nbytes: int) -> "_Block":
        size = -(-nbytes // ROUND) * ROUND
        self.used += size
        self.reserved = max(self.reserved, self.used)
        self.allocations += 1
        return _Block(self, size)


class _Block:
    def __init__(self, pool: _Pool, size: int) -> None:
        self.size = size
        weakref.finalize(self, _release, pool, size)  # freed when the last view goes


def _release(pool: _Pool, size: int) -> None:
    pool.used -= size


POOL = _Pool()


class ndarray:  # noqa: N801 - the CuPy name
    __slots__ = ("_a", "_block", "__weakref__")

    def __init__(self, a: np.ndarray, block: _Block) -> None:
        self._a, self._block = a, block

    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    ndim = property(lambda self: self._a.ndim)
    flags = property(lambda self: self._a.flags)
    data = property(lambda self: types.SimpleNamespace(ptr=self._a.__array_interface__["data"][0]))

    def __len__(self) -> int:
        return len(self._a)

    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. "
                        "Please use `.get()` to construct a NumPy array explicitly.")

    def __getitem__(self, key):
        if isinstance(key, ndarray) or (isinstance(key, tuple) and any(isinstance(k, ndarray) for k in key)):
            raise NotImplementedError("fake cupy: advanced indexing not modelled")
        v = self._a[key]
        if not isinstance(v, np.ndarray) or not np.shares_memory(v, self._a):
            raise NotImplementedError("fake cupy: only basic (view) indexing is modelled")
        return ndarray(v, self._block)

    def __setitem__(self, key, value) -> None:
        if isinstance(value, np.ndarray) and value.ndim > 0:
            raise TypeError(f"Unsupported type {type(value)}")  # what CuPy says for a host array
        self._a[key] = value._a if isinstance(value, ndarray) else value

    def view(self, dtype) -> "ndarray":
        return ndarray(self._a.view(dtype), self._block)

    def reshape(self, *shape) -> "ndarray":
        v = self._a.reshape(*shape)
        if not np.shares_memory(v, self._a):
            raise NotImplementedError("fake cupy: only a reshape that is a view is modelled")
        return ndarray(v, self._block)

    def copy(self) -> "ndarray":
        return _new(self._a.copy())

    def get(self) -> np.ndarray:
        return self._a.copy()


def _new(a: np.ndarray) -> ndarray:
    a = np.ascontiguousarray(a)
    return ndarray(a, POOL._malloc(a.nbytes))


def zeros(shape, dtype=float, order="C") -> ndarray:
    return _new(np.zeros(shape, dtype=dtype))


def asarray(a, dtype=None, order=None) -> ndarray:
    if isinstance(a, ndarray):
        return a if dtype is None or np.dtype(dtype) == a.dtype else _new(a._a.astype(dtype))
    return _new(np.array(a, dtype=dtype, copy=True))


def get_default_memory_pool() -> _Pool:
    return POOL


# ------------------------------------------------------------------------------- kernels

_SCALAR = {"i": np.int32, "l": np.int64, "f": np.float32}


class _RawKernel:
    def __init__(self, module: "RawModule", sig) -> None:
        self.module, self.sig = module, sig
        self.max_dynamic_shared_size_bytes = 0  # CUDA's default opt-in: none beyond 48 KB

    def __call__(self, grid, block, args, *, shared_mem=0) -> None:
        name = self.sig.name
        for what, t in (("grid", grid), ("block", block)):
            if not (isinstance(t, tuple) and 1 <= len(t) <= 3 and all(type(x) is int and x >= 1 for x in t)):
                raise TypeError(f"{name}: {what} must be a tuple of up to three positive Python ints, got {t!r}")
        if not isinstance(args, tuple):
            raise TypeError(f"{name}: args must be a tuple")
        if len(args) != len(self.sig.params):
            raise TypeError(f"{name}: {len(self.sig.params)} parameters, {len(args)} arguments")
        if shared_mem != 0 and name not in DYNAMIC_SHARED:
            raise ValueError(f"{name}: this kernel uses no dynamic shared memory, got shared_mem={shared_mem}")
        if shared_mem > max(48 * 1024, self.max_dynamic_shared_size_bytes) or shared_mem > 227 * 1024:
            raise ValueError(f"{name}: shared_mem={shared_mem} above the opted-in "
                             f"max_dynamic_shared_size_bytes={self.max_dynamic_shared_size_bytes}")
        threads = int(np.prod(block))
        if threads > self.sig.launch_bounds or block[1:] not in ((), (1,), (1, 1)):
            raise ValueError(f"{name}: block {block} vs __launch_bounds__({self.sig.launch_bounds})")
        conv = []
        for (cname, kind, dtype), v in zip(self.sig.params, args):
            if kind == "p":
                if type(v) is np.uint64 and v == 0:
                    conv.append(None)
                    continue
                if not isinstance(v, ndarray):
                    raise TypeError(f"{name}({cname}): pointer argument must be a device array, got {type(v)}")
                if v.dtype != dtype or not v.flags.c_contiguous:
                    raise TypeError(f"{name}({cname}): needs a C-contiguous {dtype} array, got {v.dtype}")
                conv.append(v._a.ctypes.data)
            else:
                if type(v) is not _SCALAR[kind]:
                    raise TypeError(f"{name}({cname}): needs {_SCALAR[kind].__name__}, got {type(v).__name__}")
                conv.append(v.item())
        g = tuple(grid) + (1,) * (3 - len(grid))
        if any(x % c for x, c in zip(g, self.sig.cluster)):
            raise ValueError(f"{name}: grid {g} is not a whole number of its {self.sig.cluster} clusters")

        def launch():
            self.module.launches.append((name, g, threads, tuple(type(v).__name__ for v in args)))
            if os.environ.get("FAKE_CUPY_KERNELS") == "skip":
                return
            rc = run_emulated(emulator_library(), name, g, threads, conv, shared_mem)
            if rc != 0:
                raise RuntimeError(f"{name}: {emulator_library().csa_emu_last_error().decode()}")

        if _CAPTURING:  # recorded into the stream's graph, run when the graph is launched
            _CAPTURING[-1].append(launch)
            return
        launch()


def cuda_include_dir() -> str | None:
    """CuPy 14.2's header folder (core.pyx: find_nvidia_header_directory("cudart")), modelled."""
    import site
    import sys

    def has(d):
        return bool(d) and os.path.isfile(os.path.join(d, "cuda_runtime.h"))

    sites = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    sites += [p for p in sys.path if p.endswith("site-packages")]
    for sp in dict.fromkeys(sites):
        for sub in ("nvidia/cu13/include", "nvidia/cuda_runtime/include"):
            if has(os.path.join(sp, sub)):
                return os.path.join(sp, sub)
    if os.environ.get("CONDA_PREFIX") and has(os.path.join(os.environ["CONDA_PREFIX"], "include")):
        return os.path.join(os.environ["CONDA_PREFIX"], "include")
    for var in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(var) and has(os.path.join(os.environ[var], "include")):
            return os.path.join(os.environ[var], "include")
    return None


class RawModule:
    instances: list["RawModule"] = []
    compiles = 0  # modules compiled in this process (the first get_function of each)

    def __init__(self, code=None, *, path=None, options=(), backend="nvrtc", translate_cucomplex=False,
                 enable_cooperative_groups=False, name_expressions=None, jitify=None) -> None:
        if not isinstance(code, str) or path is not None:
            raise TypeError("fake cupy: RawModule(code=str) only")
        if not isinstance(options, tuple) or not all(isinstance(o, str) for o in options):
            raise TypeError("options must be a tuple of str")  # CuPy's signature: tuple options
        if any(o.startswith(("-arch", "--gpu-architecture")) for o in options):
            raise ValueError("CuPy adds -arch itself")
        if backend not in ("nvrtc", "nvcc"):
            raise ValueError(backend)
        self.code, self.options, self.backend = code, options, backend
        self.signatures = parse_signatures(code)
        self.launches: list[tuple] = []
        self.compiled = False
        RawModule.instances.append(self)

    def get_function(self, name: str) -> _RawKernel:
        if not self.compiled:  # CuPy compiles lazily, at the first function asked for
            if cuda_include_dir() is None:
                raise RuntimeError("Failed to find CUDA headers. Please install CUDA toolkit headers "
                                   "(e.g., pip install cupy-cuda13x[ctk]) or specify CUDA_PATH environment variable.")
            self.compiled = True
            RawModule.compiles += 1
        if name not in self.signatures:
            raise RuntimeError(f"CUDA_ERROR_NOT_FOUND: named symbol not found: {name}")
        return _RawKernel(self, self.signatures[name])


# ------------------------------------------------------------------------------- cuda


_CAPTURING: list[list] = []  # the launch lists of the streams capturing now (innermost last)


class _Graph:
    def __init__(self, launches: list) -> None:
        self.launches = launches

    def launch(self, stream=None) -> None:
        for fn in self.launches:
            fn()


class _Stream:
    """cupy.cuda.Stream as far as the probe's timer uses it: a context manager and graph capture
    (RawKernel launches inside begin_capture/end_capture are recorded, not run)."""

    def __init__(self, null=False, non_blocking=False, ptds=False, priority=None) -> None:
        self.captured: list | None = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def begin_capture(self, mode=None) -> None:
        if self.captured is not None:
            raise RuntimeError("cudaErrorIllegalState: the stream is already capturing")
        self.captured = []
        _CAPTURING.append(self.captured)

    def end_capture(self) -> _Graph:
        if self.captured is None:
            raise RuntimeError("cudaErrorIllegalState: the stream is not capturing")
        _CAPTURING.remove(self.captured)
        g, self.captured = _Graph(self.captured), None
        return g

    def is_capturing(self) -> bool:
        return self.captured is not None

    def synchronize(self) -> None:
        pass


class _Event:
    def __init__(self, block=False, disable_timing=False, interprocess=False) -> None:
        self.t = None
        self.disable_timing = disable_timing

    def record(self, stream=None) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        if self.t is None:
            raise RuntimeError("event not recorded")


def _get_elapsed_time(start: _Event, end: _Event) -> float:
    if start.t is None or end.t is None or start.disable_timing or end.disable_timing:
        raise RuntimeError("cudaErrorInvalidResourceHandle")
    return (end.t - start.t) * 1e3


class _Device:
    def __init__(self, device=None) -> None:
        self.id = 0 if device is None else int(device)


def _mem_get_info() -> tuple[int, int]:
    return CAPACITY - POOL.reserved, CAPACITY


runtime = types.SimpleNamespace(
    getDeviceCount=lambda: 1,
    memGetInfo=_mem_get_info,
    deviceSynchronize=lambda: None,
    getDeviceProperties=lambda device: {"name": b"Fake H200 (CPU emulation)", "totalGlobalMem": CAPACITY,
                                           "multiProcessorCount": 132},
    driverGetVersion=lambda: 12090,
    runtimeGetVersion=lambda: 12090,
)
cuda = types.SimpleNamespace(Event=_Event, get_elapsed_time=_get_elapsed_time, Device=_Device, Stream=_Stream,
                             runtime=runtime)

# (module path, attribute) pairs this fake provides, for the check against a real CuPy
PROVIDED = [("cupy", n) for n in ("__version__", "ndarray", "zeros", "asarray", "float32", "uint8", "int32", "uint32", "RawModule",
                                  "get_default_memory_pool")] + \
           [("cupy.cuda", n) for n in ("Event", "get_elapsed_time", "Device", "Stream")] + \
           [("cupy.cuda.runtime", n) for n in vars(runtime)]
