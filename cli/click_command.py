"""The click command for a ``CommandSpec`` (``cli/params.py``): help, usage errors and every
command line ``cli/fast_parse.py`` leaves to click.

Each declared option becomes one ``click.Option`` with the declaration's spellings, default and
help; its value is converted by the same functions the fast parser calls (``cli/options.py``'s
types wrap ``cli/params.py``'s readers), so the command receives the same values either way.
"""

from __future__ import annotations

from typing import Any

import click

from csa_plan.cli.options import CACHE_FORMAT, COUNT, COUNTS, SIZE, FloatType, SuggestChoice
from csa_plan.cli.params import Arg, CommandSpec, Kind, Opt


class DeclaredOption(click.Option):
    """An option whose help may be written when help is shown (``Opt.help_from``: ``--engine``
    names the registry's engines without parsing ever importing them)."""

    def __init__(self, *args: Any, declared: Opt, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.declared = declared

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        if self.declared.help_from is not None:
            self.help = self.declared.help_from(self.declared)
        return super().get_help_record(ctx)


def click_type(opt: Opt) -> Any:
    """The click type that reads ``opt``'s kind (None: click's plain text)."""
    kind = opt.kind
    if kind is Kind.COUNT:
        return COUNT
    if kind is Kind.COUNTS:
        return COUNTS
    if kind is Kind.SIZE:
        return SIZE
    if kind is Kind.NUMBER:
        return FloatType(opt.high)
    if kind is Kind.FLOAT:
        return click.FLOAT
    if kind is Kind.CHOICE:
        return click.Choice(list(opt.choices))
    if kind is Kind.NAME:
        return SuggestChoice(opt.choices)
    if kind is Kind.CACHE_FORMAT:
        return CACHE_FORMAT
    return None


def click_param(param: Arg | Opt) -> click.Parameter:
    if isinstance(param, Arg):
        # A required argument gets no default: click 8.2+ treats an explicit default=None as a
        # default and passes None on, where the user should read "Missing argument".
        extra: dict[str, Any] = {} if param.required else {"default": param.default}
        return click.Argument([param.dest], required=param.required, metavar=param.metavar, **extra)
    common: dict[str, Any] = {"default": param.default, "help": param.help or None, "declared": param}
    if param.kind is Kind.FLAG:
        return DeclaredOption([*param.decls, param.dest], is_flag=True, **common)
    if param.kind is Kind.SWITCH:
        (on,), (off,) = param.decls, param.off  # click spells a switch as one pair: --x/--no-x
        return DeclaredOption([f"{on}/{off}", param.dest], **common)
    return DeclaredOption([*param.decls, param.dest], type=click_type(param), metavar=param.metavar,
                          multiple=param.multiple, show_default=param.show_default, **common)


def build(spec: CommandSpec) -> click.Command:
    return click.Command(spec.name, callback=spec.callback, params=[click_param(p) for p in spec.params],
                         help=spec.callback.__doc__, epilog=spec.epilog)
