"""Bad input: the one exception type every parser raises (exit code 2).

A refusal is a well-formed value the gate rejects (a typed record, exit 3); a
``BadInput`` is a value that cannot be understood at all. Keeping them apart is
what lets a user tell "fix your file" from "this layer cannot run".
"""

from __future__ import annotations

U64_LIMIT = 1 << 64
"""Byte counts must stay below this: they travel as unsigned 64-bit values."""

I63_LIMIT = 1 << 63
"""Integers read from input must stay below this (signed 64-bit)."""


class BadInput(Exception):
    """An input that does not parse: names the source, the field and the problem."""

    def __init__(self, source: str, field: str | None, problem: str) -> None:
        self.source = source
        self.field = field
        self.problem = problem
        where = f"{source}: {field}" if field else source
        super().__init__(f"{where}: {problem}")

