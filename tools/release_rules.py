"""Where each vLLM release decides the rules csa-plan's vLLM models tell apart (outside CI).

Reads unzipped release wheels (``pip download --no-deps vllm==X``; ``unzip -q vllm-X-*.whl 'vllm/*.py'`` into
``DIR/vX/``) and prints, per release, the file:line of each marker of planner/engines/releases.py's map, then the
AST fingerprint of every rule function (docstrings and comments dropped), so that two releases whose functions
are the same show the same fingerprint and a changed function is found without reading every diff:

    python tools/release_rules.py DIR 0.25.0 0.26.0 0.27.1 0.28.0 0.29.0 0.33.0 0.34.0
    python tools/release_rules.py DIR --diff _get_packed_kv_cache_groups 0.32.0 0.33.0

Nothing here is a csa-plan dependency; docs/engine-releases.md has the table it gave.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import hashlib
import os
import re
import sys

KV = ("v1/core/kv_cache_planning.py", "v1/core/kv_cache_utils.py")
# marker -> (files, the line that decides it)
MARKERS = {
    "DeepSeek-V4 (models/deepseek_v4/)": (("models/deepseek_v4/attention.py",), r"class DeepseekV4"),
    "DeepSeek-V4 (model_executor/models/)": (("model_executor/models/deepseek_v4.py",), r"class DeepseekV4"),
    "packed groups": (KV, r"^def _get_packed_kv_cache_groups"),
    "layer tuples": (KV, r"^def _get_kv_cache_groups_uniform_groups"),
    "windows for max_in_flight_tokens": (("v1/kv_cache_interface.py",),
                                         r"max_in_flight_tokens=vllm_config.max_in_flight_tokens"),
    "extra_retained_tokens": (KV, r"^\s+extra_retained_tokens = "),
    "null block in the check": (KV, r"# Reserve the null block BlockPool permanently holds back, so the check"),
    ">= 160 GiB tier": (("engine/arg_utils.py",), r"device_memory >= 160 \* GiB_bytes"),
    "MXFP4 keys at FP8's size": (("models/deepseek_v4/attention.py",),
                                 r"For FP4 indexer cache, we still allocate the same amount"),
    "extensible KV cache": (("config/cache.py",), r"enable_extensible_kv_cache: bool"),
    "indexer BLHNC layout": (("v1/attention/backends/mla/indexer.py",), r"BLHNC"),
    # an entry of DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES (indented 8, as no other list naming it is)
    "DeepSeek-V4 on Model Runner V2 by default": (("config/vllm.py",), r'^        "DeepseekV4ForCausalLM",$'),
    "1024-token capture ceiling on sm_100": (("config/vllm.py",), r"^\s+1024 if current_platform.is_device_capability_family"),
    "uniform decode capture sizes": (("config/vllm.py",), r"uniform_decode_sizes: list\[int\] = \[\]"),
}
RULES = {  # the functions that decide the pool, by qualified name
    "SlidingWindowSpec.max_memory_usage_bytes": ("v1/kv_cache_interface.py",),
    "AttentionSpec.page_size_bytes": ("v1/kv_cache_interface.py",),
    "_get_packed_kv_cache_groups": KV, "_approximate_gcd": KV, "_get_kv_cache_groups_uniform_groups": KV,
    "get_kv_cache_groups": KV, "_get_kv_cache_bytes_per_block": KV, "_max_memory_usage_bytes_from_groups": KV,
    "get_kv_cache_config_from_groups": KV, "get_kv_cache_configs": KV,
    "get_max_concurrency_for_kv_cache_config": KV, "update_kv_cache_capacity": KV,
    "VllmConfig.max_concurrent_batches": ("config/vllm.py",), "VllmConfig.max_in_flight_tokens": ("config/vllm.py",),
    "EngineArgs.get_batch_defaults": ("engine/arg_utils.py",),
    "CompressorStateCache.get_kv_cache_spec": ("models/deepseek_v4/compressor.py",),
    "DeepseekV4SWACache.get_kv_cache_spec": ("v1/attention/backends/mla/sparse_swa.py",),
    "Scheduler.schedule": ("v1/core/sched/scheduler.py",),
    "KVCacheManager.allocate_slots": ("v1/core/kv_cache_manager.py",),
    # the device budget's non-KV terms (planner/budget/vllm_nonkv.py)
    "Worker.determine_available_memory": ("v1/worker/gpu_worker.py",),
    "VllmConfig._set_cudagraph_sizes": ("config/vllm.py",),
    "VllmConfig.use_v2_model_runner": ("config/vllm.py",),
    "VllmConfig._is_default_v2_model_runner_model": ("config/vllm.py",),
}


def _root(base: str, version: str) -> str:
    return os.path.join(base, f"v{version}", "vllm")


def marker(base: str, version: str, files: tuple[str, ...], pattern: str) -> str | None:
    rx = re.compile(pattern)
    for rel in files:
        path = os.path.join(_root(base, version), rel)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if rx.search(line):
                    return f"{rel}:{n}"
    return None


def function_source(base: str, version: str, files: tuple[str, ...], qual: str) -> tuple[list[str], str] | None:
    """The function's source without docstrings or comments, and its file:line."""
    for rel in files:
        path = os.path.join(_root(base, version), rel)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            nodes: list[ast.AST] = [ast.parse(f.read())]
        for part in qual.split("."):
            nodes = [c for n in nodes for c in ast.iter_child_nodes(n)
                     if isinstance(c, (ast.FunctionDef, ast.ClassDef)) and c.name == part]
        if not nodes:
            continue
        node = ast.parse(ast.unparse(nodes[0])).body[0]
        for x in ast.walk(node):
            body = getattr(x, "body", None)
            if isinstance(x, (ast.FunctionDef, ast.ClassDef)) and body and isinstance(body[0], ast.Expr) \
                    and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                x.body = body[1:] or [ast.Pass()]
        return ast.unparse(node).splitlines(), f"{rel}:{nodes[0].lineno}"
    return None


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", help="the folder holding vX.Y.Z/vllm/ per release")
    ap.add_argument("versions", nargs="+")
    ap.add_argument("--diff", metavar="FUNCTION", help="show FUNCTION's diff between consecutive releases")
    args = ap.parse_args(argv)
    if args.diff:
        files = RULES.get(args.diff, KV)
        for a, b in zip(args.versions, args.versions[1:]):
            sa = function_source(args.base, a, files, args.diff)
            sb = function_source(args.base, b, files, args.diff)
            lines = list(difflib.unified_diff(sa[0] if sa else [], sb[0] if sb else [], a, b, lineterm=""))
            print(f"## {args.diff} {a} -> {b}: {'the same' if not lines else ''}")
            print("\n".join(lines))
        return 0
    width = max(len(v) for v in args.versions) + 1
    print("markers (file:line where the release decides it; - where it does not)")
    for name, (files, pattern) in MARKERS.items():
        print(f"  {name}")
        for v in args.versions:
            print(f"    {v:{width}} {marker(args.base, v, files, pattern) or '-'}")
    print("rule functions (AST fingerprint; the same fingerprint is the same function)")
    for name, files in RULES.items():
        cells = []
        for v in args.versions:
            found = function_source(args.base, v, files, name)
            cells.append(hashlib.sha1("\n".join(found[0]).encode()).hexdigest()[:8] if found else "-")
        print(f"  {name:44} " + " ".join(f"{c:9}" for c in cells))
    print(f"  {'':44} " + " ".join(f"{v:9}" for v in args.versions))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
