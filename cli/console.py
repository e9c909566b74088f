"""One stdout and one stderr console per invocation, created at the edge.

Both consoles escape control characters and escape sequences in everything they
print (``planner/text.printable``): text from a file or an option never reaches the
terminal raw, whatever the rendering code did with it. Rich's own styling and
cursor control (segments it marks as control) pass through untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from rich.console import Console
from rich.segment import Segment

from csa_plan.planner.text import printable


class SafeConsole(Console):
    """A rich ``Console`` whose text segments are escaped just before they are written."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            segment if segment.control else Segment(printable(segment.text, keep_newlines=True), segment.style)
            for segment in buffer)


@dataclass
class Consoles:
    out: Console
    err: Console


def make_consoles() -> Consoles:
    return Consoles(out=SafeConsole(), err=SafeConsole(stderr=True))
