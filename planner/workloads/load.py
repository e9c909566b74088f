"""Open a workload file and dispatch on its suffix (or --format) to the mix or trace readers."""

from __future__ import annotations

from pathlib import Path

from csa_plan.planner.errors import BadInput
from csa_plan.planner.files import path_kind, read_text
from csa_plan.planner.workloads.mix import generate_mix
from csa_plan.planner.workloads.traces import container_of, read_trace_file
from csa_plan.planner.workloads.workload import TraceOptions, Workload


def load_workload(ref: str, *, sort: bool = False, options: TraceOptions | None = None) -> Workload:
    """Dispatch on the suffix: .yaml/.yml mix, .csv trace, .jsonl/.ndjson records (--format overrides)."""
    path = Path(ref)
    options = options or TraceOptions()
    kind = path_kind(path)
    if kind != "file":
        raise BadInput(ref, None, "no such workload file" if kind is None else "not a regular file")
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml") and not options.format:
        from csa_plan.planner.limits import MAX_YAML_BYTES
        from csa_plan.planner.loaders.safe_yaml import load_yaml

        return generate_mix(load_yaml(read_text(path, MAX_YAML_BYTES, "MAX_YAML_BYTES"), ref), ref)
    container = container_of(path, options)
    if container is None:
        raise BadInput(ref, None, "unknown workload type (use a .yaml mix, a .csv trace or .jsonl records, "
                       "or name the trace format with --format)")
    return read_trace_file(path, ref, container, options, sort=sort)
