"""The embedded step-time source (``--step-time physics``): a roofline over what the step holds,
plus per-step and per-layer floors, each basis term times a coefficient fitted on published
measurements (``steptime_fit.json``, written by ``tools/fit_steptime.py``; BLIS's method).

The basis terms of one step, in seconds, for one rank of the deployment (``model_cost`` reads
what the rank holds and repeats from the engine's shard rules, ``planner/weights/rules.py``):

* ``step`` 1 and ``layer`` L (decoder layers): launch and synchronisation floors;
* ``weights``: the rank's non-expert weights (embedding excluded) plus the routed-expert bytes of
  its local experts the tokens of every DP rank touch (each token picks k of E experts), over HBM;
* ``state``: what each decoding request reads of its state group at its context length
  (every indexer key, the top-k CSA records, every HCA record, the sliding window) over HBM;
* ``flops``: the rank's linears, 2 x its parameters per token (split weights its share, the
  replicated fused wq_a+wkv, compressors, indexers and router whole), over the card's GEMM peak,
  plus the attention and indexer work that grows with each token's position, over the BF16 peak
  (the indexer's scoring is not split by TP in either engine);
* ``prefill_flops`` / ``prefill_positions``: the prefill tokens' linear and position work again,
  so a fit can cost a prompt token apart from a decoded one;
* ``comm``: the all-reduces of the hidden state over the link (attention over its TP group, the
  MoE over all ranks unless DP ranks dispatch to EP);
* ``a2a_decode`` / ``a2a_prefill``: the expert-parallel dispatch (FP8) and combine (BF16) of each
  token's k experts over the link where DP ranks dispatch their own tokens, for decode and prefill
  tokens apart (DeepEP's low-latency and normal kernels).

``StepTime.linear``'s eight coefficients are these terms collected by batch feature, so the
compiled loops evaluate the model without knowing its parts. What is approximated: the
top-k records are read in full from the first token (a short context reads fewer), a draft
token costs what a decoded token costs, every rank is as loaded as the others, and DP ranks
do not step together (each replica is timed for its own batch).
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

BASIS = ("step", "layer", "weights", "state", "flops", "prefill_flops", "prefill_positions", "comm", "a2a_decode",
         "a2a_prefill")
FIT_FILE = "steptime_fit.json"


@dataclass(frozen=True)
class RankShape:
    """What one rank of a deployment runs (``rank_shape``): the group its attention heads split over,
    the data-parallel attention ranks whose tokens meet at the MoE, and the expert-parallel group."""

    attn_tp: int = 1
    dp: int = 1
    moe_ep: int = 1
    moe_tp: int = 1
    rules: str = "whole replica"

    @property
    def world(self) -> int:
        return self.attn_tp * self.dp

    def label(self) -> str:
        parts = [f"attention TP {self.attn_tp}"]
        if self.dp > 1:
            parts.append(f"DP {self.dp}")
        parts.append(f"MoE EP {self.moe_ep}" if self.moe_ep > 1 else f"MoE TP {self.moe_tp}")
        return ", ".join(parts) + f" ({self.rules})"


@dataclass(frozen=True)
class ModelCost:
    """The model's shapes the basis terms read, per rank of ``shape`` (``model_cost``): what the rank
    holds and repeats under the engine's shard rules, per token the rank itself schedules."""

    layers: int
    dense_bytes: int            # the rank's non-expert weights read every step (embedding excluded)
    expert_bytes: int           # the rank's routed experts, every layer
    experts: int                # routed experts per layer (E)
    experts_per_token: int      # k
    token_gemm_flops: float     # the rank's linears per token: its share of split weights, replicated ones whole
    token_attn_flops: float     # attention per token independent of position (top-k records, window)
    position_flops: float       # indexer and HCA attention per token per position of context
    request_read_bytes: float   # a decoding request's fixed state reads (top-k records, window)
    context_read_bytes: float   # a decoding request's state reads per context token
    comm_bytes_per_token: float  # all-reduce bytes per token, ring factors included
    a2a_bytes_per_token: float = 0.0  # expert-parallel dispatch (FP8) and combine (BF16) bytes per token
    shape: RankShape = RankShape()
    token_index_flops: float = 0.0  # candidate-bounded indexers per token, flat in the context (roles.py; V4.1)
    engram_bytes_per_token: float = 0.0  # Engram rows a token looks up on the rank (roles.py; V4.1)
    engram_bytes_s: float = 0.0  # the link those rows cross; 0: HBM


