"""``check --engine``: configure an engine model and size its pool (pure; no printing)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from csa_plan.planner.errors import BadInput
from csa_plan.planner.record import record

if TYPE_CHECKING:  # the engine models load only when an engine is named (start-up: docs/architecture.md)
    from csa_plan.planner.engines.engine import EngineModel, EnginePlan, EngineRefusal, PoolSizing
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.model import ModelSpec


@record
class EngineCheck:
    """An engine's answer at one length: its plan and pool, or the refusal that stops it."""

    engine: EngineModel
    plan: EnginePlan | None  # None when the engine refuses the settings
    sizing: PoolSizing | None  # None without a KV memory budget, or when the engine refuses it
    refusal: EngineRefusal | None
    kv_memory_bytes: int | None

    @property
    def admitted(self) -> bool:
        return self.refusal is None


def max_seq_len_of(model: ModelSpec, max_seq_len: int | None) -> int:
    if max_seq_len is not None:
        if max_seq_len < 1:
            raise BadInput("options", "--max-seq-len", "must be at least 1")
        return max_seq_len
    return max(d.max_seq_len for d in model.layers)


def engine_check(model: ModelSpec, engine_name: str, settings: EngineSettings, max_seq_len: int | None,
                 kv_memory_bytes: int | None) -> EngineCheck:
    from csa_plan.planner.engines.engine import EngineRefused
    from csa_plan.planner.engines.registry import get_engine

    engine = get_engine(engine_name)
    length = max_seq_len_of(model, max_seq_len)
    if kv_memory_bytes is not None and kv_memory_bytes <= 0:
        raise BadInput("options", "--kv-memory", "must be positive")
    try:
        plan = engine.configure(model, settings, length)
    except EngineRefused as exc:
        return EngineCheck(engine, None, None, exc.refusal, kv_memory_bytes)
    sizing = None
    if kv_memory_bytes is not None:
        try:
            sizing = plan.size_pool(kv_memory_bytes)
        except EngineRefused as exc:
            return EngineCheck(engine, plan, None, exc.refusal, kv_memory_bytes)
    return EngineCheck(engine, plan, sizing, None, kv_memory_bytes)
