"""Coverage-guided fuzzing of every input surface with atheris (run on demand, not in CI).

    pip install atheris
    python fuzz/fuzz_surfaces.py --surface config-json -atheris_runs=100000
    python fuzz/fuzz_surfaces.py --surface all -atheris_runs=100000   # each surface in turn

An input may plan, or be rejected with BadInput (exit 2 in the CLI); any other exception is a
crash: atheris stops, prints it and writes the input to crash-*. Surfaces: config-json,
config-yaml, onnx, trace-csv, trace-jsonl, mix-yaml.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import atheris

with atheris.instrument_imports(include=["csa_plan"]):
    from csa_plan.planner.errors import BadInput
    from csa_plan.planner.loaders import _parse_json, from_hf_config, from_yaml_spec
    from csa_plan.planner.plan import PlanOptions, plan_model
    from csa_plan.planner.safe_yaml import load_yaml

TMP = tempfile.mkdtemp(prefix="csa-fuzz-")


def _plan(spec) -> None:
    plan_model(spec, PlanOptions())
    plan_model(spec, PlanOptions(tp=2, query_len=2))


def config_json(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    _plan(from_hf_config(_parse_json(text, "c.json"), source="c.json", name="fuzz"))


def config_yaml(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    _plan(from_yaml_spec(load_yaml(text, "m.yaml"), source="m.yaml"))


def _file(data: bytes, suffix: str) -> str:
    path = os.path.join(TMP, "input" + suffix)
    with open(path, "wb") as f:
        f.write(data)
    return path


def onnx_graph(data: bytes) -> None:
    from csa_plan.planner.onnx_graph import load_onnx_model

    from pathlib import Path

    _plan(load_onnx_model(Path(_file(data, ".onnx")), max_seq_len=None, window=None, at_length=8))


def trace(suffix: str):
    def run(data: bytes) -> None:
        from csa_plan.planner.workloads import load_workload

        load_workload(_file(data, suffix))

    return run


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEEDS = {  # surface -> glob patterns (relative to the repository) of valid inputs to mutate
    "config-json": ["planner/presets/*.json", "examples/configs/*/config.json"],
    "config-yaml": ["examples/configs/*.yaml", "examples/configs/refusals/*.yaml"],
    "onnx": ["fuzz/seeds/*.onnx"],
    "trace-csv": ["examples/traces/*.csv"],
    "trace-jsonl": ["examples/traces/*.jsonl"],
    "mix-yaml": ["examples/mixes/*.yaml"],
}


def _seed_corpus(surface: str) -> str:
    """A fresh corpus folder holding the surface's seeds (small files only)."""
    import glob
    import shutil

    corpus = tempfile.mkdtemp(prefix=f"corpus-{surface}-", dir=TMP)
    for pattern in SEEDS[surface]:
        for i, path in enumerate(sorted(glob.glob(os.path.join(ROOT, pattern)))):
            if os.path.getsize(path) <= 64 << 10:
                shutil.copy(path, os.path.join(corpus, f"seed{i}-{os.path.basename(path)}"))
    return corpus


SURFACES = {
    "config-json": config_json,
    "config-yaml": config_yaml,
    "onnx": onnx_graph,
    "trace-csv": trace(".csv"),
    "trace-jsonl": trace(".jsonl"),
    "mix-yaml": trace(".yaml"),
}


def main() -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--surface", choices=sorted(SURFACES) + ["all"], default="config-json")
    args, rest = parser.parse_known_args()
    names = sorted(SURFACES) if args.surface == "all" else [args.surface]
    if len(names) > 1:  # atheris.Fuzz never returns: run each surface in its own process
        import subprocess

        for name in names:
            print(f"== {name}", flush=True)
            code = subprocess.call([sys.executable, __file__, "--surface", name, *rest])
            if code:
                sys.exit(code)
        return
    target = SURFACES[names[0]]

    def one_input(data: bytes) -> None:
        try:
            target(data)
        except BadInput:
            pass

    if not any(not a.startswith("-") for a in rest):  # no corpus given: start from the seeds
        rest.append(_seed_corpus(names[0]))
    atheris.Setup([sys.argv[0], *rest], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
