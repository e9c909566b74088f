"""The optional compiled decision loop; everything else is configured in pyproject.toml.

``optional=True``: without a C compiler (or Python headers) the build skips the extension
with a warning and the pure-Python loop runs; results are the same, only slower.
"""

from setuptools import Extension, setup

# -ffp-contract=off: the step-time model (planner/steptime/steptime.h) must round as Python does
FLAGS = ["-O2", "-ffp-contract=off"]

# Every extension reads its arrays through planner/native.h; both engine replays share the loop's pieces
# (planner/replay/loop.h), the step time (planner/steptime/steptime.h) and the step series.
NATIVE = ["planner/native.h"]
REPLAY = [*NATIVE, "planner/replay/loop.h", "planner/steptime/steptime.h", "planner/replay/stepseries.h"]

setup(ext_modules=[Extension("csa_plan.planner.reserve.cdecide", ["planner/reserve/cdecide.c"], depends=NATIVE,
                             optional=True, extra_compile_args=FLAGS),
                   Extension("csa_plan.planner.engines.vllm.cvllm", ["planner/engines/vllm/cvllm.c"],
                             depends=REPLAY, optional=True,
                             extra_compile_args=FLAGS),
                   Extension("csa_plan.planner.engines.sglang.csglang",
                             ["planner/engines/sglang/csglang.c"],
                             depends=REPLAY, optional=True,
                             extra_compile_args=FLAGS)])
