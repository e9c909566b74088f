"""One way out for every command's document: JSON on stdout, or the command's table renderer."""

from __future__ import annotations

from typing import Any, Callable

from csa_plan.cli.console import Consoles, escaped
from csa_plan.cli.json_text import dumps_indented
from csa_plan.cli.stream import echo


def emit(consoles: Consoles, report: dict[str, Any], as_json: bool,
         render: Callable[[Any, dict[str, Any]], None]) -> None:
    """Print ``report`` as indented JSON (``--json``: rich is never imported) or
    through ``render`` on the stdout console.

    The renderer sees the report with every string escaped for the terminal and for rich
    markup (``cli.console.escaped``): nothing from a user or a file is read as a tag.
    """
    if as_json:
        echo(dumps_indented(report))  # json.dumps(report, indent=2), faster
    else:
        render(consoles.out, escaped(report))
