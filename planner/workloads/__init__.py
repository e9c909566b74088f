"""Workloads: a YAML request mix, a CSV trace, or JSONL requests, as integer arrays.

``workload`` holds the ``Workload`` value and its limits, ``traces`` the trace readers,
``mix`` the generated request mixes, ``load`` the suffix dispatch.
"""

from csa_plan.planner.workloads.load import load_workload
from csa_plan.planner.workloads.mix import generate_mix, parse_distribution, parse_mix
from csa_plan.planner.workloads.traces import read_jsonl, read_trace_csv
from csa_plan.planner.workloads.workload import MixSettings, Workload

__all__ = ["MixSettings", "Workload", "generate_mix", "load_workload", "parse_distribution", "parse_mix",
           "read_jsonl", "read_trace_csv"]
