"""The physics step time of a shared-state model (DeepSeek-V4.1), layer by layer, from each layer's role.

Why a module of its own: V4's roofline (``physics.model_cost``) charges every compressed layer a
compressor, an indexer and a cache of its own. In V4.1 only the kv sources own those, and
charging every ratio-1/2 layer as V4 does would cost the wrong work (DEEPSEEK_V41.md §2-3). The
roles come from the same descriptors the gate, the layout and the weight budget read
(``Descriptor.mode``, ``Descriptor.sharing``): one source of truth.

Per layer, per token (decode reads per request):

* every layer (window only, sources, readers, DSpark drafts): attention over its own 128-token
  window, and the window rows it reads;
* every ratio-1/2 layer (owner or reader): sparse attention over the gathered top-k
  (``index_topk`` 512) records of its kv source; ratio 1 means one record per token, so the
  gathered set is still 512 records, not the context;
* index sources that own their candidates (2, 8, 14 at ratio 2; 20 at ratio 1, which selects
  the candidate blocks): the indexer scores every compressed key of the context (per position,
  ``index_heads x index_head_dim x 2 / ratio`` FLOPs, the key bytes / ratio read);
* index sources inside another layer's candidates (24-36 inside layer 20's 2,048 blocks of 8):
  the indexer scores at most ``blocks x block_size`` = 16,384 compressed positions, whatever the
  context: a per-token constant, flat beyond the bound (the linear step form has no min(), so
  below 16,384 positions it is charged the full bound: an overestimate at short context);
* readers and window-only layers: no compressor and no indexer. The compressor's and the
  indexer's linears are priced from the weight inventory, which holds them on their owners only
  (``planner/weights/deepseek_v41.py``: ``wkv`` x4, ``wgate`` x3, ``indexer.wq_b`` x8).

Engram (``planner/weights/engram.py`` says where each engine keeps the tables): each token looks
up one row per hash column (24 per table), 264 B each; a rank reads its own columns, over HBM
when the tables sit on the GPU, over the card's host link (``planner/cards.py`` ``HOSTS``) when
the engine keeps them on the host. No published row times these lookups: the tables are weights read
by lookup, so they ride on the weights term's coefficient (a roofline at the link's rate; random 264 B
reads over PCIe run below it, so host lookups are an optimistic bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from csa_plan.planner.errors import BadInput

SHARED_BAND = ("V4's band, carried, not measured: no published DeepSeek-V4.1 serving row is fitted; the two found, "
               "from preview builds (benchmarks/published_serving_v41_heldout.csv, tools/v41_heldout.py), "
               "show the clock too fast, TPOT -43% and -77%, TTFT -80% and -84% at one request")


def flat_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The text config the roofline reads: V4.1 nests its fields under ``text_config``."""
    nested = config.get("text_config")
    if isinstance(nested, Mapping):
        return {**{k: v for k, v in config.items() if k != "text_config"}, **nested}
    return config


def is_shared(layers: Iterable[Any]) -> bool:
    """True for a model whose layers carry a source topology (V4.1); V4's per-layer state is False."""
    return any(d.sharing is not None for d in layers)


@dataclass(frozen=True)
class ReadFormats:
    """What the attention kernels read per record: the compressed record, a window row, an index key
    (bytes), and where the widths come from (the engine's layouts, or the descriptor's formats)."""

    record_bytes: int
    window_bytes: int
    index_key_bytes: int
    source: str


def descriptor_formats(d: Any) -> ReadFormats:
    """The widths of the descriptor's own formats (csa-plan's reference layout: 288 / 528 / 68 B)."""
    from csa_plan.planner.descriptor import IndexKeyFormat, RecordFormat
    from csa_plan.planner.layout import shared_index_key_bytes, shared_record_bytes

    s = d.sharing
    try:
        rec, win = RecordFormat(d.cache_format), RecordFormat(s.window_format)
        key = IndexKeyFormat(s.index_key_format)
    except ValueError as exc:
        raise BadInput("model", "cache_format", f"layer {d.layer_id}: {exc}") from None
    return ReadFormats(shared_record_bytes(rec, d.head_dim, d.qk_rope_head_dim),
                       shared_record_bytes(win, d.head_dim, d.qk_rope_head_dim),
                       shared_index_key_bytes(key, d.index_head_dim or 128),
                       f"the model's formats ({rec.value} records, {win.value} windows, {key.value} keys)")


