"""The command table and the top-level help texts, with no click import.

``cli/main.py`` builds the click group from these; ``cli/entry.py`` prints ``csa-plan --help``
from them without importing click at all (start-up: that help is the most run command).
"""

from __future__ import annotations

# name -> ("module:attribute", one-line help); a new command is one line here.
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("csa_plan.cli.check:COMMAND", "Gate every CSA/HCA layer, lay out its state and total the model."),
    "simulate": ("csa_plan.cli.simulate:COMMAND", "Replay a request mix or trace through the ledger."),
    "compare": ("csa_plan.cli.compare:COMMAND", "The same model under each engine's layout, side by side."),
    "run-gpu": ("csa_plan.cli.run_gpu:COMMAND", "Run the attention path on a GPU and check it against the plan."),
    "sweep": ("csa_plan.cli.sweep:COMMAND", "Search deployments for the cheapest one that serves a workload."),
    "plan": ("csa_plan.cli.plan:COMMAND", "The fewest GPUs per card for a request rate within TTFT/TPOT bounds."),
}

GROUP_HELP = "csa-plan: admit DeepSeek-V4-style compressed attention layers and size their state exactly."

# The group's one option besides --version and --help (cli/main.py; modes and variable: cli/stream.py).
COLOR_HELP = "Colour: auto (a terminal only, whatever FORCE_COLOR says), always, never [default: auto]."

# Every --help ends by saying where the definitions live.
DOCS_HELP = """\b
What the figures mean: docs/CONTRACT.md in the csa-plan sources
("CONTRACT §N" in a help text is its section N).
"""


def load_command(name: str):
    """The command's declaration (a ``cli/params.py`` CommandSpec), its module imported now."""
    import importlib

    module_name, attr = COMMANDS[name][0].split(":")
    return getattr(importlib.import_module(module_name), attr)


def available(name: str) -> bool:
    """A command is listed when its module is installed."""
    import importlib.util

    return importlib.util.find_spec(COMMANDS[name][0].split(":")[0]) is not None
