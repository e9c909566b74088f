"""vLLM 0.33.0's KV cache specs and its grouping algorithm (and 0.25-0.28's layer tuples), as pure integer code.

Ported from the release (line numbers are pointers into vllm-0.33.0):

* ``KvSpec`` mirrors the two spec classes DeepSeek-V4 registers:
  ``MLAAttentionSpec`` (a FullAttentionSpec: compressed records, indexer keys) and
  ``SlidingWindowMLASpec`` (a SlidingWindowSpec: compressor states, the SWA cache).
  Page = heads x (block_size // tokens_per_state) x state content bytes, padded up to the
  spec's ``alignment`` (v1/kv_cache_interface.py ``AttentionSpec.unpadded_page_size_bytes``,
  ``_apply_alignment_padding``).
* ``packed_groups`` is ``_get_packed_kv_cache_groups`` (v1/core/kv_cache_planning.py
  ~914-1041): greedy buckets of uniform type (``UniformTypeKVCacheSpecs.is_uniform_type``:
  same block size and the same registered base type — every MLAAttentionSpec is a
  FullAttentionSpec; SlidingWindowMLASpecs must share their window), the balanced test,
  repeats per group by ``_approximate_gcd``, the anchor for state buckets, and the
  ``layers[i::n]`` split of each bucket's pattern repeats.
* ``bytes_per_block`` is ``_get_kv_cache_bytes_per_block`` for a block-outermost layout
  (~574-605): the largest group's page sum, rounded to the lcm of the stride alignments.
* ``blocks_per_request`` is a group's ``cdiv(max_memory_usage_bytes, page_size_bytes)``
  (v1/core/kv_cache_utils.py ``get_max_concurrency_for_kv_cache_config``): full attention
  ``cdiv(L, block)``; a sliding window ``cdiv(min(window - 1 + extra + in_flight, L),
  block) + 1`` (kv_cache_interface.py ``SlidingWindowSpec.max_admission_blocks_per_request``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from enum import Enum
from functools import cached_property
from math import gcd, lcm

from csa_plan.planner.record import record
from csa_plan.planner.units import ceil_div, round_up


class SpecKind(str, Enum):
    FULL = "MLAAttentionSpec"  # registered with uniform_type_base_spec=FullAttentionSpec
    SLIDING = "SlidingWindowMLASpec"  # uniform_type_base_spec=SlidingWindowMLASpec
    # DeepSeek-V4.1's ratio-2 compressor ring (v1/kv_cache_interface.py:968-1005): one block per request for
    # its whole life (max_num_blocks_per_req = 1), uniform only with other rings, never prefix-cached
    CIRCULAR = "CircularBufferSpec"


@record
class KvSpec:
    """One layer's KV cache spec (the fields vLLM's planning reads)."""

    name: str  # vLLM's layer name, e.g. model.layers.2.self_attn.indexer.k_cache
    role: str  # what it holds, for tables: "C4 attention", "C4 indexer keys", ...
    layer_id: int
    kind: SpecKind
    block_size: int
    tokens_per_state: int  # tokens compressed into one stored state (1 for states and SWA rows)
    num_heads: int
    state_content_bytes: int
    alignment: int | None
    sliding_window: int | None = None
    extra_retained_tokens: int = 0
    is_draft: bool = False
    stride_alignment: int = 1  # get_block_stride_alignment(): 1 when block_size is the kernel block size
    page_size_padded: int | None = None  # 0.25/0.26: a state page padded up to a full-attention page

    # The page sizes are read thousands of times a check (grouping, packing, every footprint):
    # computed once per spec (cached in the instance, outside its fields).
    @cached_property
    def num_states(self) -> int:
        return self.block_size // self.tokens_per_state if self.tokens_per_state > 0 else 1

    @cached_property
    def unpadded_page_bytes(self) -> int:
        return self.num_heads * self.num_states * self.state_content_bytes

    @cached_property
    def page_bytes(self) -> int:
        if self.page_size_padded is not None:
            return self.page_size_padded
        if self.alignment is None:
            return self.unpadded_page_bytes
        return round_up(self.unpadded_page_bytes, self.alignment)

    def with_kernel_stride(self, kernel_block_tokens: int = 256) -> "KvSpec":
        """0.33 v1/worker/utils.py customize_attention_spec: a backend declaring only fixed kernel block
        sizes ([256]: FLASHMLA_SPARSE_DSV4, DEEPSEEK_V4_INDEXER) gets ``MultipleOf(256)``, and
        ``get_block_stride_alignment`` (v1/kv_cache_interface.py ~224-233) makes the block stride a
        multiple of the page at kernel block gcd(256, block_size) when that splits the block (512: 256);
        1 when the block is whole (128, 256). 0.25/0.26's packed layout sums pages and ignores it."""
        kernel = gcd(kernel_block_tokens, self.block_size)
        if kernel == self.block_size:
            return self
        return replace(self, stride_alignment=replace(self, block_size=kernel).page_bytes)

    @property
    def aligned_page_bytes(self) -> int:
        """The page before any padding to another spec's page (``_apply_alignment_padding`` only)."""
        return replace(self, page_size_padded=None).page_bytes

    @property
    def uniform_key(self) -> tuple:
        """Two specs share a bucket iff their keys are equal (is_uniform_type)."""
        return (self.block_size, self.kind, self.sliding_window if self.kind is SpecKind.SLIDING else None)

    def blocks_per_request(self, max_model_len: int, in_flight_tokens: int) -> int:
        """cdiv(max_memory_usage_bytes, page_size_bytes) for this spec."""
        if self.kind is SpecKind.CIRCULAR:  # CircularBufferSpec.max_memory_usage_bytes = one page
            return 1
        if self.kind is SpecKind.FULL:
            return ceil_div(max_model_len, self.block_size)
        tokens = min(self.sliding_window - 1 + self.extra_retained_tokens + in_flight_tokens, max_model_len)
        return ceil_div(tokens, self.block_size) + 1

    def blocks_held(self, tokens: int, max_model_len: int, in_flight_tokens: int) -> int:
        """Blocks a request of ``tokens`` takes: the runtime gate's
        ``min(cdiv(tokens, block), max_admission_blocks_per_request)`` (single_type_kv_cache_manager.py
        ``get_num_blocks_to_allocate`` with apply_admission_cap), the cap sized for ``in_flight_tokens``;
        a ring its one block (``CircularBufferManager.get_num_blocks_to_allocate``,
        single_type_kv_cache_manager.py:1203-1214)."""
        if self.kind is SpecKind.CIRCULAR:
            return 1 if tokens > 0 else 0
        full = ceil_div(tokens, self.block_size)
        if self.kind is SpecKind.FULL:
            return full
        return min(full, self.blocks_per_request(max_model_len, in_flight_tokens))


