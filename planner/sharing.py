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

from typing import Iterable, Sequence

from csa_plan.planner.descriptor import Descriptor, LayerMode
from csa_plan.planner.errors import CsaPlanError, ExitCode
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


class SharingGroupSplitError(CsaPlanError):
    """A pipeline split that puts readers on another stage than their kv source; ``refusal`` is typed."""

    exit_code = ExitCode.REFUSED

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


def require_whole_groups(layers: Sequence[Descriptor], stages: Sequence[Iterable[int]]) -> None:
    """Refuse (SharingGroupSplit) a pipeline split inside a sharing group: a reader's stage would hold
    no copy of the state it reads, so its stage's bytes would be short by the source's state. vLLM
    refuses the same split (``models/deepseek_v41/attention.py:463-468, 606-612``); csa-plan does not
    invent a transfer no engine makes."""
    stage_of = {i: s for s, ids in enumerate(stages) for i in ids}
    clauses = []
    for d in layers:
        if d.sharing is None or d.mode is not LayerMode.READER or d.sharing.kv_source is None:
            continue
        src = d.sharing.kv_source
        if d.layer_id in stage_of and src in stage_of and stage_of[d.layer_id] != stage_of[src]:
            clauses.append((d.layer_id, src, stage_of[d.layer_id], stage_of[src]))
    if not clauses:
        return
    first = clauses[0]
    readers = [c[0] for c in clauses]
    raise SharingGroupSplitError(Refusal.from_clauses(RefusalType.SHARING_GROUP_SPLIT, None, [Clause(
        "--pp", "stage boundaries between sharing groups", f"{len(readers)} readers on another stage than their "
        f"source", f"the pipeline split puts reader layers {readers} on other stages than their kv sources (layer "
        f"{first[0]} on stage {first[2]} reads source {first[1]} on stage {first[3]}); no stage would hold the state "
        "they read. Choose a --pp whose boundaries fall between sharing groups, or pp 1")]))
