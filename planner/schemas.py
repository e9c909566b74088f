"""The versioned ``--json`` documents: one schema string per command, defined once.

Keys are only ever added to a document, never renamed or removed; a change that would
break a reader is a new version string.
"""

CHECK = "csa-plan/check/v2"  # v2: one capacity answer with its authority (issue 23)
COMPARE = "csa-plan/compare/v1"
SIMULATE = "csa-plan/simulate/v1"
SWEEP = "csa-plan/sweep/v2"  # v2: runtime-replayed engine points (result.runtime, model; peak_bytes may be null)
SWEEP_POINT = "csa-plan/sweep-point/v2"  # one line of a sweep's --resume file
SWEEP_RESUME = "csa-plan/sweep-resume/v1"  # the first line of a --resume file: what it belongs to
RUN_GPU = "csa-plan/run-gpu/v1"
PLAN = "csa-plan/plan/v1"  # csa-plan plan: the fewest GPUs per card for a rate and its SLO bounds (issue 45)
