"""Plan a model: gate every layer, size every admitted group, total per device.

``PlanOptions`` holds the command-line overrides; ``apply_options`` turns a model
into the descriptors one device sees (tensor parallel splits heads, never latents).
"""

from __future__ import annotations

from dataclasses import field
from functools import lru_cache

from csa_plan.planner.descriptor import CacheFormat, Descriptor
from csa_plan.planner.errors import BadInput
from csa_plan.planner.gate import Gate, run_gate
from csa_plan.planner.layout import ZERO, GroupBytes, LayerKind, descriptor_kind, layer_kind, shared_group_bytes
from csa_plan.planner.profile import LayoutProfile
from csa_plan.planner.profiles import get_profile
from csa_plan.planner.model import ModelSpec
from csa_plan.planner.record import record
from csa_plan.planner.refusals import Clause, Refusal, RefusalType
from csa_plan.planner.text import bounded, excerpt


@record
class PlanOptions:
    """Overrides applied to every layer; ``None`` keeps the model's own value."""

    gate: Gate = Gate.OP
    layout: str = "exact"  # a name in planner.profiles.PROFILES
    max_seq_len: int | None = None
    batch: int | None = None
    cache_format: str | None = None
    window: int | None = None
    query_len: int = 1
    tp: int = 1
    index_key_format: str | None = None  # shared-state models only (--index-key-format)

    def __post_init__(self) -> None:
        from csa_plan.planner.limits import MAX_NAME_CHARS

        if self.cache_format is not None and len(self.cache_format) > MAX_NAME_CHARS:
            raise BadInput("options", "--kv-format", f"{excerpt(self.cache_format)} is longer than {MAX_NAME_CHARS} "
                                                     "characters (MAX_NAME_CHARS): not a cache format")


@record
class LayerPlan:
    """One layer's kind, bytes and refusals under the plan's options."""

    descriptor: Descriptor
    kind: LayerKind
    refusals: tuple[Refusal, ...]
    bytes: GroupBytes | None  # None when the layer is refused (left out of totals)

    @property
    def admitted(self) -> bool:
        return not self.refusals


@record
class ModelPlan:
    """Every layer's plan and the per-device totals they add up to."""

    model: ModelSpec
    options: PlanOptions
    layers: tuple[LayerPlan, ...]
    per_device: GroupBytes = field(init=False)

    def __post_init__(self) -> None:
        total = ZERO
        for layer in self.layers:
            if layer.bytes is not None:
                total = total + layer.bytes
        object.__setattr__(self, "per_device", total.checked("plan", "total"))

    @property
    def refusals(self) -> tuple[Refusal, ...]:
        model_level = tuple(r for r in self.model.graph_refusals if r.layer is None)
        return tuple(r for layer in self.layers for r in layer.refusals) + model_level

    @property
    def admitted(self) -> bool:
        return not self.refusals

    @property
    def per_request_per_device_bytes(self) -> int:
        return self.per_device.total_bytes

    @property
    def all_devices_bytes(self) -> int:
        return self.per_device.total_bytes * self.options.tp

    def count(self, kind: LayerKind) -> int:
        return sum(1 for layer in self.layers if layer.kind is kind)


def apply_options(model: ModelSpec, options: PlanOptions, source: str = "options") -> tuple[Descriptor, ...]:
    """The descriptors one device keeps, after overrides and the tensor-parallel split."""
    if options.tp < 1:
        raise BadInput(source, "--tp", f"must be at least 1, got {options.tp}")
    if options.query_len < 1:
        raise BadInput(source, "--query-len", f"must be at least 1, got {options.query_len}")
    changes = {
        k: v
        for k, v in (
            ("max_seq_len", options.max_seq_len),
            ("batch", options.batch),
            ("cache_format", options.cache_format),
            ("window", options.window),
        )
        if v is not None
    }
    key_format = options.index_key_format
    if key_format is not None and not any(d.sharing is not None for d in model.layers):
        raise BadInput(source, "--index-key-format", "applies to models with shared compressed state "
                                                     "(kv_source_layer_ids) only; V4 index keys are CONTRACT §2's")
    out = []
    for d in model.layers:
        if changes:
            d = d.with_(**changes)
        if key_format is not None and d.sharing is not None:
            from dataclasses import replace

            d = d.with_(sharing=replace(d.sharing, index_key_format=key_format))
        if options.tp > 1:
            d = split_heads(d, options.tp, source)
        out.append(d)
    return tuple(out)


