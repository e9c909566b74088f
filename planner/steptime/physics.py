"""The embedded step-time source (``--step-time physics``): a roofline over what the step holds,
plus per-step and per-layer floors, each basis term times a coefficient fitted on published
measurements (``steptime_fit.json``, written by ``tools/fit_steptime.py``; BLIS's method).

The basis terms of one step, in seconds, for one rank of the deployment (``model_cost`` reads
what the rank holds and repeats from the engine's shard rules, ``planner/weights/rules.py``):

* ``step`` 1 and ``layer`` L (decoder layers): launch and synchronisation floors; ``request`` 1 per
  decoding request: the per-request floor of a step (the scheduler's and the sampler's work for each
  running request), seconds like the other two, so that no roofline coefficient has to carry it;
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
top-k records are read in full from the first token (a short context reads fewer), every rank
is as loaded as the others, and each DP rank is timed for its own batch (the serving layer puts
closed-loop ranks on one clock, each shared step as long as the slowest rank's:
``planner/serving/lockstep.py``). Speculative decoding (``draft_rows``, ``steptime/drafts.py``): a verified draft token costs
a main-model token, and the drafter's passes are charged per method (an MTP or EAGLE chain runs
the checkpoint's drafter once per draft, DSpark once per block).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from csa_plan.planner.errors import BadInput
from csa_plan.planner.steptime.hardware import CardPerf, card_perf
from csa_plan.planner.steptime.drafts import DraftPlan
from csa_plan.planner.steptime.model import StepSource, StepTime

BASIS = ("step", "layer", "request", "weights", "state", "flops", "prefill_flops", "prefill_positions", "comm",
         "a2a_decode", "a2a_prefill")
# The MoE backends as the engines spell them (SGLang --moe-runner-backend / --moe-a2a-backend, vLLM --moe-backend):
# each its own term, the routed-expert work again (``moe_row``), fitted where published rows of it exist.
MOE_BACKENDS = ("marlin", "flashinfer_mxfp4", "flashinfer_trtllm_routed", "triton", "deepep", "megamoe",
                "deep_gemm_mega_moe")
MOE_TERMS = tuple(f"moe:{b}" for b in MOE_BACKENDS)
ALL_TERMS = BASIS + MOE_TERMS
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
    draft: "DrafterCost | None" = None
    expert_token_flops: float = 0.0  # the routed experts' part of token_gemm_flops (what a MoE backend runs)  # the checkpoint's drafter (MTP / DSpark blocks) on the same rank

    token_index_flops: float = 0.0  # candidate-bounded indexers per token, flat in the context (roles.py; V4.1)
    engram_bytes_per_token: float = 0.0  # Engram rows a token looks up on the rank (roles.py; V4.1)
    engram_bytes_s: float = 0.0  # the link those rows cross; 0: HBM

@dataclass(frozen=True)
class DrafterCost:
    """One pass of the checkpoint's draft layers (its ``is_mtp`` weights: V4's MTP layer, V4.1's three
    DSpark blocks) on one rank, under the same shard rules as the main layers; the LM head it shares
    with the model is read again on every pass."""

    layers: int
    dense_bytes: int            # the drafter's non-expert weights and the LM head, the rank's share
    expert_bytes: int           # the drafter's routed experts on the rank
    token_flops: float          # its linears (and the LM head) per drafted token, over the GEMM peak
    token_attn_flops: float     # its window attention per drafted token (draft layers are window-only)
    request_read_bytes: float   # the window records a request's draft pass reads
    comm_bytes_per_token: float


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
    from csa_plan.planner.steptime.roles import descriptor_formats, flat_config, is_shared, shared_terms
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
    # the drafter's (MTP / DSpark blocks, w.is_mtp) own weights, and the LM head every draft pass reads again
    d_dense = d_expert = d_flops = d_expert_params = head_bytes = head_flops = 0.0
    seen: dict[tuple[object, ...], tuple[int, int]] = {}
    for w in inventory.weights:
        if w.role in (Role.EMBED, Role.ENGRAM, Role.UNATTRIBUTED):  # Engram: lookups (roles.py); the rest: vision tower
            continue
        params = math.prod(w.logical) * w.copies
        if w.role in (Role.EXPERT_W13, Role.EXPERT_W2):
            if g is None:
                mine_e = float(w.nbytes)
            else:
                kind = (w.role, w.logical, w.quant, w.tensor.dtype)
                if kind not in seen:
                    seen[kind] = (local_bytes(w, rules, g), 0)
                mine_e = seen[kind][0] * w.copies / g.moe_ep
            if w.is_mtp:
                d_expert += mine_e
                d_expert_params += params
            else:
                expert += mine_e
                expert_params += params
            continue
        if g is None:
            mine_b, flops = float(w.nbytes), 2.0 * params
        else:
            kind = (w.role, w.logical, w.quant, w.tensor.dtype)  # layers repeat their shapes: one computation a kind
            if kind not in seen:
                seen[kind] = (local_bytes(w, rules, g), local_bytes(w, rules, one))
            mine, whole = seen[kind]
            share = mine / whole if whole else 1.0
            group = round(1 / share) if share > 0 else 1  # the ranks this weight is split over
            tokens = group // shape.attn_tp if group > shape.attn_tp else 1  # tokens of other DP ranks gathered
            mine_b, flops = float(mine * w.copies), 2.0 * params * share * tokens
        if w.is_mtp:
            d_dense += mine_b
            d_flops += flops
            continue
        dense += mine_b
        dense_flops += flops
        if w.role is Role.HEAD:
            head_bytes += mine_b
            head_flops += flops
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
    drafts = [d for d in spec.layers if d.is_mtp]
    d_experts = int(config.get("dspark_n_routed_experts") or experts)
    d_k = min(k, d_experts)
    d_attn = sum(d.window * d.num_heads * d.head_dim * 4 for d in drafts)
    draft = DrafterCost(layers=len(drafts), dense_bytes=int(d_dense + head_bytes), expert_bytes=int(d_expert),
                        token_flops=d_flops + head_flops + 2.0 * d_expert_params * d_k / d_experts / tp,
                        token_attn_flops=d_attn / tp,
                        request_read_bytes=sum(d.window * ((formats or descriptor_formats(d)).window_bytes
                                                           if d.sharing is not None else _record_bytes(d))
                                               for d in drafts),  # V4.1's DSpark windows at the engine's widths
                        comm_bytes_per_token=len(drafts) * hidden * 2 * (_ring(tp) + moe_ring))
    return ModelCost(layers=len(mains), dense_bytes=int(dense), expert_bytes=int(expert), experts=experts,
                     experts_per_token=k,
                     token_gemm_flops=dense_flops + 2.0 * expert_params * k / experts / tp,
                     token_attn_flops=attn / tp, position_flops=pos_rep / indexer_split + pos_heads / tp,
                     request_read_bytes=req, context_read_bytes=ctx,
                     comm_bytes_per_token=len(mains) * hidden * 2 * (_ring(tp) + moe_ring),
                     a2a_bytes_per_token=a2a, shape=shape, draft=draft,
                     expert_token_flops=2.0 * expert_params * k / experts / tp,
                     token_index_flops=bounded / indexer_split,
                     engram_bytes_per_token=float(engram.bytes_per_token) if engram else 0.0,
                     engram_bytes_s=float(engram.link_bytes_s or 0.0) if engram else 0.0)


def basis_rows(cost: ModelCost, perf: CardPerf, draft: DraftPlan | None = None,
               moe_backend: str | None = None) -> dict[str, tuple[float, ...]]:
    """Each basis term of one rank as a ``StepTime.linear`` vector (its coefficient 1): the model is
    their sum weighted by the fitted coefficients (``linear_model``). The expert term's exponent counts
    the tokens of every DP rank that meet at the MoE. With ``draft``, each term also carries the
    drafter's part of a step (``draft_rows``) and the verify pass's position work; with ``moe_backend``
    (one of ``MOE_BACKENDS``) its own term is the routed-expert work (``moe_row``), every other
    backend's term zero."""
    rows = _main_rows(cost, perf)
    if draft is not None and draft.drafts > 0:
        extra = draft_rows(cost, perf, draft)
        rows = {t: tuple(a + b for a, b in zip(v[:7], extra.get(t, (0.0,) * 7))) + (v[7],) for t, v in rows.items()}
    q = rows["step"][7]
    for b, term in zip(MOE_BACKENDS, MOE_TERMS):
        rows[term] = moe_row(cost, perf, q) if b == moe_backend else (0, 0, 0, 0, 0, 0, 0, q)
    return rows