def _record_bytes(d) -> int:
    """One compressed record as the attention kernel reads it: the latent in FP8 with one scale per
    64 values and the RoPE part in BF16 (fp8 formats), or all BF16."""
    nope = d.head_dim - d.qk_rope_head_dim
    if "fp8" in str(d.cache_format):
        return nope + 2 * d.qk_rope_head_dim + 4 * math.ceil(nope / 64)
    return 2 * d.head_dim


def _ring(n: int) -> float:
    return 2.0 * (n - 1) / n if n > 1 else 0.0


def rank_shape(rules: Any, placement: Any, experts: int) -> tuple[RankShape, Any]:
    """The rank shape of ``placement`` under shard ``rules`` (planner/weights/rules.py) and its groups."""
    g = rules.groups(placement, experts)
    return RankShape(attn_tp=g.attn_tp, dp=placement.dp, moe_ep=g.moe_ep, moe_tp=g.moe_tp, rules=rules.name), g


def model_cost(spec: Any, config: Mapping[str, Any], inventory: Any, rules: Any = None,
               placement: Any = None, formats: Any = None, engram: Any = None) -> ModelCost:
    """The costs of one rank running ``spec``'s main layers with the checkpoint's weights (``inventory``)
    under the engine's shard ``rules`` at ``placement``; without rules, one rank running the whole model.

    The same rules the weight budget reads say what a rank holds (``local_bytes``): a weight split over
    the rank's group costs the rank its share, a replicated one (vLLM's and SGLang's fused wq_a+wkv,
    compressors, indexers, router) costs every rank all of it, for every token of the rank's attention
    group. Under DP attention the tokens of the ``dp`` ranks meet at the MoE: the shared experts split over
    the whole group and the routed experts over EP see them all.

    A shared-state model (V4.1) is costed layer by layer from its roles (``roles.py``), its records at
    ``formats`` (the engine's layouts; None: the descriptors'), its Engram lookups as ``engram``
    (``roles.EngramRead``); Engram tables and the unattributed rest of a checkpoint (vision tower) are
    not dense weights a step reads."""
    from csa_plan.planner.steptime.roles import flat_config, is_shared, shared_terms
    from csa_plan.planner.weights.tensors import Role

    config = flat_config(config)

    mains = [d for d in spec.layers if not d.is_mtp]
    if not mains:
        raise BadInput(spec.source, "layers", "no main layers: nothing to time")
    experts = int(config.get("n_routed_experts") or 0)
    k = int(config.get("num_experts_per_tok") or 0)
    hidden = int(config.get("hidden_size") or 0)
    if experts < 1 or not 1 <= k <= experts or hidden < 1:
        raise BadInput(spec.source, "n_routed_experts", "the physics step time needs n_routed_experts, "
                                                        "num_experts_per_tok and hidden_size (or --step-time fixed)")
    shape, g, one = RankShape(), None, None
    if rules is not None:
        from csa_plan.planner.placement import Placement
        from csa_plan.planner.weights.sharding import local_bytes

        shape, g = rank_shape(rules, placement, experts)
        one = rules.groups(Placement(), experts)
    dense = expert = 0.0
    dense_flops = expert_params = 0.0
    seen: dict[tuple[object, ...], tuple[int, int]] = {}
    for w in inventory.weights:
        if w.is_mtp or w.role in (Role.EMBED, Role.ENGRAM, Role.UNATTRIBUTED):
            continue
        params = math.prod(w.logical) * w.copies
        if w.role in (Role.EXPERT_W13, Role.EXPERT_W2):
            if g is None:
                expert += w.nbytes
            else:
                kind = (w.role, w.logical, w.quant, w.tensor.dtype)
                if kind not in seen:
                    seen[kind] = (local_bytes(w, rules, g), 0)
                expert += seen[kind][0] * w.copies / g.moe_ep
            expert_params += params
            continue
        if g is None:
            dense += w.nbytes
            dense_flops += 2.0 * params
            continue
        kind = (w.role, w.logical, w.quant, w.tensor.dtype)  # layers repeat their shapes: one computation a kind
        if kind not in seen:
            seen[kind] = (local_bytes(w, rules, g), local_bytes(w, rules, one))
        mine, whole = seen[kind]
        share = mine / whole if whole else 1.0
        group = round(1 / share) if share > 0 else 1  # the ranks this weight is split over
        tokens = group // shape.attn_tp if group > shape.attn_tp else 1  # tokens of other DP ranks gathered
        dense += mine * w.copies
        dense_flops += 2.0 * params * share * tokens
    attn = pos_rep = pos_heads = req = ctx = 0.0
    indexer_split = 1 if g is None else g.indexer
    bounded = 0.0
    for t in shared_terms(mains, formats) if is_shared(mains) else ():
        attn += t.attn_flops
        pos_rep += t.position_flops
        bounded += t.bounded_flops
        req += t.request_read_bytes
        ctx += t.context_read_bytes
    for d in () if is_shared(mains) else mains:
        qk = d.head_dim  # one latent KV head: scores and values both over head_dim
        rec = _record_bytes(d)
        attn += d.window * d.num_heads * qk * 4
        req += d.window * rec
        r = d.compression_ratio
        if r > 1 and d.index_topk > 0:  # CSA: the indexer scores every compressed key, attention reads top-k
            pos_rep += d.index_num_heads * d.index_head_dim * 2 / r
            attn += d.index_topk * d.num_heads * qk * 4
            req += d.index_topk * rec
            ctx += (d.index_head_dim + 4) / r
        elif r > 1:  # HCA: attention over every compressed record
            pos_heads += d.num_heads * qk * 4 / r
            ctx += rec / r
    tp = shape.attn_tp
    a2a = 0.0
    moe_ring = 0.0
    if shape.moe_ep > 1 and shape.dp > 1:  # each DP rank dispatches its own tokens to their experts' ranks
        a2a = len(mains) * k * hidden * (1 + 2) * (shape.moe_ep - 1) / shape.moe_ep
    else:  # every rank holds every token (TP attention): the experts' outputs meet in an all-reduce
        moe_ring = _ring(shape.world) * shape.dp
    return ModelCost(layers=len(mains), dense_bytes=int(dense), expert_bytes=int(expert), experts=experts,
                     experts_per_token=k,
                     token_gemm_flops=dense_flops + 2.0 * expert_params * k / experts / tp,
                     token_attn_flops=attn / tp, position_flops=pos_rep / indexer_split + pos_heads / tp,
                     request_read_bytes=req, context_read_bytes=ctx,
                     comm_bytes_per_token=len(mains) * hidden * 2 * (_ring(tp) + moe_ring),
                     a2a_bytes_per_token=a2a, shape=shape, token_index_flops=bounded / indexer_split,
                     engram_bytes_per_token=float(engram.bytes_per_token) if engram else 0.0,
                     engram_bytes_s=float(engram.link_bytes_s or 0.0) if engram else 0.0)


