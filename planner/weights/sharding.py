"""What one device holds of a model's weights under an engine's parallel layout.

A deployment is ``tp`` attention tensor-parallel ranks per data-parallel rank, ``dp``
data-parallel attention ranks (each serving its own requests), ``pp`` pipeline stages
and ``ep`` expert-parallel ranks over the ``tp x dp`` GPUs of a stage (None: the
engine's default). Every rank of a stage holds the same bytes (the splits are even, or
the deployment is refused), so the answer is one figure per pipeline stage.

Each engine is a ``ShardRules`` entry in ``RULES``: the group sizes it splits each kind
of weight over, the dtypes it keeps, its pipeline split and its constraints, each with
the file and line of the engine release it was read from. ``reference`` is the DeepSeek
reference inference code's own split, used when no engine is named.
"""

from __future__ import annotations

from dataclasses import field
from enum import Enum
from typing import Callable

from csa_plan.planner.errors import BadInput
from csa_plan.planner.placement import Placement
from csa_plan.planner.record import record
from csa_plan.planner.units import ceil_div, round_up
from csa_plan.planner.weights.tensors import Inventory, Quant, Role, StoredDType, Weight


class Split(str, Enum):
    """How a weight is cut over a group of ranks."""

    REPLICATED = "replicated"
    OUT = "out"            # dim 0 (ColumnParallel: output features / heads)
    IN = "in"              # dim 1 (RowParallel: input features)
    VOCAB = "vocab"        # dim 0, with the engine's vocabulary padding


class Part(str, Enum):
    """Coarse groups for the budget table."""

    EMBEDDING = "embedding"
    HEAD = "head"
    ATTENTION = "attention"
    ROUTED_EXPERTS = "routed experts"
    SHARED_EXPERTS = "shared experts"
    ROUTER = "router"
    OTHER = "norms and mixes"
    MTP = "MTP layer"
    ENGRAM = "Engram tables"
    UNATTRIBUTED = "rest of the published checkpoint"


ROLE_PART: dict[Role, Part] = {
    Role.EMBED: Part.EMBEDDING, Role.HEAD: Part.HEAD,
    Role.EXPERT_W13: Part.ROUTED_EXPERTS, Role.EXPERT_W2: Part.ROUTED_EXPERTS,
    Role.SHARED_W13: Part.SHARED_EXPERTS, Role.SHARED_W2: Part.SHARED_EXPERTS,
    Role.ROUTER_GATE: Part.ROUTER, Role.ROUTER_BIAS: Part.ROUTER, Role.TID2EID: Part.ROUTER,
    Role.FINAL_NORM: Part.OTHER, Role.HC_HEAD: Part.OTHER, Role.LAYER_NORM: Part.OTHER, Role.HC: Part.OTHER,
    Role.MTP_PROJ: Part.OTHER, Role.MTP_NORM: Part.OTHER,
    Role.ENGRAM: Part.ENGRAM, Role.UNATTRIBUTED: Part.UNATTRIBUTED,
}


@record
class Groups:
    """Group sizes one deployment gives each kind of weight on one engine."""

    attn_tp: int
    dense_tp: int          # shared experts
    embed: int             # vocabulary split of the embedding
    head: int              # vocabulary split of the head
    moe_ep: int
    moe_tp: int
    local_experts: int     # routed experts per EP rank
    indexer: int           # indexer wq_b / weights_proj
    sink: int              # attn_sink split
    expert_inter_multiple: int = 1  # a rank's expert intermediate width padded up to this (SGLang's Marlin)


@record
class ShardRules:
    """One engine's weight layout; every callable reads only the deployment and the inventory."""

    name: str
    description: str
    groups: Callable[[Placement, int], Groups]          # (placement, routed experts) -> groups
    stage_counts: Callable[[int, int], tuple[int, ...]]  # (main layers, pp) -> layers per stage
    scale_dtype: StoredDType                              # what dense FP8 block scales are kept as
    dtypes: dict[Role, StoredDType] = field(default_factory=dict)
    sink_heads: Callable[[int], int] | None = None        # local heads -> heads allocated for attn_sink
    shared_pad: bool = False                              # vLLM pads shared experts to whole TP blocks
    hc_head_every_stage: bool = False
    mtp_embed_when_pp: bool = False                       # the drafter keeps its own embedding when pp > 1
    vocab_pad: Callable[[int, int], int] = lambda vocab, group: vocab
    check: Callable[[Inventory, Placement, Groups], None] = lambda inv, p, g: None
    sources: tuple[str, ...] = ()


