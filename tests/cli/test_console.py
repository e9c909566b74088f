"""The two escaping layers of the CLI's consoles, each tested on its own."""

from __future__ import annotations

import io

from csa_plan.cli.console import esc, escaped
from csa_plan.cli.safe_console import SafeConsole

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


def test_json_runs_never_import_rich():
    """``--json`` prints through click: the consoles and renderers (rich) are built for tables only."""
    import subprocess
    import sys

    from helpers import EXAMPLES

    code = ("import sys\nfrom csa_plan.cli.main import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write(str(sorted(m for m in sys.modules if m.split('.')[0] == 'rich')))\n")
    for argv in (["check", "deepseek-v4-pro", "--device-memory", "h200", "--tp", "8", "--json"],
                 ["simulate", str(EXAMPLES / "traces" / "sample.csv"), "--model", "deepseek-v4-flash", "--json"]):
        proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
        assert proc.stdout.lstrip().startswith("{"), proc.stderr
        assert proc.stderr.endswith("[]"), proc.stderr[-300:]
