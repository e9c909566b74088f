"""The core stays pure and the CLI stays fast: check what each entry point imports."""

from __future__ import annotations

import subprocess
import sys


def imported_after(code: str) -> set[str]:
    """The modules loaded once ``code`` has run (its own output, e.g. a command's JSON, is set aside)."""
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print('\\nMODULES ' + ' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.rpartition("\nMODULES ")[2].split())


def test_planner_imports_no_cli_or_gpu():
    """Every module of the core, imported together, pulls in no CLI, GPU, onnx or numpy."""
    mods = imported_after(
        "import importlib, pkgutil, csa_plan.planner as p\n"
        "for m in pkgutil.walk_packages(p.__path__, 'csa_plan.planner.'):\n"
        "    importlib.import_module(m.name)")
    assert "csa_plan.planner.reserve" in mods and "csa_plan.planner.engines.vllm.startup" in mods
    for banned in ("click", "rich", "cupy", "onnx", "numpy"):
        assert banned not in mods, banned


def test_help_imports_no_heavy_modules():
    mods = imported_after("from csa_plan.cli.main import cli\n"
                          "try:\n    cli.main(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass")
    for banned in ("numpy", "onnx", "cupy", "matplotlib"):
        assert banned not in mods, banned


def test_console_script_runs():
    from pathlib import Path

    script = Path(sys.executable).with_name("csa-plan")  # installed beside the interpreter
    out = subprocess.run([str(script), "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and "csa-plan" in out.stdout


def imported_by_run(*args: str) -> set[str]:
    """The modules a whole ``csa-plan ARGS`` run has loaded when it exits (any exit code)."""
    return imported_after("import sys\nfrom csa_plan.cli.main import main\n"
                          f"try:\n    main({list(args)!r})\nexcept SystemExit:\n    pass\n"
                          )


ENGINE_MODELS = ("csa_plan.planner.engines.registry", "csa_plan.planner.engines.engine",
                 "csa_plan.planner.engines.vllm.startup", "csa_plan.planner.engines.sglang.startup")
BUDGET = ("csa_plan.planner.budget.device", "csa_plan.planner.budget.startup", "csa_plan.planner.weights.measured",
          "csa_plan.planner.weights.sharding")


def test_check_without_a_device_or_engine_imports_neither():
    """Start-up: the plain check pays for no engine model, device budget or weight inventory."""
    for args in (("check", "deepseek-v4-pro", "--json"), ("check", "deepseek-v4-pro")):
        mods = imported_by_run(*args)
        assert "csa_plan.planner.plan" in mods  # the scan saw the run
        for banned in ENGINE_MODELS + BUDGET + ("numpy",):
            assert banned not in mods, (args, banned)
    assert "rich" not in imported_by_run("check", "deepseek-v4-pro", "--json")


def test_a_device_without_an_engine_imports_no_engine_model():
    mods = imported_by_run("check", "deepseek-v4-pro", "--device-memory", "h200", "--tp", "8", "--json")
    assert "csa_plan.planner.budget.device" in mods
    for banned in ("csa_plan.planner.engines.sglang.startup", "rich", "numpy"):
        assert banned not in mods, banned


def imported_by_plain_run(*args: str) -> set[str]:
    """The modules a plain line run as the console script runs it has loaded (cli/invoke.py run_plain)."""
    return imported_after("from csa_plan.cli.invoke import run_plain\n"
                          f"try:\n    run_plain({list(args)!r})\n    raise AssertionError('left to click')\n"
                          "except SystemExit:\n    pass\n")


PLAIN_JSON_LINES = (
    ("check", "deepseek-v4-pro", "--max-seq-len", "1M", "--device-memory", "h200", "--tp", "8",
     "--engine", "vllm-0.33", "--json"),
    ("check", "no-such-model", "--json"),
    ("check", "deepseek-v4-pro", "--kv-memory", "40GiB", "--json"),  # bad input (no --engine), read without click
    ("compare", "deepseek-v4-flash", "--json"),
    ("simulate", "examples/traces/sample.jsonl", "--model", "deepseek-v4-flash", "--json"),
    ("sweep", "examples/sweeps/small.yaml", "--json", "--jobs", "1"),
)


def test_a_plain_line_imports_no_click_and_json_no_rich():
    """The console script reads a plain line from the command's declaration (cli/fast_parse.py):
    neither click nor the click CLI is imported, and ``--json`` never imports rich."""
    for args in PLAIN_JSON_LINES:
        mods = imported_by_plain_run(*args)
        assert "csa_plan.cli.invoke" in mods, args
        for banned in ("click", "csa_plan.cli.main", "rich"):
            assert banned not in mods, (args, banned)
    mods = imported_by_plain_run("check", "deepseek-v4-pro", "--device-memory", "h200")  # tables: rich, not click
    assert "rich" in mods and "click" not in mods


def test_no_json_path_imports_rich():
    """``--json`` prints with the guarded stream's writer: rich (consoles, tables) is for the terminal only."""
    for args in (("check", "deepseek-v4-pro", "--max-seq-len", "1M", "--device-memory", "h200", "--tp", "8",
                  "--engine", "vllm-0.33", "--json"),
                 ("check", "no-such-model", "--json"),
                 ("compare", "deepseek-v4-flash", "--json"),
                 ("simulate", "examples/traces/sample.jsonl", "--model", "deepseek-v4-flash", "--json"),
                 ("sweep", "examples/sweeps/small.yaml", "--json")):
        mods = imported_by_run(*args)
        assert "csa_plan.cli.main" in mods and "rich" not in mods, args


def test_top_level_help_imports_no_click():
    mods = imported_after("import sys\nsys.argv = ['csa-plan', '--help']\nfrom csa_plan.cli.entry import main\n"
                          "try:\n    main()\nexcept SystemExit:\n    pass\n")
    assert "csa_plan.cli.commands" in mods
    for banned in ("click", "csa_plan.cli.main", "csa_plan.planner.plan"):
        assert banned not in mods, banned


# Start-up budget of the engine path (issue 28; docs/architecture.md "Start-up and latency"): what a
# command does not use, it does not import.
ENGINE_MODEL_MODULES = {"vllm-0.33": "csa_plan.planner.engines.vllm.startup",
                        "sglang-0.5.23": "csa_plan.planner.engines.sglang.startup",
                        "onnx-genai": "csa_plan.planner.engines.onnx_genai"}
# Never on a check of a preset: fractions/decimal (exact decimals are done with ints), importlib.resources
# (and the zipfile/tempfile it pulls in: presets are read beside their module), the safetensors reader
# (a model directory only), YAML, and the table and array libraries.
NOT_ON_A_PRESET_CHECK = ("fractions", "decimal", "importlib.resources", "zipfile", "tempfile", "yaml",
                         "csa_plan.planner.weights.safetensors", "rich", "numpy")


def test_an_engine_check_imports_only_that_engine_model():
    for engine in ENGINE_MODEL_MODULES:
        mods = imported_by_run("check", "deepseek-v4-pro", "--max-seq-len", "1M", "--device-memory", "h200",
                               "--tp", "8", "--engine", engine, "--json")
        assert ENGINE_MODEL_MODULES[engine] in mods and "csa_plan.planner.budget.device" in mods, engine
        others = [m for name, m in ENGINE_MODEL_MODULES.items() if name != engine]
        for banned in (*others, *NOT_ON_A_PRESET_CHECK):
            assert banned not in mods, (engine, banned)


def test_a_check_without_an_engine_imports_no_exact_decimals_or_package_resources():
    for args in (("check", "deepseek-v4-pro", "--json"),
                 ("check", "deepseek-v4-pro", "--max-seq-len", "128k", "--device-memory", "h200", "--tp", "8",
                  "--json")):
        mods = imported_by_run(*args)
        for banned in (*NOT_ON_A_PRESET_CHECK, *ENGINE_MODEL_MODULES.values(), "csa_plan.planner.engines.engine"):
            assert banned not in mods, (args, banned)


def test_the_registry_lists_engines_without_importing_them():
    """Listing the names (``check --help``, did-you-mean) loads no engine model; looking one up loads
    that one, and every entry holds the engine model of its own name."""
    mods = imported_after("from csa_plan.planner.engines.registry import ENGINES, get_engine\n"
                          "names = ', '.join(ENGINES)\n"
                          "try:\n    get_engine('vllm-9')\nexcept Exception:\n    pass")
    for module in ENGINE_MODEL_MODULES.values():
        assert module not in mods, module
    mods = imported_by_run("check", "--help")
    for module in (*ENGINE_MODEL_MODULES.values(), "csa_plan.planner.engines.engine"):
        assert module not in mods, module
    from csa_plan.planner.engines.registry import ENGINES, NEWEST, get_engine

    assert list(ENGINES) == ["vllm-0.34", "vllm-0.33", "vllm-0.28", "vllm-0.27", "vllm-0.26", "vllm-0.25", "sglang-0.5.23",
                             "onnx-genai"]
    for name, model in ENGINES.items():
        assert model.name == name and get_engine(name) is model
    assert all(target in ENGINES for target in NEWEST.values())


def test_the_engine_check_defines_records_and_compiles_only_the_inits_it_builds():
    """Start-up (docs/architecture.md): every frozen dataclass the vLLM check loads is a ``@record``
    (no per-class ``__setattr__``/``__delattr__`` compiled), and a record's ``__init__`` is
    compiled only when the class is first built."""
    out = subprocess.run([sys.executable, "-c",
                          "import dataclasses, io, sys\nfrom csa_plan.cli.main import main\n"
                          "from csa_plan.planner.record import _FirstInit\nsys.stdout = io.StringIO()\n"
                          "try:\n    main(['check', 'deepseek-v4-pro', '--max-seq-len', '1M', '--device-memory', 'h200',"
                          " '--tp', '8', '--engine', 'vllm-0.33', '--json'])\nexcept SystemExit:\n    pass\n"
                          "plain, lazy, built = [], 0, 0\n"
                          "for name, m in list(sys.modules.items()):\n"
                          "    if not name.startswith('csa_plan.'):\n        continue\n"
                          "    for c in vars(m).values():\n"
                          "        if isinstance(c, type) and c.__module__ == name and dataclasses.is_dataclass(c) "
                          "and c.__dataclass_params__.frozen:\n"
                          "            if '__record_repr__' not in vars(c) and '__repr__' not in vars(c):\n"
                          "                plain.append(c.__qualname__)\n"
                          "            init = vars(c).get('__init__')\n"
                          "            lazy += isinstance(init, _FirstInit)\n"
                          "            built += callable(init) and not isinstance(init, _FirstInit)\n"
                          "sys.stderr.write(f'{plain} {lazy} {built}')"],
                         capture_output=True, text=True, check=True).stderr.split(" ")
    assert out[0] == "[]", out  # no plain frozen dataclass on the path
    assert int(out[-2]) > 0 and int(out[-1]) > 0  # some records never built, their __init__ never compiled


def test_a_preset_check_imports_no_pathlib():
    """A preset is read beside its module with ``open`` (``planner/presets``): pathlib (and the
    urllib.parse and ipaddress it imports) loads only where a path is given. (An editable
    install's import hook has loaded pathlib before csa-plan starts: it is set aside first.)"""
    def run(*args: str) -> set[str]:
        return imported_after("import sys\nsys.modules.pop('pathlib', None)\n"
                              "from csa_plan.cli.main import main\n"
                              f"try:\n    main({list(args)!r})\nexcept SystemExit:\n    pass\n")

    for args in (("check", "deepseek-v4-pro", "--json"),
                 ("check", "deepseek-v4-pro", "--max-seq-len", "1M", "--device-memory", "h200", "--tp", "8",
                  "--engine", "vllm-0.33", "--json")):
        mods = run(*args)
        assert "csa_plan.planner.presets" in mods
        assert "pathlib" not in mods, args
    assert "pathlib" in run("check", "examples/specs/missing.yaml", "--json")  # a path: it loads