@record
class StageWeights:
    """The bytes each device of one pipeline stage holds (every tp x dp rank the same)."""

    stage: int
    layers: tuple[int, ...]        # decoder-layer ids on this stage (MTP included when loaded)
    devices: int                   # tp x dp
    nbytes: int
    by_part: tuple[tuple[Part, int], ...]


@record
class DeviceWeights:
    """Per-device weights of a deployment: one entry per pipeline stage."""

    engine: str
    placement: Placement
    ep: int
    moe_tp: int
    mtp: bool
    stages: tuple[StageWeights, ...]
    sources: tuple[str, ...]

    @property
    def max_bytes(self) -> int:
        return max(s.nbytes for s in self.stages)

    @property
    def all_devices_bytes(self) -> int:
        return sum(s.nbytes * s.devices for s in self.stages)


def shard(inventory: Inventory, rules: ShardRules, placement: Placement, *, mtp: bool) -> DeviceWeights:
    routed = routed_experts(inventory)
    g = rules.groups(placement, routed)
    rules.check(inventory, placement, g)
    pp = placement.pp
    counts = rules.stage_counts(inventory.num_main_layers, pp)
    if len(counts) != pp or min(counts) < 1:
        raise BadInput("options", "--pp", f"{pp} stages for {inventory.num_main_layers} layers: every stage needs one")
    stage_of: dict[int, int] = {}
    stage_layers: list[tuple[int, ...]] = []
    start = 0
    for s, n in enumerate(counts):
        stage_layers.append(tuple(range(start, start + n)))
        for layer in range(start, start + n):
            stage_of[layer] = s
        start += n
    mtp_layers = tuple(range(inventory.num_main_layers, inventory.num_main_layers + inventory.num_mtp_layers))
    for layer in mtp_layers:
        stage_of[layer] = pp - 1  # the drafter runs beside the last stage
    if mtp:
        stage_layers[-1] += mtp_layers
    totals = [dict.fromkeys(Part, 0) for _ in range(pp)]
    # Each distinct layer block is sharded once and counted once per stage it sits on that many times.
    uses: dict[tuple[int, int | None], int] = {}  # (block, stage; None at model level) -> occurrences
    for b, layer, _ in inventory.layout:
        key = (b, None if layer is None else stage_of[layer])
        uses[key] = uses.get(key, 0) + 1
    each_of: dict[tuple[object, ...], int] = {}  # blocks repeat their shapes: one computation per kind
    for (b, stage), times in uses.items():
        for w in inventory.blocks[b]:
            if w.is_mtp and not mtp:
                continue
            # a rank's share of this layer's experts (the drafter's layers may have fewer than the main ones)
            n = w.copies * g.local_experts // routed if w.expert is not None and routed else w.copies
            if not n:
                continue
            part = Part.MTP if w.is_mtp else ROLE_PART.get(w.role, Part.ATTENTION)
            kind = (w.role, w.logical, w.quant, w.tensor.dtype)
            each = each_of.get(kind)
            if each is None:
                each = each_of[kind] = local_bytes(w, rules, g)
            for s in ((stage,) if stage is not None else _model_stages(w, rules, pp, mtp)):
                totals[s][part] += each * n * times
    devices = placement.tp * placement.dp
    stages = tuple(StageWeights(s, stage_layers[s], devices, sum(totals[s].values()),
                                tuple((p, b) for p, b in totals[s].items() if b))
                   for s in range(pp))
    return DeviceWeights(rules.name, placement, g.moe_ep, g.moe_tp, mtp, stages, rules.sources)


def routed_experts(inventory: Inventory) -> int:
    return inventory.dim("routed_experts")


