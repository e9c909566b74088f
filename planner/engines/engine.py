"""One interface for every engine model: what an engine holds, reserves, sizes and admits.

An *engine model* (``EngineModel``) reproduces one engine release's own memory planning
for a model. ``configure`` resolves the engine's settings (its own defaults, its own
spelling) against a target GPU and returns an ``EnginePlan``, or raises ``EngineRefused``
when the engine itself would refuse that combination (a typed record naming the rule).

An ``EnginePlan`` answers, in the engine's own granularity (blocks, pages, slots):

* ``footprint(tokens, phase)`` — what one request of that many tokens holds while it
  decodes (one step in flight) or while it prefills under the engine's in-flight budget;
* ``startup_budget()`` — what the engine budgets per request of max_seq_len when it sizes
  its pool at start-up (vLLM's "Maximum concurrency" divisor, SGLang's per-request SWA);
* ``size_pool(kv_memory_bytes)`` — the pool(s) that a KV memory budget per device yields,
  what is reserved before the first request, and the start-up log line(s);
* ``admits(sizing, used_units, running, tokens)`` — whether one more request is admitted;
* ``runtime(sizing, trace, options)`` — the engine's own scheduler and memory manager in
  motion (``planner/replay``: the one replay loop steps it), or None for an engine whose
  runtime is not modelled step by step (it reserves at admission: ``simulate`` charges
  ``charge(tokens)`` instead).

Callers never branch on an engine's name: they look the model up in the registry
(``csa_plan.planner.engines.registry``) and use this interface. ``kv_memory_bytes`` per
device is the single input a device budget (weights, fractions, reservations) feeds in.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import field
from enum import Enum
from typing import TYPE_CHECKING, Any

from csa_plan.planner.errors import CsaPlanError, ExitCode
from csa_plan.planner.layout import GroupBytes, StateClass
from csa_plan.planner.record import record

if TYPE_CHECKING:
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.model import ModelSpec
    from csa_plan.planner.replay.protocol import EngineRuntime, RuntimeOptions, RuntimeTrace


class Phase(str, Enum):
    DECODE = "decode"  # one step in flight: 1 token (+ speculative drafts)
    PREFILL = "prefill"  # the engine's in-flight budget (chunked prefill, async batches)


@record
class EngineRefusal:
    """The engine would refuse this: which engine, which of its rules, which setting."""

    engine: str
    rule: str  # the engine's own check, e.g. "indexer.py dsa_indexer_uses_fp4"
    setting: str  # the option that triggers it, spelled as the engine spells it
    expected: str
    actual: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"type": "EngineRefused", "engine": self.engine, "rule": self.rule, "setting": self.setting,
                "expected": self.expected, "actual": self.actual, "message": self.message}


class EngineRefused(CsaPlanError):
    """Raised by ``configure`` / ``size_pool``: carries the typed refusal (exit 3)."""

    exit_code = ExitCode.REFUSED

    def __init__(self, refusal: EngineRefusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


@record
class PoolUse:
    """One pool (vLLM: one KV cache group; SGLang: one of its pools) of one request."""

    pool: str
    units: int  # blocks / pages / slots held
    unit_bytes: int  # bytes charged per unit (vLLM: every group's block costs bytes_per_block)
    state_class: StateClass  # the ledger class the bytes are booked under
    content_bytes: int = -1  # bytes of content per unit, before padding / block pricing (-1: = unit_bytes)

    @property
    def bytes(self) -> int:
        return self.units * self.unit_bytes

    @property
    def padding_bytes(self) -> int:
        """Charged beyond the content (page alignment; vLLM: every block priced at bytes_per_block)."""
        return 0 if self.content_bytes < 0 else self.units * (self.unit_bytes - self.content_bytes)

    def as_dict(self) -> dict[str, Any]:
        return {"pool": self.pool, "units": self.units, "unit_bytes": self.unit_bytes, "bytes": self.bytes,
                "state_class": self.state_class.value, "padding_bytes": self.padding_bytes}


@record
class Footprint:
    """What one request holds (or is budgeted): per pool, in the engine's units."""

    tokens: int
    phase: str  # a Phase value, or "startup" for the engine's start-up budget
    in_flight_tokens: int
    uses: tuple[PoolUse, ...]

    @property
    def total_bytes(self) -> int:
        return sum(u.bytes for u in self.uses)

    @property
    def units(self) -> int:
        return sum(u.units for u in self.uses)

    @property
    def padding_bytes(self) -> int:
        return sum(u.padding_bytes for u in self.uses)

    def by_class(self) -> GroupBytes:
        values = {c: 0 for c in StateClass}
        for u in self.uses:
            values[u.state_class] += u.bytes
        return GroupBytes(**{f"{c.value}_bytes": v for c, v in values.items()})

    def as_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "phase": self.phase, "in_flight_tokens": self.in_flight_tokens,
                "units": self.units, "bytes": self.total_bytes, "pools": [u.as_dict() for u in self.uses]}


@record
class PoolSize:
    """One pool the engine allocates at start-up."""

    name: str
    units: int
    unit_bytes: int
    note: str = ""

    @property
    def bytes(self) -> int:
        return self.units * self.unit_bytes

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "units": self.units, "unit_bytes": self.unit_bytes, "bytes": self.bytes,
                "note": self.note}


