"""The measured step-time source (``--step-time measured``): aiconfigurator-core's per-operator
kernel data (NVIDIA, measured on real GPUs), through its compiled per-step estimator.

Imported only when a replay asks for it; without the ``[perf]`` extra it is bad input naming
the extra. The compiled loops take one linear form (``steptime.py``), so the estimator is
sampled once per deployment over decode batches (1..1024 requests at 1K..64K of context) and
prefill chunks (256..16K tokens), and the eight coefficients are fitted to the samples by
non-negative least squares on relative error; the fit's error against the direct calls is
measured there and stated in the band. Where aiconfigurator lacks the exact case (its data are
vLLM 0.24 / SGLang 0.5.14; V4-Flash's MXFP4 experts have no H200 data), the nearest case is
used (the FP8 checkpoint) and the provenance says which.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from csa_plan.planner.errors import BadInput
from csa_plan.planner.steptime.model import StepSource, StepTime
from csa_plan.planner.text import excerpt

EXTRA = "pip install 'csa-plan[perf]' (aiconfigurator-core)"
SYSTEMS = {"h100": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "a100-80gb": "a100_sxm",
           "a100-40gb": "a100_sxm", "l40s": "l40s", "rtx-pro-6000": "rtx_pro_6000_server"}
# csa-plan's model -> aiconfigurator's model paths, nearest first
MODELS = {"deepseek-v4-flash": ("deepseek-ai/DeepSeek-V4-Flash", "sgl-project/DeepSeek-V4-Flash-FP8"),
          "deepseek-v4-pro": ("deepseek-ai/DeepSeek-V4-Pro",)}
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
DECODE_CONTEXTS = (1024, 8192, 65536)
PREFILL_TOKENS = (256, 1024, 4096, 8192, 16384)


SHAPE_KEYS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "head_dim", "moe_intermediate_size",
              "n_routed_experts", "num_experts_per_tok", "n_shared_experts", "q_lora_rank", "o_lora_rank",
              "index_n_heads", "index_head_dim", "sliding_window", "vocab_size", "num_nextn_predict_layers")


def check_same_model(name: str, config: Mapping[str, Any]) -> None:
    """The measured data is chosen by the model's name: the model must be that preset's shape, key for key
    (an 8-layer config in a folder named deepseek-v4-flash was timed as the 43-layer preset)."""
    import json
    from pathlib import Path

    if name not in MODELS:
        return
    preset = json.loads((Path(__file__).resolve().parents[1] / "presets" / f"{name}.json").read_text(encoding="utf-8"))
    for key in SHAPE_KEYS:
        if key in preset and config.get(key) != preset[key]:
            raise BadInput("options", "--step-time", f"measured: the kernel data is {name}'s ({key} {preset[key]!r}); "
                                                     f"this model, named {name}, has {key} {excerpt(config.get(key))}: "
                                                     "use --step-time physics (it reads the model's own shape)")


def _compile(model: str, system: str, backend: str, tp: int, ep: int) -> tuple[Any, str]:
    try:
        from aiconfigurator_core.sdk.engine import EngineHandle
    except ImportError:
        raise BadInput("options", "--step-time", f"measured needs aiconfigurator-core: {EXTRA}") from None
    last = ""
    for path in MODELS.get(model, ()):
        try:
            h = EngineHandle.compile(path, system, backend, tp_size=tp, moe_tp_size=1, moe_ep_size=ep)
            h.decode_step_latency(1, 1024, 2)  # data holes raise here, not at compile
            return h, path
        except Exception as exc:  # aiconfigurator's PerfDataNotAvailableError and friends: try the next case
            last = f"{type(exc).__name__}: {str(exc)[:120]}"
    raise BadInput("options", "--step-time", f"aiconfigurator-core has no data for {model} on {system} "
                                             f"({backend}, tp {tp}){'; ' + last if last else ''}: use --step-time physics")


def _features(q: float) -> tuple[list[list[float]], list[tuple[str, int, int]]]:
    """The samples' batch features (columns of the linear form) and what each sample asks the estimator."""
    rows, asks = [], []
    for d in DECODE_BATCHES:
        for ctx in DECODE_CONTEXTS:
            rows.append([1.0, float(d), 0.0, 0.0, float(d), float(d * ctx), 1.0 - math.exp(q * d)])
            asks.append(("decode", d, ctx))
    for p in PREFILL_TOKENS:
        rows.append([1.0, float(p), float(p), float(p * (p + 1) // 2), 0.0, 0.0, 1.0 - math.exp(q * p)])
        asks.append(("prefill", p, 0))
    return rows, asks


def measured_step_time(spec: Any, config: Mapping[str, Any], card_name: str, tp: int, placement: Any,
                       engine: str, engine_label: str) -> StepTime:
    import numpy as np

    check_same_model(spec.name, config)
    system = SYSTEMS.get(card_name)
    if system is None:
        raise BadInput("options", "--step-time", f"aiconfigurator-core has no system for {card_name!r} "
                                                 f"(known: {', '.join(SYSTEMS)}): use --step-time physics")
    experts, k = int(config.get("n_routed_experts") or 0), int(config.get("num_experts_per_tok") or 0)
    q = math.log1p(-k / experts) if 0 < k < experts else -1e300
    ep = placement.ep or tp
    h, path = _compile(spec.name, system, engine, tp, ep)
    rows, asks = _features(q)
    y = np.array([_ask(h, kind, n, ctx) for kind, n, ctx in asks], dtype=np.float64)
    a = np.array(rows, dtype=np.float64)
    from csa_plan.planner.steptime.nnls import nnls

    c = nnls(a / y[:, None], np.ones(len(y)))
    pred = a @ c
    rel = np.abs(pred / y - 1)
    band = (f"the linear form fitted to {len(y)} direct estimator calls: median |error| {np.median(rel):.0%}, "
            f"max {rel.max():.0%}; aiconfigurator-core's own error against published rows not calibrated here")
    sub = "" if path == MODELS[spec.name][0] else f" (nearest case: {path})"
    provenance = (f"aiconfigurator-core kernel data, {system}, {engine} backend data, tp {tp} ep {ep}, "
                  f"model {path}{sub}; replaying {engine_label}")
    return StepTime(20.0, 10_000.0, linear=(*map(float, c), q), source=StepSource.MEASURED, provenance=provenance,
                    band=band)


def _ask(h: Any, kind: str, n: int, ctx: int) -> float:
    """One direct estimator call, in seconds (its ``osl`` places the decode context mid-generation)."""
    if kind == "decode":
        return float(h.decode_step_latency(n, ctx, 2)) / 1e3
    return float(h.mixed_step_latency(n, 0, n, 1, 0)) / 1e3