def moe_row(cost: ModelCost, perf: CardPerf, q: float) -> tuple[float, ...]:
    """The routed-expert weights a step's tokens touch, over HBM, once more: a backend's fitted coefficient
    is how much longer than the datasheet its kernels take to stream them (decode is where the backends
    differ: marlin dequantises MXFP4 in the GEMM, flashinfer_mxfp4 and trtllm run native FP4), beyond what
    every backend shares (``weights``). The experts' GEMM FLOPs stay in the shared ``flops`` term: a
    per-backend FLOP term moved the prefill (TTFT) fit, which the rows cannot split by backend."""
    return (0, 0, 0, 0, 0, 0, cost.expert_bytes / perf.hbm_bytes_s, q)


def moe_backend_key(engine: str, runner: str | None, a2a: str | None = None) -> str | None:
    """The backend term a deployment's MoE runs under, from the engine's own spellings: SGLang's
    ``--moe-a2a-backend`` (deepep, megamoe) when one dispatches, else its ``--moe-runner-backend``;
    vLLM's ``--moe-backend``. None: a spelling with no term (``auto``, or one not listed)."""
    name = (a2a if a2a not in (None, "", "none") else runner) or ""
    name = name.replace(" (a2a)", "").strip()
    return name if name in MOE_BACKENDS else None


