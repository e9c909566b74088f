"""Exit codes shared by every command: the names the CLI uses for ``ExitCode``."""

from csa_plan.planner.errors import ExitCode

EXIT_OK = ExitCode.OK
EXIT_INTERNAL = ExitCode.INTERNAL
EXIT_BAD_INPUT = ExitCode.BAD_INPUT
EXIT_REFUSED = ExitCode.REFUSED
EXIT_CHECK_FAILED = ExitCode.CHECK_FAILED
EXIT_NO_GPU = ExitCode.NO_GPU
EXIT_INTERRUPTED = ExitCode.INTERRUPTED

EXIT_CODES_HELP = """\b
Exit codes:
  0  success: admitted / every request admitted / every GPU check passed
  2  bad input (the message names the file or option and the field)
  3  a typed refusal, or it does not fit the given memory
  4  run-gpu: a verification check failed
  5  run-gpu: no usable GPU (CuPy missing, no driver, driver too old, no device)
  1  an internal error (a bug: please report it; CSA_PLAN_DEBUG=1 shows the traceback)
  130 interrupted (Ctrl-C): one line, no output
  141 the reader of the output went away (a closed pipe, as head does); nothing is said
"""
