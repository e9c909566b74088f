"""``simulate --engine`` for an engine whose runtime is modelled step by step (``EnginePlan.runtime_modelled``).

The engine reserves nothing per request up front, so ``--reserve`` / ``--policy`` do not
apply (refused, saying why); the start-up pool is the one ``check --engine`` sizes from
the device budget (or ``--kv-memory``); the trace is replayed through the engine's own
scheduler by the one loop (``planner/runtime``); ``--find-capacity`` searches the largest
``--rate-scale`` whose queue-wait p99 stays under ``--max-wait`` with every request served
(``planner/runtime/serve.py``: the same entry ``sweep``'s engine axis uses).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from csa_plan.planner.errors import BadInput, ExitCode
from csa_plan.planner.reports.schemas import SIMULATE

if TYPE_CHECKING:
    from csa_plan.planner.commands.simulate import SimulateOutcome, SimulateRequest
    from csa_plan.planner.engines.settings import EngineSettings

NOT_RESERVED = ("{engine} reserves nothing per request up front: its scheduler admits and preempts step by step, "
                "and simulate --engine {name} replays exactly that ({option} applies to the reference layout "
                "and to --engine onnx-genai)")


def refuse_reservation_options(req: "SimulateRequest", plan) -> None:
    from csa_plan.planner.runtime.serve import refuse_unreplayed

    refuse_unreplayed(plan)  # first: no other option matters where the scheduler is not modelled
    for option, value in (("--reserve", req.given.reserve), ("--policy", req.given.policy),
                          ("--bucket", req.given.bucket)):
        if value is not None:
            raise BadInput("options", option, NOT_RESERVED.format(engine=plan.engine.label(), name=plan.engine.name,
                                                                  option=option))
    if req.verify:
        raise BadInput("options", "--verify", f"the ledger replay does not apply to --engine {plan.engine.name}: "
                                              "its runtime is cross-checked against the engine's own scheduler "
                                              "(tools/crosscheck_vllm_runtime.py)")


def run_runtime_simulate(req: "SimulateRequest", wl, spec, config, progress) -> "SimulateOutcome":
    """The outcome without the budget sections (the caller adds them, as for every simulate)."""
    from csa_plan.planner.commands.simulate import SimulateOutcome
    from csa_plan.planner.runtime.serve import report, runtime_capacity, runtime_setup, serve

    setup = runtime_setup(spec, config, req.enable_prefix_caching)  # EngineRefused: the caller's typed document
    plan, sizing = setup.plan, setup.sizing
    capacity = None
    if req.find_capacity:
        if setup.max_concurrency is not None:
            raise BadInput("options", "--find-capacity", f"a closed loop (max_concurrency {setup.max_concurrency:,}) "
                                                         "sends each request when one ends, not at the trace's rate: "
                                                         "the rate scale the search would bisect changes nothing; "
                                                         "drop --max-concurrency (or the mix's max_concurrency) or "
                                                         "--find-capacity")
        if req.max_wait_s is None:
            raise BadInput("options", "--max-wait", f"--find-capacity with --engine {plan.engine.name} needs "
                                                    "--max-wait SECONDS (the engine queues; it never refuses for "
                                                    "memory)")
        with progress("finding capacity", None, True) as tick:
            cap = runtime_capacity(setup, wl, int(round(req.max_wait_s * 1e9)), start=config.time.rate_scale,
                                   tick=lambda k, s: tick(k, None, f"probe {k}: x{s:.4g}"))
        if cap.rate_scale is None:
            raise BadInput("options", "--max-wait", f"no rate scale keeps the queue-wait p99 under "
                                                    f"{req.max_wait_s:g} s with every request served")
        capacity = {"rate_scale": cap.rate_scale, "probes": cap.probes, "max_wait_s": req.max_wait_s,
                    "at_least": cap.capped}
        rate = cap.rate_scale
    else:
        rate = config.time.rate_scale
    n = len(wl)
    with progress("simulating", n, n >= 200_000) as tick:
        result = serve(setup, wl, rate, progress=lambda done, total: tick(done, total, None))
    rep = report(setup, result, wl)
    code = ExitCode.REFUSED if rep.refused else ExitCode.OK
    doc = _document(wl, spec, replace(config, time=replace(config.time, rate_scale=rate)), plan, sizing, code)
    doc["time"].update(step_time=setup.time.as_dict(), max_concurrency=setup.max_concurrency,
                       step_model=setup.time.label)
    doc["runtime"] = rep.as_dict()
    doc["capacity"] = capacity
    return SimulateOutcome(doc, code, None, title=f"{spec.name} — {wl.source}")


def _document(wl, spec, config, plan, sizing, code) -> dict[str, Any]:
    from csa_plan.planner.reports.vocabulary import model_info
    from csa_plan.planner.workloads.formats import trace_document

    p = config.placement
    engine = None
    if plan is not None:
        e = plan.engine
        engine = {"name": e.name, "engine": e.engine_name, "version": e.version,
                  "settings": [s.as_dict() for s in plan.settings], "unit_bytes": plan.unit_bytes,
                  "pool": sizing.as_dict() if sizing else None}
    return {
        "schema": SIMULATE,
        "workload": {"source": wl.source, "requests": len(wl), "classes": list(wl.class_names),
                     "notes": list(wl.notes), **trace_document(wl.trace)},
        "model": {"name": spec.name, "source": spec.source, "layout": config.layout},
        "deployment": {"tp": p.tp, "pp": p.pp, "dp": p.dp, "router": p.router.value, "devices": p.device_count},
        "memory": {"limit_bytes": config.limit_bytes, "unlimited": config.limit_bytes == 0},
        "reserve": None,
        "policy": None,
        "time": {"prefill_tok_s": config.time.prefill_tok_s, "tpot_ms": config.time.tpot_ms,
                 "rate_scale": config.time.rate_scale,
                 "step_model": "a step lasts max(tpot_ms / 1000, prefill tokens in it / prefill_tok_s) s"},
        "plan_refusals": [],
        "exit_code": int(code),
        "engine": engine,
        "model_info": model_info(spec.name, spec.source),
    }


def run_side_by_side(req: "SimulateRequest", run_one, progress) -> "SimulateOutcome":
    """Several ``--engine`` on the same trace and deployment: each engine's own runtime replay (the one
    path above, ``run_one`` = run_simulate), each given the settings it has (``settings_for``)."""
    from csa_plan.planner.commands.simulate import SimulateOutcome
    from csa_plan.planner.engines.engine import EngineRefused
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings

    names = req.engines
    docs, code = [], ExitCode.OK
    for name in names:
        es = settings_for(get_engine(name), req.engine_settings or EngineSettings(), names)
        try:
            out = run_one(replace(req, engine=name, engines=(), engine_settings=es), progress)
        except EngineRefused as exc:  # this engine would not start: said in its column, the others still run
            docs.append({"engine": {"name": name}, "engine_refusal": exc.refusal.as_dict(), "runtime": None})
            code = max(code, ExitCode.REFUSED)
            continue
        if out.report.get("runtime") is None and out.report.get("engine_refusal") is None \
                and out.report.get("engine") is not None:
            raise BadInput("options", "--engine", f"side by side needs engines whose runtime is replayed step by "
                                                  f"step; {name} reserves at admission instead (run it alone)")
        if out.report.get("engine_refusal") is not None:  # refused alone (its own document): no runtime column
            out.report.setdefault("runtime", None)
        docs.append(out.report)
        code = max(code, out.exit_code)
    first = next((d for d in docs if "workload" in d), None)
    if first is None:  # every engine refused to start: the first refusal is the answer
        raise EngineRefused(_refusal(docs[0]))
    report = {"schema": SIMULATE, "workload": first["workload"], "model": first["model"],
              "deployment": first["deployment"], "side_by_side": docs, "exit_code": int(code)}
    return SimulateOutcome(report, ExitCode(code), None, title=f"{first['model']['name']} — {first['workload']['source']}")


def settings_for(model, settings: "EngineSettings", names: tuple[str, ...]) -> "EngineSettings":
    """The settings this engine has, when several engines share one command line: an option only some of
    them have goes to those (--max-running-requests is SGLang's, --max-num-seqs vLLM's); one none has is
    bad input."""
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import OPTION_SPELLING

    accepted = set(model.options)
    for name in settings.given():
        if not any(name in get_engine(n).options for n in names):
            raise BadInput("options", OPTION_SPELLING[name], f"none of {', '.join(names)} has this setting")
    return replace(settings, **{f: None for f in settings.given() if f not in accepted})


def _refusal(doc):
    from csa_plan.planner.engines.engine import EngineRefusal

    return EngineRefusal(**{k: v for k, v in doc["engine_refusal"].items() if k != "type"})
