"""The ``csa-plan`` commands and relative links that README.md and docs/*.md show.

A command is a ``csa-plan …`` line inside a fenced block: in a ``console`` block after a
``$ `` prompt (the lines up to the next prompt are its shown output), or in any other block
as a line of its own or after ``&&`` (continuation backslashes joined, ``# comments``,
pipes and redirections cut). A synopsis (``csa-plan check MODEL [--gate op|c1] …``) is no
command: it has a ``[`` placeholder and is skipped.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from helpers import ROOT

ELISION = ("…", "...")


@dataclass(frozen=True)
class DocCommand:
    """One command a page shows: where, its arguments after ``csa-plan``, and the output shown under it."""

    page: Path
    line: int
    text: str
    args: tuple[str, ...]
    shown: tuple[str, ...] = field(default=())

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def shown_exit_code(self) -> int:
        """The exit code the shown output states (``(exit N)``), else 0."""
        for line in reversed(self.shown):
            m = re.search(r"\(exit (\d+)\)", line)
            if m:
                return int(m.group(1))
        return 0


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def fenced_blocks(text: str) -> list[tuple[str, int, list[str]]]:
    """(info string, first line number, lines) of every fenced block."""
    out, info, start, body = [], None, 0, []
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            if info is None:
                info, start, body = line.strip()[3:].strip(), number + 1, []
            else:
                out.append((info, start, body))
                info = None
        elif info is not None:
            body.append(line)
    return out


def _args(command: str) -> tuple[str, ...] | None:
    """The arguments after ``csa-plan`` in one shell line, or None when it is no csa-plan command."""
    command = command.split(" #", 1)[0]
    try:
        words = shlex.split(command, comments=False)
    except ValueError:
        return None
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # COLUMNS=100 csa-plan …
        words.pop(0)
    if not words or words[0] != "csa-plan":
        return None
    args = []
    for w in words[1:]:
        if w in ("|", ">", ">>", "&&", ";", "2>&1", "||") or w.startswith(">"):
            break
        args.append(w)
    if any(w.startswith("[") or w in ("...", "…") for w in args):
        return None  # a synopsis
    return tuple(args)


def _join_continuations(lines: list[str], start: int) -> list[tuple[int, str]]:
    out, pending, first = [], "", 0
    for offset, line in enumerate(lines):
        if not pending:
            first = start + offset
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((first, pending + line))
        pending = ""
    return out


def commands(page: Path) -> list[DocCommand]:
    text = page.read_text(encoding="utf-8")
    found = []
    for info, start, body in fenced_blocks(text):
        if info == "console":
            current = None
            for number, line in _join_continuations(body, start):
                if line.startswith("$ "):
                    if current:
                        found.append(current)
                    args = _args(line[2:])
                    current = (DocCommand(page, number, line[2:], args) if args is not None else None)
                elif current is not None:
                    current = DocCommand(current.page, current.line, current.text, current.args,
                                         current.shown + (line,))
            if current:
                found.append(current)
            continue
        for number, line in _join_continuations(body, start):
            line = line[2:] if line.startswith("$ ") else line
            for part in re.split(r"&&|;", line):
                args = _args(part.strip())
                if args is not None:
                    found.append(DocCommand(page, number, part.strip(), args))
    return found


_LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def relative_links(page: Path) -> list[tuple[int, str]]:
    """(line, target) of every Markdown link outside fenced blocks that is not a URL."""
    out, fenced = [], False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        for m in _LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            target = m.group(1) or m.group(2)
            if not re.match(r"[a-z][a-z0-9+.-]*:", target):
                out.append((number, target))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"#{1,6} (.*)", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_link(page: Path, target: str) -> str | None:
    """Why a relative link from ``page`` does not resolve, or None when it does."""
    path_part, _, anchor = target.partition("#")
    dest = (page.parent / path_part).resolve() if path_part else page
    if path_part and not dest.exists():
        return f"no file {path_part}"
    try:
        dest.relative_to(ROOT)
    except ValueError:
        return f"{path_part} is outside the repository"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"no heading #{anchor} in {dest.relative_to(ROOT)}"
    return None
