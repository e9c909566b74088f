"""One charge per source: the invariant that keeps shared compressed state from being counted per layer.

In a model with cross-layer shared compressed state (``Descriptor.sharing``), a kv source's
records, index keys and carry are one buffer that the source and every reader of it use. Charging
that buffer on each layer that reads it is the naive per-layer sum: 10,324 B/token instead of
890 for DeepSeek-V4.1-Flash at its reference formats, an 11.6x overcount (DEEPSEEK_V41.md §4).
``refuse_double_count`` is the check every per-layer sizing of such a model passes: only an
owner may carry source state, and each source exactly once. ``plan_model`` runs it on every
plan, so a layout that charged readers would be refused, not reported.
"""

from __future__ import annotations

from typing import Iterable

from csa_plan.planner.descriptor import Descriptor, LayerMode
from csa_plan.planner.layout import GroupBytes
from csa_plan.planner.refusals import Clause, Refusal, RefusalType


def source_state_bytes(b: GroupBytes) -> int:
    """The part of a layer's bytes that is shared source state: records, keys and carry."""
    return b.compressed_bytes + b.index_bytes + b.carry_bytes + b.index_carry_bytes


def refuse_double_count(layers: Iterable[tuple[Descriptor, GroupBytes | None]]) -> tuple[Refusal, ...]:
    """DoubleCount refusals for sized layers that charge a source's state more than once.

    A reader (or window-only layer) with any source-state bytes charges state its owner already
    charges; two owners of one source charge it twice. Layers without a source topology (V4)
    each own their state and are never refused here.
    """
    found: list[Refusal] = []
    owners: dict[int, int] = {}
    for d, b in layers:
        if b is None or d.sharing is None:
            continue
        mode = d.mode
        shared = source_state_bytes(b)
        if mode is LayerMode.OWN_SOURCE:
            if d.layer_id in owners:
                found.append(_refusal(d, shared, f"kv source {d.layer_id} is charged twice"))
            owners[d.layer_id] = shared
        elif shared:
            source = d.sharing.kv_source
            found.append(_refusal(d, shared, f"layer {d.layer_id} ({mode.value}) charges {shared:,} B of source "
                                             f"state that its kv source {source} already charges once for "
                                             "every reader"))
    return tuple(found)


def _refusal(d: Descriptor, shared: int, text: str) -> Refusal:
    return Refusal.from_clauses(RefusalType.DOUBLE_COUNT, d.layer_id,
                                [Clause("bytes", "0 B of source state (charged by the owner)", f"{shared} B", text)])


def owner_charges(layers: Iterable[tuple[Descriptor, GroupBytes | None]]) -> dict[int, GroupBytes]:
    """Each kv source's one charge (its layer's bytes), by source layer id."""
    return {d.layer_id: b for d, b in layers
            if b is not None and d.sharing is not None and d.mode is LayerMode.OWN_SOURCE}
