"""One size parser for every option: bytes, decimal and binary units, GPU names."""

from __future__ import annotations

import pytest

from csa_plan.planner.errors import BadInput
from csa_plan.planner.memory import GPU_MEMORY_MIB, device_budget, parse_size


@pytest.mark.parametrize("text,value", [
    ("123B", 123),
    ("2000000", 2_000_000),
    ("141GB", 141 * 10**9),
    ("80GiB", 80 * 2**30),
    ("1.5TB", 1_500_000_000_000),
    ("0.5GiB", 2**29),
    ("512 MiB", 512 * 2**20),
    ("h200", 143771 * 2**20),
    ("H100", 81559 * 2**20),
    ("a100-80gb", 81920 * 2**20),
])
def test_parse_size(text, value):
    assert parse_size(text, "--device-memory") == value


@pytest.mark.parametrize("text", ["", "GB", "12XB", "-5GB", "1.5", "1e9", "10 GB GB", str(1 << 63), "123", "141"])
def test_parse_size_rejects(text):
    with pytest.raises(BadInput) as err:
        parse_size(text, "--device-memory")
    assert "--device-memory" in str(err.value)


def test_budget_never_becomes_unlimited():
    with pytest.raises(BadInput, match="at or above"):
        device_budget(1000, 1000)
    assert device_budget(None, 0) is None
    assert device_budget(1000, 1).limit_bytes == 999


def test_every_gpu_name_parses():
    for name in GPU_MEMORY_MIB:
        assert parse_size(name, "x") % (1 << 20) == 0
