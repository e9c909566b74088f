"""A plain command line parsed without click, or handed to click.

Importing click is about a third of a ``check``'s start-up (docs/architecture.md). Most command lines
are plain: long options, each once or last-wins, values that convert, one positional. This
parser reads exactly those, from the command's declaration (``cli/params.py``), and gives up
(returns None) on everything else: help, a short or unknown option, ``--``, a value that
starts with ``-`` or does not convert, a missing or extra argument, a value for a flag. click
then parses the line itself and says what is wrong, or answers the odd spelling, as it always
has. ``tests/cli/test_fast_parse.py`` draws command lines and requires that whenever this parser
answers, click's own parse passes the command the same values.
"""

from __future__ import annotations

from typing import Any, Sequence

from csa_plan.cli.params import VALUELESS, Arg, CommandSpec, Opt, convert


def parse(spec: CommandSpec, argv: Sequence[str]) -> dict[str, Any] | None:
    """The command's keyword arguments for ``argv`` (the words after the command's name), or
    None where click must read it."""
    spellings: dict[str, tuple[Opt, bool]] = {}
    args: list[Arg] = []
    for param in spec.params:
        if isinstance(param, Arg):
            args.append(param)
            continue
        for word in param.decls:
            spellings[word] = (param, True)
        for word in param.off:
            spellings[word] = (param, False)
    given: dict[str, Any] = {}
    positional: list[str] = []
    words = iter(argv)
    for word in words:
        if word[:1] != "-":
            positional.append(word)
            continue
        name, equals, inline = word.partition("=") if word[:2] == "--" else (word, "", "")
        hit = spellings.get(name)
        if hit is None:  # -h, --help, --, -, a short option, a typo: click says what it is
            return None
        opt, on = hit
        if opt.kind in VALUELESS:
            if equals:
                return None
            value: Any = on
        else:
            text = inline if equals else next(words, None)
            if text is None or (not equals and text[:1] == "-"):
                return None
            try:
                value = convert(opt, text, name)
            except Exception:  # noqa: BLE001 - click converts it again and words the error
                return None
        if opt.multiple:
            given[opt.dest] = (*given.get(opt.dest, ()), value)
        else:
            given[opt.dest] = value
    if len(positional) > len(args) or any(a.required for a in args[len(positional):]):
        return None
    out: dict[str, Any] = {}
    for index, arg in enumerate(args):
        out[arg.dest] = positional[index] if index < len(positional) else arg.default
    for param in spec.params:
        if isinstance(param, Opt):
            out[param.dest] = given[param.dest] if param.dest in given else default_of(param)
    return out


def default_of(opt: Opt) -> Any:
    """The value click passes for an option that is not given (``cli/click_command.py`` gives click
    the same default)."""
    return () if opt.multiple else opt.default
