"""Weights: what a model's tensors take, from its config alone or from its checkpoint.

* ``tensors``: stored dtypes, one tensor, one weight (a tensor and its scales), an inventory;
* ``registry``: the inventory builder per architecture (``inventory_for``); an unknown
  architecture is bad input, never a guess;
* ``deepseek_v4``: the DeepSeek-V4 entry, derived from the reference inference code;
* ``config``: the raw config of a preset, model directory or config.json;
* ``safetensors``: a bounded reader of safetensors headers (never the tensor data) and of
  ``model.safetensors.index.json``;
* ``measured``: which figure a budget uses (a checkpoint's, else the inventory's) and how
  far the two are apart;
* ``sharding``: what each device holds under an engine's tensor, expert, pipeline and
  data-parallel rules.
"""
