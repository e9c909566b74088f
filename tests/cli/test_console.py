"""The two escaping layers of the CLI's consoles, each tested on its own."""

from __future__ import annotations

import io

from csa_plan.cli.console import SafeConsole, esc, escaped

HOSTILE = "trace\x1b[31mred\x1b]0;title\x07[bold]x\u009b2J"


def _printed(text: str, **kw: object) -> str:
    buf = io.StringIO()
    SafeConsole(file=buf, force_terminal=True, width=200, **kw).print(text, markup=False, highlight=False)
    return buf.getvalue()


def test_safe_console_escapes_text_a_renderer_built_itself():
    """The hook rich calls for every segment (Console._render_buffer) is ours: a rich release that
    stopped calling it would leave the raw ESC here and fail this test."""
    out = _printed(HOSTILE)
    assert "\x1b]" not in out and "\x07" not in out and "\u009b" not in out
    assert "\x1b[31m" not in out  # the file's colour code is shown, not obeyed
    assert "trace" in out and "red" in out


def test_safe_console_keeps_its_own_styling():
    buf = io.StringIO()
    SafeConsole(file=buf, force_terminal=True, color_system="standard").print("[bold]ok[/bold]")
    assert "\x1b[1m" in buf.getvalue()


def test_escaped_documents_are_terminal_safe_before_rich_sees_them():
    doc = escaped({"name": HOSTILE, "rows": [HOSTILE, 3], "n": 1})
    for value in (doc["name"], doc["rows"][0], esc(HOSTILE)):
        assert value.isprintable() and "\\[bold]" in value
    assert doc["rows"][1] == 3 and doc["n"] == 1