@record
class PoolSizing:
    """The pool(s) a KV memory budget per device yields, as the engine sizes them."""

    kv_memory_bytes: int
    unit_name: str  # "block", "page"
    unit_bytes: int  # the admission granularity: every charge is a multiple of it
    total_units: int  # allocated (vLLM: num_blocks, the null block included)
    usable_units: int  # what requests can take (vLLM: num_blocks - 1)
    max_running: int  # the engine's cap on running requests (max_num_seqs / max_running_requests)
    max_seq_len: int
    budget_units_per_request: int  # what the engine budgets one request of max_seq_len at start-up
    concurrency: float  # the engine's own "maximum concurrency" figure
    tokens: int  # the engine's own token capacity figure
    pools: tuple[PoolSize, ...]
    reserved_bytes: int  # held at start-up before the first request (SGLang: per-slot state, spare pages)
    log_lines: tuple[str, ...]
    extra: tuple[tuple[str, Any], ...] = ()

    @property
    def usable_bytes(self) -> int:
        return self.usable_units * self.unit_bytes

    def as_dict(self) -> dict[str, Any]:
        return {"kv_memory_bytes": self.kv_memory_bytes, "unit": self.unit_name, "unit_bytes": self.unit_bytes,
                "total_units": self.total_units, "usable_units": self.usable_units,
                "usable_bytes": self.usable_bytes, "max_running": self.max_running,
                "max_seq_len": self.max_seq_len, "budget_units_per_request": self.budget_units_per_request,
                "concurrency": self.concurrency, "tokens": self.tokens,
                "pools": [p.as_dict() for p in self.pools], "reserved_bytes": self.reserved_bytes,
                "log_lines": list(self.log_lines), **dict(self.extra)}


@record
class TpRule:
    """Whether a state spec is split over tensor-parallel ranks or copied to each."""

    spec: str
    placement: str  # "replicated" or "split"
    source: str

    def as_dict(self) -> dict[str, str]:
        return {"spec": self.spec, "placement": self.placement, "source": self.source}


@record
class Resolved:
    """One engine setting after defaults: its value and where it came from."""

    option: str  # spelled as the engine spells it, e.g. --max-num-batched-tokens
    value: Any
    source: str  # "given", or the engine rule the default comes from

    def as_dict(self) -> dict[str, Any]:
        return {"option": self.option, "value": self.value, "source": self.source}


class EnginePlan(ABC):
    """A model as one engine release plans it, with the settings resolved."""

    model_name: str
    max_seq_len: int
    settings: tuple[Resolved, ...]

    @property
    @abstractmethod
    def engine(self) -> "EngineModel": ...

    @property
    @abstractmethod
    def unit_bytes(self) -> int:
        """Bytes per admission unit (vLLM: bytes_per_block; SGLang: bytes per SWA page)."""

    @abstractmethod
    def footprint(self, tokens: int, phase: Phase = Phase.DECODE) -> Footprint: ...

    @abstractmethod
    def startup_budget(self) -> Footprint: ...

    @abstractmethod
    def size_pool(self, kv_memory_bytes: int) -> PoolSizing:
        """Raises EngineRefused when the engine would refuse to start with this budget."""

    @abstractmethod
    def admits(self, sizing: PoolSizing, used_units: int, running: int, tokens: int) -> bool: ...

    @abstractmethod
    def tp_rules(self) -> tuple[TpRule, ...]: ...

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """The engine's own structures (specs, groups, pools) for --json and the tables."""

    def charge(self, tokens: int) -> Footprint:
        """What the simulator charges a request that reserves ``tokens``: its peak over its
        life, i.e. the prefill footprint (windowed pools at their in-flight bound)."""
        return self.footprint(tokens, Phase.PREFILL)

    def admission_units(self, tokens: int) -> int:
        """Units of the admission pool a request of ``tokens`` takes (what ``admits`` counts in
        ``used_units``): every block for vLLM, the full pages for SGLang, 1 for onnx-genai."""
        return self.charge(tokens).units

    def setting(self, option: str) -> Any:
        return next(s.value for s in self.settings if s.option == option)

    @property
    def runtime_modelled(self) -> bool:
        """True when ``runtime`` steps the engine's scheduler (no reservation at admission)."""
        return False

    @property
    def replay_refusal(self) -> str | None:
        """Why the step-by-step replay must not run for this release although its start-up is modelled
        (its scheduler is not: replaying another release's would be a silent wrong answer), else None."""
        return None

    def runtime(self, sizing: PoolSizing, trace: "RuntimeTrace", options: "RuntimeOptions") -> "EngineRuntime":
        """The engine's scheduler and memory manager over ``trace`` in the pool ``sizing`` gives
        (``planner/replay/protocol.py``); raises where ``runtime_modelled`` is False."""
        raise NotImplementedError(f"{self.engine.name}: the runtime is not modelled step by step")


@record
class EngineModel(ABC):
    """One engine release; ``name`` is its registry key (``vllm-0.33``)."""

    name: str
    engine_name: str
    version: str
    summary: str
    options: tuple[str, ...] = field(default=())  # EngineSettings fields it reads
    sources: tuple[str, ...] = field(default=())
    # True where this release's pools for cross-layer shared compressed state (DeepSeek-V4.1) are
    # modelled; a shared-state model on any other release is a typed refusal (shared_engines.py)
    models_shared_state: bool = False
    # True where this release's disaggregated decode instance looks up its own prefix cache before it pulls the
    # prompt's KV, so the transfer moves only the tokens beyond the local hit (vLLM 0.33/0.34 with NIXL:
    # v1/core/sched/scheduler.py:1122-1141, nixl/pull_scheduler.py:34-65); False where the decode side keeps
    # no prefix cache by default (SGLang 0.5.23: --disaggregation-decode-enable-radix-cache off)
    decode_side_prefix_cache: bool = False

    @abstractmethod
    def configure(self, model: "ModelSpec", settings: "EngineSettings", max_seq_len: int) -> EnginePlan:
        """Resolve settings, build the engine's structures; raise EngineRefused if it would refuse."""

    def label(self) -> str:
        return f"{self.engine_name} {self.version}"