def basis_rows(cost: ModelCost, perf: CardPerf) -> dict[str, tuple[float, ...]]:
    """Each basis term of one rank as a ``StepTime.linear`` vector (its coefficient 1): the model is
    their sum weighted by the fitted coefficients (``linear_model``). The expert term's exponent counts
    the tokens of every DP rank that meet at the MoE."""
    bw, gemm, bf16 = perf.hbm_bytes_s, perf.gemm_flops, perf.bf16_flops
    k, e = cost.experts_per_token, cost.experts
    q = math.log1p(-k / e) * cost.shape.dp if k < e else -1e300
    return {
        "step": (1.0, 0, 0, 0, 0, 0, 0, q),
        "layer": (float(cost.layers), 0, 0, 0, 0, 0, 0, q),
        "weights": (cost.dense_bytes / bw, 0, 0, 0, 0, 0, cost.expert_bytes / bw, q),
        "state": (0, cost.engram_bytes_per_token / (cost.engram_bytes_s or bw), 0, 0, cost.request_read_bytes / bw,
                  cost.context_read_bytes / bw, 0, q),
        "flops": (0, cost.token_gemm_flops / gemm + cost.token_attn_flops / bf16 + cost.token_index_flops / bf16, 0,
                  cost.position_flops / bf16, 0, cost.position_flops / bf16, 0, q),
        "prefill_flops": (0, 0, cost.token_gemm_flops / gemm, 0, 0, 0, 0, q),
        "prefill_positions": (0, 0, 0, cost.position_flops / bf16, 0, 0, 0, q),
        "comm": (0, cost.comm_bytes_per_token / perf.link_bytes_s, 0, 0, 0, 0, 0, q),
        # DeepEP's low-latency kernels carry decode tokens, its normal kernels prefill chunks: a coefficient each
        "a2a_decode": (0, cost.a2a_bytes_per_token / perf.link_bytes_s, -cost.a2a_bytes_per_token / perf.link_bytes_s,
                       0, 0, 0, 0, q),
        "a2a_prefill": (0, 0, cost.a2a_bytes_per_token / perf.link_bytes_s, 0, 0, 0, 0, q),
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


def physics_step_time(spec: Any, config: Mapping[str, Any], inventory: Any, card_name: str, placement: Any,
                      engine: str, engine_label: str, rules: Any = None, formats: Any = None,
                      engram: Any = None) -> StepTime:
    """The physics step time of one rank of ``placement`` (a ``Placement``, or a TP size) on ``card_name``
    under ``engine`` (vllm | sglang), each rank costed by the engine release's shard ``rules`` (None: the
    rules of vLLM 0.33 / SGLang 0.5.23). A shared-state model (V4.1) is costed by its layers' roles
    (``roles.py``) with the engine's record ``formats`` and ``engram`` lookups; its band is V4's, carried:
    no published V4.1 row is fitted (``roles.SHARED_BAND`` says so, and the gap on the rows found)."""
    from csa_plan.planner.placement import Placement
    from csa_plan.planner.weights.rules import RULES

    perf = card_perf(card_name)
    if perf is None:
        raise BadInput("options", "--step-time", f"no published bandwidth and FLOPS figures for {card_name!r} in "
                                                 "the card table (planner/cards.py): give "
                                                 "--step-time fixed with --tpot-ms / --prefill-tok-s")
    if isinstance(placement, int):
        placement = Placement(tp=placement)
    if rules is None:
        rules = RULES["sglang-0.5.23" if engine == "sglang" else "vllm-0.33"]
    cost = model_cost(spec, config, inventory, rules, placement, formats, engram)
    beta, fitted, band = fitted_beta(engine, perf.family)
    c = linear_model(basis_rows(cost, perf), beta)
    devices = placement.tp * placement.dp
    roles = ""
    from csa_plan.planner.steptime.roles import SHARED_BAND, descriptor_formats, is_shared

    if is_shared(spec.layers):
        fmt = "; records: " + (formats.source if formats is not None else
                               descriptor_formats(next(d for d in spec.layers if d.sharing is not None)).source
                               + ", the engine's own widths not modelled")
        roles = (f"; each layer costed by its role (kv sources, index sources, readers){fmt}"
                 f"{'; ' + engram.label if engram is not None else ''}")
        band = f"{SHARED_BAND}: {band}"
    provenance = (f"roofline on {card_name} x{devices} ({perf.family}; a rank: {cost.shape.label()}), {fitted}"
                  f"{roles}; replaying {engine_label}")
    return StepTime(20.0, 10_000.0, linear=c, source=StepSource.PHYSICS, provenance=provenance, band=band)


def fit_table_markdown(fit: dict[str, Any]) -> str:
    """The fit's row-by-row errors as docs/steptime.md shows them (generated, and tested equal)."""
    pct = lambda v: "-" if v is None else f"{v:+.1%}"
    ms = lambda v, f: "-" if v is None else format(v, f)
    lines = ["| row | engine | model | GPU | GPUs | layout | prompt | concurrency | spec | split | TPOT published (ms) "
             "| TPOT physics (ms) | error | error, other family's fit | TTFT published (ms) | TTFT physics (ms) "
             "| error |",
             "|---:|---|---|---|---:|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for t in fit["rows"]:
        lines.append(f"| {t['row']} | {t['engine']} | {t['model']} | {t['gpu']} | {t['gpus']} | {t['layout']} "
                     f"| {t['isl']:,} | {t['concurrency']:,} | {t['spec']} | {t['split']} | {ms(t['tpot_ms'], '.2f')} "
                     f"| {ms(t['tpot_pred_ms'], '.2f')} | {pct(t['tpot_err'])} | {pct(t['tpot_err_other_family_fit'])} "
                     f"| {ms(t['ttft_ms'], ',.0f')} | {ms(t['ttft_pred_ms'], ',.0f')} | {pct(t['ttft_err'])} |")
    lines += ["", "| split | rows | median abs error | max |", "|---|---:|---:|---:|"]
    for name, s in fit["summary"].items():
        lines.append(f"| {name} | {s['rows']} | {s['median_abs_err']:.1%} | {s['max_abs_err']:.1%} |")
    return "\n".join(lines) + "\n"
