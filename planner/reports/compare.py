"""The ``csa-plan/compare/v1`` document: one row per layout profile, with the answer first.

``CompareHead`` is the answer (the verdict, and each row's requests of max_seq_len that fit with
the authority that counted them); the text renderer and the JSON document both read it
(``head`` and ``verdict``), so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from csa_plan.planner.budget.comparison import Comparison
from csa_plan.planner.plan import apply_options
from csa_plan.planner.schemas import COMPARE


def comparison_report(c: Comparison) -> dict[str, Any]:
    """The csa-plan/compare/v1 JSON document."""
    o = c.options
    lengths = sorted({d.max_seq_len for d in apply_options(c.model, o)})
    from csa_plan.planner.reports.vocabulary import device_limit, model_info

    return {
        "model_info": model_info(c.model.name, c.model.source),
        "device_limit": device_limit(c.limit_bytes),
        "schema": COMPARE,
        "model": {"name": c.model.name, "source": c.model.source},
        "options": {"max_seq_len": lengths[0] if len(lengths) == 1 else lengths, "batch": o.batch, "query_len": o.query_len, "tp": o.tp,
                    "gate": o.gate.value, "window": o.window, "cache_format": o.cache_format},
        "limit_bytes": c.limit_bytes,
        "refused_layers": list(c.refused_layers),
        "engine_refusals": [r.as_dict() for r in c.engine_refusals],
        "profiles": [r.as_dict() for r in c.rows],
    }


class CompareVerdict:
    ADMITTED = "admitted"          # no layer refused, no device memory named: nothing to count requests in
    FITS = "fits"                  # no layer refused, every row admits at least one request
    DOES_NOT_FIT = "does_not_fit"  # the weights leave no pool, or some row admits none
    REFUSED = "refused"            # a layer refused by the gate (no count for a refused model)


@dataclass(frozen=True)
class RowAnswer:
    """One row's answer: requests of max_seq_len that fit, by its own authority."""

    profile: str
    authority: str                   # "engine: vllm-0.33" | "layout: exact"
    per_request_bytes: int
    charge_bytes: int | None
    requests_that_fit: int | None    # None: no limit given, a refused model or pool, or unbounded
    unbounded: bool
    limit_bytes: int | None
    no_answer: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"profile": self.profile, "authority": self.authority, "per_request_bytes": self.per_request_bytes,
                "charge_bytes": self.charge_bytes, "requests_that_fit": self.requests_that_fit,
                "unbounded": self.unbounded, "limit_bytes": self.limit_bytes, "no_answer": self.no_answer}


@dataclass(frozen=True)
class CompareHead:
    """The answer first: the verdict, each row's count, which row admits the most, every refusal."""

    verdict: str
    exit_code: int
    model: str
    max_seq_len: Any                 # an int, or the list of per-layer lengths
    deployment: str | None
    rows: tuple[RowAnswer, ...]
    most: tuple[str, ...]            # the rows that admit the most requests (empty: no counts)
    refusals: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict,
                "head": {"verdict": self.verdict, "exit_code": self.exit_code, "model": self.model,
                         "max_seq_len": self.max_seq_len, "deployment": self.deployment,
                         "rows": [r.as_dict() for r in self.rows], "most": list(self.most),
                         "refusals": list(self.refusals)}}


def compare_head(c: Comparison, report: dict[str, Any], exit_code: int, weights_fit: bool,
                 deployment: str | None) -> CompareHead:
    rows = []
    for r, d in zip(c.rows, report["profiles"]):
        why = None
        if r.requests_that_fit is None and not r.requests_unbounded:
            why = ("no device memory named (--device-memory)" if c.limit_bytes is None and r.limit_bytes is None
                   else r.pool_refused or ("the model is refused by the gate" if c.refused_layers else "no state pool"))
        elif r.pool_refused:  # an engine that refuses to start gives no count (the table's cell says 0)
            why = f"refuses a pool of {r.limit_bytes:,} B at start-up: {r.pool_refused}"
        count = None if r.pool_refused else r.requests_that_fit
        rows.append(RowAnswer(r.profile, d["authority"], r.per_request_bytes, d["charge_bytes"], count,
                              r.requests_unbounded, r.limit_bytes if r.limit_bytes is not None else c.limit_bytes,
                              why))
    counted = [r for r in rows if r.requests_that_fit is not None]
    top = max((r.requests_that_fit for r in counted), default=None)
    most = tuple(r.profile for r in counted if top and r.requests_that_fit == top)
    refusals = [f"{e.engine} refuses this model: {e.message}" for e in c.engine_refusals]
    if c.refused_layers:
        refusals.append(f"{len(c.refused_layers)} layer(s) refused by the gate: no count for a refused model "
                        "(run check for the reasons)")
    if not weights_fit:
        refusals.append("the weights (and start-up reserves) leave no state pool under some row's rules")
    refusals += [f"{r.profile}: {r.no_answer}" for r in rows if r.no_answer and r.no_answer.startswith("refuses")]
    refusals += [f"{r.profile}: admits no request of max_seq_len in {r.limit_bytes:,} B" for r in rows
                 if r.requests_that_fit == 0 and r.limit_bytes]
    if c.refused_layers:
        verdict = CompareVerdict.REFUSED
    elif exit_code:
        verdict = CompareVerdict.DOES_NOT_FIT
    elif all(r.limit_bytes is None for r in rows):  # exit 0 without a count: not "fits"
        verdict = CompareVerdict.ADMITTED
    else:
        verdict = CompareVerdict.FITS
    return CompareHead(verdict, exit_code, c.model.name, report["options"]["max_seq_len"], deployment, tuple(rows),
                       most, tuple(refusals))
