"""The optional compiled decision loop; everything else is configured in pyproject.toml.

``optional=True``: without a C compiler (or Python headers) the build skips the extension
with a warning and the pure-Python loop runs; results are the same, only slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("csa_plan.planner.simulate.cdecide", ["planner/simulate/cdecide.c"],
                             optional=True, extra_compile_args=["-O2"]),
                   Extension("csa_plan.planner.engines.cvllm", ["planner/engines/cvllm.c"],
                             depends=["planner/runtime/stepseries.h"], optional=True, extra_compile_args=["-O2"]),
                   Extension("csa_plan.planner.engines.sglang_runtime.csglang",
                             ["planner/engines/sglang_runtime/csglang.c"],
                             depends=["planner/runtime/stepseries.h"], optional=True, extra_compile_args=["-O2"])])
