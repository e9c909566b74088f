"""One stdout and one stderr console per invocation, created at the edge."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console


@dataclass
class Consoles:
    out: Console
    err: Console


def make_consoles() -> Consoles:
    return Consoles(out=Console(), err=Console(stderr=True))
