"""Extract each modelled engine release's own command-line flags into ``tests/fixtures/engine_flags.json``.

Why: csa-plan prints the winning deployment as the engine's launch command (``planner/engines/launch.py``);
the test ``tests/engines/test_launch_flags.py`` checks every argv it emits against these tables: an unknown
flag, a value outside the flag's choices, or a flag that takes a value given none fails. The tables are
what the release's own argument parser registers, not a transcription: this tool builds that parser.

How: each release is imported in a child process of a separate Python (``--python``, a venv with CPU torch,
``pip install torch==2.13.0`` and the releases' pure-Python dependencies; never a dependency of csa-plan)
from its unpacked wheel, and its parser is built and walked:

* vLLM (0.25, 0.26, 0.27, 0.28, 0.33, 0.34): ``vllm/engine/arg_utils.py`` ``AsyncEngineArgs.add_cli_args`` on vLLM's own
  ``FlexibleArgumentParser`` -- the engine flags ``vllm serve`` takes (its frontend flags, host, port,
  API keys, are not planned and not extracted). There is no GPU here: vLLM is told its platform is the CPU
  (``vllm/platforms/__init__.py`` ``cpu_platform_plugin``), which changes defaults, not the flags or choices.
* SGLang 0.5.23: ``sglang/srt/server_args.py`` ``ServerArgs.add_cli_args`` (with its arg groups,
  ``sglang/srt/arg_groups/``). The unpacked wheel lacks the compiled ``sglang.kernels`` package; the
  parser imports two names from it that do not shape any flag csa-plan emits (``debug_torch_op``, a
  logging decorator, and ``RealKvHashMode``, the choices of ``--kv-canary-hash-mode``): they are stood in
  for here, and a flag whose choices came out empty is written with ``choices: null`` and listed under
  ``unresolved``.

Each release: ``switches`` (flags that take no value: argparse ``nargs`` 0, store_true and vLLM's
``--X``/``--no-X`` pairs), ``values`` (flag -> [int, float or str: what the value must parse as; its
choices as strings, or null when any value is taken]), ``optional`` (``nargs='?'``: the value may be
left out) and ``many`` (``nargs='+'``: one or more values).

Usage (from the repository root):
  python tools/extract_engine_flags.py --python /tmp/torchcpu/bin/python \\
      --vllm vllm-0.25=/tmp/w43/v0.25.0 --vllm vllm-0.26=/tmp/w43/v0.26.0 \\
      --vllm vllm-0.27=/tmp/w43/v0.27.0 --vllm vllm-0.28=/tmp/w43/v0.28.0 \\
      --vllm vllm-0.33=/tmp/w43/v0.33.0 --vllm vllm-0.34=/tmp/w43/v0.34.0 \\
      --sglang sglang-0.5.23=/tmp/w43/sg --out tests/fixtures/engine_flags.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r'''
import argparse, importlib.abc, importlib.machinery, json, sys, types
family, root = sys.argv[1], sys.argv[2]
sys.path.insert(0, root)

class _Stand(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """sglang.kernels (compiled, not in the unpacked wheel): the two names server_args.py reads."""
    def find_spec(self, name, path, target=None):
        if name == "sglang.kernels" or name.startswith("sglang.kernels."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        m = types.ModuleType(spec.name)
        m.__path__ = []
        m.debug_torch_op = lambda fn, *a, **k: fn
        m._KERNEL_API_LOG_LEVEL = 0
        m.RealKvHashMode = []
        return m
    def exec_module(self, m):
        pass

if family == "vllm":
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    try:
        parser = FlexibleArgumentParser()
        AsyncEngineArgs.add_cli_args(parser)
    except RuntimeError:  # "Failed to infer device type" (0.25, 0.26): no GPU here, so the CPU platform
        import vllm.platforms as platforms
        from vllm.platforms.cpu import CpuPlatform
        platforms._current_platform = CpuPlatform()
        parser = FlexibleArgumentParser()
        AsyncEngineArgs.add_cli_args(parser)
    where = "vllm/engine/arg_utils.py AsyncEngineArgs.add_cli_args"
else:
    sys.meta_path.insert(0, _Stand())
    from sglang.srt.server_args import ServerArgs
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    where = "sglang/srt/server_args.py ServerArgs.add_cli_args"

def kind(t):
    if t is None:
        return "str"
    for base in (int, float, str):
        if t is base:
            return base.__name__
    name = getattr(t, "__name__", "") or ""
    inner = [c.cell_contents for c in (getattr(t, "__closure__", None) or ()) if isinstance(c.cell_contents, type)]
    for base in (int, float):
        if base in inner:
            return base.__name__
    if "human_readable_int" in name:
        return "int"
    return "str"

flags, unresolved = {}, []
for a in parser._actions:
    if not a.option_strings or isinstance(a, argparse._HelpAction):
        continue
    takes = a.nargs != 0
    choices = None
    if a.choices is not None:
        choices = sorted({str(c) for c in a.choices if c is not None})
        if not choices:
            choices = None
            unresolved.append(a.option_strings[0])
    for s in a.option_strings:
        flags[s] = {"takes_value": takes, "optional_value": a.nargs == "?", "choices": choices,
                    "many": a.nargs in ("+", "*") or (isinstance(a.nargs, int) and a.nargs > 1),
                    "value": kind(a.type) if takes else None}
print(json.dumps({"parser": where, "flags": dict(sorted(flags.items())), "unresolved": sorted(set(unresolved))}))
'''


def extract(python: str, family: str, root: str) -> dict:
    out = subprocess.run([python, "-c", CHILD, family, root], capture_output=True, text=True, timeout=600,
                         cwd="/tmp")
    if out.returncode != 0:
        raise SystemExit(f"{family} at {root}: the parser did not build:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", required=True, help="a Python with CPU torch and the releases' dependencies")
    ap.add_argument("--vllm", action="append", default=[], metavar="ENGINE=ROOT")
    ap.add_argument("--sglang", action="append", default=[], metavar="ENGINE=ROOT")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    table = {}
    for family, items in (("vllm", args.vllm), ("sglang", args.sglang)):
        for item in items:
            engine, _, root = item.partition("=")
            got = extract(args.python, family, root)
            version = engine.partition("-")[2]
            table[engine] = {"release": f"{family} {version} ({root.rstrip('/').rsplit('/', 1)[-1]})", **got}
            print(f"{engine}: {len(got['flags'])} flag spellings", file=sys.stderr)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(compact(table))


def compact(table: dict) -> str:
    """One line a flag: ``switches`` take no value; ``values`` map a flag to [value kind, choices or null]
    (``optional`` lists those whose value may be left out, ``many`` those that take one or more)."""
    lines = ["{"]
    for i, (engine, t) in enumerate(sorted(table.items())):
        flags = t["flags"]
        switches = sorted(f for f, v in flags.items() if not v["takes_value"])
        optional = sorted(f for f, v in flags.items() if v["optional_value"])
        values = sorted(f for f, v in flags.items() if v["takes_value"])
        many = sorted(f for f, v in flags.items() if v.get("many"))
        lines.append(f' {json.dumps(engine)}: {{"release": {json.dumps(t["release"])}, "parser": '
                     f'{json.dumps(t["parser"])}, "unresolved": {json.dumps(t["unresolved"])},')
        lines.append(f'  "switches": {json.dumps(switches)},')
        lines.append(f'  "optional": {json.dumps(optional)},')
        lines.append(f'  "many": {json.dumps(many)},')
        lines.append('  "values": {')
        for j, f in enumerate(values):
            v = flags[f]
            lines.append(f'   {json.dumps(f)}: {json.dumps([v["value"], v["choices"]])}' + ("," if j < len(values) - 1 else ""))
        lines.append("  }}" + ("," if i < len(table) - 1 else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
