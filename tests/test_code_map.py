"""docs/architecture.md's code map matches the tree: every module is named, every name exists.

The map is the page's fenced blocks (``# Code layout``): in them, a line that
starts with ``cli/``, ``planner/`` or ``kernels/`` names a file (or, ending in ``/``, a
package folder) by its path from the repository root.
"""

from __future__ import annotations

import re

from helpers import ROOT

ROOTS = ("cli", "planner", "kernels")
PAGE = ROOT / "docs" / "architecture.md"
_PATH = re.compile(r"^((?:cli|planner|kernels)/\S*)")


def layout_section() -> str:
    text = PAGE.read_text(encoding="utf-8")
    assert text.startswith("# Code layout\n"), f"{PAGE.name} no longer starts with '# Code layout'"
    return text


def named_paths(section: str) -> list[str]:
    out, fenced = [], False
    for line in section.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        m = _PATH.match(line) if fenced else None
        if m:
            out.append(m.group(1))
    return out


def tree_modules() -> set[str]:
    return {p.relative_to(ROOT).as_posix() for r in ROOTS for p in (ROOT / r).rglob("*.py")
            if "__pycache__" not in p.parts}


def test_map_names_every_module():
    named = set(named_paths(layout_section()))
    missing = sorted(tree_modules() - named)
    assert not missing, (
        "docs/architecture.md, block 'The map', does not name these modules. Add one line per "
        "module, in its package's group (the path from the repository root, then what it holds):\n"
        + "\n".join(f"  {m:<34}<one line: what this module holds>" for m in missing))


def test_every_named_path_exists():
    stale = []
    for path in named_paths(layout_section()):
        target = ROOT / path
        if "*" in path:
            ok = any(target.parent.glob(target.name))
        elif path.endswith("/"):
            ok = target.is_dir()
        else:
            ok = target.is_file()
        if not ok:
            stale.append(path)
    assert not stale, ("docs/architecture.md names paths that do not exist; rename or remove "
                       "these lines:\n" + "\n".join(f"  {p}" for p in stale))


def test_every_module_is_named_once():
    named = [p for p in named_paths(layout_section()) if p.endswith(".py")]
    twice = sorted({p for p in named if named.count(p) > 1})
    assert not twice, f"docs/architecture.md names these modules more than once: {twice}"


def test_every_package_folder_has_its_line():
    """A subpackage gets a header line (``planner/onnx/  what it offers``) above its modules."""
    named = set(named_paths(layout_section()))
    folders = {p.parent.relative_to(ROOT).as_posix() + "/" for r in ROOTS for p in (ROOT / r).rglob("__init__.py")}
    missing = sorted(folders - named)
    assert not missing, ("docs/architecture.md, block 'The map', has no header line for these "
                         "packages; add, above their modules:\n"
                         + "\n".join(f"  {f:<34}<what this package offers>" for f in missing))


def test_the_parser_sees_the_map():
    """The map is read from the fenced blocks of the section (a guard against an empty parse)."""
    named = named_paths(layout_section())
    assert "planner/gate.py" in named and "cli/main.py" in named and "kernels/oracle.py" in named
    assert named_paths("# Code layout\nplanner/outside.py is prose\n```\nplanner/x.py  y\n```\n") == ["planner/x.py"]
