"""How a failure is told: one line on stderr and, when ``--json`` was asked for, one JSON line on stdout.

A script that reads ``--json`` output gets a document on every exit, not an empty stdout:
``{"schema": "csa-plan/error/v1", "exit_code": 2, "message": "..."}`` (docs/json-schemas.md).
"""

from __future__ import annotations

import json
from typing import Sequence

import click

ERROR_SCHEMA = "csa-plan/error/v1"


def json_asked(argv: Sequence[str]) -> bool:
    """``--json`` among the options (before a ``--`` that ends them)."""
    for word in argv:
        if word == "--":
            return False
        if word == "--json":
            return True
    return False


def tell_failure(line: str, exit_code: int, as_json: bool) -> None:
    """``csa-plan: LINE`` on stderr; with ``--json`` also the error document on stdout."""
    click.echo(f"csa-plan: {line}", err=True)
    if as_json:
        message = line.removeprefix("error: ")
        click.echo(json.dumps({"schema": ERROR_SCHEMA, "exit_code": int(exit_code), "message": message}))
