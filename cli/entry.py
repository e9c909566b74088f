"""The ``csa-plan`` console script: ``csa-plan --help`` and plain command lines without importing
click, else the click CLI.

The top-level help is printed here in click's own layout (``tests/cli/test_entry.py`` requires
it to equal click's rendering at every terminal width), because importing click is most of
that command's time. A plain line of a declared command (``cli/invoke.py run_plain``) runs
without click too; every other invocation goes to ``cli/main.py`` unchanged.
"""

from __future__ import annotations

import sys

HELP_FLAGS = (["--help"], ["-h"])
GC_YOUNG_THRESHOLD = 10_000  # allocations between young-generation collections (Python: 700)


def main() -> None:
    if sys.argv[1:] in HELP_FLAGS:
        from csa_plan.cli.stream import GuardedStream, refuse_bad_color_env, refuse_unusable_streams

        refuse_unusable_streams()  # an encoding that cannot carry text: one line, exit 2
        refuse_bad_color_env()  # CSA_PLAN_COLOR=bogus: the line a command gets
        out = GuardedStream(sys.stdout, "stdout")  # what the encoding cannot carry, escaped
        out.write(top_level_help())
        out.flush()
        sys.exit(0)
    import gc

    # A run allocates some 250,000 objects, nearly all kept to the end: collecting the young
    # generation every 700 allocations (Python's default, for long-lived programs) is about 50
    # collections that find almost nothing (about 7 ms of an engine check, docs/architecture.md).
    gc.set_threshold(GC_YOUNG_THRESHOLD, 10, 10)
    try:
        from csa_plan.cli.invoke import run_plain

        run_plain(sys.argv[1:])  # a plain line runs without importing click, and exits
        from csa_plan.cli.main import main as click_main

        click_main(plain=False)
    except SystemExit as exc:
        leave(exc.code)
    except KeyboardInterrupt:  # before a command's guard (while importing): still one line
        sys.stderr.write("csa-plan: interrupted\n")
        leave(130)
    leave(0)


def leave(code: object) -> None:
    """End the process with ``code`` once the output is flushed, skipping the interpreter's
    teardown (freeing every module and object: about 14 ms of an engine check, docs/architecture.md).

    Only when nothing is left for the teardown to do: no ``atexit`` callback registered and no
    other thread running; a code that is not an int or None, a flush that fails, or a Python
    without ``atexit._ncallbacks`` exits as ``sys.exit`` does, through the normal teardown."""
    import atexit

    threads = sys.modules.get("threading")
    ncallbacks = getattr(atexit, "_ncallbacks", None)
    quiet = (ncallbacks is not None and ncallbacks() == 0
             and (threads is None or threads.active_count() == 1))
    if quiet and (code is None or type(code) is int):
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001 - the normal exit reports it as it always has
            raise SystemExit(code) from None
        import os

        os._exit(code or 0)
    raise SystemExit(code)


def top_level_help(columns: int | None = None) -> str:
    """``csa-plan --help`` as click 8 formats a group's help (HelpFormatter: width clamped to 80)."""
    import shutil

    from csa_plan.cli.commands import COLOR_HELP, COMMANDS, DOCS_HELP, GROUP_HELP, available
    from csa_plan.cli.exit_codes import EXIT_CODES_HELP
    from csa_plan.cli.stream import COLOR_ENV, COLOR_MODES

    option_rows = (("--version", "Show the version and exit."),
                   (f"--color [{'|'.join(COLOR_MODES)}]", f"{COLOR_HELP}  [env var: {COLOR_ENV}]"),
                   ("-h, --help", "Show this message and exit."))

    if columns is None:
        columns = shutil.get_terminal_size().columns
    width = max(min(columns, 80) - 2, 50)
    out = [_usage("Usage: csa-plan ", "[OPTIONS] COMMAND [ARGS]...", width), "\n"]
    out += ["\n", _wrap_paragraphs(GROUP_HELP, width, "  "), "\n"]
    out += ["\n", "Options:\n", _definitions(option_rows, width, 2)]
    rows = [(name, help_) for name, (_target, help_) in COMMANDS.items() if available(name)]
    if rows:
        out += ["\n", "Commands:\n", _definitions(rows, width, 2)]
    epilog = _cleandoc(f"{EXIT_CODES_HELP}\n{DOCS_HELP}")
    out += ["\n", _wrap_paragraphs(epilog, width, "  "), "\n"]
    return "".join(out)


def _wrapper(width: int, initial: str = "", subsequent: str = ""):
    import textwrap

    return textwrap.TextWrapper(width, initial_indent=initial, subsequent_indent=subsequent,
                                replace_whitespace=False)


def _usage(prefix: str, args: str, width: int) -> str:
    return _wrapper(width, prefix, " " * len(prefix)).fill(args)


def _wrap_paragraphs(text: str, width: int, indent: str) -> str:
    """click's ``wrap_text(preserve_paragraphs=True)``: a paragraph opened by a ``\\b`` line is kept as written."""
    paragraphs: list[tuple[int, bool, str]] = []
    buf: list[str] = []
    lead: int | None = None

    def flush() -> None:
        if buf:
            raw = buf[0].strip() == "\b"
            paragraphs.append((lead or 0, raw, "\n".join(buf[1:]) if raw else " ".join(buf)))
            buf.clear()

    for line in text.expandtabs().splitlines():
        if not line:
            flush()
            lead = None
            continue
        if lead is None:
            stripped = line.lstrip()
            lead, line = len(line) - len(stripped), stripped
        buf.append(line)
    flush()
    out = []
    for extra, raw, body in paragraphs:
        first = indent + " " * extra
        if raw:
            out.append("\n".join(first + line for line in body.splitlines()))
        else:
            out.append(_wrapper(width, first, first).fill(body))
    return "\n\n".join(out)


def _definitions(rows, width: int, indent: int, col_max: int = 30, spacing: int = 2) -> str:
    """click's ``HelpFormatter.write_dl``."""
    first_col = min(max(len(a) for a, _b in rows), col_max) + spacing
    out = []
    for term, text in rows:
        out.append(" " * indent + term)
        if len(term) <= first_col - spacing:
            out.append(" " * (first_col - len(term)))
        else:
            out.append("\n" + " " * (first_col + indent))
        lines = _wrap_paragraphs(text, max(width - first_col - 2, 10), "").splitlines()
        out.append(lines[0] + "\n")
        out += [" " * (first_col + indent) + line + "\n" for line in lines[1:]]
    return "".join(out)


def _cleandoc(text: str) -> str:
    """``inspect.cleandoc`` (inspect itself is a large import)."""
    lines = text.expandtabs().split("\n")
    margin = min((len(l) - len(l.lstrip()) for l in lines[1:] if l.strip()), default=0)
    body = [lines[0].lstrip()] + [l[margin:] for l in lines[1:]]
    while body and not body[-1].strip():
        body.pop()
    while body and not body[0].strip():
        body.pop(0)
    return "\n".join(body)
