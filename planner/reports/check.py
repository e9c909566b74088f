"""The versioned machine-readable form of a check (``--json``), built from plan objects.

Schema ``csa-plan/check/v2`` (docs/answers.md, docs/json-schemas.md): the capacity answer is one ``fit`` object
with its authority (``engine: vllm-0.33`` or ``layout: exact``); v1's ``memory`` and
``budget.requests_that_fit`` (two counts that could disagree) are gone. Every refusal, of the
configuration (gate, engine rules) and of the fit (weights, state pool), is in ``all_refusals``.
The head (verdict, answer, refusals, log line, pool) is a typed ``CheckHead`` that the text and
the JSON renderers both read, so they cannot disagree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from csa_plan.planner.capacity import DeviceFit
from csa_plan.planner.descriptor import DESCRIPTOR_FIELDS, Descriptor
from csa_plan.planner.layout import PER_LAYER_KINDS, LayerKind

SHARED_KINDS = (LayerKind.OWNER, LayerKind.READER)
from csa_plan.planner.plan import LayerPlan, ModelPlan
from csa_plan.planner.record import record

if TYPE_CHECKING:  # a check without a device never loads the memory module (start-up)
    from csa_plan.planner.memory import DeviceBudget

from csa_plan.planner.schemas import CHECK as CHECK_SCHEMA


class Verdict:
    ADMITTED = "admitted"
    REFUSED = "refused"
    DOES_NOT_FIT = "does_not_fit"


def verdict(plan: ModelPlan, cap: DeviceFit | None) -> str:
    if plan.refusals:
        return Verdict.REFUSED
    if cap is not None and not cap.fits:
        return Verdict.DOES_NOT_FIT
    return Verdict.ADMITTED


def descriptor_dict(d: Descriptor) -> dict[str, Any]:
    # Every field is an immutable scalar but present_edges: no deep copy (dataclasses.asdict) needed.
    out = {name: getattr(d, name) for name in DESCRIPTOR_FIELDS}
    out["present_edges"] = sorted(e.value for e in d.present_edges)
    if d.sharing is not None:  # only shared-state layers carry it: V4 documents are unchanged
        out["sharing"] = {"mode": d.mode.value, **d.sharing.as_dict()}
    return out


def layer_dict(layer: LayerPlan) -> dict[str, Any]:
    d = layer.descriptor
    return {
        "layer_id": d.layer_id,
        "kind": layer.kind.value,
        "is_mtp": d.is_mtp,
        "compression_ratio": d.compression_ratio,
        "admitted": layer.admitted,
        "refusal_types": [r.type.value for r in layer.refusals],
        "bytes": layer.bytes.as_dict() if layer.bytes is not None else None,
        "descriptor": descriptor_dict(d),
    }


def layer_groups(plan: ModelPlan) -> list[dict[str, Any]]:
    """Identical layers collapse into one row: same kind, MTP flag, bytes and refusal types."""
    groups: dict[tuple, list[LayerPlan]] = {}
    for layer in plan.layers:
        key = (layer.kind, layer.descriptor.is_mtp, layer.bytes, tuple(r.type for r in layer.refusals))
        if layer.kind in SHARED_KINDS:  # owners and readers of shared state group by ratio too
            key += (layer.descriptor.compression_ratio,)
        groups.setdefault(key, []).append(layer)
    out = []
    for (kind, is_mtp, group_bytes, types, *ratio), layers in groups.items():
        out.append({
            "kind": kind.value,
            "is_mtp": is_mtp,
            "count": len(layers),
            "layer_ids": [l.descriptor.layer_id for l in layers],
            "admitted": not types,
            "refusal_types": [t.value for t in types],
            "bytes_per_group": group_bytes.as_dict() if group_bytes is not None else None,
            "bytes_all": group_bytes.scaled(len(layers)).as_dict() if group_bytes is not None else None,
            **({"compression_ratio": ratio[0]} if ratio else {}),
        })
    return out


def effective(plan: ModelPlan, field: str) -> Any:
    values = {getattr(l.descriptor, field) for l in plan.layers}
    return values.pop() if len(values) == 1 else sorted(values, key=str)


def check_report(plan: ModelPlan, budget: DeviceBudget | None, cap: DeviceFit | None, exit_code: int) -> dict[str, Any]:
    """The detail part of the document (model, options, layers, totals)."""
    o = plan.options
    m = plan.model
    from csa_plan.planner.reports.vocabulary import device_limit, model_info

    report = {
        "schema": CHECK_SCHEMA,
        "model": {
            "name": m.name,
            "source": m.source,
            "num_main_layers": m.num_main_layers,
            "num_mtp_layers": m.num_mtp_layers,
            "compress_ratios": list(m.compress_ratios),
            "notes": list(m.notes),
        },
        "options": {
            "gate": o.gate.value,
            "tp": o.tp,
            "query_len": o.query_len,
            "max_seq_len": effective(plan, "max_seq_len"),
            "batch": effective(plan, "batch"),
            "cache_format": effective(plan, "cache_format"),
            "window": effective(plan, "window"),
        },
        "counts": {k.value.lower(): plan.count(k) for k in LayerKind if k in PER_LAYER_KINDS or plan.count(k)},
        "verdict": verdict(plan, cap),
        "exit_code": exit_code,
        "refusals": [r.as_dict() for r in plan.refusals],
        "groups": layer_groups(plan),
        "layers": [layer_dict(l) for l in plan.layers],
        "totals": {
            "per_request_per_device": plan.per_device.as_dict(),
            "devices": o.tp,
            "per_request_all_devices_bytes": plan.all_devices_bytes,
            "refused_layers_excluded": sorted({r.layer for r in plan.refusals if r.layer is not None}),
        },
    }
    report["model_info"] = model_info(m.name, m.source)
    report["device_limit"] = device_limit(budget.limit_bytes if budget is not None else None)
    return report



@record
class Refusal:
    """One reason the deployment cannot run as asked: of the configuration or of the fit."""

    kind: str          # "configuration" (gate, engine rules) | "fit" (weights, state pool)
    type: str
    setting: str
    message: str
    expected: str = ""
    actual: str = ""
    rule: str = ""
    layers: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "type": self.type, "setting": self.setting, "message": self.message,
                "expected": self.expected, "actual": self.actual, "rule": self.rule, "layers": list(self.layers)}


@record
class CheckHead:
    """The answer first: verdict, the capacity answer, every refusal, the engine's log line, the pool."""

    verdict: str
    exit_code: int
    model: str
    engine: str | None            # "vllm-0.33 (vLLM 0.33.0)"
    deployment: str | None        # "tp 8 pp 1 dp 1 ep 8 (8 GPUs), h200"
    capacity: Any                 # budget.answer.CapacityAnswer
    refusals: tuple[Refusal, ...]
    log_lines: tuple[str, ...]
    kv_memory_bytes: int | None
    smallest_fitting: tuple[dict[str, int], ...]
    smallest_fitting_searched: bool
    warnings: tuple[str, ...]
    searched_max_tp: int = 0          # the widest tp the search tried (the model's heads)
    replicas: dict[str, int] | None = None  # none passes: dp replicas that hold the requests in all
    question: str = "count"           # "length": --concurrency N without --max-seq-len asks the longest length

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "exit_code": self.exit_code, "fit": self.capacity.as_dict(),
                "all_refusals": [r.as_dict() for r in self.refusals],
                "head": {"model": self.model, "engine": self.engine, "deployment": self.deployment,
                         "log_lines": list(self.log_lines), "kv_memory_bytes": self.kv_memory_bytes,
                         "smallest_fitting": list(self.smallest_fitting),
                         "smallest_fitting_searched": self.smallest_fitting_searched,
                         "searched_max_tp": self.searched_max_tp, "replicas": self.replicas,
                         "question": self.question},
                "warnings": list(self.warnings)}


