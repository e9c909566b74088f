"""Errors and exit codes: one base class, the exit code on the class.

A refusal is a well-formed value the gate rejects (a typed record, exit 3); a
``BadInput`` is a value that cannot be understood at all (exit 2). Keeping them apart
is what lets a user tell "fix your file" from "this layer cannot run". Every error a
user can cause derives from ``CsaPlanError``, so the CLI turns any of them into one
line and the class's exit code without a list of exception types.

A ``BadInput`` message is built to be shown as is: one line, bounded, every control
character and escape sequence escaped (``planner/text.py``) — the source, field and
problem may all carry text from the input.
"""

from __future__ import annotations

from enum import IntEnum

from csa_plan.planner.text import clip

U64_LIMIT = 1 << 64
"""Byte counts must stay below this: they travel as unsigned 64-bit values."""

I63_LIMIT = 1 << 63
"""Integers read from input must stay below this (signed 64-bit)."""

MAX_SOURCE_CHARS = 240
MAX_FIELD_CHARS = 160
MAX_PROBLEM_CHARS = 480


class ExitCode(IntEnum):
    """The process exit codes every command shares (docs/CONTRACT.md §6)."""

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

    def __reduce__(self) -> tuple:
        """Pickle by state, not by re-running ``__init__`` on the message: a sweep worker's error
        must reach the parent process as the same error (else the pool breaks)."""
        return _restore, (type(self), self.args, self.__dict__)


def _restore(cls: type, args: tuple, state: dict) -> CsaPlanError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class BadInput(CsaPlanError):
    """An input that does not parse: names the source, the field and the problem."""

    exit_code = ExitCode.BAD_INPUT

    def __init__(self, source: str, field: str | None, problem: str) -> None:
        self.source = clip(str(source), MAX_SOURCE_CHARS)
        self.field = clip(str(field), MAX_FIELD_CHARS) if field else field
        self.problem = clip(str(problem), MAX_PROBLEM_CHARS)
        where = f"{self.source}: {self.field}" if self.field else self.source
        super().__init__(f"{where}: {self.problem}")


class ReplayInputError(BadInput):
    """A compiled replay loop (cvllm.c, csglang.c) refused the arrays it was given: one typed line, exit 2,
    never a ValueError from inside (the callers check first; this is what reaches the user if one misses)."""

    def __init__(self, loop: str, problem: str) -> None:
        super().__init__("the engine replay", loop, f"{problem} (the compiled loop refused its input)")

    @classmethod
    def guard(cls, call, loop: str):
        """``call()``, with the compiled loop's own ValueError / OverflowError (its checks of the arrays) typed."""
        try:
            return call()
        except (ValueError, OverflowError) as e:
            raise cls(loop, str(e)) from None
