"""Open a workload file and dispatch on its suffix to the mix or trace readers."""

from __future__ import annotations

from pathlib import Path

from csa_plan.planner.errors import BadInput
from csa_plan.planner.files import path_kind, read_text
from csa_plan.planner.workloads.mix import generate_mix
from csa_plan.planner.workloads.traces import read_jsonl, read_trace_csv
from csa_plan.planner.workloads.workload import MAX_TRACE_BYTES, Workload


def load_workload(ref: str, *, sort: bool = False) -> Workload:
    """Dispatch on the suffix: .yaml/.yml mix, .csv trace, .jsonl/.ndjson requests."""
    path = Path(ref)
    kind = path_kind(path)
    if kind != "file":
        raise BadInput(ref, None, "no such workload file" if kind is None else "not a regular file")
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        from csa_plan.planner.loaders.safe_yaml import load_yaml

        return generate_mix(load_yaml(read_text(path, MAX_TRACE_BYTES), ref), ref)
    if suffix == ".csv":
        return read_trace_csv(read_text(path, MAX_TRACE_BYTES), ref, sort=sort)
    if suffix in (".jsonl", ".ndjson"):
        return read_jsonl(read_text(path, MAX_TRACE_BYTES), ref, sort=sort)
    raise BadInput(ref, None, "unknown workload type (use .yaml mix, .csv trace or .jsonl requests)")