@dataclass(frozen=True)
class LayerTerms:
    """One layer's work by its role, per token (reads: per decoding request)."""

    layer: int
    role: str
    attn_flops: float            # attention over the window and the gathered top-k (split over attention TP)
    position_flops: float        # indexer scoring per position of context (every compressed key)
    bounded_flops: float         # indexer scoring inside another layer's candidates: flat in the context
    request_read_bytes: float    # window rows, top-k records, candidate keys: per decoding request
    context_read_bytes: float    # index keys per context token
    bound_positions: int = 0     # the candidate bound (compressed positions) of ``bounded_flops``

    def decode(self, context: int) -> tuple[float, float]:
        """(FLOPs, bytes read) of one decoded token at ``context`` positions (the breakdown's figures)."""
        return (self.attn_flops + self.position_flops * context + self.bounded_flops,
                self.request_read_bytes + self.context_read_bytes * context)


def role_name(d: Any) -> str:
    from csa_plan.planner.descriptor import LayerMode

    s, mode = d.sharing, d.mode
    tail = " (DSpark draft)" if d.is_mtp else ""
    if mode is LayerMode.WINDOW_ONLY:
        return "window only" + tail
    if mode is LayerMode.OWN_SOURCE:
        idx = "indexer, candidate stage" if s.candidate_source == d.layer_id else "indexer"
        return f"kv source, ratio {d.compression_ratio}, compressor + {idx}"
    if d.is_index_source:
        return f"reader of {s.kv_source}, indexer inside {s.candidate_source}'s candidates"
    return f"reader of {s.kv_source}, top-k of {s.index_source}"


def layer_terms(d: Any, fmt: ReadFormats) -> LayerTerms:
    """The work of shared-state layer ``d`` by its role (module docstring)."""
    from csa_plan.planner.descriptor import LayerMode

    s, mode = d.sharing, d.mode
    if s is None:
        raise BadInput("model", "sharing", f"layer {d.layer_id} has no source topology: V4's roofline applies")
    qk = d.head_dim  # one latent KV head: scores and values both over head_dim
    attn = float(d.window * d.num_heads * qk * 4)
    req = float(d.window * fmt.window_bytes)
    pos = bounded = ctx = 0.0
    bound = 0
    if mode is not LayerMode.WINDOW_ONLY:
        r = d.compression_ratio
        attn += d.index_topk * d.num_heads * qk * 4  # the gathered top-k of the source's records
        req += d.index_topk * fmt.record_bytes
        if d.is_index_source:
            score = float(d.index_num_heads * d.index_head_dim * 2)
            if s.candidate_source is None or s.candidate_source == d.layer_id:  # every compressed key
                pos = score / r
                ctx = fmt.index_key_bytes / r
            else:  # only inside the candidate stage's blocks: at most blocks x block size positions
                bound = s.candidate_topk_blocks * s.candidate_block_size
                bounded = score * bound
                req += bound * fmt.index_key_bytes
    return LayerTerms(d.layer_id, role_name(d), attn, pos, bounded, req, ctx, bound)


def shared_terms(layers: Iterable[Any], fmt: ReadFormats | None = None) -> tuple[LayerTerms, ...]:
    """Every layer's role terms; ``fmt`` None: each layer's descriptor formats."""
    return tuple(layer_terms(d, fmt or descriptor_formats(d)) for d in layers)


@dataclass(frozen=True)
class EngramRead:
    """The Engram lookups of one token on the busiest rank: bytes, and the link they cross."""

    bytes_per_token: int
    link_bytes_s: float | None  # None: HBM (the tables in device memory)
    label: str


def engram_read(config: Mapping[str, Any], engine: str, tp: int, dp: int, host: Any = None,
                choice: Any = None) -> EngramRead | None:
    """Where ``engine`` keeps the Engram tables (``weights/engram.py``, under the engine's default or
    ``choice``) and what one token's lookups read on a rank: one row per hash column, the rank's
    ceil(columns / group) columns of each table. On the host they cross ``host`` (``cards.HostSide``);
    bad input where the card table has no host link for the card. None: the model has no tables."""
    from csa_plan.planner.weights.engram import EngramChoice, placement, tables_of

    tables = tables_of(dict(config))
    if not tables:
        return None
    p = placement(tables, engine, tp, dp, choice or EngramChoice())
    group = tp * dp if p.engine.startswith("sglang") else tp
    per_token = sum(math.ceil(len(t.columns) / group) * t.row_bytes for t in tables)
    if p.where == "host":
        if host is None:
            raise BadInput("options", "--device-memory", f"{engine} keeps the Engram tables on the host and the "
                                                         "card table has no host link for this card (planner/cards.py "
                                                         "HOSTS): its lookups cannot be timed")
        return EngramRead(per_token, float(host.link_bytes_s),
                          f"Engram on the host: {per_token:,} B a token per rank over {host.link} "
                          f"({host.link_bytes_s / 1e9:g} GB/s)")
    return EngramRead(per_token, None, f"Engram in HBM: {per_token:,} B a token per rank")
