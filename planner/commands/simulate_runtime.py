"""``simulate --engine NAME`` for an engine whose runtime is modelled step by step.

The engine's own scheduler and memory manager (``EnginePlan.runtime``) are stepped by the one
replay loop (``planner/runtime``) over the trace, in the pool the device budget's KV memory
yields (exactly as ``check --engine`` sizes it). Several ``--engine`` run the same trace and
deployment side by side; each engine gets the settings it has (``--max-num-seqs`` is vLLM's,
``--max-running-requests`` SGLang's; shared ones such as ``--gpu`` go to both), and a setting no
named engine has is bad input. ``--reserve`` and ``--policy`` belong to engines that reserve at
admission and are refused here (the scheduler decides, not a reservation rule).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from csa_plan.planner.errors import BadInput, ExitCode

if TYPE_CHECKING:
    from csa_plan.planner.engines.settings import EngineSettings


def runtime_engines(names: tuple[str, ...], spec, settings: "EngineSettings", max_seq_len: int,
                    card=lambda es, name: es) -> list | None:
    """The configured plans when every named engine is runtime-modelled; None when the only one is not.
    ``card(settings, name)`` gives an engine the target GPU the device memory names (card_settings)."""
    from csa_plan.planner.engines.registry import get_engine

    plans = []
    for name in names:
        model = get_engine(name)
        es = card(settings_for(model, settings, names), name)
        plans.append((name, es, model.configure(spec, es, max_seq_len)))
    modelled = [p.runtime_modelled for _n, _s, p in plans]
    if all(modelled):
        return plans
    if len(names) == 1:
        return None
    off = ", ".join(n for (n, _s, _p), m in zip(plans, modelled) if not m)
    raise BadInput("options", "--engine", f"side by side needs engines whose runtime is modelled step by step; "
                                          f"{off} reserves at admission instead (run it alone)")


def settings_for(model, settings: "EngineSettings", names: tuple[str, ...]) -> "EngineSettings":
    """The settings this engine has, when several engines share one command line."""
    if len(names) == 1:
        return settings
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import OPTION_SPELLING

    accepted = set(model.options)
    for name in settings.given():
        if not any(name in get_engine(n).options for n in names):
            raise BadInput("options", OPTION_SPELLING[name], f"none of {', '.join(names)} has this setting")
    return replace(settings, **{f: None for f in settings.given() if f not in accepted})


def run_runtime(req, wl, settings, config, spec, plans, progress) -> Any:
    """Replay ``wl`` through every plan's runtime; the outcome carries one run document per engine."""
    import numpy as np

    from csa_plan.planner.commands.simulate import SimulateOutcome, device_budget, with_budget
    from csa_plan.planner.runtime.loop import replay
    from csa_plan.planner.runtime.protocol import RuntimeOptions, RuntimeTrace
    from csa_plan.planner.runtime.report import RUNTIME, runtime_document
    from csa_plan.planner.runtime.steptime import StepTime

    for option, value in (("--reserve", req.given.reserve), ("--policy", req.given.policy)):
        if value is not None:
            raise BadInput("options", option, f"{', '.join(n for n, _s, _p in plans)} schedule requests step by "
                                               "step (no reservation at admission, no refusal policy): "
                                               f"{option} applies to --layout and onnx-genai only")
    for option, value in (("--find-capacity", req.find_capacity), ("--verify", req.verify)):
        if value:
            raise BadInput("options", option, "not available with a step-by-step engine runtime yet")
    if config.placement.pp != 1 or config.placement.dp != 1:
        raise BadInput("options", "--pp" if config.placement.pp != 1 else "--dp",
                       "an engine runtime replays one replica of one pipeline stage (pp 1, dp 1)")
    time = config.time
    arrival = wl.arrival_ns.astype(np.int64)
    if time.rate_scale != 1.0:
        arrival = np.floor(arrival / time.rate_scale).astype(np.int64)
    trace = RuntimeTrace(arrival, wl.prompt_tokens.astype(np.int64), np.maximum(wl.output_tokens, 1).astype(np.int64),
                         wl.hash_ids, wl.hash_offsets,
                         id_block_tokens=(wl.trace.prefix.block_tokens if wl.trace is not None and
                                          wl.trace.prefix is not None and wl.trace.prefix.block_tokens else 512))
    step_time = StepTime(tpot_ms=time.tpot_ms, prefill_tok_s=time.prefill_tok_s)
    options = RuntimeOptions(enable_prefix_caching=req.enable_prefix_caching)
    runs, budgets, code = [], [], ExitCode.OK
    for name, es, plan in plans:
        device = device_budget(settings, config, name, es, req.kv_memory_bytes)
        if device is not None and not device.fits:
            budgets.append(device)
            runs.append({"engine": {"name": name, "label": plan.engine.label()}, "weights_fit": False})
            code = ExitCode.REFUSED
            continue
        kv = req.kv_memory_bytes if device is None else device.kv_memory_bytes
        if kv is None:
            raise BadInput("options", "--device-memory", f"{name} replays its scheduler in a real pool: name the "
                                                         "device (--device-memory h200) or --kv-memory")
        sizing = plan.size_pool(kv)
        rt = plan.runtime(sizing, trace, options)
        with progress(f"simulating {name}", len(trace), len(trace) >= 200_000) as tick:
            res = replay(rt, trace, step_time, progress=lambda done, total: tick(done, total, None))
        engine = {"name": name, "label": rt.label, "release": plan.engine.label(), "kv_memory_bytes": kv,
                  "preemption_word": rt.preemption_word,
                  "settings": [s.as_dict() for s in plan.settings], "pool": sizing.as_dict()}
        doc = runtime_document(res, engine=engine, time={"prefill_tok_s": time.prefill_tok_s,
                                                         "tpot_ms": time.tpot_ms, "rate_scale": time.rate_scale},
                               prefix_caching=options.enable_prefix_caching is not False)
        runs.append(doc)
        budgets.append(device)
        if res.refused:
            code = ExitCode.REFUSED
    p = config.placement
    report = {"schema": RUNTIME,
              "workload": {"source": wl.source, "requests": len(wl), "notes": list(wl.notes)},
              "model": {"name": spec.name, "source": spec.source},
              "deployment": {"tp": p.tp, "pp": p.pp, "dp": p.dp, "devices": p.device_count},
              "runs": runs, "exit_code": int(code)}
    report = with_budget(report, budgets[0] if len(budgets) == 1 else None)
    if len(budgets) > 1:
        from csa_plan.planner.budget.document import budget_document

        report["budgets"] = [None if b is None else budget_document(b) for b in budgets]
    return SimulateOutcome(report, code, None, title=f"{spec.name} — {wl.source}")
