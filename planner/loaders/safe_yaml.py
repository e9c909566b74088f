"""YAML loading that constructs no objects and cannot be blown up by aliases."""

from __future__ import annotations

from typing import Any

import yaml

from csa_plan.planner.errors import BadInput

MAX_ALIASES = 100

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str, source: str) -> Any:
    """Parse with the safe loader; refuse alias-heavy documents before composing them."""
    try:
        aliases = sum(1 for event in yaml.parse(text, Loader=_Loader) if isinstance(event, yaml.AliasEvent))
        if aliases > MAX_ALIASES:
            raise BadInput(source, None, f"YAML uses {aliases} aliases (at most {MAX_ALIASES} allowed)")
        return yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise BadInput(source, None, f"malformed YAML{where}: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise BadInput(source, None, f"malformed YAML: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise BadInput(source, None, "malformed YAML: nesting too deep") from None
    except ValueError as exc:  # e.g. an integer literal longer than Python converts (4300 digits)
        raise BadInput(source, None, f"malformed YAML: {str(exc).split(';')[0]}") from None
