"""Read a model from a preset name, a HF config.json, a model directory or our YAML spec.

Each reader validates types strictly (``values.read_int``) and raises ``BadInput``
naming the file and the field; semantic problems are left to the gate.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from .descriptor import DESCRIPTOR_FIELDS, Descriptor, StateEdge
from .errors import BadInput
from .files import read_text
from .model import ModelSpec
from .values import read_bool, read_int, read_str

PRESETS: dict[str, str] = {
    "deepseek-v4-flash": "deepseek-v4-flash.json",
    "deepseek-v4-pro": "deepseek-v4-pro.json",
}

INDEX_FIELDS = ("index_num_heads", "index_head_dim", "index_topk")
MAX_FILE_BYTES = 64 << 20
MAX_LAYERS = 1 << 16  # far beyond any real stack; bounds memory on hostile specs


def load_model(ref: str, *, max_seq_len: int | None = None, window: int | None = None,
               at_length: int = 8) -> ModelSpec:
    """Dispatch on what ``ref`` names: preset, directory, .onnx, .yaml/.yml or .json.

    The keyword options matter only for ONNX graphs, whose capacity may come from
    node attributes, model metadata or the command line (in that order of lookup,
    with the command line overriding).
    """
    if ref in PRESETS:
        text = resources.files("csa_plan.planner.presets").joinpath(PRESETS[ref]).read_text()
        return from_hf_config(_parse_json(text, ref), source=ref, name=ref)
    path = Path(ref)
    if not path.exists():
        known = ", ".join(PRESETS)
        raise BadInput(ref, None, f"no such file, directory or preset (presets: {known})")
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise BadInput(str(path), None, "directory has no config.json")
        path = config
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        from .onnx_graph import load_onnx_model  # onnx is imported only for graphs

        return load_onnx_model(path, max_seq_len=max_seq_len, window=window, at_length=at_length)
    text = read_text(path, MAX_FILE_BYTES)
    if suffix in (".yaml", ".yml"):
        return from_yaml_spec(_parse_yaml(text, str(path)), source=str(path))
    data = _parse_json(text, str(path))
    if isinstance(data, dict) and "layers" in data:
        return from_yaml_spec(data, source=str(path))
    return from_hf_config(data, source=str(path), name=path.parent.name or path.stem)


def _parse_json(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(source, None, f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise BadInput(source, None, "malformed JSON: nesting too deep") from None


def _parse_yaml(text: str, source: str) -> Any:
    from .safe_yaml import load_yaml

    return load_yaml(text, source)


def _require_mapping(data: Any, source: str, field: str | None = None) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise BadInput(source, field, f"expected a mapping, got {type(data).__name__}")
    for key in data:
        if not isinstance(key, str):
            raise BadInput(source, field, f"keys must be strings, got {key!r}")
    return data


def _ratios(source: str, value: Any, expected_len: int, expected_text: str) -> list[int]:
    if not isinstance(value, list):
        raise BadInput(source, "compress_ratios", f"expected a list of integers, got {type(value).__name__}")
    ratios = [read_int(source, f"compress_ratios[{i}]", r) for i, r in enumerate(value)]
    if len(ratios) != expected_len:
        raise BadInput(source, "compress_ratios",
                       f"has {len(ratios)} entries but {expected_text} = {expected_len}")
    return ratios


# --- Hugging Face config.json -------------------------------------------------------

HF_FIELDS: dict[str, str] = {
    "num_heads": "num_attention_heads",
    "head_dim": "head_dim",
    "qk_rope_head_dim": "qk_rope_head_dim",
    "index_num_heads": "index_n_heads",
    "index_head_dim": "index_head_dim",
    "index_topk": "index_topk",
    "max_seq_len": "max_position_embeddings",
}


def from_hf_config(data: Any, *, source: str, name: str) -> ModelSpec:
    data = _require_mapping(data, source)
    if "compress_ratios" not in data:
        raise BadInput(source, "compress_ratios", "missing: not a compressed-attention (DeepSeek-V4-style) config")

    def field(key: str, default: int | None = None) -> int:
        if key not in data or data[key] is None:
            if default is None:
                raise BadInput(source, key, "missing")
            return default
        return read_int(source, key, data[key])

    n_main = field("num_hidden_layers")
    n_mtp = field("num_nextn_predict_layers", 0)
    if n_main + n_mtp > MAX_LAYERS:
        raise BadInput(source, "num_hidden_layers", f"{n_main} + {n_mtp} layers is more than {MAX_LAYERS}")
    ratios = _ratios(source, data["compress_ratios"], n_main + n_mtp,
                     f"num_hidden_layers + num_nextn_predict_layers ({n_main} + {n_mtp})")
    has_csa = any(r == 4 for r in ratios)
    common = {
        "num_heads": field("num_attention_heads"),
        "head_dim": field("head_dim"),
        "qk_rope_head_dim": field("qk_rope_head_dim"),
        "max_seq_len": field("max_position_embeddings"),
        "window": field("sliding_window", 128),
    }
    index = {ours: field(HF_FIELDS[ours], None if has_csa else 0) for ours in INDEX_FIELDS}
    layers = tuple(
        Descriptor(
            layer_id=i,
            compression_ratio=r,
            is_mtp=i >= n_main,
            **common,
            **(index if r == 4 else {k: 0 for k in INDEX_FIELDS}),
        )
        for i, r in enumerate(ratios)
    )
    return ModelSpec(name=name, source=source, layers=layers, num_main_layers=n_main, num_mtp_layers=n_mtp)


# --- our YAML model spec ------------------------------------------------------------

SPEC_DEFAULT_FIELDS = tuple(f for f in DESCRIPTOR_FIELDS if f not in ("layer_id", "present_edges", "is_mtp"))
LAYER_EXTRA_KEYS = ("repeat", "mtp", "state_edges")
TOP_EXTRA_KEYS = ("name", "layers", "compress_ratios", "num_nextn_predict_layers")


def from_yaml_spec(data: Any, *, source: str) -> ModelSpec:
    data = _require_mapping(data, source)
    _reject_unknown(data, source, None, SPEC_DEFAULT_FIELDS + TOP_EXTRA_KEYS)
    name = read_str(source, "name", data["name"]) if "name" in data else Path(source).stem
    defaults = {k: _read_field(source, k, data[k]) for k in SPEC_DEFAULT_FIELDS if k in data}
    entries: list[tuple[str, dict[str, Any]]] = []
    if "layers" in data and "compress_ratios" in data:
        raise BadInput(source, "layers", "give either layers or compress_ratios, not both")
    if "layers" in data:
        raw_layers = data["layers"]
        if not isinstance(raw_layers, list) or not raw_layers:
            raise BadInput(source, "layers", "expected a non-empty list of layer mappings")
        for i, raw in enumerate(raw_layers):
            where = f"layers[{i}]"
            raw = _require_mapping(raw, source, where)
            _reject_unknown(raw, source, where, SPEC_DEFAULT_FIELDS + LAYER_EXTRA_KEYS)
            repeat = read_int(source, f"{where}.repeat", raw.get("repeat", 1))
            if repeat < 1:
                raise BadInput(source, f"{where}.repeat", f"must be at least 1, got {repeat}")
            if len(entries) + repeat > MAX_LAYERS:
                raise BadInput(source, f"{where}.repeat", f"the spec would have more than {MAX_LAYERS} layers")
            entries.extend([(where, raw)] * repeat)
    elif "compress_ratios" in data:
        n_mtp = read_int(source, "num_nextn_predict_layers", data.get("num_nextn_predict_layers", 0))
        if not isinstance(data["compress_ratios"], list):
            raise BadInput(source, "compress_ratios", "expected a list of integers")
        n = len(data["compress_ratios"])
        ratios = _ratios(source, data["compress_ratios"], n, "its length")
        if n_mtp > n:
            raise BadInput(source, "num_nextn_predict_layers", f"{n_mtp} exceeds the {n} compress_ratios entries")
        entries = [(f"compress_ratios[{i}]", {"compression_ratio": r, "mtp": i >= n - n_mtp})
                   for i, r in enumerate(ratios)]
    else:
        raise BadInput(source, "layers", "missing (give layers or compress_ratios)")

    layers = []
    for layer_id, (where, raw) in enumerate(entries):
        layers.append(_spec_layer(source, where, layer_id, defaults, raw))
    n_mtp = sum(1 for d in layers if d.is_mtp)
    return ModelSpec(name=name, source=source, layers=tuple(layers),
                     num_main_layers=len(layers) - n_mtp, num_mtp_layers=n_mtp)


def _spec_layer(source: str, where: str, layer_id: int, defaults: dict[str, Any], raw: dict[str, Any]) -> Descriptor:
    own = {k: _read_field(source, f"{where}.{k}", raw[k]) for k in SPEC_DEFAULT_FIELDS if k in raw}
    ratio = own.get("compression_ratio", defaults.get("compression_ratio"))
    if ratio is None:
        raise BadInput(source, f"{where}.compression_ratio", "missing")
    values = dict(defaults)
    if ratio != 4:  # model-wide indexer settings belong to ratio-4 layers only
        for k in INDEX_FIELDS:
            values.pop(k, None)
    values.update(own)
    for required in ("num_heads", "max_seq_len"):
        if required not in values:
            raise BadInput(source, f"{where}.{required}", "missing (set it model-wide or on the layer)")
    mtp = read_bool(source, f"{where}.mtp", raw.get("mtp", False))
    edges = set(StateEdge)
    if "state_edges" in raw:
        spec = _require_mapping(raw["state_edges"], source, f"{where}.state_edges")
        for key, present in spec.items():
            try:
                edge = StateEdge(key)
            except ValueError:
                names = ", ".join(e.value for e in StateEdge)
                raise BadInput(source, f"{where}.state_edges.{key}", f"unknown state edge (known: {names})") from None
            if not read_bool(source, f"{where}.state_edges.{key}", present):
                edges.discard(edge)
    return Descriptor(layer_id=layer_id, is_mtp=mtp, present_edges=frozenset(edges), **values)


def _read_field(source: str, field: str, value: Any) -> Any:
    leaf = field.rsplit(".", 1)[-1]
    if leaf == "cache_format":
        return read_str(source, field, value)
    return read_int(source, field, value)


def _reject_unknown(data: dict[str, Any], source: str, where: str | None, allowed: tuple[str, ...]) -> None:
    for key in data:
        if key not in allowed:
            prefix = f"{where}." if where else ""
            raise BadInput(source, f"{prefix}{key}", "unknown field")

