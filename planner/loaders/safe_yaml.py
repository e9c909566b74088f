"""YAML loading that constructs no objects, follows the YAML 1.2 core schema and is bounded.

* **Nothing is constructed.** The safe loader's constructors for plain data only;
  ``!!python/...`` and any other unknown tag is bad input, nothing runs.
* **YAML 1.2 core schema.** ``true``/``false`` are the only booleans (``yes``, ``no``,
  ``on``, ``off`` stay strings), integers are decimal, ``0o`` octal or ``0x`` hex (no
  ``1_000``, no sexagesimal ``1:30`` = 90), ``null``/``~``/empty is null, floats are
  decimal with ``.inf``/``.nan`` spelled out. A value that YAML 1.1 would have turned
  into a number silently stays a string, so a field that needs a number says so.
* **Duplicate keys** in a mapping are bad input naming the key and both lines.
* **Bounded before it is built.** One pass over the parser's events, before anything is
  composed, bounds the alias count (MAX_YAML_ALIASES), the nesting depth (MAX_DEPTH) and
  the document's size with every alias expanded (MAX_YAML_EXPANDED: nodes plus scalar
  characters) — so 99 aliases of a large node are refused as surely as a billion laughs.
  Scalars longer than MAX_STRING_CHARS and integers longer than MAX_INT_DIGITS are refused.
* **Line numbers** are counted in ``\\n`` only (libyaml also breaks lines at U+2028,
  U+2029 and NEL, which would shift every line number after one).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from csa_plan.planner.errors import BadInput
from csa_plan.planner.loaders.safe_json import Oversized, check_tree
from csa_plan.planner.limits import (MAX_COLLECTION_ITEMS, MAX_DEPTH, MAX_INT_DIGITS, MAX_NUMBER_CHARS,
                                     MAX_STRING_CHARS, MAX_YAML_ALIASES, MAX_YAML_BYTES, MAX_YAML_EXPANDED,
                                     MAX_YAML_NODES)
from csa_plan.planner.text import excerpt

MAX_ALIASES = MAX_YAML_ALIASES  # the old name

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_BOOL = re.compile(r"true|True|TRUE|false|False|FALSE")
_NULL = re.compile(r"~|null|Null|NULL|")
_INT = re.compile(r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", re.ASCII)
_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.nan|\.NaN|\.NAN",
                    re.ASCII)


class _Problem(Exception):
    """A bound or schema violation found while constructing, with the node's position."""

    def __init__(self, index: int, field: str | None, problem: str) -> None:
        super().__init__(problem)
        self.index, self.field, self.problem = index, field, problem


class CoreLoader(_Base):  # type: ignore[misc, valid-type]
    """The safe loader with the YAML 1.2 core schema's implicit resolvers and strict mappings."""

    yaml_implicit_resolvers: dict = {}

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        if len(node.value) > MAX_COLLECTION_ITEMS:
            raise _Problem(node.start_mark.index, None,
                           f"a mapping of {len(node.value):,} keys (limit MAX_COLLECTION_ITEMS = {MAX_COLLECTION_ITEMS:,})")
        seen: dict[Any, Any] = {}
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise _Problem(key_node.start_mark.index, None, "a mapping key must be a scalar") from None
            if key in seen:
                raise _Problem(key_node.start_mark.index, str(key),
                               f"duplicate key (first at line {_line(self._text, seen[key])})")
            seen[key] = key_node.start_mark.index
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = node.value.lstrip("+")
        negative = text.startswith("-")
        body = text.lstrip("-")
        base = 10
        if body.startswith(("0o", "0x")):
            base = 8 if body[1] == "o" else 16
            body = body[2:]
        digits = body.lstrip("0") or "0"
        if len(digits) > MAX_INT_DIGITS:
            return Oversized(len(digits))  # reported with its field by check_tree
        value = int(digits, base)
        return -value if negative else value

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        text = node.value
        if len(text) > MAX_NUMBER_CHARS:
            raise _Problem(node.start_mark.index, None, f"a number of {len(text):,} characters "
                                                        f"(limit MAX_NUMBER_CHARS = {MAX_NUMBER_CHARS})")
        lowered = text.lower()
        if lowered.endswith(".inf"):
            return float("-inf") if lowered.startswith("-") else float("inf")
        if lowered == ".nan":
            return float("nan")
        return float(text)

    def construct_undefined(self, node: yaml.Node) -> Any:
        raise _Problem(node.start_mark.index, None,
                       f"malformed YAML: the tag {excerpt(node.tag, 60)} is not allowed (plain data only)")


