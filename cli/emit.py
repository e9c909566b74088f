"""One way out for every command's document: JSON on stdout, or the command's table renderer."""

from __future__ import annotations

import json
from typing import Any, Callable

import click
from rich.console import Console


def emit(out: Console, report: dict[str, Any], as_json: bool,
         render: Callable[[Console, dict[str, Any]], None]) -> None:
    """Print ``report`` as indented JSON (``--json``) or through ``render``.

    The renderer sees the report with every string escaped for rich markup
    (``cli.console.escaped``): nothing from a user or a file is read as a tag.
    """
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        from csa_plan.cli.console import escaped

        render(out, escaped(report))
