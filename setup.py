"""The optional compiled decision loop; everything else is configured in pyproject.toml.

``optional=True``: without a C compiler (or Python headers) the build skips the extension
with a warning and the pure-Python loop runs; results are the same, only slower.
"""

from setuptools import Extension, setup

# -ffp-contract=off: the step-time model (planner/steptime/steptime.h) must round as Python does
FLAGS = ["-O2", "-ffp-contract=off"]

setup(ext_modules=[Extension("csa_plan.planner.reserve.cdecide", ["planner/reserve/cdecide.c"],
                             optional=True, extra_compile_args=FLAGS),
                   Extension("csa_plan.planner.engines.vllm.cvllm", ["planner/engines/vllm/cvllm.c"],
                             depends=["planner/steptime/steptime.h", "planner/replay/stepseries.h"], optional=True,
                             extra_compile_args=FLAGS),
                   Extension("csa_plan.planner.engines.sglang.csglang",
                             ["planner/engines/sglang/csglang.c"],
                             depends=["planner/steptime/steptime.h", "planner/replay/stepseries.h"], optional=True,
                             extra_compile_args=FLAGS)])
