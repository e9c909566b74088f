"""Which engine releases run shared compressed state, and what csa-plan models of them: a typed answer.

DeepSeek-V4.1-Flash (cross-layer shared compressed state, ratios 1 and 2) loads in vLLM from
0.30.0 (0.29.0 has no ``models/deepseek_v41/``) and in SGLang from 0.5.21 (0.5.20 lacks
``srt/configs/deepseek_v41.py``) (DEEPSEEK_V41.md §1). csa-plan's engine models reproduce the
V4 pools of their releases; their V4.1 pools (vLLM 0.33: kv-source-only ``MLAAttentionSpec``,
``CircularBufferSpec`` carries, 288/528/584 B records by card, ``attention.py:1206-1231``;
SGLang 0.5.23: ``deepseek_v4_memory_pool.py:94-115``, ``pool_configurator.py:1390-1403``) are not
modelled yet. Rather than size V4.1 with a V4 pool — a silent wrong number — an engine check of a
shared-state model is refused, typed: ``EngineReleaseUnsupported`` for a release before the one
that added the model, ``LayoutNotModelled`` for one that runs it.
"""

from __future__ import annotations

from csa_plan.planner.refusals import Clause, Refusal, RefusalType

# engine family -> (first release that runs shared-state V4.1, where that is seen)
FIRST_RELEASE: dict[str, tuple[tuple[int, ...], str]] = {
    "vllm": ((0, 30, 0), "vLLM 0.30.0 added models/deepseek_v41/ (0.29.0 has none)"),
    "sglang": ((0, 5, 21), "SGLang 0.5.21 added srt/configs/deepseek_v41.py (0.5.20 lacks it)"),
}


# The first release of each family whose V4.1 pool csa-plan models (vllm-0.33, and 0.34 with it): vLLM 0.30-0.32
# run V4.1 with other rules (records 528 / 584 B only, no SWA bounded replay, no mega attention: DEEPSEEK_V41.md
# §5), so a version the release map hands to vllm-0.33's V4 rules is not modelled for V4.1.
FIRST_MODELLED: dict[str, tuple[int, ...]] = {"vllm": (0, 33)}


def spelled(engine: str) -> str:
    """``vllm==0.30.1`` / ``vllm 0.30.1`` / ``vLLM-0.30.1`` as ``vllm-0.30.1`` (how a release is named here)."""
    return engine.strip().lower().replace("==", "-").replace(" ", "-")


def before_modelled(engine: str) -> bool:
    """Whether a named version is older than the first release whose V4.1 pool is modelled (False without a
    numeric version: a bare family name or a registry alias)."""
    family, version = release_of(spelled(engine))
    first = FIRST_MODELLED.get(family)
    return first is not None and version is not None and tuple(version[:len(first)]) < first


def release_of(engine: str) -> tuple[str, tuple[int, ...] | None]:
    """``("vllm", (0, 33))`` from ``vllm-0.33``; a name without a numeric release gives None."""
    family, _, version = engine.partition("-")
    try:
        return family, tuple(int(p) for p in version.split(".")) if version else None
    except ValueError:
        return family, None


def engine_refusal(engine: str) -> Refusal:
    """The typed refusal of an engine check of a model with shared compressed state."""
    family, version = release_of(engine)
    first = FIRST_RELEASE.get(family)
    if first is None or version is None:
        return Refusal.from_clauses(RefusalType.ENGINE_RELEASE_UNSUPPORTED, None, [Clause(
            "--engine", "vllm >= 0.30 or sglang >= 0.5.21", engine,
            f"{engine} has no cross-layer shared compressed state (ratios 1 and 2 with kv_source_layer_ids): "
            "its CompressedSparseAttention op takes ratios 4 and 128 only")])
    wanted, where = first
    shown = ".".join(str(p) for p in wanted)
    if version + (0,) * (len(wanted) - len(version)) < wanted:
        return Refusal.from_clauses(RefusalType.ENGINE_RELEASE_UNSUPPORTED, None, [Clause(
            "--engine", f"{family} >= {shown}", engine,
            f"{engine} cannot load a model with shared compressed state: {where}")])
    return Refusal.from_clauses(RefusalType.LAYOUT_NOT_MODELLED, None, [Clause(
        "--engine", "an engine release whose shared-state pool csa-plan models", engine,
        f"{engine} runs shared compressed state (since {family} {shown}), but csa-plan does not model this "
        "release's V4.1 pool yet (its groups, record formats by card, block sizes and carries); no engine "
        "figure is given rather than a V4 one. Drop --engine for the exact layout (DeepSeek's reference "
        "formats, 890 B/token of compressed state)")])
