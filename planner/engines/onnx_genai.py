"""``onnx-genai``: the reference runtime's CSA buffer manager as an engine model.

Source: justinchuby/onnx-genai ``crates/onnx-runtime-ep-cuda/src/kernels/csa_device_state.rs``
(commit 2a7703a4): ``CsaBufferLayout::from_values`` sizes all seven buffers of every CSA
node for the request's max_seq_len at admission (the ``onnx-genai-b6`` layout profile's
bytes: both ratios' records and carries, the index cache, the dense ring, top-k-512
scratch) and keeps them until the request ends; sliding-window-only layers keep their
ring. There are no blocks or pages: the unit is one request's whole reservation, so a
request holds the same bytes in every phase and at every length up to max_seq_len.
When a node carries no window attribute, its window is max_seq_len
(``csa_device_state.rs`` ~96-98) — read here from the ONNX reader's note that the window
came from the default. No engine caps running requests; TP is not modelled by the
runtime (one device).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from csa_plan.planner.engines.engine import (EngineModel, EnginePlan, EngineRefusal, EngineRefused, Footprint,
                                              Phase, PoolSize, PoolSizing, PoolUse, Resolved, TpRule)
from csa_plan.planner.profile_onnx_genai import b6_group_bytes
from csa_plan.planner.engines.settings import EngineSettings, check_accepted
from csa_plan.planner.layout import GroupBytes, swa_ring_bytes

ENGINE = "onnx-genai"
SRC = "justinchuby/onnx-genai crates/onnx-runtime-ep-cuda/src/kernels/csa_device_state.rs @2a7703a4"
UNLIMITED_RUNNING = 1 << 62


def window_from_default(notes: tuple[str, ...]) -> bool:
    return any(n.startswith("window ") and "from the default (no" in n for n in notes)


@dataclass(frozen=True)
class OnnxGenaiPlan(EnginePlan):
    model_name: str
    max_seq_len: int
    settings: tuple[Resolved, ...]
    per_request: GroupBytes
    window_is_max_seq_len: bool
    _engine: EngineModel = field(repr=False)

    @property
    def engine(self) -> EngineModel:
        return self._engine

    @property
    def unit_bytes(self) -> int:
        return self.per_request.total_bytes

    def _uses(self) -> tuple[PoolUse, ...]:
        return tuple(PoolUse(f"{c.value} buffers", 1, v, c) for c, v in self.per_request.by_class().items() if v)

    def footprint(self, tokens: int, phase: Phase = Phase.DECODE) -> Footprint:
        return Footprint(tokens, Phase(phase).value, 1, self._uses())

    def startup_budget(self) -> Footprint:
        return Footprint(self.max_seq_len, "startup", 1, self._uses())

    def size_pool(self, kv_memory_bytes: int) -> PoolSizing:
        per = self.unit_bytes
        n = kv_memory_bytes // per
        if n < 1:
            raise EngineRefused(EngineRefusal(ENGINE, f"{SRC} (buffers allocated per request)", "--kv-memory",
                                              f">= {per} bytes", str(kv_memory_bytes),
                                              f"{ENGINE}: one request's buffers take {per:,} B"))
        return PoolSizing(kv_memory_bytes=kv_memory_bytes, unit_name="request", unit_bytes=per, total_units=n,
                          usable_units=n, max_running=UNLIMITED_RUNNING, max_seq_len=self.max_seq_len,
                          budget_units_per_request=1, concurrency=float(n), tokens=n * self.max_seq_len,
                          pools=(PoolSize("per-request CSA buffers", n, per, "allocated at admission"),),
                          reserved_bytes=0, log_lines=())

    def admits(self, sizing: PoolSizing, used_units: int, running: int, tokens: int) -> bool:
        return used_units + 1 <= sizing.usable_units

    def charge(self, tokens: int) -> Footprint:
        return self.startup_budget()

    def admission_units(self, tokens: int) -> int:
        return 1

    def tp_rules(self) -> tuple[TpRule, ...]:
        return (TpRule("all seven CSA buffers", "replicated", f"{SRC}: one device per runtime (no TP split)"),)

    def describe(self) -> dict[str, Any]:
        return {"startup_note": "onnx-genai reserves every CSA node's seven buffers for max_seq_len at admission"
                                + (" (window = max_seq_len: the graph gives no window)" if self.window_is_max_seq_len
                                   else ""),
                "startup_budget_setting": "--max-seq-len",
                "per_request": self.per_request.as_dict()}


@dataclass(frozen=True)
class OnnxGenai(EngineModel):
    def configure(self, model, settings: EngineSettings, max_seq_len: int) -> OnnxGenaiPlan:
        check_accepted(settings, ENGINE, ())
        no_window = window_from_default(model.notes)
        total = GroupBytes()
        for d in model.layers:
            d = d.with_(max_seq_len=max_seq_len, layer_id=0, is_mtp=False)
            if no_window:
                d = d.with_(window=max_seq_len)
            if d.compression_ratio == 0:
                total = total + swa_ring_bytes(d)
            elif d.compression_ratio in (4, 128):
                total = total + b6_group_bytes(d, 1)
            else:
                raise EngineRefused(EngineRefusal(ENGINE, f"{SRC} CsaBufferLayout (ratios 4 and 128)",
                                                  "compress_ratios", "0, 4 or 128", str(d.compression_ratio),
                                                  f"{ENGINE}: compress ratio {d.compression_ratio} is not supported"))
        out = (Resolved("--max-seq-len", max_seq_len, "buffers sized for max_seq_len at admission"),)
        return OnnxGenaiPlan(model_name=model.name, max_seq_len=max_seq_len, settings=out, per_request=total,
                             window_is_max_seq_len=no_window, _engine=self)


ONNX_GENAI = OnnxGenai(name=ENGINE, engine_name="onnx-genai", version="2a7703a4",
                       summary="onnx-genai reference runtime: seven buffers per CSA node, reserved for max_seq_len "
                               "per request", options=(), sources=(SRC,))
