"""``simulate --engine``: what an engine model charges, fed to the one ledger.

``EngineRun.prepare`` turns the engine's own accounting into the simulator's inputs:
every reservation tier is charged ``EnginePlan.charge(tokens)`` — vLLM: every KV cache
group's blocks for a request of that many tokens under the in-flight budget (a request's
peak), all at bytes_per_block; SGLang: its full pages (the SWA pool and the c128 state of
every request slot are reserved at start-up, before the first request); onnx-genai: the
request's whole buffer set — so every charge is a whole number of the engine's units.
The ledger's per-device limit is the pool the KV memory yields, in those units (vLLM:
``(num_blocks - 1) x bytes_per_block``, the null block held back), and the engine's
running-request cap (max_num_seqs / max_running_requests) bounds each replica. Then the
ledger's byte admission is exactly the engine's unit admission.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from csa_plan.planner.engines.registry import get_engine
from csa_plan.planner.engines.settings import EngineSettings
from csa_plan.planner.errors import BadInput

if TYPE_CHECKING:
    from csa_plan.planner.engines.engine import EnginePlan, PoolSizing
    from csa_plan.planner.layout import GroupBytes
    from csa_plan.planner.model import ModelSpec

UNCAPPED = 1 << 60


@dataclass(frozen=True)
class EngineRun:
    name: str
    settings: EngineSettings = EngineSettings()
    kv_memory_bytes: int | None = None  # None: the device budget's limit (device memory - reserved) is the KV memory
    # --pp above 1: every stage's pool and the scheduler's (serving/pipeline.py PipelinePools), sized by the caller
    pipeline: Any = field(default=None, compare=False, hash=False)

    def prepare(self, spec: "ModelSpec", pp: int, limit_bytes: int, max_seq_len: int,
                tier_tokens: list[int]) -> tuple[int, int, list[tuple["GroupBytes", ...]]]:
        """The ledger's inputs under this engine: ``(limit_bytes, max_running, bundles)``: the pool in the
        engine's units, its running-request cap (0: none), and one charge per reservation tier."""
        plan, sizing = self.sized(spec, pp, limit_bytes, max_seq_len)
        limit = sizing.usable_bytes if sizing else 0
        cap = sizing.max_running if sizing else plan_cap(plan)
        cap = 0 if cap >= UNCAPPED else cap
        return limit, cap, [(plan.charge(t).by_class(),) for t in tier_tokens]

    def sized(self, spec: "ModelSpec", pp: int, limit_bytes: int,
              max_seq_len: int) -> tuple["EnginePlan", "PoolSizing | None"]:
        """The engine configured once for the run, and its pool from the KV memory (this record's, else
        the device budget's ``limit_bytes``; None without either)."""
        if pp != 1:
            if self.pipeline is None or len(self.pipeline.stages) != pp:
                raise BadInput("options", "--pp", f"--engine {self.name} with {pp} pipeline stages needs each stage's "
                                                  "budget: name --device-memory (or --gpu)")
            return self.pipeline.plan, self.pipeline.sizing  # the pool the scheduler sees (the smallest stage's)
        plan = get_engine(self.name).configure(spec, self.settings, max_seq_len)
        kv = self.kv_memory_bytes if self.kv_memory_bytes is not None else (limit_bytes or None)
        return plan, (plan.size_pool(kv) if kv else None)

    def describe(self, spec: "ModelSpec", pp: int, limit_bytes: int, max_seq_len: int) -> dict[str, Any]:
        plan, sizing = self.sized(spec, pp, limit_bytes, max_seq_len)
        e = plan.engine
        return {"name": e.name, "engine": e.engine_name, "version": e.version,
                "settings": [s.as_dict() for s in plan.settings], "unit_bytes": plan.unit_bytes,
                "pool": sizing.as_dict() if sizing else None,
                "replayed": bool(plan.runtime_modelled)}  # its own scheduler decides: no reserve or policy


def plan_cap(plan: "EnginePlan") -> int:
    """The running-request cap without a pool (no KV memory given): the engine's setting."""
    for option in ("--max-num-seqs", "--max-running-requests"):
        try:
            return int(plan.setting(option))
        except StopIteration:
            continue
    return UNCAPPED
