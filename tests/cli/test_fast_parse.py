"""The plain-line parser (``cli/fast_parse.py``) and click read a command line the same way.

Whenever the fast parser answers, click's own parse of the same words (the command built from
the same declaration, ``cli/click_command.py``) must give the command exactly the same keyword
arguments; and a line of long options with values that convert must be answered, not left to
click (else the start-up saving is gone without any test noticing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from csa_plan.cli import check, compare, run_gpu, simulate, sweep
from csa_plan.cli.click_command import build
from csa_plan.cli.fast_parse import parse
from csa_plan.cli.params import VALUELESS, Arg, Kind, Opt

SPECS = {m.COMMAND.name: m.COMMAND for m in (check, compare, run_gpu, simulate, sweep)}

# Texts each kind may be given: good ones, bad ones, odd ones.
TEXTS = {
    Kind.TEXT: ["x", "", "a=b", "deepseek-v4-pro", "é", "-x", "--json"],
    Kind.COUNT: ["1", "8", "0", "1M", "128k", "128K", "1e6", "1,000,000", "1MiB", "abc", "-1", "1.5", " 8 ",
                 str(1 << 63)],
    Kind.SIZE: ["h200", "H200", "80GiB", "141GB", "141", "141B", "1e9", "h20", "xx", "-5GB", "0"],
    Kind.NUMBER: ["0.5", "2", "1", "nan", "inf", "1e300", "-3", "0x10", "abc"],
    Kind.FLOAT: ["0.9", "1", "abc", "nan", " 0.5", "1_0", "-0.5"],
    Kind.CACHE_FORMAT: ["f32", "FP8_E4M3_BLOCK64", " fp4_e2m1_block32 ", "bogus"],
    Kind.COUNTS: ["1,2,4", "8", "1 2 4", "1,,2", "", "x,1", "-1,2", "128k,1"],
}


def texts_for(opt: Opt) -> list[str]:
    if opt.kind in (Kind.CHOICE, Kind.NAME):
        return [*opt.choices, *(c.upper() for c in opt.choices), "bogus", ""]
    return TEXTS[opt.kind]


def good_texts(opt: Opt, spelling: str) -> list[str]:
    """The texts that convert and do not look like an option: what a plain line gives."""
    from csa_plan.cli.params import convert

    good = []
    for text in texts_for(opt):
        try:
            convert(opt, text, spelling)
        except Exception:  # noqa: BLE001 - only the texts that convert make a plain line
            continue
        if not text.startswith("-"):
            good.append(text)
    return good


@st.composite
def option_words(draw, opt: Opt, plain: bool = False) -> list[str]:
    """One option's words; ``plain``: spelled as the fast parser reads it, with a value that converts."""
    spelling = draw(st.sampled_from(opt.decls + opt.off))
    if opt.kind in VALUELESS:
        return [f"{spelling}=1"] if not plain and draw(st.integers(0, 9)) == 0 else [spelling]
    if not plain and draw(st.integers(0, 9)) == 0:
        return [spelling]  # its value missing (at the end) or taken from the next option
    odd = not plain and draw(st.integers(0, 3)) == 0
    text = draw(st.sampled_from(texts_for(opt) if odd else good_texts(opt, spelling)))
    joined = spelling.startswith("--") and draw(st.booleans())  # --opt=value; a short option takes -j 4
    if not plain and draw(st.integers(0, 19)) == 0:
        joined = True  # -j=4 too
    return [f"{spelling}={text}"] if joined else [spelling, text]


NOISE = ["--", "-", "-h", "--help", "--no-such-option", "-j4", "--jso", "extra-positional"]


@st.composite
def command_lines(draw, spec):
    opts = [p for p in spec.params if isinstance(p, Opt)]
    words: list[str] = []
    for _ in range(draw(st.integers(0, 8))):
        if draw(st.integers(0, 14)) == 0:
            words.append(draw(st.sampled_from(NOISE)))
        else:
            words += draw(option_words(draw(st.sampled_from(opts))))
    if draw(st.integers(0, 9)):
        words.insert(draw(st.integers(0, len(words))), draw(st.sampled_from(["deepseek-v4-pro", "model.yaml", "x"])))
    return words


def same(a: dict | None, b: dict | None) -> bool:
    """Equal arguments, value by value and type by type (a NaN equals a NaN)."""
    if a is None or b is None or a.keys() != b.keys():
        return a is b
    return all(type(a[k]) is type(b[k]) and (a[k] == b[k] or (a[k] != a[k] and b[k] != b[k])) for k in a)


def click_params(spec, words: list[str]) -> dict | None:
    try:
        with build(spec).make_context(spec.name, list(words)) as ctx:
            return dict(ctx.params)
    except click.exceptions.ClickException:
        return None
    except click.exceptions.Exit:
        return None


