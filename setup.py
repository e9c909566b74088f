"""The optional compiled decision loop; everything else is configured in pyproject.toml.

``optional=True``: without a C compiler (or Python headers) the build skips the extension
with a warning and the pure-Python loop runs; results are the same, only slower.
"""

from setuptools import Extension, setup

# -ffp-contract=off: the step-time model (planner/runtime/steptime.h) must round as Python does
FLAGS = ["-O2", "-ffp-contract=off"]

setup(ext_modules=[Extension("csa_plan.planner.simulate.cdecide", ["planner/simulate/cdecide.c"],
                             optional=True, extra_compile_args=FLAGS),
                   Extension("csa_plan.planner.engines.cvllm", ["planner/engines/cvllm.c"],
                             depends=["planner/runtime/steptime.h", "planner/runtime/stepseries.h"], optional=True,
                             extra_compile_args=FLAGS),
                   Extension("csa_plan.planner.engines.sglang_runtime.csglang",
                             ["planner/engines/sglang_runtime/csglang.c"],
                             depends=["planner/runtime/steptime.h", "planner/runtime/stepseries.h"], optional=True,
                             extra_compile_args=FLAGS)])
