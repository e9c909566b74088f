"""The rich console the CLI prints through: every text segment escaped just before it is written."""

from __future__ import annotations

from typing import Iterable

from rich.console import Console
from rich.segment import Segment

from csa_plan.planner.text import printable


class SafeConsole(Console):
    """A rich ``Console`` whose text segments are escaped just before they are written; rich's own
    styling and cursor control (segments it marks as control) pass through untouched."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            segment if segment.control else Segment(printable(segment.text, keep_newlines=True), segment.style)
            for segment in buffer)
