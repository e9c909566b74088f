"""Every shipped example describes a deployment that can run (issue 36 item 3).

Before, ``examples/sweeps/small.yaml`` (``reserved: 136GiB``) and ``engines.yaml`` (``reserved:
110GiB``, tp 1) answered "DeepSeek-V4-Pro on one H200": a sweep's ``reserved`` stood in for the
805 GiB of weights, where ``--reserved`` and a mix's ``memory.reserved`` mean the engine's start-up
reserves on top of them. Now ``reserved`` means that everywhere, and these tests hold every shipped
sweep point that runs to the model's own weights per device, and every shipped mix to a budget whose
weights fit.
"""

from __future__ import annotations

import pytest
import yaml

from csa_plan.planner.budget.deployment import Deployment, card_settings, deployment_budget
from csa_plan.planner.loaders.model_files import load_model
from csa_plan.planner.sweep.evaluate import triage
from csa_plan.planner.sweep.spec import load_spec
from csa_plan.planner.workloads.mix import parse_mix
from helpers import EXAMPLES

SWEEPS = sorted((EXAMPLES / "sweeps").glob("*.yaml"))
MIXES = sorted((EXAMPLES / "mixes").glob("*.yaml"))


def _own_weights_per_device(model: str, memory: int, tp: int, pp: int, dp: int, max_seq_len: int | None,
                            engine: str | None) -> int:
    """The model's weights on its fullest device by the tensor inventory (what ``check`` counts)."""
    length = max_seq_len or max(d.max_seq_len for d in load_model(model).layers)
    b = deployment_budget(model, memory, Deployment(tp=tp, pp=pp, dp=dp), length, engine,
                          card_settings(None, memory), search=False)
    return max(s.weights_bytes for s in b.stages)


def test_the_examples_are_found():
    assert {p.name for p in SWEEPS} >= {"small.yaml", "engines.yaml", "azure-200.yaml", "gpus-for-trace.yaml"}
    assert len(MIXES) >= 5


@pytest.mark.parametrize("path", SWEEPS, ids=[p.name for p in SWEEPS])
def test_every_point_a_shipped_sweep_runs_counts_the_models_weights(path):
    plan = triage(load_spec(str(path)))
    assert plan.to_run, f"{path.name}: no point runs"
    for p in plan.to_run:
        own = _own_weights_per_device(p.model, p.memory_bytes, p.tp, p.pp, p.dp, p.max_seq_len, p.engine)
        assert p.reserved_bytes >= own > 0, (path.name, p.key, p.reserved_bytes, own)
        assert 0 < p.limit_bytes <= p.memory_bytes - own


def test_a_plain_reserved_in_a_sweep_is_what_reserved_means_on_the_command_line(tmp_path):
    """``reserved: 31GiB`` sets aside the weights and 31 GiB, exactly as ``simulate --reserved 31GiB``."""
    from csa_plan.planner.memory import parse_size

    (tmp_path / "t.csv").write_text((EXAMPLES / "traces" / "azure_conv_sample_200.csv").read_text())
    spec = tmp_path / "s.yaml"
    spec.write_text("workload: t.csv\ngrid: {model: deepseek-v4-pro, device: h200, tp: 8, reserved: 31GiB}\n")
    (point,) = load_spec(str(spec)).points
    h200 = parse_size("h200", "test", "device")
    b = deployment_budget("deepseek-v4-pro", h200, Deployment(tp=8, reserved_bytes=31 << 30), 1 << 20, None,
                          card_settings(None, h200), search=False)
    assert point.limit_bytes == b.kv_memory_bytes
    assert point.reserved_bytes == h200 - b.kv_memory_bytes > (31 << 30) + 100 * 10**9  # weights + 31 GiB


@pytest.mark.parametrize("path", MIXES, ids=[p.name for p in MIXES])
def test_every_shipped_mix_counts_the_weights_and_they_fit(path):
    *_, settings = parse_mix(yaml.safe_load(path.read_text()), str(path))
    assert settings.weights_bytes is None, f"{path.name}: memory.weights replaces the model's own weights"
    assert settings.device_memory_bytes is not None and settings.model is not None
    length = settings.max_seq_len or max(d.max_seq_len for d in load_model(settings.model).layers)
    d = Deployment(tp=settings.tp, pp=settings.pp, dp=settings.dp, ep=settings.ep,
                   reserved_bytes=settings.reserved_bytes)
    b = deployment_budget(settings.model, settings.device_memory_bytes, d, length, None,
                          card_settings(None, settings.device_memory_bytes), search=False)
    assert b is not None and b.fits, path.name
