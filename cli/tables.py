"""Tables that never cut a number or a name that tells rows apart, at any terminal width.

Every command's table goes through ``print_table``. A column is a ``Col``: ``key``
columns (row labels) and ``num`` columns (exact numbers) are never wrapped nor
truncated; ``text`` columns may wrap at spaces. Headers may wrap. When the whole
table cannot fit the console even so, it is *folded*: printed as several tables
that each repeat the key columns and carry as many of the other columns as fit,
so a cell is always shown whole. Cells are rich markup; anything that came from a
user or a file must already be escaped (``cli.console.esc``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rich import box as rich_box
from rich.console import Console
from rich.table import Table
from rich.text import Text

KEY, NUM, TEXT = "key", "num", "text"
MIN_TEXT_WIDTH = 12


@dataclass(frozen=True)
class Col:
    header: str
    kind: str = NUM  # key | num | text
    justify: str = ""  # default: right for numbers, left otherwise

    @property
    def align(self) -> str:
        return self.justify or ("right" if self.kind == NUM else "left")


def _cell_width(markup: str) -> int:
    return max((Text.from_markup(line).cell_len for line in markup.split("\n")), default=0)


def _header_width(header: str) -> int:
    """Headers may wrap at spaces: the longest word is what they need."""
    return max((len(w) for w in header.split()), default=0)


def _needed(col: Col, cells: Sequence[str]) -> int:
    widths = [_header_width(col.header)] + [_cell_width(c) for c in cells]
    need = max(widths)
    if col.kind == TEXT:
        return min(need, max(MIN_TEXT_WIDTH, _header_width(col.header)))
    return need


def print_table(console: Console, title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[str]], *,
                box: rich_box.Box | None = rich_box.HEAVY_HEAD, show_header: bool = True) -> None:
    """Print the table whole: fitted to the console, folded into parts when it must be."""
    columns = list(range(len(cols)))
    needs = [_needed(cols[i], [r[i] for r in rows]) for i in columns]
    natural = [max(needs[i], len(cols[i].header)) for i in columns]
    width = console.width
    edge = 1 if box is not None else 0

    def fits(idx: list[int], pad: int, w: list[int]) -> bool:  # pad per column, +1 for its border
        return sum(w[i] for i in idx) + (pad + 1) * len(idx) + edge <= width

    keys = [i for i in columns if cols[i].kind == KEY]
    rest = [i for i in columns if cols[i].kind != KEY]
    padding: tuple[int, ...] = (0, 1)
    pad = 2
    widths = natural
    if not fits(columns, pad, widths):
        widths = needs  # headers wrap at spaces
    parts: list[list[int]] = []
    if fits(columns, pad, widths) or not rest:
        parts = [columns]
    else:
        current: list[int] = []
        for i in rest:
            if current and not fits(keys + current + [i], pad, widths):
                parts.append(keys + current)
                current = []
            current.append(i)
        parts.append(keys + current)
    for n, part in enumerate(parts, 1):
        label = title
        if len(parts) > 1:  # the title on its own line: a narrow part would wrap it word by word
            console.print(f"{title or 'table'} (part {n} of {len(parts)}, folded to {width} columns)")
            label = None
        table = Table(title=label, title_justify="left", box=box, show_header=show_header,
                      pad_edge=True, padding=padding, collapse_padding=False)
        for i in part:
            c = cols[i]
            # a fixed width: rich never collapses it, so a number or key stays whole on one line
            table.add_column(c.header, justify=c.align, overflow="fold",
                             width=widths[i] if c.kind != TEXT else None)
        for row in rows:
            table.add_row(*[row[i] for i in part])
        console.print(table)
