"""What may import what (docs/architecture.md), read from every module's import statements.

Every ``import`` and ``from … import`` of every module under cli/, planner/ and kernels/
is parsed with ``ast`` — including the lazy ones inside functions — and checked:

- planner/ never imports csa_plan.cli, csa_plan.kernels, click, rich or cupy;
- kernels/ never imports csa_plan.cli;
- no module imports a private name (``_x``) from another csa_plan module, neither as
  ``from m import _x`` nor as ``m._x`` on an imported module (this covers cli/ reaching
  into planner's private names);
- every import is absolute.

``tests/test_imports.py`` checks what importing really loads; ``tests/test_packaging.py``
that every package folder is listed in pyproject.toml. The checker itself is tested on
small sources below, so these tests can fail.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import ROOT

PACKAGES = {"cli": "csa_plan.cli", "planner": "csa_plan.planner", "kernels": "csa_plan.kernels"}

BANNED = {
    "csa_plan.planner": ("csa_plan.cli", "csa_plan.kernels", "click", "rich", "cupy"),
    "csa_plan.kernels": ("csa_plan.cli",),
}

# (importing module, "module.name") -> why it may stay. Empty: none remains.
PRIVATE_EXCEPTIONS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    module: str  # the imported module, absolute
    names: tuple[str, ...]  # names taken from it (from-import), else ()
    line: int
    relative: bool


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    parts = list(rel.with_suffix("").parts)
    parts[0] = PACKAGES[parts[0]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_of(module: str, is_package: bool) -> str:
    return module if is_package else module.rpartition(".")[0]


def imports_of(tree: ast.AST, module: str, is_package: bool) -> list[Import]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(Import(a.name, (), node.lineno, False) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = package_of(module, is_package).split(".")
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            out.append(Import(base, tuple(a.name for a in node.names), node.lineno, bool(node.level)))
    return out


def private_uses(tree: ast.AST, imports: list[Import]) -> list[tuple[str, int]]:
    """``module._name`` on a name bound to an imported csa_plan module (``import … as M`` or
    ``from pkg import module``)."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("csa_plan.") and a.asname:
                    bound[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("csa_plan"):
            for a in node.names:
                bound[a.asname or a.name] = f"{node.module}.{a.name}"
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                and is_private(node.attr)):
            found.append((f"{bound[node.value.id]}.{node.attr}", node.lineno))
    return found


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """Every broken rule in one module's source, as 'line N: what'."""
    tree = ast.parse(source)
    imports = imports_of(tree, module, is_package)
    out = []
    top = next((p for p in BANNED if module == p or module.startswith(p + ".")), None)
    for imp in imports:
        if imp.relative:
            out.append(f"line {imp.line}: relative import of {imp.module} (imports are absolute)")
        targets = [imp.module] + [f"{imp.module}.{n}" for n in imp.names]
        if top:
            for banned in BANNED[top]:
                if any(t == banned or t.startswith(banned + ".") for t in targets):
                    out.append(f"line {imp.line}: {top.split('.')[-1]}/ imports {banned}")
                    break
        if imp.module.startswith("csa_plan"):
            if any(is_private(part) for part in imp.module.split(".")):
                out.append(f"line {imp.line}: imports the private module {imp.module}")
            for n in imp.names:
                if is_private(n) and (module, f"{imp.module}.{n}") not in PRIVATE_EXCEPTIONS:
                    out.append(f"line {imp.line}: imports the private name {n} from {imp.module}")
    for name, line in private_uses(tree, imports):
        if (module, name) not in PRIVATE_EXCEPTIONS:
            out.append(f"line {line}: uses the private name {name} of another module")
    return out