def _plan_refusals(plan: ModelPlan) -> list[Refusal]:
    grouped: dict[tuple[str, str, str, str, str], list[int]] = {}
    for r in plan.refusals:
        d = r.as_dict()
        detail = d["message"].split(": ", 2)[-1]
        grouped.setdefault((d["type"], d["field"], detail, d["expected"], d["actual"]), []).append(
            d["layer"] if d["layer"] is not None else -1)
    return [Refusal("configuration", t, f, m, e, a, "the gate (docs/CONTRACT.md)",
                    tuple(x for x in layers if x >= 0)) for (t, f, m, e, a), layers in grouped.items()]


def fit_refusals(device: Any, answer: Any, question: str = "count") -> list[Refusal]:
    """The weights (and start-up reserves) that do not fit the card, and a state pool that does not
    hold the requests asked for, as typed refusals (``question`` "length": the longest length for them
    is the answer asked for, and a default length they do not fit at is no refusal)."""
    out = []
    if device is not None and not device.fits:
        b = device.binding
        what = "WeightsDoNotFit" if b.weights_bytes > b.usable_bytes else "WeightsAndReservesDoNotFit"
        out.append(Refusal("fit", what, "--tp/--ep/--device-memory",
                           f"{b.weights_bytes:,} B of weights and {b.reserve_bytes:,} B of start-up reserves per "
                           f"GPU against {b.usable_bytes:,} B usable ({device.engine}); short by "
                           f"{-b.kv_memory_bytes:,} B: no state pool is left",
                           f"<= {b.usable_bytes:,} B", f"{b.weights_bytes + b.reserve_bytes:,} B",
                           "usable - weights - reserves (planner/budget/device.py)"))
    elif answer.fits is False and question != "length":
        n = answer.concurrency
        out.append(Refusal("fit", "StatePoolTooSmall", "--concurrency",
                           f"{n:,} requests of {answer.max_seq_len:,} tokens do not fit: {answer.authority} admits "
                           f"{answer.requests_that_fit:,}"
                           + (f"; the longest max_seq_len for {n:,} is {answer.longest_context:,}"
                              if answer.longest_context else f"; no max_seq_len lets {n:,} fit"),
                           f">= {n:,} admitted", f"{answer.requests_that_fit:,}", answer.source))
    return out