def draft_rows(cost: ModelCost, perf: CardPerf, draft: DraftPlan) -> dict[str, tuple[float, ...]]:
    """The drafter's part of one step and the verify pass (first seven coefficients per term).

    Every step runs ``draft.passes`` drafter passes: each reads the drafter's weights and the LM head
    once (``c0``) and the experts its tokens touch (the expert term, saturating at the step's tokens:
    an overestimate at small batches, said in docs/steptime.md), and per decoding request (``c_req``)
    its drafted positions' linears, window attention and window reads. The verify pass puts k + 1
    tokens a request through the main model (the replay already counts them as the step's tokens);
    its position work (the indexer's and HCA's scoring of every earlier key) is per query token, so
    the per-request context term counts k + 1 queries."""
    d = cost.draft
    bw, gemm, bf16 = perf.hbm_bytes_s, perf.gemm_flops, perf.bf16_flops
    out: dict[str, tuple[float, ...]] = {"flops": (0, 0, 0, 0, 0, cost.position_flops / bf16 * draft.drafts, 0)}
    if d is None or d.layers == 0:
        return out
    p, n = float(draft.passes), float(draft.tokens_per_request)
    out["layer"] = (p * d.layers, 0, 0, 0, 0, 0, 0)
    out["weights"] = (p * d.dense_bytes / bw, 0, 0, 0, 0, 0, p * d.expert_bytes / bw)
    out["state"] = (0, 0, 0, 0, p * d.request_read_bytes / bw, 0, 0)
    out["flops"] = (0, 0, 0, 0, p * n * (d.token_flops / gemm + d.token_attn_flops / bf16),
                    cost.position_flops / bf16 * draft.drafts, 0)
    out["comm"] = (0, 0, 0, 0, p * n * d.comm_bytes_per_token / perf.link_bytes_s, 0, 0)
    return out


def _main_rows(cost: ModelCost, perf: CardPerf) -> dict[str, tuple[float, ...]]:
    bw, gemm, bf16 = perf.hbm_bytes_s, perf.gemm_flops, perf.bf16_flops
    k, e = cost.experts_per_token, cost.experts
    q = math.log1p(-k / e) * cost.shape.dp if k < e else -1e300
    return {
        "step": (1.0, 0, 0, 0, 0, 0, 0, q),
        "layer": (float(cost.layers), 0, 0, 0, 0, 0, 0, q),
        # the host's and the sampler's work for each decoding request, every step: seconds, not a roofline
        "request": (0, 0, 0, 0, 1.0, 0, 0, q),
        # the Engram tables are weights read by lookup: a token's rows, over HBM or the host link (roles.py)
        "weights": (cost.dense_bytes / bw, cost.engram_bytes_per_token / (cost.engram_bytes_s or bw), 0, 0, 0, 0,
                    cost.expert_bytes / bw, q),
        "state": (0, 0, 0, 0, cost.request_read_bytes / bw, cost.context_read_bytes / bw, 0, q),
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
        if not any(vec[:7]):
            continue
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
                      engine: str, engine_label: str, rules: Any = None, draft: DraftPlan | None = None,
                      draft_note: str = "", moe_backend: tuple[str | None, str] = (None, ""), formats: Any = None,
                      engram: Any = None) -> StepTime:
    """The physics step time of one rank of ``placement`` (a ``Placement``, or a TP size) on ``card_name``
    under ``engine`` (vllm | sglang), each rank costed by the engine release's shard ``rules`` (None: the
    rules of vLLM 0.33 / SGLang 0.5.23); ``draft``: the speculative method the replay runs (its drafter
    passes and verify pass, ``draft_rows``); ``draft_note``: what the provenance says of drafts;
    ``moe_backend``: (its term's key or None, the backend as the engine spells it). A shared-state model
    (V4.1) is costed by its layers' roles (``roles.py``) with the engine's record ``formats`` and ``engram``
    lookups; its band is V4's, carried: no published V4.1 row is fitted (``roles.SHARED_BAND`` says so,
    and the gap on the rows found)."""
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
    key, spelled = moe_backend
    moe_note, fitted_term = moe_backend_note(key, spelled, engine, perf.family)
    c = linear_model(basis_rows(cost, perf, draft, key if fitted_term else None), beta)
    devices = placement.tp * placement.dp
    drafts = f"; drafts: {draft.label()}" if draft is not None else ""
    roles = ""
    from csa_plan.planner.steptime.roles import SHARED_BAND, descriptor_formats, is_shared

    if is_shared(spec.layers):
        fmt = "; records: " + (formats.source if formats is not None else
                               descriptor_formats(next(d for d in spec.layers if d.sharing is not None)).source
                               + ", the engine's own widths not modelled")
        roles = (f"; each layer costed by its role (kv sources, index sources, readers){fmt}"
                 f"{'; ' + engram.label if engram is not None else ''}")
        band = f"{SHARED_BAND}: {band}"
    provenance = (f"roofline on {card_name} x{devices} ({perf.family}; a rank: {cost.shape.label()}{drafts}"
                  f"{draft_note}; {moe_note}), {fitted}{roles}; "
                  f"replaying {engine_label}")
    return StepTime(20.0, 10_000.0, linear=c, source=StepSource.PHYSICS, provenance=provenance, band=band)