for _tag, _pattern, _first in (
        ("tag:yaml.org,2002:bool", _BOOL, "tTfF"),
        ("tag:yaml.org,2002:null", _NULL, ["~", "n", "N", ""]),
        ("tag:yaml.org,2002:int", _INT, "-+0123456789"),
        ("tag:yaml.org,2002:float", _FLOAT, "-+.0123456789"),
        ("tag:yaml.org,2002:merge", re.compile("<<"), "<")):
    CoreLoader.add_implicit_resolver(_tag, re.compile(rf"^(?:{_pattern.pattern})$", re.ASCII), list(_first))
CoreLoader.add_constructor("tag:yaml.org,2002:int", CoreLoader.construct_yaml_int)
CoreLoader.add_constructor("tag:yaml.org,2002:float", CoreLoader.construct_yaml_float)
CoreLoader.add_constructor(None, CoreLoader.construct_undefined)
# the safe loader's timestamp, binary, set, omap and pairs constructors stay off the implicit path;
# an explicit !!timestamp / !!binary is still plain data, so it is allowed.


def _line(text: str, index: int) -> str:
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return f"{line} column {column}"


def _prescan(text: str, source: str) -> None:
    """Alias count, depth and expanded size from the event stream, before anything is composed."""
    aliases = 0
    depth = 0
    expanded = 0
    sizes: dict[str, int] = {}  # anchor -> its node's expanded size
    open_nodes: list[tuple[str | None, int]] = []  # (anchor, expanded size when it opened)
    nodes = 0
    for event in yaml.parse(text, Loader=_Base):
        kind = type(event)
        if kind is yaml.ScalarEvent or kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            nodes += 1
            if nodes > MAX_YAML_NODES:  # composing is ~10 us a node: bounded before any is composed
                raise BadInput(source, None, f"more than {MAX_YAML_NODES:,} YAML nodes (values, lists and mappings) "
                                             f"by line {_line(text, event.start_mark.index)} (limit MAX_YAML_NODES)")
        if kind is yaml.ScalarEvent:
            if len(event.value) > MAX_STRING_CHARS:
                raise BadInput(source, None, f"a value of {len(event.value):,} characters at line "
                                             f"{_line(text, event.start_mark.index)} (limit MAX_STRING_CHARS = "
                                             f"{MAX_STRING_CHARS:,})")
            expanded += len(event.value) + 1
            if event.anchor is not None:
                sizes[event.anchor] = len(event.value) + 1
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            depth += 1
            if depth > MAX_DEPTH:
                raise BadInput(source, None, f"nesting deeper than {MAX_DEPTH} levels at line "
                                             f"{_line(text, event.start_mark.index)} (limit MAX_DEPTH)")
            expanded += 1
            open_nodes.append((event.anchor, expanded))
        elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            depth -= 1
            anchor, started = open_nodes.pop()
            if anchor is not None:
                sizes[anchor] = expanded - started + 1
        elif kind is yaml.AliasEvent:
            aliases += 1
            if aliases > MAX_YAML_ALIASES:
                raise BadInput(source, None, f"YAML uses more than {MAX_YAML_ALIASES} aliases "
                                             f"(limit MAX_YAML_ALIASES)")
            if event.anchor not in sizes:  # an alias to a node still open: a recursive structure
                raise BadInput(source, None, f"recursive alias *{excerpt(event.anchor)} at line "
                                             f"{_line(text, event.start_mark.index)}")
            expanded += sizes[event.anchor]
        if expanded > MAX_YAML_EXPANDED:
            raise BadInput(source, None, f"the document expands to more than {MAX_YAML_EXPANDED:,} nodes and "
                                         f"characters through its aliases (limit MAX_YAML_EXPANDED)")


def load_yaml(text: str, source: str) -> Any:
    """Parse with the core-schema safe loader; refuse over-large, deep or alias-heavy documents first."""
    if len(text) > MAX_YAML_BYTES:  # characters, at most the bytes they came from
        raise BadInput(source, None, f"{len(text):,} characters of YAML (limit MAX_YAML_BYTES = {MAX_YAML_BYTES:,})")
    try:
        _prescan(text, source)
        loader = CoreLoader(text)
        loader._text = text
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
        check_tree(data, source)
        return data
    except _Problem as exc:
        raise BadInput(source, exc.field, f"{exc.problem} at line {_line(text, exc.index)}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {_line(text, mark.index)}" if mark else ""
        raise BadInput(source, None, f"malformed YAML{where}: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise BadInput(source, None, f"malformed YAML: {str(exc).splitlines()[0] if str(exc) else 'error'}") from None
    except RecursionError:
        raise BadInput(source, None, f"malformed YAML: nesting too deep (limit MAX_DEPTH = {MAX_DEPTH})") from None
