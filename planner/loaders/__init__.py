"""Model sources: bundled presets, HF ``config.json``, model directories and our YAML spec.

``model_files`` reads them into a ``ModelSpec``; ``safe_yaml`` is the one YAML loader.
ONNX graphs are read by ``csa_plan.planner.onnx``.
"""
