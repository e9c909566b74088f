"""Engine models: what an engine release really allocates and admits.

Engine models — ``vllm-0.33`` (``vllm/``), ``sglang-0.5.23`` (``sglang/``), ``onnx-genai`` —
implement one interface (``engine.EngineModel`` / ``engine.EnginePlan``) and live in
``registry.ENGINES``; callers reach them with ``registry.get_engine(name)``. Each reproduces
its engine's own memory planning: per-request bytes at any length and phase, start-up
reservations, the pool a KV memory budget yields, and admission (docs/engines.md); each
release's folder holds its start-up model, its scheduler and KV manager in motion and their
compiled twin side by side. Layout profiles that are not engines live beside ``layout.py``
(``planner/profiles.py``).
"""
