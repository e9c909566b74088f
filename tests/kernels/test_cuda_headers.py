"""Where CuPy will find the CUDA runtime headers (kernels/cuda_headers.py), and what happens when
it will not: CuPy 14 compiles only with cuda_runtime.h from NVIDIA wheels, a conda prefix or
CUDA_PATH / CUDA_HOME, so without them run-gpu, the probe and the compile step exit 5 with one
line naming the fix (never a traceback), and the test-double CuPy refuses to compile as CuPy does."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from csa_plan.kernels import cuda_headers as H

FAKE = Path(__file__).resolve().with_name("fake_cupy.py")


def _fake():
    spec = importlib.util.spec_from_file_location("fake_cupy", FAKE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def no_headers(monkeypatch, tmp_path):
    """No CUDA_PATH / CUDA_HOME / conda prefix, no headers wheel, no toolkit or nvcc to point at."""
    for var in ("CUDA_PATH", "CUDA_HOME", "CONDA_PREFIX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(H, "TOOLKIT_ROOTS", (str(tmp_path / "no-toolkit"),))
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvcc
    monkeypatch.setattr(H, "_site_dirs", lambda: [str(tmp_path / "site-packages")])
    return tmp_path


def _toolkit(root: Path) -> Path:
    (root / "include").mkdir(parents=True)
    (root / "include" / "cuda_runtime.h").write_text("/* stand-in */\n")
    return root


def test_cupy14_looks_in_wheels_conda_and_cuda_path_not_in_a_bare_toolkit(no_headers, monkeypatch):
    tk = _toolkit(no_headers / "cuda")
    monkeypatch.setattr(H, "TOOLKIT_ROOTS", (str(tk),))
    found = H.lookup("14.2.0")
    if found.rule == "cuda.pathfinder":  # the real pathfinder is installed: it answers, not our model
        pytest.skip("cuda.pathfinder installed: the emulated order is not used")
    assert found.rule == "pathfinder order, emulated" and found.header_dir is None
    assert found.toolkit_roots == (str(tk),)  # the headers are there, CuPy 14 would not look
    reason = H.missing_reason(found)
    assert reason.startswith("no usable GPU: CuPy 14.2.0 cannot compile") and "\n" not in reason
    assert f"export CUDA_PATH={tk}" in reason and "nvidia-cuda-runtime" in reason
    monkeypatch.setenv("CUDA_PATH", str(tk))
    hit = H.lookup("14.2.0")
    assert hit.header_dir == str(tk / "include") and hit.found_via == "CUDA_PATH" and H.missing_reason(hit) is None
    # CuPy 13 found /usr/local/cuda (or nvcc's root) by itself
    monkeypatch.delenv("CUDA_PATH")
    assert H.lookup("13.6.0").rule == "cupy 13"


def test_the_headers_wheel_layout_is_found_first(no_headers, monkeypatch):
    if H.lookup("14.2.0").rule == "cuda.pathfinder":
        pytest.skip("cuda.pathfinder installed: the emulated order is not used")
    for sub in H.WHEEL_INCLUDE_DIRS:  # nvidia-cuda-runtime (CUDA 13), nvidia-cuda-runtime-cu12
        site = no_headers / f"site-{sub.split('/')[1]}"
        (site / sub).mkdir(parents=True)
        (site / sub / "cuda_runtime.h").write_text("")
        monkeypatch.setattr(H, "_site_dirs", lambda site=site: [str(site)])
        monkeypatch.setenv("CUDA_PATH", str(_toolkit(no_headers / f"tk-{sub.split('/')[1]}")))
        found = H.lookup("14.2.0")
        assert found.header_dir == str(site / sub) and found.found_via == "site-packages"


def test_the_test_double_refuses_to_compile_without_headers_as_cupy_does(no_headers, monkeypatch):
    fake = _fake()
    if fake.cuda_include_dir() is not None:
        pytest.skip(f"a headers wheel is installed here: {fake.cuda_include_dir()}")
    mod = fake.RawModule(code='extern "C" __global__ void k(float* x) {}')
    with pytest.raises(RuntimeError, match="Failed to find CUDA headers"):
        mod.get_function("k")
    monkeypatch.setenv("CUDA_PATH", str(_toolkit(no_headers / "cuda")))
    assert mod.get_function("k") is not None and mod.compiled


def test_cupy_backend_turns_the_header_failure_into_exit_5(no_headers, monkeypatch):
    from csa_plan.kernels.backends import CudaHeadersMissing, CupyBackend
    from csa_plan.planner.errors import ExitCode

    fake = _fake()
    monkeypatch.setattr(fake, "cuda_include_dir", lambda: None)  # as CuPy 14 finds nothing
    with pytest.raises(CudaHeadersMissing) as exc:
        CupyBackend(fake)
    assert exc.value.exit_code == ExitCode.NO_GPU
    assert "cuda_runtime.h" in str(exc.value) and "fix:" in str(exc.value) and "\n" not in str(exc.value)


def test_run_gpu_and_the_probe_exit_5_with_the_header_line(no_headers, monkeypatch, csa, capsys):
    fake = _fake()
    monkeypatch.setattr(fake, "cuda_include_dir", lambda: None)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(H, "lookup", lambda cupy_version=None: H.HeaderLookup("14.2.0", "cuda.pathfinder", None, "",
                                                                             (), None))
    r = csa("run-gpu", "--tiny")
    assert r.code == 5 and r.out == ""
    assert r.err.strip().startswith("csa-plan: no usable GPU: CuPy 14.2.0 cannot compile the kernels")
    assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err
    from csa_plan.kernels import gpu_compile, probe

    code, doc = probe.run(["--small"])
    assert code == 5 and doc is None
    assert gpu_compile.main([]) == 5
    err = capsys.readouterr().err
    assert "probe: no usable GPU" in err and "gpu_compile: no usable GPU" in err and "Traceback" not in err


def test_the_lookup_prints_as_json_and_exits_5_without_headers(no_headers, capsys):
    if H.lookup().rule == "cuda.pathfinder":
        pytest.skip("cuda.pathfinder installed")
    assert H.main() == 5
    cap = capsys.readouterr()
    assert '"header_dir": null' in cap.out and "cuda_headers: no usable GPU" in cap.err
