"""Suite-wide setup: the Hypothesis profile, the ``csa`` fixture (the real CLI, in-process) and the
two bundled models (``pro``, ``flash``, loaded once per test module)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

from helpers import Result

# Registered once: no deadlines (CI machines have 2 cores and share them).
settings.register_profile("csa-plan", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("csa-plan")


# Files whose tests run whole processes for seconds each: the CUDA emulator, nvcc and the SASS tools,
# pip installs. They carry the ``slow`` marker; ``-m "not fuzz and not slow"`` is the quick local
# subset (README, "Install and the two commands"); CI runs everything.
SLOW_FILES = {
    "tests/test_install.py",
    *(f"tests/kernels/{name}.py" for name in (
        "test_attn_tc", "test_bench_kernels", "test_cupy_backend_fake", "test_emulated_kernels", "test_emulator_tc",
        "test_gpu_check", "test_index_tc", "test_kernel_hazards", "test_nvcc_compile", "test_run_gpu", "test_sass",
        "test_topk_mb")),
}


# Single tests of more than ~10 s on the 2-core machine (pytest --durations), in files that are otherwise quick.
SLOW_TESTS = {
    "test_recorded_counts_are_the_current_sass", "test_sliced_run_equals_the_ledger_replay_and_the_reference_series",
    "test_ray_and_local_executors_return_identical_results", "test_fast_path_equals_ledger_replay",
    "test_a_checkpoint_directory_is_measured_and_the_gap_is_shown",
    "test_azure_trace_v4_pro_tp8_h200_matches_ledger_replay",
    "test_an_inventory_past_its_layer_limit_is_bad_input_and_weights_replace_it",
}


def pytest_collection_modifyitems(items):
    """Everything under tests/fuzz/ carries the ``fuzz`` marker (``-m 'not fuzz'`` skips it); the files
    in SLOW_FILES and the tests in SLOW_TESTS carry ``slow``."""
    for item in items:
        path = str(item.path).replace("\\", "/")
        if "/tests/fuzz/" in path:
            item.add_marker(pytest.mark.fuzz)
        if any(path.endswith("/" + name) for name in SLOW_FILES) or item.originalname in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def csa(capsys):
    """Run ``csa-plan ARGS`` through ``main`` (exit code, stdout, stderr)."""
    from csa_plan.cli.main import main

    def run(*args: str) -> Result:
        capsys.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture(scope="module")
def pro():
    from csa_plan.planner.loaders.model_files import load_model

    return load_model("deepseek-v4-pro")


@pytest.fixture(scope="module")
def flash():
    from csa_plan.planner.loaders.model_files import load_model

    return load_model("deepseek-v4-flash")
