"""``simulate --engine E --prefill-workers N --prefill-tp T --decode-workers M --decode-tp U``: a
disaggregated deployment, each role sized and set up by the paths an aggregated run takes (the device
budget, ``serve.runtime_setup``), then composed by ``planner/serving/disaggregation.py``.

Options the composition does not replay are refused, never dropped: ``--find-capacity`` (the rate search
bisects one setup), ``--max-concurrency`` (a closed loop over two pools), ``--verify`` (the ledger),
several ``--engine``, and the aggregated ``--tp/--dp/--pp/--ep`` (each role names its own:
``--prefill-tp/--prefill-dp/--prefill-ep``, the decode role's alike).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from csa_plan.planner.errors import BadInput, ExitCode


def refuse_disaggregated_options(req: Any) -> None:
    """Bad input for what a disaggregated replay cannot apply (module docstring)."""
    role = "--prefill-workers/--decode-workers"
    if req.engines:
        raise BadInput("options", "--engine", f"{role}: one engine serves both roles; give one --engine")
    if req.engine is None:
        raise BadInput("options", "--engine", f"{role} replay an engine's prefill and decode instances: add "
                                              "--engine vllm-0.33 or --engine sglang-0.5.23")
    for option, value in (("--find-capacity", req.find_capacity), ("--verify", req.verify),
                          ("--max-concurrency", req.given.max_concurrency), ("--tp", req.given.tp),
                          ("--dp", req.given.dp), ("--pp", req.given.pp), ("--ep", req.given.ep),
                          ("--reserve", req.given.reserve), ("--policy", req.given.policy)):
        if value:
            why = (ROLE_SHAPE if option in ("--tp", "--dp", "--pp", "--ep")
                   else "not modelled for a disaggregated deployment")
            raise BadInput("options", option, f"{role}: {why}")


ROLE_SHAPE = ("each role names its own (--prefill-tp/--prefill-dp/--prefill-ep, --decode-tp/--decode-dp/--decode-ep; "
              "--prefill-workers, --decode-workers)")


def role_field(exc: BadInput, role: str) -> BadInput:
    """A shard rule's or budget's refusal of ``--tp/--dp/--ep`` (``weights/rules.py``), named as the role's flag
    (``--prefill-ep``): the user gave that one."""
    if exc.field in ("--tp", "--dp", "--ep"):
        return BadInput(exc.source, f"--{role}-{exc.field[2:]}", exc.problem)
    return exc


class RoleRefused(Exception):
    """A role whose weights do not fit its device budget: the run is refused (exit 3), the budget says why."""

    def __init__(self, field: str, device: Any, config: Any) -> None:
        super().__init__(field)
        self.field, self.device, self.config = field, device, config


def role_setup(req: Any, wl: Any, settings: Any, role: Any, caching: bool | None, field: str) -> tuple[Any, ...]:
    """One role's engine instance as an aggregated run of ``--tp role.tp --dp role.dp --ep role.ep`` sets it up
    (the device budget per rank, SGLang's per-rank ``--max-running-requests``, EP in the shard rules and the step
    clock): (setup, config, device budget, spec); its workers' data-parallel ranks are the setup's replicas."""
    from csa_plan.planner.budget.deployment import Deployment, card_settings, deployment_budget, engine_settings_for
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.placement import Placement
    from csa_plan.planner.reserve.engine_run import EngineRun
    from csa_plan.planner.reserve.settings import sim_config
    from csa_plan.planner.serving.serve import runtime_setup

    name = field.split("-")[2]  # --prefill-tp: prefill
    try:
        s = replace(settings, tp=role.tp, dp=role.dp, ep=role.ep, pp=1)
        config, _ = sim_config(s, wl.source)
        es = card_settings(req.engine_settings, s.device_memory_bytes, req.engine)
        es = engine_settings_for(req.engine, es or EngineSettings(), Deployment(dp=role.dp))
        length = config.max_seq_len or max(d.max_seq_len for d in load_model(s.model).layers)
        device = None
        if s.device_memory_bytes is not None:
            device = deployment_budget(s.model, s.device_memory_bytes,
                                       Deployment(tp=role.tp, pp=1, dp=role.dp, ep=role.ep,
                                                  weights_bytes=s.weights_bytes,
                                                  reserved_bytes=s.reserved_bytes or None),
                                       length, req.engine, es, req.kv_memory_bytes,
                                       placement=Placement(tp=role.tp, pp=1, dp=role.dp, ep=role.ep))
            if not device.fits:
                raise RoleRefused(field, device, config)
            config = replace(config, limit_bytes=device.kv_memory_bytes)
        kv = req.kv_memory_bytes if device is None else device.kv_memory_bytes
        config = replace(config, engine=EngineRun(req.engine, es, kv))
        spec = load_model(s.model, max_seq_len=config.max_seq_len)
        setup = runtime_setup(spec, config, caching)  # refuses a release whose scheduler is not replayed
    except BadInput as exc:
        raise role_field(exc, name) from None
    return replace(setup, dp=role.ranks), config, device, spec


def run_disaggregated(req: Any, wl: Any, settings: Any) -> tuple[dict[str, Any], ExitCode, str]:
    """The document, exit code (3 when any request is refused) and title of a disaggregated replay."""
    from csa_plan.planner.cards import link as named_link
    from csa_plan.planner.engines.settings import target_of
    from csa_plan.planner.reports.simulate import runtime_document
    from csa_plan.planner.serving.disaggregation import (default_link, disagg_decode_caching, disaggregation_section,
                                                         serve_disaggregated)
    from csa_plan.planner.serving.report import runtime_report

    refuse_disaggregated_options(req)
    mix = wl.settings
    for name in ("tp", "dp", "pp", "ep"):
        if getattr(mix, name, None) not in (None, 1):
            raise BadInput(wl.source, name, f"sizes an aggregated deployment; with --prefill-workers/--decode-workers "
                                            f"{ROLE_SHAPE}")
    d = req.disaggregation
    try:
        prefill, pconfig, pdevice, spec = role_setup(req, wl, settings, d.prefill, req.enable_prefix_caching,
                                                     "--prefill-tp")
        decode, dconfig, ddevice, _ = role_setup(req, wl, settings, d.decode,
                                                 disagg_decode_caching(req.engine, req.enable_prefix_caching),
                                                 "--decode-tp")
    except RoleRefused as exc:  # the weights do not fit a role's GPUs: its budget is the answer (exit 3)
        return refused_document(wl, settings, exc), ExitCode.REFUSED, f"{settings.model} — {wl.source}"
    from csa_plan.planner.serving.serve import host_tier_section, with_host_tier

    prefill = with_host_tier(prefill, pconfig, req.host_tier)  # the prefill side's prefix cache
    from csa_plan.planner.cards import card

    c = card(target_of(pconfig.engine.settings)[0].name)
    domain = c.perf.link_domain if c.perf is not None else 1
    link, bytes_s = named_link(d.link or default_link(d.gpus, domain), c, d.gpus)
    rate = pconfig.time.rate_scale
    run = serve_disaggregated(prefill, decode, wl, rate, bytes_s)
    preps = tuple(runtime_report(r, caching=s.caching, unit=s.sizing.unit_name, output_tokens=o, devices=s.devices,
                                 step_time=s.time.as_dict())
                  for r, s, o in ((run.prefill, prefill, None), (run.decode, decode, wl.output_tokens)))
    rep = runtime_report(run.result, caching=prefill.caching, unit=decode.sizing.unit_name,
                         output_tokens=wl.output_tokens, devices=d.gpus, step_time=decode.time.as_dict())
    code = ExitCode.REFUSED if rep.refused else ExitCode.OK
    doc = runtime_document(wl, spec, replace(dconfig, time=replace(dconfig.time, rate_scale=rate)), decode.plan,
                           decode.sizing, code)
    doc["deployment"].update(devices=d.gpus, disaggregated=True)
    doc["time"].update(step_time=decode.time.as_dict(), max_concurrency=None, step_model=decode.time.label)
    doc["runtime"] = rep.as_dict()
    section = disaggregation_section(run, (prefill, decode), preps, d, link)
    for key, device in (("prefill", pdevice), ("decode", ddevice)):
        section[key]["kv_memory_bytes"] = None if device is None else int(device.kv_memory_bytes)
    doc["runtime"]["disaggregation"] = section
    doc["runtime"]["host_tier"] = host_tier_section(prefill, run.prefill)
    doc["capacity"] = None
    doc["budget"] = None
    doc["fit"] = None
    return doc, code, f"{spec.name} — {wl.source}"


def run_check_roles(request: Any, roles: Any, budget_plot: str | None = None) -> tuple[dict[str, Any], ExitCode]:
    """``check --prefill-tp T --decode-tp U ...``: each role's check, its pool from its own deployment
    (``--tp`` of the role, everything else as given), and the worse exit code."""
    from csa_plan.planner.commands.check import run_check

    d = request.deployment
    if request.engine is None:
        raise BadInput("options", "--engine", "--prefill-workers/--decode-workers check each role's engine "
                                              "instance: add --engine vllm-0.33 or --engine sglang-0.5.23")
    for option, value in (("--tp", d.tp), ("--dp", d.dp), ("--pp", d.pp), ("--ep", d.ep),
                          ("--budget-plot", budget_plot), ("--from-log", d.from_log)):
        if value is not None:
            raise BadInput("options", option, f"--prefill-workers/--decode-workers: {ROLE_SHAPE}"
                           if option in ("--tp", "--dp", "--pp", "--ep")
                           else "--prefill-workers/--decode-workers: not per role; check one role at a time")
    out: dict[str, Any] = {}
    code = ExitCode.OK
    for name, role in (("prefill", roles.prefill), ("decode", roles.decode)):
        try:  # the role's worker checked as the aggregated --tp/--dp/--ep check it (per rank)
            r = run_check(replace(request, options=replace(request.options, tp=role.tp),
                                  deployment=replace(d, tp=role.tp, dp=role.dp, ep=role.ep)))
        except BadInput as exc:
            raise role_field(exc, name) from None
        out[name] = {"workers": role.workers, "tp": role.tp, "dp": role.dp, "ep": role.ep, "ranks": role.ranks,
                     "shape": role.shape, "gpus": role.gpus, "check": r.report}
        code = max(code, r.exit_code)
    return {"schema": "csa-plan/check/v1", "disaggregation": out, "exit_code": int(code)}, ExitCode(code)


def refused_document(wl: Any, settings: Any, exc: RoleRefused) -> dict[str, Any]:
    """The simulate document of a role whose weights do not fit: nothing replayed, that role's budget."""
    from csa_plan.planner.budget.document import budget_document
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.reports.simulate import simulate_report

    spec = load_model(settings.model, max_seq_len=exc.config.max_seq_len)
    doc = simulate_report(wl, spec, exc.config, None, None, exit_code=ExitCode.REFUSED)
    doc["budget"] = budget_document(exc.device)
    doc["fit"] = None
    doc["refused_role"] = "prefill" if exc.field == "--prefill-tp" else "decode"
    return doc
