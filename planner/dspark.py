"""How many DSpark draft layers a DeepSeek-V4 config describes, as the engines count them.

DeepSeek-V4-Flash-0731 ships the DSpark drafter inside the target checkpoint: its ``config.json``
keeps the legacy ``num_nextn_predict_layers: 1`` beside ``dspark_target_layer_ids`` and a
``compress_ratios`` list one entry longer per draft layer (43 main + 3 DSpark = 46). The engines
read the draft-layer count from ``n_mtp_layers`` (inference/config.json's name) and default to 3:
vLLM 0.34.0 models/deepseek_v4/nvidia/dspark.py:105 (``getattr(config, "n_mtp_layers", None) or 3``),
SGLang's ``get_dspark_num_layers`` (``dspark_num_layers ... or 3``). A V4.1 config names its DSpark
layers in ``num_nextn_predict_layers`` itself and is not a case here.
"""

from __future__ import annotations

from typing import Any, Mapping

from csa_plan.planner.values import read_int

DSPARK_MARKER = "dspark_target_layer_ids"
DEFAULT_DSPARK_LAYERS = 3  # vllm-0.34.0 models/deepseek_v4/nvidia/dspark.py:105


def dspark_draft_layers(config: Mapping[str, Any], source: str) -> int | None:
    """The draft-layer count of a V4 DSpark config (``n_mtp_layers``, ``dspark_num_layers``, else 3); None when
    the config is not one (no ``dspark_target_layer_ids``, or its ``num_nextn_predict_layers`` already counts
    every entry of ``compress_ratios`` beyond the main layers, as V4.1's does)."""
    if DSPARK_MARKER not in config:
        return None
    ratios = config.get("compress_ratios")
    main = config.get("num_hidden_layers")
    nextn = config.get("num_nextn_predict_layers", 0)
    if isinstance(ratios, list) and isinstance(main, int) and isinstance(nextn, int) and len(ratios) == main + nextn:
        return None
    for key in ("n_mtp_layers", "dspark_num_layers"):
        if config.get(key):
            return read_int(source, key, config[key])
    return DEFAULT_DSPARK_LAYERS
