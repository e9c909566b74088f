"""vLLM's DeepSeek-V4 memory planning and scheduler, one module per concept, named as vLLM names them.

* ``startup``          — the engine model (``vllm-0.33``, ``-0.26``, ``-0.25``): KV cache specs per layer, the
  pool a KV memory yields, the start-up log line, admission;
* ``kv_cache_utils``   — the specs and the packed grouping algorithm, as pure integer code;
* ``kv_cache_manager`` — the block pool and one manager per KV cache group, in motion;
* ``prefix_caching``   — block hashes and the longest hit per group;
* ``scheduler``        — one scheduler step over the groups, behind the replay loop's ``EngineRuntime``;
* ``compiled``         — the whole replay compiled (``cvllm.c``, optional), which the engine plan hands the
  runtime; the modules above are its checked twin.

File:line pointers are into the vLLM release each module names; ``tools/crosscheck_vllm_runtime.py``
drives vLLM's own code on CPU against them.
"""