def moe_backend_note(key: str | None, spelled: str, engine: str, family: str) -> tuple[str, bool]:
    """What the provenance says of the MoE backend, and whether its own term applies: only a backend
    with rows in the engine's own fit for the family has one (a stand-in fit's terms are another
    engine's kernels); every other backend is said to be not distinguished."""
    fit = shipped_fit()["fits"]
    chosen = f"{engine}/{family}" if f"{engine}/{family}" in fit else None
    rows = (fit.get(chosen) or {}).get("moe_rows", {}) if chosen else {}
    shown = spelled or "the engine's default"
    if key is not None and rows.get(key):
        beta = float(fit[chosen]["beta"].get(f"moe:{key}", 0.0))
        return (f"MoE backend {shown}: its own term, +{beta:.2f}x the routed-expert work (fitted on "
                f"{rows[key]} {key} rows)"), True
    return f"MoE backend {shown}: not distinguished (no published {engine}/{family} rows of it to fit a term)", False


def fit_table_markdown(fit: dict[str, Any]) -> str:
    """The fit's row-by-row errors as docs/steptime.md shows them (generated, and tested equal)."""
    pct = lambda v: "-" if v is None else f"{v:+.1%}"
    ms = lambda v, f: "-" if v is None else format(v, f)
    lines = ["| row | engine | model | GPU | GPUs | layout | prompt | concurrency | spec | MoE backend | split "
             "| TPOT published (ms) | TPOT physics (ms) | error | error, other family's fit | TTFT published (ms) "
             "| TTFT physics (ms) | error | ITL p50 published (ms) | ITL physics (ms) | error |",
             "|---:|---|---|---|---:|---|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for t in fit["rows"]:
        lines.append(f"| {t['row']} | {t['engine']} | {t['model']} | {t['gpu']} | {t['gpus']} | {t['layout']} "
                     f"| {t['isl']:,} | {t['concurrency']:,} | {t['spec']} | {t.get('moe_backend', '-')} "
                     f"| {t['split']} | {ms(t['tpot_ms'], '.2f')} "
                     f"| {ms(t['tpot_pred_ms'], '.2f')} | {pct(t['tpot_err'])} | {pct(t['tpot_err_other_family_fit'])} "
                     f"| {ms(t['ttft_ms'], ',.0f')} | {ms(t['ttft_pred_ms'], ',.0f')} | {pct(t['ttft_err'])} "
                     f"| {ms(t.get('itl_ms'), '.1f')} | {ms(t.get('itl_pred_ms'), '.1f')} | {pct(t.get('itl_err'))} |")
    lines += ["", "| split | rows | median abs error | max |", "|---|---:|---:|---:|"]
    for name, s in fit["summary"].items():
        lines.append(f"| {name} | {s['rows']} | {s['median_abs_err']:.1%} | {s['max_abs_err']:.1%} |")
    return "\n".join(lines) + "\n"
