"""One way out for every command's document: JSON on stdout, or the command's table renderer."""

from __future__ import annotations

import json
from typing import Any, Callable

import click

from csa_plan.cli.console import Consoles, escaped


def emit(consoles: Consoles, report: dict[str, Any], as_json: bool,
         render: Callable[[Any, dict[str, Any]], None]) -> None:
    """Print ``report`` as indented JSON (``--json``, through click: rich is never imported) or
    through ``render`` on the stdout console.

    The renderer sees the report with every string escaped for the terminal and for rich
    markup (``cli.console.escaped``): nothing from a user or a file is read as a tag.
    """
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        render(consoles.out, escaped(report))