def all_modules() -> list[Path]:
    return sorted(p for folder in PACKAGES for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def test_every_package_is_scanned():
    names = {module_name(p) for p in all_modules()}
    assert {"csa_plan.planner.gate", "csa_plan.cli.main", "csa_plan.kernels.oracle",
            "csa_plan.planner.onnx.record_axes"} <= names


@pytest.mark.parametrize("path", all_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_follows_the_import_rules(path):
    found = violations(path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py")
    assert not found, f"{path.relative_to(ROOT)} breaks the import rules (docs/architecture.md):\n  " + \
        "\n  ".join(found)


def test_private_exceptions_are_still_needed():
    """An exception that no module needs any more is removed from the list."""
    used = set()
    for path in all_modules():
        module = module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imports = imports_of(tree, module, path.name == "__init__.py")
        used |= {(module, f"{i.module}.{n}") for i in imports for n in i.names}
        used |= {(module, name) for name, _ in private_uses(tree, imports)}
    assert set(PRIVATE_EXCEPTIONS) <= used


# --- the checker itself -----------------------------------------------------------


@pytest.mark.parametrize("module, source, expected", [
    ("csa_plan.planner.x", "import click", "planner/ imports click"),
    ("csa_plan.planner.x", "def f():\n    import rich.console", "planner/ imports rich"),
    ("csa_plan.planner.x", "from csa_plan.cli import main", "planner/ imports csa_plan.cli"),
    ("csa_plan.planner.x", "from csa_plan import kernels", "planner/ imports csa_plan.kernels"),
    ("csa_plan.planner.onnx.x", "def f():\n    import cupy", "planner/ imports cupy"),
    ("csa_plan.kernels.x", "from csa_plan.cli.format import gib", "kernels/ imports csa_plan.cli"),
    ("csa_plan.cli.x", "from csa_plan.planner.layout import _helper", "private name _helper"),
    ("csa_plan.kernels.x", "from csa_plan.kernels import oracle as O\nO._fill_carry()",
     "private name csa_plan.kernels.oracle._fill_carry"),
    ("csa_plan.cli.x", "import csa_plan.planner.plan as P\nP._sized(1)", "private name csa_plan.planner.plan._sized"),
    ("csa_plan.planner.x", "from csa_plan.planner._impl import f", "private module"),
    ("csa_plan.planner.x", "from .units import ceil_div", "relative import of csa_plan.planner.units"),
])
def test_checker_finds(module, source, expected):
    found = violations(source, module)
    assert any(expected in v for v in found), found


@pytest.mark.parametrize("module, source", [
    ("csa_plan.planner.x", "import numpy as np\nfrom csa_plan.planner.units import ceil_div"),
    ("csa_plan.kernels.x", "import cupy\nfrom csa_plan.planner.layout import group_bytes"),
    ("csa_plan.cli.x", "import click, rich\nfrom csa_plan.planner import plan\nplan.__doc__"),
    ("csa_plan.cli.x", "from __future__ import annotations\nfrom csa_plan.kernels.harness import Group"),
    ("csa_plan.planner.x", "class A:\n    def f(self):\n        return self._x"),
])
def test_checker_accepts(module, source):
    assert violations(source, module) == []


# --- the walls: no import circle between files, no two folders importing each other, data flows down ----
#
# Every import counts here, the lazy ones inside functions and those under ``TYPE_CHECKING`` too: a
# circle hidden from Python by a lazy import is still a circle for the reader (docs/architecture.md,
# "One way down").

# The floors of the package, top to bottom: a module imports only its own floor's folders or lower
# ones, never a higher floor. Folders on one floor may import one another in one direction only.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("cli",),
    ("kernels",),
    ("planner/commands",),
    ("planner/reports", "planner/sweep"),
    ("planner/reserve", "planner/serving", "planner/budget"),
    ("planner/engines", "planner/engines/vllm", "planner/engines/sglang"),
    ("planner/replay",),
    ("planner/steptime",),
    ("planner/weights", "planner/workloads", "planner/loaders", "planner/onnx", "planner/presets"),
    ("planner",),
)
FLOOR_OF = {folder: len(FLOORS) - i for i, floor in enumerate(FLOORS) for folder in floor}


def folder_of(module: str, is_package: bool = False) -> str:
    """The repository folder a module's file sits in (``csa_plan.planner.engines.vllm.startup`` ->
    ``planner/engines/vllm``; a package's ``__init__`` sits in its own folder)."""
    parts = module.split(".")[1:]
    return "/".join(parts if is_package else parts[:-1])


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """module -> the csa_plan modules it imports (every import statement; ``from pkg import mod`` is
    the module ``pkg.mod`` when that is a module, else ``pkg``), from ``{module: (source, is_package)}``."""
    known = set(sources)
    graph: dict[str, set[str]] = {}
    for module, (source, is_package) in sources.items():
        out = set()
        for imp in imports_of(ast.parse(source), module, is_package):
            targets = [f"{imp.module}.{n}" for n in imp.names if f"{imp.module}.{n}" in known] or [imp.module]
            for t in targets:
                while t and t not in known:
                    t = t.rpartition(".")[0]
                if t and t != module:
                    out.add(t)
        graph[module] = out
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of two or more modules (Tarjan), each sorted, as a list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def folder_pairs(graph: dict[str, set[str]], packages: set[str]) -> list[tuple[str, str]]:
    """Pairs of folders each of which imports the other."""
    edges = {(folder_of(a, a in packages), folder_of(b, b in packages)) for a in graph for b in graph[a]}
    return sorted((x, y) for x, y in edges if x < y and (y, x) in edges)


def upward(graph: dict[str, set[str]], packages: set[str]) -> list[str]:
    """Imports from a lower floor to a higher one (``FLOORS``), as 'module -> module'."""
    out = []
    for a in sorted(graph):
        fa = FLOOR_OF.get(folder_of(a, a in packages))
        for b in sorted(graph[a]):
            fb = FLOOR_OF.get(folder_of(b, b in packages))
            if fa is None or fb is None or fb > fa:
                out.append(f"{a} -> {b}" + ("" if fa is not None and fb is not None else " (a folder with no floor)"))
    return out


def tree_sources() -> dict[str, tuple[str, bool]]:
    return {module_name(p): (p.read_text(encoding="utf-8"), p.name == "__init__.py") for p in all_modules()}


def test_no_file_level_import_circle():
    found = circles(import_graph(tree_sources()))
    assert not found, "import circles (lazy and TYPE_CHECKING imports counted; docs/architecture.md):\n  " + \
        "\n  ".join(" <-> ".join(c) for c in found)


def test_no_two_folders_import_each_other():
    sources = tree_sources()
    packages = {m for m, (_, pkg) in sources.items() if pkg}
    found = folder_pairs(import_graph(sources), packages)
    assert not found, "folders that import each other:\n  " + "\n  ".join(f"{a} <-> {b}" for a, b in found)


def test_every_folder_has_a_floor_and_imports_flow_down():
    sources = tree_sources()
    packages = {m for m, (_, pkg) in sources.items() if pkg}
    assert {folder_of(m, m in packages) for m in sources} <= set(FLOOR_OF), "a new folder gets its floor in FLOORS"
    found = upward(import_graph(sources), packages)
    assert not found, "imports that climb a floor (FLOORS, docs/architecture.md):\n  " + "\n  ".join(found)


def _graph(**modules: str) -> tuple[dict[str, set[str]], set[str]]:
    sources = {name.replace("__", "."): (src, False) for name, src in modules.items()}
    return import_graph(sources), set()


def test_the_walls_find_a_lazy_circle_a_type_checking_circle_and_a_two_way_seam():
    graph, packages = _graph(
        csa_plan__planner__reserve__a="def f():\n    from csa_plan.planner.reserve.b import g\n",
        csa_plan__planner__reserve__b="from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                      "    from csa_plan.planner.reserve.a import f\n",
        csa_plan__planner__engines__x="from csa_plan.planner.replay.y import z\n",
        csa_plan__planner__replay__y="def z():\n    from csa_plan.planner.engines import x\n",
    )
    assert circles(graph) == [["csa_plan.planner.engines.x", "csa_plan.planner.replay.y"],
                              ["csa_plan.planner.reserve.a", "csa_plan.planner.reserve.b"]]
    assert folder_pairs(graph, packages) == [("planner/engines", "planner/replay")]
    assert upward(graph, packages) == ["csa_plan.planner.replay.y -> csa_plan.planner.engines.x"]


def test_the_walls_accept_a_one_way_flow():
    graph, packages = _graph(
        csa_plan__planner__serving__s="from csa_plan.planner.engines.registry import get_engine\n",
        csa_plan__planner__engines__registry="from csa_plan.planner.profiles import lookup\n",
        csa_plan__planner__profiles="import math\n",
    )
    assert circles(graph) == [] and folder_pairs(graph, packages) == [] and upward(graph, packages) == []
