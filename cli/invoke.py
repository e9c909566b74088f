"""One way a command runs, whichever parser read its line: guarded streams, one exit code, and a
bug told in one line (never a traceback unless ``CSA_PLAN_DEBUG`` is set).

``run_plain`` runs a plain command line without importing click (``cli/fast_parse.py`` reads it
from the command's declaration); ``cli/main.py`` runs every other line through click. Both end
in ``run_guarded`` and call the same command function with the same arguments.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, NoReturn, Sequence


def run_guarded(call: Callable[[], Any], as_json: bool) -> NoReturn:
    """Run ``call`` with stdout and stderr guarded (``cli/stream.py``) and exit with its code.

    A ``SystemExit`` from the command passes through; any other exception is a bug in csa-plan,
    not in the input: one line on stderr (and the error document under ``--json``), exit 1."""
    from csa_plan.cli.stream import guarded, set_color_mode

    set_color_mode(None)
    with guarded():
        try:
            rv = call()
        except KeyboardInterrupt:  # Ctrl-C, also inside a compiled replay (it checks for signals as it goes)
            interrupted(as_json)
        except Exception as exc:
            if os.environ.get("CSA_PLAN_DEBUG"):
                raise
            from csa_plan.cli.error_doc import one_line, tell_failure
            from csa_plan.cli.exit_codes import EXIT_INTERNAL

            tell_failure(f"internal error: {type(exc).__name__}: {one_line(str(exc), 300)} "
                         "(set CSA_PLAN_DEBUG=1 for the traceback)", EXIT_INTERNAL, as_json)
            sys.exit(EXIT_INTERNAL)
        sys.exit(rv if isinstance(rv, int) else 0)


def interrupted(as_json: bool) -> NoReturn:
    """Ctrl-C: one line (and the error document under ``--json``), exit 130, no traceback."""
    from csa_plan.cli.error_doc import tell_failure
    from csa_plan.cli.exit_codes import EXIT_INTERRUPTED

    tell_failure("interrupted", EXIT_INTERRUPTED, as_json)
    sys.exit(EXIT_INTERRUPTED)


def run_plain(argv: Sequence[str]) -> None:
    """Run ``csa-plan ARGV`` without click when the line is plain (returns only when it is not:
    click must read it). Plain: a declared command (``cli/params.py``), no group option before
    it, ``CSA_PLAN_COLOR`` unset or one of its modes, and words ``cli/fast_parse.py`` reads."""
    from csa_plan.cli.commands import COMMANDS
    from csa_plan.cli.stream import COLOR_ENV, COLOR_MODES

    if not argv or argv[0] not in COMMANDS:
        return
    color = os.environ.get(COLOR_ENV)
    if color and color not in COLOR_MODES:  # click says what is wrong with it
        return
    from csa_plan.cli.commands import load_command
    from csa_plan.cli.fast_parse import parse

    try:
        spec = load_command(argv[0])
    except Exception:  # noqa: BLE001 - not installed, or a bug: click's path lists or tells it, in one line
        return
    kwargs = parse(spec, argv[1:])
    if kwargs is None:
        return
    run_guarded(lambda: spec.callback(**kwargs), bool(kwargs.get("as_json")))
