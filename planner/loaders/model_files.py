"""Read a model from a preset name, a HF config.json, a model directory or our YAML spec.

Each reader validates types strictly (``values.read_int``) and raises ``BadInput``
naming the file and the field; semantic problems are left to the gate.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from csa_plan.planner.descriptor import DESCRIPTOR_FIELDS, STATE_EDGE_INPUT_INDEX, Descriptor, StateEdge
from csa_plan.planner.errors import BadInput
from csa_plan.planner.files import describe_mode, path_kind, read_text
from csa_plan.planner.limits import MAX_FILE_BYTES, MAX_LAYER_ID, MAX_LAYERS, MAX_NAME_CHARS
from csa_plan.planner.model import ModelSpec
from csa_plan.planner.text import excerpt, kind_of
from csa_plan.planner.values import read_bool, read_int, read_str

if TYPE_CHECKING:  # a preset is read without pathlib (start-up)
    from pathlib import Path

PRESETS: dict[str, str] = {
    "deepseek-v4-flash": "deepseek-v4-flash.json",
    "deepseek-v4-pro": "deepseek-v4-pro.json",
    # DeepSeek-V4-Flash-0731 (2026-07-31): the preview's structure with the DSpark drafter attached
    # (46 compress_ratios); its config as cited in the preset's _csa_plan_source (docs/deepseek-v4-0731.md)
    "deepseek-v4-flash-0731": "deepseek-v4-flash-0731.json",
    # DeepSeek-V4-Pro-0813 (2026-08-13): the Pro preview's structure with a DSpark drafter, derived (its preset's
    # _csa_plan_source); the sgl-project FP8 repacks: the previews with block-FP8 experts
    "deepseek-v4-pro-0813": "deepseek-v4-pro-0813.json",
    "deepseek-v4-flash-fp8": "deepseek-v4-flash-fp8.json",
    "deepseek-v4-pro-fp8": "deepseek-v4-pro-fp8.json",
    # DeepSeek-V4.1-Flash (2026-09-10, MIT) and its -1017 checkpoint (the one the API serves): no
    # published field of the -1017 config differs, so both read the one bundled config (docs/deepseek-v41.md)
    "deepseek-v4.1-flash": "deepseek-v4.1-flash.json",
    "deepseek-v4.1-flash-1017": "deepseek-v4.1-flash.json",
}
# The Hugging Face repository each bundled preset is the config of.
PRESET_REPOS: dict[str, str] = {
    "deepseek-ai/DeepSeek-V4-Flash": "deepseek-v4-flash",
    "deepseek-ai/DeepSeek-V4-Pro": "deepseek-v4-pro",
    "deepseek-ai/DeepSeek-V4-Flash-0731": "deepseek-v4-flash-0731",
    "deepseek-ai/DeepSeek-V4-Pro-0813": "deepseek-v4-pro-0813",
    "sgl-project/DeepSeek-V4-Flash-FP8": "deepseek-v4-flash-fp8",
    "sgl-project/DeepSeek-V4-Pro-FP8": "deepseek-v4-pro-fp8",
    "deepseek-ai/DeepSeek-V4.1-Flash": "deepseek-v4.1-flash",
    "deepseek-ai/DeepSeek-V4.1-Flash-1017": "deepseek-v4.1-flash-1017",
}


def preset_name(ref: str) -> str | None:
    """The bundled preset ``ref`` names: its own name in any case, or its Hugging Face
    repository id (``deepseek-ai/DeepSeek-V4-Pro``, also without the owner); else None."""
    key = ref.strip().casefold()
    for name in PRESETS:
        if key == name:
            return name
    for repo, name in PRESET_REPOS.items():
        if key in (repo.casefold(), repo.split("/", 1)[1].casefold()):
            return name
    return None

INDEX_FIELDS = ("index_num_heads", "index_head_dim", "index_topk")
DIRECTORY_CONFIGS = ("config.json", "inference_config.json")


DEFAULT_LINT_LENGTH = 8
"""ONNX graphs: the total length at which symbolic record-axis conflicts are named."""


def load_model(ref: str, *, max_seq_len: int | None = None, window: int | None = None,
               at_length: int = DEFAULT_LINT_LENGTH) -> ModelSpec:
    """Dispatch on what ``ref`` names: preset, directory, .onnx, .yaml/.yml or .json.

    The keyword options matter only for ONNX graphs, whose capacity may come from
    node attributes, model metadata or the command line (in that order of lookup,
    with the command line overriding).
    """
    path = None
    if ref not in PRESETS:  # a file of that name wins over a spelling of a preset
        from pathlib import Path

        path = Path(ref)
    kind = None if path is None else path_kind(path)
    preset = preset_name(ref) if kind is None else None
    if preset is not None:
        from csa_plan.planner.presets import read_preset

        return from_hf_config(_parse_json(read_preset(PRESETS[preset]), preset), source=preset, name=preset)
    if kind is None:
        from csa_plan.planner.suggest import did_you_mean_model

        known = ", ".join(PRESETS)  # deepseek-v3 is another model, not a typo of deepseek-v4-pro: same digits only
        raise BadInput(ref, None, f"no such file, directory or preset (presets: {known}, or their Hugging Face "
                       f"ids {', '.join(PRESET_REPOS)}){did_you_mean_model(ref, [*PRESETS, *PRESET_REPOS])}")
    if kind == "dir":
        return _from_directory(path, max_seq_len)
    return _from_file(path, max_seq_len=max_seq_len, window=window, at_length=at_length)


def _from_directory(path: Path, max_seq_len: int | None) -> ModelSpec:
    """config.json, else inference_config.json; when both are there and disagree, a note says so."""
    present = []
    for name in DIRECTORY_CONFIGS:
        kind = path_kind(path / name)
        if kind == "other":  # e.g. a symlink to /dev/zero: say what it is, not "no config.json"
            raise BadInput(str(path / name), None, f"{describe_mode(os.stat(path / name).st_mode)}, not a regular file")
        if kind == "file":
            present.append(path / name)
        elif kind == "dir":
            raise BadInput(str(path / name), None, "a directory, not a regular file")
    if not present:
        raise BadInput(str(path), None, "directory has no config.json (nor inference_config.json)")
    spec = _from_file(present[0], max_seq_len=max_seq_len)
    if len(present) > 1:
        try:
            fallback = max_seq_len if max_seq_len is not None else spec.layers[0].max_seq_len
            other = _from_file(present[1], max_seq_len=fallback)
        except BadInput as exc:
            note = f"{present[1].name} is ignored ({exc.problem}); {present[0].name} is used"
        else:
            note = _disagreement(spec, other, present[0].name, present[1].name)
        if note:
            spec = replace(spec, notes=(*spec.notes, note))
    return spec


def _disagreement(used: ModelSpec, other: ModelSpec, used_name: str, other_name: str) -> str | None:
    def show(spec: ModelSpec) -> dict[str, object]:
        first = spec.layers[0] if spec.layers else None
        return {"layers": len(spec.layers), "mtp layers": spec.num_mtp_layers,
                "compress_ratios": [d.compression_ratio for d in spec.layers],
                **({f: getattr(first, f) for f in ("num_heads", "head_dim", "qk_rope_head_dim", "window",
                                                   "index_num_heads", "index_head_dim", "index_topk")} if first else {})}

    a, b = show(used), show(other)
    differ = [k for k in a if a.get(k) != b.get(k)]
    if not differ:
        return None
    k = differ[0]
    va, vb = (x[k] if not isinstance(x[k], list) else f"{len(x[k])} entries" for x in (a, b))
    more = f" (and {len(differ) - 1} more field(s))" if len(differ) > 1 else ""
    return (f"{used_name} and {other_name} disagree on {k} ({va} vs {vb}){more}; {used_name} is used")


def _from_file(path: Path, *, max_seq_len: int | None, window: int | None = None, at_length: int = 8) -> ModelSpec:
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        from csa_plan.planner.onnx.graph import load_onnx_model  # onnx is imported only for graphs

        return load_onnx_model(path, max_seq_len=max_seq_len, window=window, at_length=at_length)
    text = read_text(path, MAX_FILE_BYTES, "MAX_FILE_BYTES")
    if suffix in (".yaml", ".yml"):
        return from_yaml_spec(_parse_yaml(text, str(path)), source=str(path), max_seq_len=max_seq_len)
    data = _parse_json(text, str(path))
    if isinstance(data, dict) and "layers" in data:
        return from_yaml_spec(data, source=str(path), max_seq_len=max_seq_len)
    return from_hf_config(data, source=str(path), name=path.parent.name or path.stem, max_seq_len=max_seq_len)


def _parse_json(text: str, source: str) -> Any:
    from csa_plan.planner.loaders.safe_json import load_json

    return load_json(text, source)


def _parse_yaml(text: str, source: str) -> Any:
    from csa_plan.planner.loaders.safe_yaml import load_yaml

    return load_yaml(text, source)


def _require_mapping(data: Any, source: str, field: str | None = None) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise BadInput(source, field, f"expected a mapping, got {kind_of(data)}")
    for key in data:
        if not isinstance(key, str):
            raise BadInput(source, field, f"keys must be strings, got {kind_of(key)}")
    return data


def _ratios(source: str, value: Any, expected_len: int, expected_text: str) -> list[int]:
    if not isinstance(value, list):
        raise BadInput(source, "compress_ratios", f"expected a list of integers, got {kind_of(value)}")
    ratios = [read_int(source, f"compress_ratios[{i}]", r) for i, r in enumerate(value)]
    if len(ratios) != expected_len:
        raise BadInput(source, "compress_ratios",
                       f"has {len(ratios)} entries but {expected_text} = {expected_len}")
    return ratios


# --- Hugging Face config.json -------------------------------------------------------

# Our field -> the keys that may carry it, in order of preference. The first name is the
# HF config.json key; later names are the reference inference code's inference_config.json.
HF_KEYS: dict[str, tuple[str, ...]] = {
    "num_main_layers": ("num_hidden_layers", "n_layers"),
    "num_mtp_layers": ("num_nextn_predict_layers",),
    "num_heads": ("num_attention_heads", "n_heads"),
    "head_dim": ("head_dim",),
    "qk_rope_head_dim": ("qk_rope_head_dim", "rope_head_dim"),
    "index_num_heads": ("index_n_heads", "index_num_heads"),
    "index_head_dim": ("index_head_dim",),
    "index_topk": ("index_topk",),
    "max_seq_len": ("max_position_embeddings",),
    "window": ("sliding_window", "window_size"),
}
NESTED_CONFIG_KEYS = ("text_config", "language_config")  # multimodal wrappers keep the LM config here


def from_hf_config(data: Any, *, source: str, name: str, max_seq_len: int | None = None) -> ModelSpec:
    """A HF config.json (or the reference code's inference_config.json) as a layer stack.

    ``max_seq_len`` (the command line) stands in when the file has no
    max_position_embeddings, as inference_config.json does not.
    """
    data = _require_mapping(data, source)
    notes: list[str] = []
    if "compress_ratios" not in data:
        nested = next((k for k in NESTED_CONFIG_KEYS if isinstance(data.get(k), dict)
                       and "compress_ratios" in data[k]), None)
        if nested is None:
            raise BadInput(source, "compress_ratios", "missing: not a compressed-attention (DeepSeek-V4-style) config")
        data = _require_mapping(data[nested], source, nested)
        notes.append(f"read the language-model config under {nested!r}")

    def field(ours: str, default: int | None = None) -> int:
        keys = HF_KEYS[ours]
        for key in keys:
            if data.get(key) is not None:
                return read_int(source, key, data[key])
        if default is None:
            hint = " (or pass --max-seq-len)" if ours == "max_seq_len" else ""
            raise BadInput(source, keys[0], f"missing{hint}")
        return default

    n_main = field("num_main_layers")
    raw_ratios = data["compress_ratios"]
    if "num_hidden_layers" not in data and "n_layers" in data and isinstance(raw_ratios, list):
        # inference_config.json has no MTP count: its compress_ratios list is main layers then MTP layers
        n_mtp = max(len(raw_ratios) - n_main, 0)
        notes.append(f"inference_config.json: {n_mtp} MTP layer(s) = compress_ratios entries beyond n_layers")
    else:
        from csa_plan.planner.dspark import dspark_draft_layers

        n_mtp = field("num_mtp_layers", 0)
        drafts = dspark_draft_layers(data, source)
        if drafts is not None:  # V4-Flash-0731: the DSpark drafter's layers follow the main ones (planner/dspark.py)
            n_mtp = drafts
            notes.append(f"{drafts} DSpark draft layer(s) after the {n_main} main layers (dspark_target_layer_ids; "
                         "num_nextn_predict_layers is the legacy 1)")
    if n_main + n_mtp > MAX_LAYERS:
        raise BadInput(source, "num_hidden_layers", f"{n_main} + {n_mtp} layers is more than {MAX_LAYERS:,} "
                                                    "(MAX_LAYERS)")
    if n_main + n_mtp == 0:
        raise BadInput(source, "num_hidden_layers", "0 layers: a model needs at least one layer")
    ratios = _ratios(source, raw_ratios, n_main + n_mtp,
                     f"num_hidden_layers + num_nextn_predict_layers ({n_main} + {n_mtp})")
    has_csa = any(r == 4 for r in ratios)
    common = {
        "num_heads": field("num_heads"),
        "head_dim": field("head_dim"),
        "qk_rope_head_dim": field("qk_rope_head_dim"),
        "max_seq_len": field("max_seq_len", max_seq_len),
        "window": field("window", 128),
    }
    if "max_position_embeddings" not in data and max_seq_len is not None:
        notes.append("max_seq_len from --max-seq-len (the config has no max_position_embeddings)")
    if "kv_source_layer_ids" in data:  # cross-layer shared compressed state: its own reader, V4 untouched
        from csa_plan.planner.loaders.shared_sources import shared_layers

        layers, found, shared_notes = shared_layers(data, source, ratios, n_main, common,
                                                    {ours: field(ours, 0) for ours in INDEX_FIELDS})
        return ModelSpec(name=name, source=source, layers=layers, num_main_layers=n_main, num_mtp_layers=n_mtp,
                         notes=(*notes, *shared_notes), graph_refusals=found)
    index = {ours: field(ours, None if has_csa else 0) for ours in INDEX_FIELDS}
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
    return ModelSpec(name=name, source=source, layers=layers, num_main_layers=n_main, num_mtp_layers=n_mtp,
                     notes=tuple(notes))


# --- our YAML model spec ------------------------------------------------------------

SPEC_DEFAULT_FIELDS = tuple(f for f in DESCRIPTOR_FIELDS if f not in ("layer_id", "present_edges", "is_mtp"))
LAYER_EXTRA_KEYS = ("repeat", "mtp", "is_mtp", "state_edges", "layer_id")
TOP_EXTRA_KEYS = ("name", "layers", "compress_ratios", "num_nextn_predict_layers", "defaults", "state_edges", "gate")
SPEC_GATES = ("op", "c1")

# Names a state edge may go by: ours, the ONNX input name, or the ONNX input index.
EDGE_ALIASES: dict[str, StateEdge] = {}
for _edge, _onnx in ((StateEdge.COMPRESSED, "past_compressed_kv"), (StateEdge.CARRY, "past_compression_carry"),
                     (StateEdge.INDEX_KEY, "past_index_key"), (StateEdge.INDEX_CARRY, "past_index_carry")):
    EDGE_ALIASES[_edge.value] = EDGE_ALIASES[_onnx] = EDGE_ALIASES[str(STATE_EDGE_INPUT_INDEX[_edge])] = _edge


def from_yaml_spec(data: Any, *, source: str, max_seq_len: int | None = None) -> ModelSpec:
    """Our model spec: model-wide descriptor fields (top level, or under ``defaults``) and layers.

    ``max_seq_len`` (the command line) stands in when the spec sets none.
    """
    data = _require_mapping(data, source)
    _reject_unknown(data, source, None, SPEC_DEFAULT_FIELDS + TOP_EXTRA_KEYS)
    if "name" in data:
        name = read_str(source, "name", data["name"])
    else:
        from pathlib import Path

        name = Path(source).stem
    gate = read_str(source, "gate", data["gate"]) if "gate" in data else None
    if gate is not None and gate not in SPEC_GATES:
        from csa_plan.planner.suggest import unknown_problem

        raise BadInput(source, "gate", unknown_problem("gate", gate, SPEC_GATES))
    defaults = {k: _read_field(source, k, data[k]) for k in SPEC_DEFAULT_FIELDS if k in data}
    if "defaults" in data:
        block = _require_mapping(data["defaults"], source, "defaults")
        _reject_unknown(block, source, "defaults", SPEC_DEFAULT_FIELDS + ("state_edges",))
        for k in SPEC_DEFAULT_FIELDS:
            if k in block:
                if k in defaults:
                    raise BadInput(source, f"defaults.{k}", "also given at the top level")
                defaults[k] = _read_field(source, f"defaults.{k}", block[k])
        if "state_edges" in block:
            if "state_edges" in data:
                raise BadInput(source, "defaults.state_edges", "also given at the top level")
            data = {**data, "state_edges": block["state_edges"]}
    if max_seq_len is not None:
        defaults.setdefault("max_seq_len", max_seq_len)
    edge_defaults = _edges(data["state_edges"], source, "state_edges", frozenset(StateEdge)) \
        if "state_edges" in data else frozenset(StateEdge)
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
                raise BadInput(source, f"{where}.repeat", f"the spec would have more than {MAX_LAYERS:,} layers "
                                                          "(MAX_LAYERS)")
            entries.extend([(where, raw)] * repeat)
    elif "compress_ratios" in data:
        n_mtp = read_int(source, "num_nextn_predict_layers", data.get("num_nextn_predict_layers", 0))
        if not isinstance(data["compress_ratios"], list):
            raise BadInput(source, "compress_ratios", "expected a list of integers")
        n = len(data["compress_ratios"])
        if n == 0:
            raise BadInput(source, "compress_ratios", "empty: a model needs at least one layer")
        if n > MAX_LAYERS:
            raise BadInput(source, "compress_ratios", f"{n:,} entries, more than {MAX_LAYERS:,} (MAX_LAYERS)")
        ratios = _ratios(source, data["compress_ratios"], n, "its length")
        if n_mtp > n:
            raise BadInput(source, "num_nextn_predict_layers", f"{n_mtp} exceeds the {n} compress_ratios entries")
        entries = [(f"compress_ratios[{i}]", {"compression_ratio": r, "mtp": i >= n - n_mtp})
                   for i, r in enumerate(ratios)]
    else:
        raise BadInput(source, "layers", "missing (give layers or compress_ratios)")

    layers = []
    seen: dict[int, str] = {}
    for position, (where, raw) in enumerate(entries):
        layer = _spec_layer(source, where, position, defaults, raw, edge_defaults)
        if layer.layer_id in seen:
            raise BadInput(source, f"{where}.layer_id", f"layer id {layer.layer_id} is also used by {seen[layer.layer_id]}")
        seen[layer.layer_id] = where
        layers.append(layer)
    n_mtp = sum(1 for d in layers if d.is_mtp)
    return ModelSpec(name=name, source=source, layers=tuple(layers),
                     num_main_layers=len(layers) - n_mtp, num_mtp_layers=n_mtp, gate=gate)


def _spec_layer(source: str, where: str, layer_id: int, defaults: dict[str, Any], raw: dict[str, Any],
                edge_defaults: frozenset[StateEdge]) -> Descriptor:
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
    if "mtp" in raw and "is_mtp" in raw:
        raise BadInput(source, f"{where}.is_mtp", "give mtp or is_mtp, not both")
    mtp_key = "is_mtp" if "is_mtp" in raw else "mtp"
    mtp = read_bool(source, f"{where}.{mtp_key}", raw.get(mtp_key, False))
    if "layer_id" in raw:
        if read_int(source, f"{where}.repeat", raw.get("repeat", 1)) != 1:
            raise BadInput(source, f"{where}.layer_id", "cannot be combined with repeat")
        layer_id = read_int(source, f"{where}.layer_id", raw["layer_id"])
        if layer_id >= MAX_LAYER_ID:
            raise BadInput(source, f"{where}.layer_id", f"{layer_id:,} is not below {MAX_LAYER_ID:,} (MAX_LAYER_ID)")
    edges = edge_defaults
    if "state_edges" in raw:
        edges = _edges(raw["state_edges"], source, f"{where}.state_edges", edge_defaults)
    return Descriptor(layer_id=layer_id, is_mtp=mtp, present_edges=edges, **values)


def _edges(value: Any, source: str, where: str, start: frozenset[StateEdge]) -> frozenset[StateEdge]:
    """Which state edges are present: a list of the present ones, or a mapping edge -> presence.

    In a mapping, presence is true/false, or the edge's tensor name as an exporter writes it
    (an empty name or null means absent, as in ONNX). Edges go by our name
    (compressed, carry, index_key, index_carry), the ONNX input name or the input index.
    """
    def edge(key: Any) -> StateEdge:
        found = EDGE_ALIASES.get(str(key)) if isinstance(key, (str, int)) and not isinstance(key, bool) else None
        if found is None:
            names = ", ".join(e.value for e in StateEdge)
            raise BadInput(source, f"{where}.{str(key)[:80]}", f"unknown state edge (known: {names}, or ONNX names/indices)")
        return found

    if isinstance(value, list):
        return frozenset(edge(k) for k in value)
    if not isinstance(value, dict):
        raise BadInput(source, where, f"expected a list of present edges or a mapping, got {kind_of(value)}")
    present = set(start)
    for key, flag in value.items():
        e = edge(key)
        if isinstance(flag, str):
            keep = bool(flag.strip())
        elif flag is None:
            keep = False
        else:
            keep = read_bool(source, f"{where}.{key}", flag)
        (present.add if keep else present.discard)(e)
    return frozenset(present)


def _read_field(source: str, field: str, value: Any) -> Any:
    leaf = field.rsplit(".", 1)[-1]
    if leaf == "cache_format":
        name = read_str(source, field, value)
        if len(name) > MAX_NAME_CHARS:
            raise BadInput(source, field, f"{excerpt(name)} is longer than {MAX_NAME_CHARS} characters "
                                          "(MAX_NAME_CHARS): not a cache format")
        return name
    return read_int(source, field, value)


def _reject_unknown(data: dict[str, Any], source: str, where: str | None, allowed: tuple[str, ...]) -> None:
    for key in data:
        if key not in allowed:
            from csa_plan.planner.suggest import did_you_mean

            prefix = f"{where}." if where else ""
            raise BadInput(source, f"{prefix}{str(key)[:80]}", f"unknown field{did_you_mean(str(key), allowed)}")

