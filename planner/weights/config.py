"""The raw config a tensor inventory is built from: a preset, a model directory or a config file.

YAML specs and ONNX graphs carry no weight structure: they give ``None`` here, and a
budget then needs a checkpoint or ``--weights``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from csa_plan.planner.errors import BadInput
from csa_plan.planner.files import path_kind, read_text
from csa_plan.planner.loaders.model_files import PRESETS
from csa_plan.planner.record import record

if TYPE_CHECKING:  # a preset is read without pathlib (start-up)
    from pathlib import Path

MAX_CONFIG_BYTES = 64 << 20

# The reference inference code's inference_config.json, by the HF config names.
REFERENCE_KEYS = {
    "dim": "hidden_size", "n_layers": "num_hidden_layers", "n_heads": "num_attention_heads",
    "moe_inter_dim": "moe_intermediate_size", "n_hash_layers": "num_hash_layers",
    "n_activated_experts": "num_experts_per_tok", "n_mtp_layers": "num_nextn_predict_layers",
}
REFERENCE_MTP_DEFAULT = 1  # ModelArgs.n_mtp_layers in the reference inference code


@record
class ModelConfig:
    """A config mapping and where it was read; ``directory`` is set when the model ref is a folder."""

    data: dict[str, Any]
    source: str
    directory: Path | None = None

    @property
    def data_key(self) -> str:
        """The config as canonical JSON text (a cache key for its inventory)."""
        return json.dumps(self.data, sort_keys=True)


def read_model_config(ref: str) -> ModelConfig | None:
    if ref in PRESETS:
        from csa_plan.planner.presets import read_preset

        return ModelConfig(_parse(read_preset(PRESETS[ref]), ref), ref)
    from pathlib import Path

    path = Path(ref)
    kind = path_kind(path)
    directory = None
    if kind == "dir":
        directory = path
        for name in ("config.json", "inference_config.json"):
            if path_kind(path / name) == "file":
                path = path / name
                break
        else:
            return ModelConfig({}, str(path), directory)
    elif kind != "file" or path.suffix.lower() != ".json":
        return None
    data = _parse(read_text(path, MAX_CONFIG_BYTES), str(path))
    if not isinstance(data, dict) or "layers" in data:
        return None  # our JSON model spec, not a checkpoint config
    for key in ("text_config", "language_config"):
        if isinstance(data.get(key), dict):  # the wrapper's architecture and quantization stay with it
            data = {**{k: data[k] for k in ("architectures", "quantization_config") if k in data}, **data[key]}
            break
    if path.name == "inference_config.json" or ("dim" in data and "n_layers" in data):
        data = from_reference_config(data)
    return ModelConfig(data, str(path), directory)


def from_reference_config(data: dict[str, Any]) -> dict[str, Any]:
    """inference_config.json in HF names: FP8 128x128 when ``dtype`` is fp8 (kernel block_size 128)."""
    out = {REFERENCE_KEYS.get(k, k): v for k, v in data.items()}
    out.setdefault("num_nextn_predict_layers", REFERENCE_MTP_DEFAULT)
    out.setdefault("architectures", ["DeepseekV4ForCausalLM"])
    if data.get("dtype") == "fp8":
        out["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
    return out


def _parse(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except (RecursionError, ValueError) as exc:
        raise BadInput(source, None, f"malformed JSON: {str(exc).splitlines()[0][:200]}") from None
