"""Workloads: a YAML request mix, or a published CSV / JSONL trace, as integer arrays.

``workload`` holds the ``Workload`` value and its limits, ``formats`` the published
trace layouts (Azure 2023/2024, BurstGPT, Mooncake, Bailian, ours), ``columns`` the
vectorised field parsers, ``csv_trace`` / ``jsonl_trace`` the chunked readers,
``traces`` their file and text entry points, ``mix`` the generated request mixes,
``load`` the dispatch.
"""

from csa_plan.planner.workloads.formats import FORMAT_NAMES, FORMATS, parse_columns, parse_where
from csa_plan.planner.workloads.load import load_workload
from csa_plan.planner.workloads.mix import generate_mix, parse_distribution, parse_mix
from csa_plan.planner.workloads.traces import read_jsonl, read_trace_csv
from csa_plan.planner.workloads.workload import MixSettings, PrefixSummary, TraceOptions, TraceSummary, Workload

__all__ = ["FORMATS", "FORMAT_NAMES", "MixSettings", "PrefixSummary", "TraceOptions", "TraceSummary", "Workload",
           "generate_mix", "load_workload", "parse_columns", "parse_distribution", "parse_mix", "parse_where",
           "read_jsonl", "read_trace_csv"]
