"""Errors and exit codes: one base class, the exit code on the class.

A refusal is a well-formed value the gate rejects (a typed record, exit 3); a
``BadInput`` is a value that cannot be understood at all (exit 2). Keeping them apart
is what lets a user tell "fix your file" from "this layer cannot run". Every error a
user can cause derives from ``CsaPlanError``, so the CLI turns any of them into one
line and the class's exit code without a list of exception types.
"""

from __future__ import annotations

from enum import IntEnum

U64_LIMIT = 1 << 64
"""Byte counts must stay below this: they travel as unsigned 64-bit values."""

I63_LIMIT = 1 << 63
"""Integers read from input must stay below this (signed 64-bit)."""


class ExitCode(IntEnum):
    """The process exit codes every command shares (README "Exit codes")."""

    OK = 0
    INTERNAL = 1  # a bug in csa-plan itself
    BAD_INPUT = 2
    REFUSED = 3  # a typed refusal, or it does not fit the given memory
    CHECK_FAILED = 4  # run-gpu: a verification check failed
    NO_GPU = 5  # run-gpu: no usable GPU
    INTERRUPTED = 130  # Ctrl-C (sweep keeps its finished points in --resume FILE)


class CsaPlanError(Exception):
    """Base of every error a user can cause; ``exit_code`` says how the process ends."""

    exit_code: ExitCode = ExitCode.INTERNAL


class BadInput(CsaPlanError):
    """An input that does not parse: names the source, the field and the problem."""

    exit_code = ExitCode.BAD_INPUT

    def __init__(self, source: str, field: str | None, problem: str) -> None:
        self.source = source
        self.field = field
        self.problem = problem
        where = f"{source}: {field}" if field else source
        super().__init__(f"{where}: {problem}")
