"""The embedded step-time source (``--step-time physics``): a roofline over what the step holds,
plus per-step and per-layer floors, each basis term times a coefficient fitted on published
measurements (``steptime_fit.json``, written by ``tools/fit_steptime.py``; BLIS's method).

The basis terms of one step, in seconds, per rank of a TP-wide replica:

* ``step`` 1 and ``layer`` L (decoder layers): launch and synchronisation floors;
* ``weights``: the non-expert weights (embedding excluded) plus the routed-expert bytes the
  step's T tokens touch (each token picks k of E experts), over the HBM bandwidth;
* ``state``: what each decoding request reads of its state group at its context length
  (every indexer key, the top-k CSA records, every HCA record, the sliding window) over HBM;
* ``flops``: the linears' 2 x active parameters per token over the card's GEMM peak, plus the
  attention and indexer work that grows with each token's position, over the BF16 peak;
* ``prefill_flops``: the linears' work of the prefill tokens again, so a fit can cost a prompt
  token apart from a decoded one (large-batch GEMMs, activations, chunk overheads);
* ``comm``: two TP all-reduces of the hidden state per layer per token over the link.

``StepTime.linear``'s eight coefficients are these terms collected by batch feature, so the
compiled loops evaluate the model without knowing its parts. What is approximated: the
top-k records are read in full from the first token (a short context reads fewer), a draft
token costs what a decoded token costs, and DP attention and EP all-to-all are not modelled
apart from TP (the fit absorbs them for the rows it saw).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from csa_plan.planner.errors import BadInput
from csa_plan.planner.steptime.hardware import CardPerf, card_perf
from csa_plan.planner.steptime.model import StepSource, StepTime

BASIS = ("step", "layer", "weights", "state", "flops", "prefill_flops", "comm")
FIT_FILE = "steptime_fit.json"


@dataclass(frozen=True)
class ModelCost:
    """The model's shapes the basis terms read (per model, whole replica: divide by TP per rank)."""

    layers: int
    dense_bytes: int            # non-expert weights read every step (embedding excluded)
    expert_bytes: int           # every routed expert of every layer
    experts: int                # routed experts per layer (E)
    experts_per_token: int      # k
    token_gemm_flops: float     # 2 x active parameters per token (shared and k routed experts)
    token_attn_flops: float     # attention per token independent of position (top-k records, window)
    position_flops: float       # indexer and HCA attention per token per position of context
    request_read_bytes: float   # a decoding request's fixed state reads (top-k records, window)
    context_read_bytes: float   # a decoding request's state reads per context token
    comm_bytes_per_token: float  # TP all-reduce bytes per token (2 per layer, bf16 hidden)


def _record_bytes(d) -> int:
    """One compressed record as the attention kernel reads it: the latent in FP8 with one scale per
    64 values and the RoPE part in BF16 (fp8 formats), or all BF16."""
    nope = d.head_dim - d.qk_rope_head_dim
    if "fp8" in str(d.cache_format):
        return nope + 2 * d.qk_rope_head_dim + 4 * math.ceil(nope / 64)
    return 2 * d.head_dim


def model_cost(spec: Any, config: Mapping[str, Any], inventory: Any) -> ModelCost:
    """The costs of ``spec``'s main layers with the checkpoint's weights (``inventory``)."""
    from csa_plan.planner.weights.tensors import Role

    mains = [d for d in spec.layers if not d.is_mtp]
    if not mains:
        raise BadInput(spec.source, "layers", "no main layers: nothing to time")
    experts = int(config.get("n_routed_experts") or 0)
    k = int(config.get("num_experts_per_tok") or 0)
    hidden = int(config.get("hidden_size") or 0)
    if experts < 1 or not 1 <= k <= experts or hidden < 1:
        raise BadInput(spec.source, "n_routed_experts", "the physics step time needs n_routed_experts, "
                                                        "num_experts_per_tok and hidden_size (or --step-time fixed)")
    dense = expert = 0
    dense_params = expert_params = 0
    for w in inventory.weights:
        if w.is_mtp or w.role is Role.EMBED:
            continue
        params = math.prod(w.logical) * w.copies
        if w.role in (Role.EXPERT_W13, Role.EXPERT_W2):
            expert += w.nbytes
            expert_params += params
        else:
            dense += w.nbytes
            dense_params += params
    attn = pos = req = ctx = 0.0
    for d in mains:
        qk = d.head_dim  # one latent KV head: scores and values both over head_dim
        rec = _record_bytes(d)
        window_flops = d.window * d.num_heads * qk * 4
        attn += window_flops
        req += d.window * rec
        r = d.compression_ratio
        if r > 1 and d.index_topk > 0:  # CSA: the indexer scores every compressed key, attention reads top-k
            pos += d.index_num_heads * d.index_head_dim * 2 / r
            attn += d.index_topk * d.num_heads * qk * 4
            req += d.index_topk * rec
            ctx += (d.index_head_dim + 4) / r
        elif r > 1:  # HCA: attention over every compressed record
            pos += d.num_heads * qk * 4 / r
            ctx += rec / r
    return ModelCost(layers=len(mains), dense_bytes=dense, expert_bytes=expert, experts=experts,
                     experts_per_token=k, token_gemm_flops=2.0 * (dense_params + expert_params * k / experts),
                     token_attn_flops=attn, position_flops=pos, request_read_bytes=req, context_read_bytes=ctx,
                     comm_bytes_per_token=2.0 * len(mains) * hidden * 2)


