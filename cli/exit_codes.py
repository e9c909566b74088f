"""Exit codes shared by every command (CONTRACT §6)."""

EXIT_OK = 0
EXIT_INTERNAL = 1  # a bug in csa-plan itself
EXIT_BAD_INPUT = 2
EXIT_REFUSED = 3
EXIT_CHECK_FAILED = 4
EXIT_NO_GPU = 5

EXIT_CODES_HELP = """\b
Exit codes:
  0  success: admitted / every request admitted / every GPU check passed
  2  bad input (the message names the file or option and the field)
  3  a typed refusal, or it does not fit the given memory
  4  run-gpu: a verification check failed
  5  run-gpu: no usable GPU (CuPy missing, no driver, driver too old, no device)
  1  an internal error (a bug: please report it; CSA_PLAN_DEBUG=1 shows the traceback)
"""