def check_document(plan: ModelPlan, device: Any, answer: Any, engine_result: Any, warnings: tuple[str, ...],
                   layout: str, question: str = "count") -> tuple[dict[str, Any], int]:
    """The whole check document and its exit code, with the head first."""
    from csa_plan.planner.errors import ExitCode

    refusals = _plan_refusals(plan)
    if engine_result is not None and engine_result.refusal is not None:
        r = engine_result.refusal
        refusals.append(Refusal("configuration", "EngineRefused", r.setting, r.message, r.expected, r.actual, r.rule))
    refusals += fit_refusals(device, answer, question)
    if any(r.kind == "configuration" for r in refusals):
        v = Verdict.REFUSED
    elif refusals:
        v = Verdict.DOES_NOT_FIT
    else:
        v = Verdict.ADMITTED
    code = ExitCode.OK if v == Verdict.ADMITTED else ExitCode.REFUSED
    engine_label = None
    log_lines: tuple[str, ...] = ()
    if engine_result is not None:
        e = engine_result.engine
        engine_label = f"{e.name} ({e.label()})"
        if engine_result.sizing is not None:
            log_lines = tuple(engine_result.sizing.log_lines)
    where = None
    if device is not None:
        p = device.request.placement
        ep = device.device_weights.ep if device.device_weights else p.ep
        from csa_plan.planner.cards import card_of

        card = card_of(device.card_bytes)
        gib = device.card_bytes / (1 << 30)
        where = (f"tp {p.tp} pp {p.pp} dp {p.dp} ep {ep}: {p.device_count} x "
                 + (f"{card.name} ({gib:.2f} GiB)" if card else f"{gib:.2f} GiB") + f", budget {device.engine}")
    head = CheckHead(v, int(code), plan.model.name, engine_label, where, answer, tuple(refusals), log_lines,
                     answer.kv_memory_bytes, tuple(device.smallest_fitting) if device is not None else (),
                     bool(device is not None and device.searched), tuple(warnings),
                     device.searched_max_tp if device is not None and device.searched else 0,
                     device.replicas if device is not None else None, question)
    doc = check_report(plan, None, None, int(code))
    doc.update(head.as_dict())
    doc["options"]["layout"] = layout
    doc["budget"] = None
    if device is not None:  # the budget modules load only when a device is named (start-up)
        from csa_plan.planner.budget.document import budget_document

        doc["budget"] = budget_document(device)
    if engine_result is not None:
        from csa_plan.planner.reports.engine import engine_report

        doc["engine"] = engine_report(engine_result.engine, engine_result.plan, engine_result.sizing,
                                      engine_result.refusal, engine_result.kv_memory_bytes)
    return doc, int(code)