def basis_rows(cost: ModelCost, perf: CardPerf, tp: int) -> dict[str, tuple[float, ...]]:
    """Each basis term as a ``StepTime.linear`` vector (its coefficient 1): the model is their
    sum weighted by the fitted coefficients (``linear_model``)."""
    bw, gemm, bf16 = perf.hbm_bytes_s, perf.gemm_flops, perf.bf16_flops
    q = math.log1p(-cost.experts_per_token / cost.experts) if cost.experts_per_token < cost.experts else -1e300
    ring = 2.0 * (tp - 1) / tp if tp > 1 else 0.0
    return {
        "step": (1.0, 0, 0, 0, 0, 0, 0, q),
        "layer": (float(cost.layers), 0, 0, 0, 0, 0, 0, q),
        "weights": (cost.dense_bytes / tp / bw, 0, 0, 0, 0, 0, cost.expert_bytes / tp / bw, q),
        "state": (0, 0, 0, 0, cost.request_read_bytes / bw, cost.context_read_bytes / bw, 0, q),
        "flops": (0, (cost.token_gemm_flops / gemm + cost.token_attn_flops / bf16) / tp, 0,
                  cost.position_flops / bf16 / tp, 0, cost.position_flops / bf16 / tp, 0, q),
        "prefill_flops": (0, 0, cost.token_gemm_flops / gemm / tp, 0, 0, 0, 0, q),
        "comm": (0, cost.comm_bytes_per_token * ring / perf.link_bytes_s, 0, 0, 0, 0, 0, q),
    }


def linear_model(rows: Mapping[str, tuple[float, ...]], beta: Mapping[str, float]) -> tuple[float, ...]:
    """The coefficients of ``sum(beta[t] * rows[t])`` (the expert term's exponent is shared)."""
    out = [0.0] * 7
    for term, vec in rows.items():
        b = float(beta.get(term, 0.0))
        for i in range(7):
            out[i] += b * float(vec[i])
    return (*out, float(next(iter(rows.values()))[7]))


@lru_cache(maxsize=1)
def shipped_fit() -> dict[str, Any]:
    """``steptime_fit.json``: coefficients per engine and GPU family, their data and errors."""
    from importlib.resources import files

    return json.loads(files("csa_plan.planner.steptime").joinpath(FIT_FILE).read_text(encoding="utf-8"))


def fitted_beta(engine: str, family: str) -> tuple[dict[str, float], str, str]:
    """The fitted coefficients for ``engine`` (vllm | sglang) on ``family``, where they came from and their
    error band. The nearest fit stands in where none exists, and the provenance says so."""
    fit = shipped_fit()
    fits = fit["fits"]
    key = f"{engine}/{family}"
    chosen, note = key, ""
    if key not in fits:
        same_family = [k for k in fits if k.endswith("/" + family)]
        same_engine = [k for k in fits if k.startswith(engine + "/")]
        chosen = (same_family or same_engine or [fit["default"]])[0]
        note = f"; no fit for {key}: {chosen}'s coefficients stand in"
    f = fits[chosen]
    return dict(f["beta"]), f"fitted on {f['data']}{note}", f["band"]


def physics_step_time(spec: Any, config: Mapping[str, Any], inventory: Any, card_name: str, tp: int,
                      engine: str, engine_label: str) -> StepTime:
    """The physics step time of ``spec`` on ``tp`` x ``card_name`` under ``engine`` (vllm | sglang)."""
    perf = card_perf(card_name)
    if perf is None:
        raise BadInput("options", "--step-time", f"no published bandwidth and FLOPS figures for {card_name!r} in "
                                                 "the card table (planner/steptime/hardware.py): give "
                                                 "--step-time fixed with --tpot-ms / --prefill-tok-s")
    cost = model_cost(spec, config, inventory)
    beta, fitted, band = fitted_beta(engine, perf.family)
    c = linear_model(basis_rows(cost, perf, tp), beta)
    provenance = f"roofline on {card_name} x{tp} ({perf.family}), {fitted}; replaying {engine_label}"
    return StepTime(20.0, 10_000.0, linear=c, source=StepSource.PHYSICS, provenance=provenance, band=band)


def fit_table_markdown(fit: dict[str, Any]) -> str:
    """The fit's row-by-row errors as docs/steptime.md shows them (generated, and tested equal)."""
    pct = lambda v: "-" if v is None else f"{v:+.1%}"
    lines = ["| row | model | GPU | GPUs | concurrency | spec | split | TPOT published (ms) | TPOT physics (ms) | error "
             "| error, other family's fit | TTFT published (ms) | TTFT physics (ms) | error |",
             "|---:|---|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for t in fit["rows"]:
        ttft = "-" if t["ttft_pred_ms"] is None else f"{t['ttft_pred_ms']:,.0f}"
        lines.append(f"| {t['row']} | {t['model']} | {t['gpu']} | {t['gpus']} | {t['concurrency']:,} | {t['spec']} "
                     f"| {t['split']} | {t['tpot_ms']:.2f} | {t['tpot_pred_ms']:.2f} | {pct(t['tpot_err'])} "
                     f"| {pct(t['tpot_err_other_family_fit'])} | {t['ttft_ms']:,.0f} | {ttft} | {pct(t['ttft_err'])} |")
    lines += ["", "| split | rows | median abs error | max |", "|---|---:|---:|---:|"]
    for name, s in fit["summary"].items():
        lines.append(f"| {name} | {s['rows']} | {s['median_abs_err']:.1%} | {s['max_abs_err']:.1%} |")
    return "\n".join(lines) + "\n"