@record
class KvGroup:
    """One KV cache group: layers sharing one block table (KVCacheGroupSpec)."""

    index: int
    specs: tuple[KvSpec, ...]

    @property
    def first(self) -> KvSpec:
        return self.specs[0]

    @property
    def page_sum_bytes(self) -> int:
        """Bytes of one block of this group (the packed per-layer pages)."""
        return sum(s.page_bytes for s in self.specs)

    @property
    def label(self) -> str:
        roles = Counter(s.role for s in self.specs)
        return " + ".join(f"{role} x{n}" for role, n in roles.items())

    def blocks_per_request(self, max_model_len: int, in_flight_tokens: int) -> int:
        return self.first.blocks_per_request(max_model_len, in_flight_tokens)

    def blocks_held(self, tokens: int, max_model_len: int, in_flight_tokens: int) -> int:
        return self.first.blocks_held(tokens, max_model_len, in_flight_tokens)


def approximate_gcd(values: list[int], lower_bound: int | None = None) -> int:
    """``_approximate_gcd``: the chunk size d minimising sum of upward padding; ties prefer larger d."""
    if not values:
        raise ValueError("values must be non-empty")
    min_d = max(1, lower_bound if lower_bound is not None else 1)
    max_d = max(values)
    if min_d > max_d:
        return min_d
    best_d, best_pad = min_d, None
    for d in range(min_d, max_d + 1):
        pad = sum((d - (x % d)) % d for x in values)
        if best_pad is None or pad < best_pad or (pad == best_pad and d > best_d):
            best_pad, best_d = pad, d
    return best_d