@st.composite
def plain_lines(draw, spec):
    """A positional and long options with values that convert, each spelled either way."""
    words = [a.default or "deepseek-v4-pro" for a in spec.params if isinstance(a, Arg) and a.required]
    for opt in draw(st.lists(st.sampled_from([p for p in spec.params if isinstance(p, Opt)]), max_size=8)):
        words += draw(option_words(opt, plain=True))
    return words


@pytest.mark.parametrize("lines", ["any", "plain"])
@pytest.mark.parametrize("name", sorted(SPECS))
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_when_the_fast_parser_answers_click_gives_the_same_arguments(name, lines, data):
    """Any drawn line: if the fast parser answers, click agrees. A plain line: it must answer."""
    spec = SPECS[name]
    words = data.draw(command_lines(spec) if lines == "any" else plain_lines(spec))
    fast = parse(spec, words)
    assert fast is not None or lines == "any", words
    if fast is not None:
        assert same(click_params(spec, words), fast), words


def test_the_fast_parser_leaves_what_it_does_not_read_to_click():
    spec = SPECS["check"]
    for words in (["deepseek-v4-pro", "--help"], ["deepseek-v4-pro", "-h"], ["--", "deepseek-v4-pro"],
                  ["deepseek-v4-pro", "--tp"], ["deepseek-v4-pro", "--tp", "-1"], ["deepseek-v4-pro", "--tp", "x"],
                  ["deepseek-v4-pro", "--json=yes"], [], ["a", "b"], ["deepseek-v4-pro", "--jsn"],
                  ["deepseek-v4-pro", "--device-memory", "141"]):
        assert parse(spec, words) is None, words
    assert parse(SPECS["sweep"], ["s.yaml", "-j=4"]) is None  # click reads a short option's value as "=4"
    assert parse(SPECS["sweep"], ["s.yaml", "-j", "4"])["jobs"] == 4


def _run(args: list[str], plain: bool, env: dict[str, str] | None = None) -> tuple[int, bytes, bytes]:
    code = ("import sys\nfrom csa_plan.cli.main import main\n"
            f"main({args!r}, plain={plain!r})\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, env={**os.environ, **(env or {})},
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    return run.returncode, run.stdout, run.stderr


@pytest.mark.parametrize("args", [
    ["check", "deepseek-v4-pro", "--max-seq-len", "1M", "--device-memory", "h200", "--tp", "8",
     "--engine", "vllm", "--json"],
    ["check", "deepseek-v4-flash", "--device-memory=b200", "--tp=4", "--engine=sglang-0.5.23", "--brief"],
    ["check", "deepseek-v4-pro", "--device-memory", "h100", "--tp", "1", "--engine", "vllm-0.33"],
    ["check", "deepseek-v4-pro", "--kv-memory", "40GiB", "--engine", "vllm-0.33", "--json"],
    ["check", "deepseek-v4-pro", "--kv-memory", "40GiB", "--json"],  # an engine setting without --engine: 2
    ["check", "no-such-model", "--json"],
    ["compare", "deepseek-v4-flash", "--json"],
    ["simulate", "examples/traces/sample.jsonl", "--model", "deepseek-v4-flash", "--brief"],
])
def test_a_plain_line_gives_the_same_bytes_and_exit_code_either_way(args):
    assert _run(args, True) == _run(args, False)


def test_a_bad_colour_variable_is_left_to_click():
    args = ["check", "deepseek-v4-flash", "--json"]
    env = {"CSA_PLAN_COLOR": "purple"}
    fast, slow = _run(args, True, env), _run(args, False, env)
    assert fast == slow and fast[0] == 2 and b"--color" in fast[2]


@pytest.mark.parametrize("args, metavar", [
    (["check"], "MODEL"), (["check", "--engine", "vllm-0.33"], "MODEL"), (["compare"], "MODEL"),
    (["compare", "--tp", "2"], "MODEL"), (["simulate", "--model", "deepseek-v4-pro"], "WORKLOAD"),
    (["sweep"], "SPEC"), (["sweep", "--jobs", "2"], "SPEC"),
])
@pytest.mark.parametrize("plain", [True, False])
def test_a_missing_argument_is_clicks_usage_error(args, metavar, plain):
    """Issue 36 item 2: the first thing many people type was an internal TypeError, exit 1."""
    code, out, err = _run(args, plain)
    assert (code, out, err) == (2, b"", f"csa-plan: error: Missing argument '{metavar}'.\n".encode())
    code, out, err = _run([*args, "--json"], plain)
    assert code == 2 and err == f"csa-plan: error: Missing argument '{metavar}'.\n".encode()
    assert json.loads(out) == {"schema": "csa-plan/error/v1", "exit_code": 2,
                               "message": f"Missing argument '{metavar}'."}
    assert parse(SPECS[args[0]], args[1:]) is None  # the fast parser leaves it to click
    assert click_params(SPECS[args[0]], args[1:]) is None
