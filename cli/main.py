"""The ``csa-plan`` entry point: a lazy click group with one-line errors.

Subcommands are imported only when they run, so ``csa-plan --help`` never pulls in
numpy, onnx or cupy. Every failure a user can cause ends as one line on stderr and
a documented exit code, never a traceback.
"""

from __future__ import annotations

import sys

import click

from csa_plan.cli.commands import COLOR_HELP, COMMANDS, DOCS_HELP, GROUP_HELP, available, load_command
from csa_plan.cli.exit_codes import EXIT_BAD_INPUT, EXIT_CODES_HELP
from csa_plan.cli.invoke import run_guarded, run_plain
from csa_plan.cli.error_doc import one_line
from csa_plan.cli.stream import COLOR_ENV, COLOR_MODES, refuse_bad_color_env, set_color_mode

_built: dict[str, click.Command] = {}  # a declared command's click form, built once


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if available(name)]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS or not available(name):
            return None
        command = _built.get(name)
        if command is None:
            from csa_plan.cli.click_command import build

            command = _built[name] = build(load_command(name))
        if DOCS_HELP not in (command.epilog or ""):
            command.epilog = f"{command.epilog}\n{DOCS_HELP}" if command.epilog else DOCS_HELP
        return command

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name = args[0] if args else ""
        if args and self.get_command(ctx, name) is None and not name.startswith("-"):
            from csa_plan.planner.suggest import did_you_mean

            raise click.UsageError(f"No such command {name!r} (commands: {', '.join(self.list_commands(ctx))})"
                                   f"{did_you_mean(name, self.list_commands(ctx))}", ctx)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, help=GROUP_HELP, epilog=f"{EXIT_CODES_HELP}\n{DOCS_HELP}", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="csa-plan", prog_name="csa-plan")
@click.option("--color", type=click.Choice(COLOR_MODES), default=None, envvar=COLOR_ENV, show_envvar=True,
              help=COLOR_HELP)
def cli(color: str | None) -> None:
    """The group; its help is GROUP_HELP (cli/commands.py), which cli/entry.py also prints without click."""
    set_color_mode(color)


def main(argv: list[str] | None = None, *, plain: bool = True) -> None:
    """Run the CLI as the console script does: a plain line without click (``cli/invoke.py
    run_plain``; ``plain=False`` when the caller has tried it), any other through click; both
    through the guarded streams (a closed pipe, a full disk or an encoding that cannot carry a
    character end as documented, never as an internal error)."""
    from csa_plan.cli.error_doc import json_asked

    words = sys.argv[1:] if argv is None else argv
    if not words or words[0] in ("--help", "-h", "--version"):  # click exits on these before it reads the variable
        refuse_bad_color_env()
    if plain:
        run_plain(words)
    run_guarded(lambda: _main(argv), json_asked(words))


def _main(argv: list[str] | None) -> int:
    """Click usage errors become one line and exit 2 (with --json, also the error document)."""
    from csa_plan.cli.error_doc import json_asked, tell_failure

    as_json = json_asked(sys.argv[1:] if argv is None else argv)
    try:
        rv = cli.main(args=argv, prog_name="csa-plan", standalone_mode=False)
    except click.exceptions.Abort:
        from csa_plan.cli.invoke import interrupted

        interrupted(as_json)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        sys.exit(EXIT_BAD_INPUT)
    except click.ClickException as exc:
        if isinstance(exc, click.NoSuchOption):
            exc.possibilities = option_suggestions(exc, sys.argv[1:] if argv is None else argv)
        code = EXIT_BAD_INPUT if exc.exit_code in (1, 2) else exc.exit_code
        tell_failure(f"error: {one_line(exc.format_message() + group_option_hint(exc))}", code, as_json)
        sys.exit(code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    return rv if isinstance(rv, int) else 0


def option_suggestions(exc: click.NoSuchOption, words: list[str]) -> list[str]:
    """What an unknown option may have meant, among the command's options and as the named engine
    spells them (``planner/engines/flags.py``): never an unrelated option, nor another engine's."""
    from csa_plan.planner.engines.flags import option_suggestions as suggest

    command = exc.ctx.command if exc.ctx is not None else None
    if command is None or exc.option_name is None:
        return list(exc.possibilities or ())
    options = tuple(o for p in command.params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts))
    engines = tuple(words[i + 1] for i, w in enumerate(words[:-1]) if w == "--engine")
    engines += tuple(w.partition("=")[2] for w in words if w.startswith("--engine="))
    return suggest(exc.option_name, options, engines)


def group_option_hint(exc: click.ClickException) -> str:
    """A command refusing one of csa-plan's own options (``check ... --color never``): where it goes."""
    name = getattr(exc, "option_name", None) if isinstance(exc, click.NoSuchOption) else None
    if name is None:
        return ""
    spelled = name.partition("=")[0]
    param = next((p for p in cli.params if spelled in (*p.opts, *p.secondary_opts)), None)
    if param is None:
        return ""
    command = exc.ctx.info_name if exc.ctx is not None else "COMMAND"
    choices = getattr(param.type, "choices", None)
    value = "|".join(choices) if choices else (param.metavar or param.name or "VALUE").upper()
    example = f"csa-plan {spelled}" if getattr(param, "is_flag", False) else f"csa-plan {spelled} {value} {command} ..."
    return f" ({spelled} is an option of csa-plan itself, given before the command: {example})"


if __name__ == "__main__":  # pragma: no cover
    main()