def _model_stages(w: Weight, rules: ShardRules, pp: int, mtp: bool) -> tuple[int, ...]:
    """The stages holding a model-level weight (a layer's weights sit on that layer's stage)."""
    if w.role is Role.EMBED:
        if mtp and pp > 1 and rules.mtp_embed_when_pp:
            return (0, pp - 1)
        return (0,)
    if w.role is Role.HC_HEAD and rules.hc_head_every_stage:
        return tuple(range(pp))
    return (pp - 1,)  # head, final norm, model-level hc_head


def local_bytes(w: Weight, rules: ShardRules, g: Groups) -> int:
    """Bytes of ``w`` on one device under ``rules`` and groups ``g``."""
    role = w.role
    if role in (Role.EXPERT_W13, Role.EXPERT_W2):
        return _expert_bytes(w, g)
    dtype = rules.dtypes.get(role, w.tensor.dtype)
    if role is Role.ENGRAM:  # a hash table's rows split over the attention TP group, each row with its scales
        rows = w.logical[0]
        return ceil_div(rows, g.attn_tp) * (w.copy_nbytes // rows)
    if role is Role.ATTN_SINK:
        local = w.logical[0] // g.sink
        heads = rules.sink_heads(local) if rules.sink_heads else local
        return heads * dtype.itemsize
    if w.quant is Quant.NONE:
        shape = list(w.logical)
        split, group = _split(role, g)
        if split is Split.VOCAB:
            shape[0] = rules.vocab_pad(shape[0], group) // group
        elif split is Split.OUT:
            shape[0] //= group
        elif split is Split.IN:
            shape[1] //= group
        n = 1
        for s in shape:
            n *= s
        return n * dtype.itemsize
    out_f, in_f = w.logical
    split, group = _split(role, g)
    if role in (Role.SHARED_W13, Role.SHARED_W2) and rules.shared_pad and group > 1:
        inter = out_f if role is Role.SHARED_W13 else in_f
        padded = ceil_div(inter // 128, group) * 128 * group  # vLLM DeepseekV4MLP block padding
        out_f, in_f = (padded, in_f) if role is Role.SHARED_W13 else (out_f, padded)
    if split is Split.OUT:
        out_f //= group
    elif split is Split.IN:
        in_f //= group
    return _quant_bytes(w.quant, out_f, in_f, rules.scale_dtype if w.quant is Quant.FP8_BLOCK128 else
                        StoredDType.F8_E8M0)


def _quant_bytes(quant: Quant, out_f: int, in_f: int, scale_dtype: StoredDType) -> int:
    shape, stored = quant.stored(out_f, in_f, StoredDType.BF16)
    scale = quant.scale_shape(out_f, in_f)
    n = shape[0] * shape[1] * stored.itemsize
    if scale is not None:
        n += scale[0] * scale[1] * scale_dtype.itemsize
    return n


def _expert_bytes(w: Weight, g: Groups) -> int:
    """One routed expert's bytes on its EP rank, cut over moe_tp along its intermediate dimension
    (``shard`` multiplies by the ``local_experts`` each rank holds; the rules refuse an uneven split)."""
    out_f, in_f = w.logical
    m = g.expert_inter_multiple
    if w.role is Role.EXPERT_W13:  # [gate; up]: two halves of the intermediate width, each padded
        out_f = 2 * round_up(out_f // 2 // g.moe_tp, m)
    else:
        in_f = round_up(in_f // g.moe_tp, m)
    return _quant_bytes(w.quant, out_f, in_f, StoredDType.F8_E8M0)


def _split(role: Role, g: Groups) -> tuple[Split, int]:
    table: dict[Role, tuple[Split, int]] = {
        Role.EMBED: (Split.VOCAB, g.embed), Role.HEAD: (Split.VOCAB, g.head),
        Role.WQ_B: (Split.OUT, g.attn_tp), Role.WO_A: (Split.OUT, g.attn_tp), Role.WO_B: (Split.IN, g.attn_tp),
        Role.INDEXER_WQ_B: (Split.OUT, g.indexer), Role.INDEXER_WEIGHTS_PROJ: (Split.OUT, g.indexer),
        Role.SHARED_W13: (Split.OUT, g.dense_tp), Role.SHARED_W2: (Split.IN, g.dense_tp),
    }
    return table.get(role, (Split.REPLICATED, 1))
