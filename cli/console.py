"""One stdout and one stderr console per invocation, created at the edge.

Both consoles escape control characters and escape sequences in everything they
print (``planner/text.printable``): text from a file or an option never reaches the
terminal raw, whatever the rendering code did with it. Rich's own styling and
cursor control (segments it marks as control) pass through untouched.

Markup is the other half: renderers print rich markup of their own (``[bold]``,
``[red]``), and a workload named ``trace[red].jsonl`` or a hint like ``pip install
'csa-plan[plot]'`` must not be read as markup. ``escaped(report)`` escapes every string
in a report document (the values, not the keys) before a renderer sees it (``cli.emit``
does it for every command), so no renderer has to remember which field came from
where; ``esc`` does the same for one string.

Both halves are applied twice on purpose: ``escaped`` also runs ``printable`` on every
value, with public API only, so a report's text is safe before rich sees it even if a
rich release stopped calling ``Console._render_buffer`` (the private hook SafeConsole
overrides for text that renderers build themselves); ``tests/cli/test_console.py`` fails
if that hook is ever bypassed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from rich.console import Console
from rich.markup import escape
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


def esc(value: Any) -> str:
    """``str(value)`` with control characters and every ``[`` that could open a rich tag escaped."""
    return escape(printable(str(value), keep_newlines=True))


def escaped(doc: Any) -> Any:
    """A copy of a report document with every string value escaped for the terminal and rich markup."""
    if isinstance(doc, str):
        return esc(doc)
    if isinstance(doc, dict):
        return {k: escaped(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [escaped(v) for v in doc]
    return doc