def split_heads(d: Descriptor, tp: int, source: str = "options") -> Descriptor:
    """Query and indexer heads divide across ranks; the single-head latent does not."""
    for name in ("num_heads", "index_num_heads"):
        heads = getattr(d, name)
        if heads % tp:
            raise BadInput(source, "--tp", f"layer {d.layer_id}: {name} {heads} is not divisible by tp {tp}")
    return d.with_(num_heads=d.num_heads // tp, index_num_heads=d.index_num_heads // tp)


def plan_layer(d: Descriptor, gate: Gate, query_len: int, extra: tuple[Refusal, ...] = (),
               profile: LayoutProfile | None = None) -> LayerPlan:
    """Gate one layer (plus any graph-level findings on it) and size it if admitted."""
    profile = profile or get_profile("exact")
    if d.sharing is not None:
        return _plan_shared(d, gate, query_len, extra, profile)
    kind = layer_kind(d.compression_ratio)
    if extra:
        gated = run_gate(gate, d) if kind is not LayerKind.SWA else ()
        return LayerPlan(d, kind, gated + extra, None)
    if kind is LayerKind.SWA:
        if d.known_format is None:
            refusal = Refusal.from_clauses(RefusalType.UNKNOWN_CACHE_FORMAT, d.layer_id, [
                Clause("cache_format", "|".join(f.value for f in CacheFormat), bounded(d.cache_format),
                       f"cache_format {excerpt(d.cache_format)} is unknown; the window ring cannot be sized")])
            return LayerPlan(d, kind, (refusal,), None)
        return LayerPlan(d, kind, (), profile.swa_bytes(d).checked("plan", f"layer {d.layer_id}"))
    refusals = run_gate(gate, d)
    if refusals:
        return LayerPlan(d, kind, refusals, None)
    return LayerPlan(d, kind, (), _sized(profile, d.with_(layer_id=0, is_mtp=False), query_len, d.layer_id))


def _plan_shared(d: Descriptor, gate: Gate, query_len: int, extra: tuple[Refusal, ...],
                 profile: LayoutProfile) -> LayerPlan:
    """A layer of a shared-state model: gated by the shared rules (window-only layers too, for
    their place in the topology), sized by the exact layout only — another profile has no
    shared-state layout and is refused once for the model (``plan_model``), never approximated."""
    kind = descriptor_kind(d)
    refusals = run_gate(gate, d) + extra
    if refusals or profile.name != "exact":
        return LayerPlan(d, kind, refusals, None)
    sized = _shared_cached(d.with_(is_mtp=False), query_len)  # the layer id stays: it decides the mode
    return LayerPlan(d, kind, (), sized.checked("plan", f"layer {d.layer_id}"))


@lru_cache(maxsize=4096)
def _shared_cached(d: Descriptor, query_len: int) -> GroupBytes:
    return shared_group_bytes(d, query_len)


def shared_profile_refusal(model: ModelSpec, profile: LayoutProfile) -> tuple[Refusal, ...]:
    """Only the exact layout knows shared compressed state; any other profile is a typed refusal."""
    if profile.name == "exact" or not any(d.sharing is not None for d in model.layers):
        return ()
    return (Refusal.from_clauses(RefusalType.LAYOUT_NOT_MODELLED, None, [Clause(
        "--layout", "exact", profile.name, f"layout {profile.name!r} has no model of cross-layer shared compressed "
                                           "state (kv_source_layer_ids); use the exact layout")]),)


def _sized(profile: LayoutProfile, d: Descriptor, query_len: int, layer_id: int) -> GroupBytes:
    return _sized_cached(profile, d, query_len).checked("plan", f"layer {layer_id}")


@lru_cache(maxsize=4096)
def _sized_cached(profile: LayoutProfile, d: Descriptor, query_len: int) -> GroupBytes:
    return profile.group_bytes(d, query_len)


def plan_model(model: ModelSpec, options: PlanOptions = PlanOptions(), source: str = "options") -> ModelPlan:
    descriptors = apply_options(model, options, source)
    on_layer: dict[int, tuple[Refusal, ...]] = {}
    for r in model.graph_refusals:
        if r.layer is not None:
            on_layer[r.layer] = on_layer.get(r.layer, ()) + (r,)
    profile = get_profile(options.layout, source)
    layers = tuple(plan_layer(d, options.gate, options.query_len, on_layer.get(d.layer_id, ()), profile)
                   for d in descriptors)
    extra = shared_profile_refusal(model, profile)
    if any(d.sharing is not None for d in descriptors):
        from csa_plan.planner.sharing import refuse_double_count

        doubled = refuse_double_count((layer.descriptor, layer.bytes) for layer in layers)
        if doubled:  # a layout that charged a reader for its source: refused, never reported as a total
            on = {r.layer: r for r in doubled}
            layers = tuple(LayerPlan(l.descriptor, l.kind, l.refusals + (on[l.descriptor.layer_id],), None)
                           if l.descriptor.layer_id in on else l for l in layers)
    if extra:
        from dataclasses import replace

        model = replace(model, graph_refusals=model.graph_refusals + extra)
    return ModelPlan(model=model, options=options, layers=layers)
