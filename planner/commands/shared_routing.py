"""Which engine a model with cross-layer shared compressed state (DeepSeek-V4.1) may be run under.

``check`` folds ``shared_engines.engine_refusal`` into its gate refusals; ``simulate``, ``compare`` and
``sweep`` size a pool and replay it, so they need the same answer as an engine refusal (exit 3), before any
engine figure — a device budget, a pool, a replay — is computed with rules that only know DeepSeek-V4.
One place decides it: an engine model's ``models_shared_state`` (vllm-0.33 / vllm-0.34 where their V4.1
specs are modelled, ``planner/engines/vllm/startup.py``); every other release gets the typed refusal of
``shared_engines`` (the release that added V4.1, or "not modelled yet").
"""

from __future__ import annotations

from typing import Any


def has_shared_state(spec: Any) -> bool:
    """Whether any layer of a loaded model carries a source topology (ratios 1/2 with kv sources)."""
    return any(getattr(d, "sharing", None) is not None for d in spec.layers)


def named_release(engine: str) -> str:
    """The release a user named, as the typed refusal should name it: ``vllm-0.30.1`` stays itself (the
    release map would hand it to vllm-0.33's rules), a bare ``vllm`` or an alias becomes its registry name."""
    from csa_plan.planner.engines.registry import resolve_engine_name
    from csa_plan.planner.shared_engines import release_of, spelled

    return spelled(engine) if release_of(spelled(engine))[1] else resolve_engine_name(engine)[0]


def models_shared_state(engine: str) -> bool:
    """Whether that engine release's pools for shared compressed state are modelled (an unknown name is bad
    input, as the registry says): the engine model says so, and a named version is not older than the first
    release whose V4.1 rules it follows (``shared_engines.before_modelled``: vLLM 0.30-0.32 are not)."""
    from csa_plan.planner.engines.registry import get_engine, resolve_engine_name
    from csa_plan.planner.shared_engines import before_modelled

    return get_engine(resolve_engine_name(engine)[0]).models_shared_state and not before_modelled(engine)


def shared_state_refusal(spec: Any, engine: str | None) -> Any:
    """The engine refusal (an ``EngineRefusal``) of running ``spec`` under ``engine``, or None when the model has
    no shared state, no engine is named, or the release models it."""
    if engine is None or not has_shared_state(spec) or models_shared_state(engine):
        return None
    from csa_plan.planner.engines.engine import EngineRefusal
    from csa_plan.planner.shared_engines import FIRST_RELEASE, engine_refusal

    name = named_release(engine)
    r = engine_refusal(name)
    family = name.partition("-")[0]
    rule = FIRST_RELEASE[family][1] if family in FIRST_RELEASE else "no cross-layer shared compressed state"
    return EngineRefusal(engine=name, rule=f"{r.type.value}: {rule}", setting=r.field, expected=r.expected,
                         actual=r.actual, message=f"{name}: {r.message}")


def refuse_split_sharing_groups(model: str, engine: str, pp: int | None) -> None:
    """vLLM refuses a pipeline split inside a V4.1 sharing group at start-up (``models/deepseek_v41/
    attention.py:463-468, 606-612``: "PP splits inside a v4.1 kv-sharing group are not supported"): raise
    the typed ``SharingGroupSplit`` (exit 3) for such a split under a release that runs V4.1, before the
    one-stage rule of csa-plan's engine models is applied. A split between groups passes here."""
    if pp is None or pp <= 1:  # None: the deployment's default, one stage
        return
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.placement import split_stages
    from csa_plan.planner.sharing import require_whole_groups

    spec = load_model(model)
    if not has_shared_state(spec) or not models_shared_state(engine):
        return
    require_whole_groups(spec.layers, split_stages(spec.num_main_layers, spec.num_mtp_layers, pp).layers)