@record
class _Bucket:
    """Specs that share a uniform key, as ``_buckets`` groups them before packing."""

    specs: tuple[KvSpec, ...]
    page_layers: tuple[tuple[int, tuple[KvSpec, ...]], ...]  # page size -> layers, insertion order
    balanced: bool

    @property
    def max_layers_per_page_size(self) -> int:
        return Counter(s.page_bytes for s in self.specs).most_common(1)[0][1]


def _buckets(specs: list[KvSpec]) -> list[_Bucket]:
    groups: list[list[KvSpec]] = []
    for spec in specs:
        for bucket in groups:
            if bucket[0].uniform_key == spec.uniform_key:
                bucket.append(spec)
                break
        else:
            groups.append([spec])
    out = []
    for bucket in groups:
        by_page: dict[int, list[KvSpec]] = {}
        for s in bucket:
            by_page.setdefault(s.page_bytes, []).append(s)
        balanced = len({len(v) for v in by_page.values()}) == 1
        out.append(_Bucket(tuple(bucket), tuple((p, tuple(v)) for p, v in by_page.items()), balanced))
    return out


def packed_groups(specs: list[KvSpec]) -> tuple[list[KvGroup], int | None]:
    """``_get_packed_kv_cache_groups`` (block-outermost layout, mixed page sizes).

    Returns the groups and repeats_per_group (None when no balanced multi-size bucket).
    """
    buckets = _buckets(specs)
    min_repeats = max((b.max_layers_per_page_size for b in buckets if b.balanced and len(b.page_layers) > 1),
                      default=0)
    repeats = (approximate_gcd([b.max_layers_per_page_size for b in buckets if b.balanced], lower_bound=min_repeats)
               if min_repeats else None)

    def num_groups_for(b: _Bucket) -> int:
        if b.balanced and repeats is not None:
            return ceil_div(b.max_layers_per_page_size, repeats)
        return 1

    def widest_group_bytes(b: _Bucket, n: int) -> int:
        return sum(ceil_div(len(layers), n) * page for page, layers in b.page_layers)

    def is_state_bucket(b: _Bucket) -> bool:
        # Mamba never occurs for DeepSeek-V4/V4.1; circular buffers (V4.1's ratio-2 rings) always count
        if b.specs[0].kind is SpecKind.CIRCULAR:
            return True
        return repeats is None and b.specs[0].kind is SpecKind.SLIDING

    anchor = max((widest_group_bytes(b, len(b.specs) if is_state_bucket(b) else num_groups_for(b))
                  for b in buckets), default=0)
    groups: list[tuple[KvSpec, ...]] = []
    for b in buckets:
        n = num_groups_for(b)
        if anchor and is_state_bucket(b):
            states_per_block = max(anchor // b.specs[0].page_bytes, 1)
            n = max(n, ceil_div(len(b.specs), states_per_block))
        if n == 1:
            groups.append(b.specs)
            continue
        pattern_repeats = list(zip(*(layers for _, layers in b.page_layers)))
        for i in range(n):
            groups.append(tuple(s for repeat in pattern_repeats[i::n] for s in repeat))
    return [KvGroup(i, g) for i, g in enumerate(groups)], repeats


def kv_cache_groups(specs: list[KvSpec]) -> tuple[list[KvGroup], int | None]:
    """``get_kv_cache_groups`` for the cases DeepSeek-V4 reaches (hybrid manager on, no hidden states).

    Every layer equal -> one group; one uniform type -> one group; otherwise packed.
    """
    if not specs:
        return [], None
    if len({s.uniform_key for s in specs}) == 1:
        return [KvGroup(0, tuple(specs))], None
    if len({s.page_bytes for s in specs}) > 1:
        return packed_groups(specs)
    raise NotImplementedError("mixed spec types with one page size (uniform-page-size grouping) is not modelled")


def bytes_per_block(groups: list[KvGroup]) -> int:
    """``_get_kv_cache_bytes_per_block`` for a block-outermost layout: the largest group's
    page sum, rounded to the lcm of every layer's stride alignment (1 at block size 256)."""
    return round_up(largest_group_bytes(groups), lcm(*(s.stride_alignment for g in groups for s in g.specs)))


# --- vLLM 0.25.0 - 0.28.0: layer tuples (v1/core/kv_cache_utils.py) -------------------------------------
# Two variants: 0.25.0 / 0.26.0 (the same code) pad each window page up to a full-attention page; 0.27.0 /
# 0.28.0 keep the window pages as they are (0.27.0 _get_kv_cache_groups_uniform_groups :1670-1754, 0.28.0
# :1623-1707: "The packed block planner overlays groups, so their page sizes do not need to match"), lay one
# block out as the largest group's pages side by side (_get_packed_kv_cache_layout, 0.27.0 :1283-1305) and
# divide "Maximum concurrency" by the groups' blocks summed (get_max_concurrency_for_kv_cache_config :937-959,
# 0.28.0 :917-939).


def tuple_groups(specs: list[KvSpec], pad_window_pages: bool = True) -> list[KvGroup]:
    """``group_and_unify_kv_cache_specs`` + ``_get_kv_cache_groups_uniform_groups`` (0.25.0 / 0.26.0
    v1/core/kv_cache_utils.py ~1525-1700; 0.27.0 :1592-1754): every MLAAttentionSpec in one full group;
    sliding-window specs bucketed by (block_size, window), each page padded up to the nearest full-group page
    at or above it (``pad_window_pages``: 0.25/0.26 only, whose assertion fails when a window page outgrows
    every full page), and each bucket split ``[i::n]`` into cdiv(layers per page size, num_layer_tuples)
    groups, num_layer_tuples the ``_approximate_gcd`` of every bucket's tuples bounded below by the full
    group's."""
    full = [s for s in specs if s.kind is SpecKind.FULL]
    buckets: dict[tuple[int, int | None], list[KvSpec]] = {}
    for s in specs:
        if s.kind is SpecKind.SLIDING:
            buckets.setdefault((s.block_size, s.sliding_window), []).append(s)
    if not full:
        raise NotImplementedError("DeepSeek-V4 layer tuples need at least one full-attention (MLA) layer")
    if len({s.block_size for s in full}) > 1:
        raise NotImplementedError("full-attention layers of different block sizes are not one uniform type")

    def tuples(group: list[KvSpec]) -> int:
        return Counter(s.page_bytes for s in group).most_common(1)[0][1]

    per_group = [tuples(full)] + [tuples(b) for b in buckets.values()]
    num_tuples = approximate_gcd(per_group, lower_bound=per_group[0])
    full_pages = sorted({s.page_bytes for s in full})
    groups: list[tuple[KvSpec, ...]] = [tuple(full)]
    for bucket in buckets.values():
        if not pad_window_pages:  # 0.27.0 :1725-1726: layers_per_size keyed by each layer's own page size
            by_own: dict[int, list[KvSpec]] = {}
            for s in bucket:
                by_own.setdefault(s.page_bytes, []).append(s)
            groups += _split_tuples(by_own, num_tuples)
            continue
        if max(s.page_bytes for s in bucket) > full_pages[-1]:
            raise NotImplementedError(
                f"a sliding-window page of {max(s.page_bytes for s in bucket):,} B is larger than every "
                f"full-attention page (largest {full_pages[-1]:,} B): vLLM's start-up fails its assertion "
                "max(sm_page_sizes) <= max(all_page_sizes) (AssertionError)")
        by_size: dict[int, list[KvSpec]] = {}
        for s in bucket:
            target = min(x for x in full_pages if x >= s.page_bytes)
            padded = s if target == s.page_bytes else replace(s, page_size_padded=target)
            by_size.setdefault(target, []).append(padded)
        groups += _split_tuples(by_size, num_tuples)
    return [KvGroup(i, g) for i, g in enumerate(groups)]


def _split_tuples(by_size: dict[int, list[KvSpec]], num_tuples: int) -> list[tuple[KvSpec, ...]]:
    """One window bucket's layer tuples split ``[i::n]`` into cdiv(layers per page size, num_tuples) groups
    (the engine asserts every page size has as many layers)."""
    if len({len(v) for v in by_size.values()}) != 1:
        raise NotImplementedError("a sliding-window bucket with unequal layers per page size")
    n = ceil_div(len(next(iter(by_size.values()))), num_tuples)
    layer_tuples = list(zip(*by_size.values()))
    return [tuple(s for t in layer_tuples[i::n] for s in t) for i in range(n)]


def tuple_bytes_per_block(groups: list[KvGroup]) -> int:
    """``_get_kv_cache_config_packed`` / ``_bucket_layers_by_page_size``: the sum over page sizes of the
    page times its slots (the most layers of that page size in any one group)."""
    slots: dict[int, int] = {}
    for g in groups:
        counts = Counter(s.page_bytes for s in g.specs)
        for page, n in counts.items():
            slots[page] = max(slots.get(page, 0), n)
    return sum(page * n for page, n in slots.items())


def largest_group_bytes(groups: list[KvGroup]) -> int:
    """The largest group's page sum: 0.33's block before stride rounding (``bytes_per_block``), and the whole
    block under 0.27.0 / 0.28.0's ``_get_packed_kv_cache_layout`` (0.27.0 kv_cache_utils.py:1283-1305, 0.28.0
    :1249): each group laid out densely in one shared block, groups overlapping, so a block is the largest
    group's page sum (no stride alignment: 0.27/0.28 have no ``get_block_stride_alignment``)."""
    return max(g.page_sum_bytes for g in groups)


def tuple_blocks_per_request(groups: list[KvGroup], max_model_len: int, in_flight_tokens: int) -> int:
    """0.25.0 / 0.26.0 ``get_max_concurrency_for_kv_cache_config``: cdiv(sum of groups' max pages x page sums,
    the first group's page sum) — the per-request divisor of "Maximum concurrency" (layer counts cancel).
    0.27.0 on divide by the groups' blocks summed, as the packed planner does."""
    total = sum(g.blocks_per_request(max_model_len, in_flight_tokens) * g.page_sum_bytes for g in groups)
    return ceil_div(total, groups[0].page_sum_bytes)


def tuple_needed_bytes(groups: list[KvGroup], max_model_len: int, in_flight_tokens: int) -> int:
    """``_max_memory_usage_bytes_from_groups`` (all groups uniform-type; the same body 0.25.0 - 0.28.0, 0.27.0
    kv_cache_utils.py:1913-1937): every group reserves the global number of layer tuples x its max pages x the
    full group's distinct page sizes summed."""
    tuple_bytes = sum({s.page_bytes for s in groups[0].specs})
    num_tuples = max(Counter(s.page_bytes for s in g.specs).most_common(1)[0][1] for g in groups)
    return sum(num_tuples * g.blocks_per_request(max_model_len, in_flight_tokens) * tuple_bytes for g in groups)
