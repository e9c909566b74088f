"""One stdout and one stderr console per invocation, created at the edge.

Both consoles (``cli/safe_console.py``, built on first use) escape control characters
and escape sequences in everything they print (``planner/text.printable``): text from a
file or an option never reaches the terminal raw, whatever the rendering code did with it.
Rich's own styling and cursor control (segments it marks as control) pass through untouched.
They write through the guarded streams (``cli/stream.py``) and colour only a terminal
unless the user asks (``csa-plan --color always``), whatever ``FORCE_COLOR`` says.

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

from contextlib import contextmanager
from functools import cached_property
from typing import Any, Iterator

from csa_plan.planner.text import printable


class Consoles:
    """stdout and stderr consoles, each built on first use: a ``--json`` run that prints
    through click alone never imports rich."""

    @cached_property
    def out(self) -> Any:
        import sys

        from csa_plan.cli.safe_console import SafeConsole
        from csa_plan.cli.stream import console_settings

        return SafeConsole(**console_settings(sys.stdout))

    @cached_property
    def err(self) -> Any:
        import sys

        from csa_plan.cli.safe_console import SafeConsole
        from csa_plan.cli.stream import console_settings

        return SafeConsole(stderr=True, **console_settings(sys.stderr))


def make_consoles() -> Consoles:
    return Consoles()


@contextmanager
def whole_lines_when_piped(console: Any) -> Iterator[None]:
    """The answer lines printed whole (not wrapped at rich's 80 columns) when stdout is not a
    terminal and COLUMNS is not set: ``csa-plan check ... | grep Longest`` keeps the whole line."""
    import os

    saved = console.soft_wrap
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console.soft_wrap = True
    try:
        yield
    finally:
        console.soft_wrap = saved


def esc(value: Any) -> str:
    """``str(value)`` with control characters and every ``[`` that could open a rich tag escaped."""
    from rich.markup import escape

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
