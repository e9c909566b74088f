"""The engine registry: every engine model under its name, and the names that went away.

``get_engine("vllm-0.33")`` is the only way callers reach an engine model; an unknown
name is bad input listing the known ones, and the retired per-layer ``--layout vllm`` /
``sglang`` names say what replaced them.

An engine model's module is imported when that engine is first looked up, not with the
registry: a command pays only for the engine it names (start-up: docs/architecture.md), and
listing the names (help, did-you-mean) imports none of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Iterator, Mapping

from csa_plan.planner.profiles import lookup

if TYPE_CHECKING:
    from csa_plan.planner.engines.engine import EngineModel


# Every engine model, in listing order: its name -> "module:attribute" (the model's own ``name`` is the
# key; tests/test_imports.py checks every entry). A new engine is a new line here.
ENGINE_MODULES: dict[str, str] = {
    "vllm-0.34": "csa_plan.planner.engines.vllm.startup:VLLM_034",
    "vllm-0.33": "csa_plan.planner.engines.vllm.startup:VLLM_033",
    "vllm-0.28": "csa_plan.planner.engines.vllm.startup:VLLM_028",
    "vllm-0.27": "csa_plan.planner.engines.vllm.startup:VLLM_027",
    "vllm-0.26": "csa_plan.planner.engines.vllm.startup:VLLM_026",
    "vllm-0.25": "csa_plan.planner.engines.vllm.startup:VLLM_025",
    "sglang-0.5.23": "csa_plan.planner.engines.sglang.startup:SGLANG_0523",
    "onnx-genai": "csa_plan.planner.engines.onnx_genai:ONNX_GENAI",
}


class _Engines(Mapping[str, "EngineModel"]):
    """The registry as a read-only mapping whose values are imported on first access."""

    def __getitem__(self, name: str) -> EngineModel:
        module, attr = ENGINE_MODULES[name].split(":")  # KeyError for an unknown name, as a dict gives
        model = getattr(importlib.import_module(module), attr)
        if model.name != name:  # never a silently different engine
            raise RuntimeError(f"registry entry {name!r} holds the engine model {model.name!r}")
        return model

    def __iter__(self) -> Iterator[str]:
        return iter(ENGINE_MODULES)

    def __len__(self) -> int:
        return len(ENGINE_MODULES)

    def __repr__(self) -> str:
        return f"ENGINES({', '.join(ENGINE_MODULES)})"


ENGINES: Mapping[str, EngineModel] = _Engines()

# An engine named without a release: its newest release modelled at start-up and in motion (every output names
# the one used). vllm-0.34 replays too, but its device budget from flags is refused (the pool needs --kv-memory).
NEWEST: dict[str, str] = {"vllm": "vllm-0.33", "sglang": "sglang-0.5.23"}
SGLANG_MODELLED = ("0.5.23",)

def resolve_engine_name(name: str) -> tuple[str, str | None]:
    """``(registry name, note)``: a bare engine name is its newest modelled release, and the note says so."""
    key = name.strip().lower() if isinstance(name, str) else name
    if key in NEWEST:
        return NEWEST[key], (f"--engine {key} names the newest release modelled at start-up and in motion, "
                             f"{NEWEST[key]}" + (" (vllm-0.34: its pool needs --kv-memory)" if key == "vllm" else ""))
    if isinstance(key, str):  # vLLM-0.33, and vllm-0.33.0 as `vllm --version` prints it
        for spelled in (key, key.removesuffix(".0")):
            if spelled in ENGINES:
                return spelled, None
        # any other vLLM version: the modelled release whose rules it runs (docs/engine-releases.md)
        for prefix in ("vllm-", "vllm==", "vllm "):
            if key.startswith(prefix):
                from csa_plan.planner.engines.releases import match_vllm

                found = match_vllm(name.strip(), key[len(prefix):])
                if found is not None:
                    return found.modelled, found.note or None
        for prefix in ("sglang-", "sglang==", "sglang "):
            version = key[len(prefix):].removeprefix("v") if key.startswith(prefix) else ""
            if version and version[:1].isdigit() and version not in SGLANG_MODELLED:
                from csa_plan.planner.errors import BadInput

                raise BadInput("options", "--engine", f"{name.strip()}: only SGLang "
                               f"{', '.join(SGLANG_MODELLED)} is modelled (--engine sglang-0.5.23); the rules of "
                               f"other SGLang releases are not read (docs/engine-releases.md)")
    return name, None


def get_engine(name: str, source: str = "options", field: str = "--engine") -> EngineModel:
    """The engine model ``name`` names (a modelled release, a bare engine or any vLLM version: see
    ``resolve_engine_name``); unknown names are bad input with the closest one."""
    return lookup("engine", ENGINES, resolve_engine_name(name)[0], source, field)
