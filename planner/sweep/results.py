"""What a sweep point's run gives: its figures, the engine replay's figures, and the constraints it breaks.

Apart from ``evaluate.py`` (which runs a point) so that the resume files (``resume.py``) read and
re-check the same records without importing the runner.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from csa_plan.planner.reserve.scenario import REASONS, Outcome
from csa_plan.planner.serving.serve import latency_violations
from csa_plan.planner.steptime.model import step_time_label
from csa_plan.planner.sweep.spec import Constraints
from csa_plan.planner.units import NS_PER_S

NOT_LIMITED = "not limited by memory within this trace"


@dataclass(frozen=True)
class RuntimeFigures:
    """An engine point whose runtime is replayed step by step: what the replay at the target rate
    observed, exactly the figures ``simulate --engine`` reports (``planner/serving/report.py``)."""

    engine: str  # the release as the replay names it ("vLLM 0.33.0")
    unit: str  # the engine's memory unit (block, page)
    served: int
    preemptions: int  # the engine's own word: vLLM preempts, SGLang retracts
    preempted_requests: int
    most_preemptions_for_one_request: int
    tokens_recomputed: int
    prefix_hit_tokens: int
    queue_wait_p99_s: float | None
    ttft_p99_s: float | None
    e2e_p99_s: float | None
    peak_units: int  # all replicas together
    usable_units: int
    peak_running: int
    steps: int
    tpot_p99_s: float | None = None
    step_time: str = ""  # the step-time source's label

    @staticmethod
    def of(rep: Any) -> "RuntimeFigures":
        p, occ = rep.preemptions, rep.occupancy
        return RuntimeFigures(rep.engine, occ.unit, rep.served, p.count, p.requests, p.most_for_one_request,
                              p.tokens_recomputed, rep.prefix_cache.hit_tokens, rep.queue_wait.p99_s, rep.ttft.p99_s,
                              rep.e2e.p99_s, occ.peak_units, occ.usable_units, occ.peak_running, rep.steps,
                              rep.tpot.p99_s, step_time_label(rep.step_time or {}))  # the band too


@dataclass(frozen=True)
class PointResult:
    """One simulated point: the run at its target rate and its sustainable rate. JSON round-trips exactly."""

    key: str
    devices: int
    requests: int
    admitted: int
    refused: int
    refusals: tuple[tuple[str, int], ...]
    wait_p99_ns: int | None
    peak_bytes: int | None  # all devices together, at the target rate (None: a runtime point counts units)
    mean_utilization: float  # resident / limit, averaged over time and devices
    peak_utilization: float  # the fullest device's peak / limit
    sustainable_rate_scale: float | None  # the largest rate scale meeting the rate criterion
    at_least: bool  # the search hit its upper bound
    probes: int
    sustainable_rate_per_s: float | None  # requests per second at that scale
    rate_per_device_per_s: float | None
    feasible: bool  # every constraint holds at the target rate
    violations: tuple[str, ...]
    runtime: RuntimeFigures | None = None  # the engine's runtime replayed step by step (else the reservation model)
    steady: str = ""  # the steady-state verdict at the sustainable rate (planner/steady.py), or why none was found
    # a disaggregated point: its roles, link and transfers at the target rate (sweep/evaluate.py); None: aggregated
    disaggregation: dict[str, Any] | None = None

    @property
    def rate_measured(self) -> bool:
        """The sustainable rate was found inside the search; False when the search reached its
        ceiling (``at_least``): every rate the trace can be replayed at fits, so memory does not
        limit the rate within this trace and the ceiling is no measurement."""
        return self.sustainable_rate_scale is not None and not self.at_least

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["refusals"] = dict(self.refusals)
        d["violations"] = list(self.violations)
        return d

    def report_dict(self) -> dict[str, Any]:
        """``as_dict`` plus the keys documents add (a resume line keeps ``as_dict`` exactly)."""
        d = self.as_dict()
        d["model"] = "reservation" if self.runtime is None else "runtime"  # how the point was evaluated
        d["rate_limited_by_memory"] = self.rate_measured
        d["rate_note"] = None if self.rate_measured or self.sustainable_rate_scale is None else NOT_LIMITED
        return d

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "PointResult":
        values = {f.name: d[f.name] for f in fields(PointResult) if f.name not in ("steady", "disaggregation")}
        values["disaggregation"] = d.get("disaggregation")
        values["refusals"] = tuple((str(k), int(v)) for k, v in dict(d["refusals"]).items())
        values["violations"] = tuple(d["violations"])
        values["steady"] = str(d.get("steady") or "")
        if d.get("runtime") is not None:
            values["runtime"] = RuntimeFigures(**{f.name: d["runtime"][f.name] for f in fields(RuntimeFigures)})
        return PointResult(**values)


def runtime_refusals(refused: tuple[tuple[str, int], ...], stranded: str) -> tuple[tuple[str, int], ...]:
    """A replay's refusals in the sweep's vocabulary: the server refuses a request up front
    (RequestExceedsCapacity) or nothing running could ever free enough memory for it (NeverFits)."""
    counts = {REASONS[Outcome.EXCEEDS_CAPACITY]: 0, REASONS[Outcome.NEVER_FITS]: 0}
    for reason, n in refused:
        counts[REASONS[Outcome.NEVER_FITS] if reason == stranded else REASONS[Outcome.EXCEEDS_CAPACITY]] += n
    return tuple((reason, n) for reason, n in counts.items() if n)


TOO_SHORT = "trace too short to say"


def point_violations(cons: Constraints, refusals: tuple[tuple[str, int], ...], wait_p99_ns: int | None,
                     mean_util: float, rate_scale: float | None, ttft_p99_s: float | None = None,
                     tpot_p99_s: float | None = None, target_scale: float | None = None,
                     steady: str = "") -> tuple[str, ...]:
    """The constraints a point's run breaks, as shown; a pure function of the run's figures, so
    a resumed record's violations are checked by computing them again (``planner/sweep/resume.py``).
    With ``target_scale`` (an engine point: its rate is judged in steady state) the point's target
    rate must itself be sustained, not only survive one finite replay."""
    if target_scale is not None and rate_scale is None and steady.startswith(TOO_SHORT):
        return (TOO_SHORT,)
    violations = []
    refused = sum(n for _, n in refusals)
    if cons.zero_refusals and refused:
        detail = ", ".join(f"{reason} {n:,}" for reason, n in refusals)
        violations.append(f"{refused:,} refused ({detail})")
    if cons.wait_p99_max_ns is not None:
        if wait_p99_ns is None:
            violations.append("no request admitted")
        elif wait_p99_ns > cons.wait_p99_max_ns:
            violations.append(f"wait p99 {wait_p99_ns / NS_PER_S:.3f} s > {cons.wait_p99_max_s:g} s")
    violations.extend(latency_violations(ttft_p99_s, tpot_p99_s, cons.latency_bounds))
    if mean_util < cons.min_mean_utilization:
        violations.append(f"mean utilization {mean_util:.1%} < {cons.min_mean_utilization:.1%}")
    if target_scale is not None and rate_scale is not None and rate_scale < target_scale:
        violations.append(f"target rate x{target_scale:g} not sustained in steady state (sustained up to "
                          f"x{rate_scale:.4g})")
    if dict(refusals).get(REASONS[Outcome.OUT_OF_MEMORY], 0) == 0 and rate_scale is None:
        violations.append("no sustainable rate")
    return tuple(violations)
