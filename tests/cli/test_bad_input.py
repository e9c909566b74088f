"""Bad input exits 2 with one line naming the file (or option) and field: never a traceback."""

from __future__ import annotations

import json

import pytest

PRO = "deepseek-v4-pro"


def flash_config() -> dict:
    from importlib import resources

    from csa_plan.planner.loaders.model_files import PRESETS

    return json.loads(resources.files("csa_plan.planner.presets").joinpath(PRESETS["deepseek-v4-flash"]).read_text())


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def assert_one_line(r, *needles):
    assert r.code == 2, (r.code, r.out, r.err)
    lines = [l for l in r.err.splitlines() if l.strip()]
    assert len(lines) == 1, r.err
    assert "Traceback" not in r.err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_malformed_json(csa, tmp_path):
    path = write(tmp_path, "config.json", '{"num_hidden_layers": 3,,}')
    assert_one_line(csa("check", path), path, "malformed JSON", "line 1")


def test_malformed_yaml(csa, tmp_path):
    path = write(tmp_path, "m.yaml", "layers: [\n  - compression_ratio: 4\n  bad")
    assert_one_line(csa("check", path), path, "malformed YAML")


@pytest.mark.parametrize("field", ["num_attention_heads", "max_position_embeddings", "compress_ratios",
                                   "num_hidden_layers", "index_topk"])
def test_missing_field(csa, tmp_path, field):
    cfg = flash_config()
    del cfg[field]
    path = write(tmp_path, "config.json", json.dumps(cfg))
    assert_one_line(csa("check", path), path, field, "missing")


@pytest.mark.parametrize("field,value,problem", [
    ("num_attention_heads", "64", "expected a non-negative integer"),
    ("head_dim", 512.0, "expected a non-negative integer"),
    ("index_topk", True, "expected a non-negative integer"),
    ("max_position_embeddings", -5, "non-negative"),
    ("max_position_embeddings", 1 << 63, "too large"),
    ("sliding_window", 10**30, "too large"),
])
def test_wrong_type_negative_or_absurd(csa, tmp_path, field, value, problem):
    cfg = flash_config()
    cfg[field] = value
    path = write(tmp_path, "config.json", json.dumps(cfg))
    assert_one_line(csa("check", path), path, field, problem)


def test_ratio_list_length_mismatch(csa, tmp_path):
    cfg = flash_config()
    cfg["compress_ratios"] = cfg["compress_ratios"][:-1]
    path = write(tmp_path, "config.json", json.dumps(cfg))
    assert_one_line(csa("check", path), path, "compress_ratios", "has 43 entries", "(43 + 1) = 44")


def test_ratio_entry_wrong_type(csa, tmp_path):
    cfg = flash_config()
    cfg["compress_ratios"][5] = "4"
    path = write(tmp_path, "config.json", json.dumps(cfg))
    assert_one_line(csa("check", path), path, "compress_ratios[5]")


def test_unknown_preset(csa):
    assert_one_line(csa("check", "deepseek-v9"), "deepseek-v9", "no such file, directory or preset")


def test_directory_without_config(csa, tmp_path):
    assert_one_line(csa("check", str(tmp_path)), str(tmp_path), "no config.json")


def test_not_a_mapping(csa, tmp_path):
    path = write(tmp_path, "config.json", "[1, 2, 3]")
    assert_one_line(csa("check", path), path, "expected a mapping")


def test_yaml_unknown_field(csa, tmp_path):
    path = write(tmp_path, "m.yaml", "num_heads: 8\nmax_seq_len: 1024\nlayers:\n  - compression_ratio: 128\n    num_head: 4\n")
    assert_one_line(csa("check", path), path, "layers[0].num_head", "unknown field")


def test_yaml_bool_is_not_an_int(csa, tmp_path):
    path = write(tmp_path, "m.yaml", "num_heads: true\nmax_seq_len: 1024\nlayers:\n  - compression_ratio: 128\n")
    assert_one_line(csa("check", path), path, "num_heads", "bool")


def test_yaml_python_tag_is_refused(csa, tmp_path):
    path = write(tmp_path, "m.yaml", "num_heads: !!python/object/apply:os.system ['true']\n")
    assert_one_line(csa("check", path), path, "malformed YAML")


def test_yaml_alias_bomb(csa, tmp_path):
    lines = ["a0: &a0 [1, 2]"] + [f"a{i}: &a{i} [" + ", ".join([f"*a{i-1}"] * 9) + "]" for i in range(1, 20)]
    path = write(tmp_path, "m.yaml", "\n".join(lines) + "\n")
    assert_one_line(csa("check", path), path, "aliases")


@pytest.mark.parametrize("args,needles", [
    (["--tp", "3"], ["--tp", "not divisible by tp 3"]),
    (["--tp", "0"], ["--tp", "at least 1"]),
    (["--batch", "-1"], ["--batch", "negative"]),
    (["--max-seq-len", "abc"], ["--max-seq-len", "not an integer"]),
    (["--max-seq-len", str(1 << 63)], ["--max-seq-len", "too large"]),
    (["--device-memory", "lots"], ["--device-memory", "cannot read size"]),
    (["--device-memory", "80GiB", "--reserved", "80GiB"], ["--reserved", "at or above the device memory"]),
    (["--device-memory", "80GiB", "--reserved", "81GiB"], ["--reserved"]),
    (["--reserved", "1GiB"], ["--reserved", "needs --device-memory"]),
    (["--gate", "c2"], ["--gate"]),
    (["--query-len", "0"], ["--query-len", "at least 1"]),
])
def test_bad_options(csa, args, needles):
    assert_one_line(csa("check", PRO, *args), *needles)


def test_byte_overflow_is_bad_input_not_wrapped(csa):
    assert_one_line(csa("check", PRO, "--batch", str(1 << 50)), "does not fit an unsigned 64-bit")


def test_zero_values_are_refusals_not_bad_input(csa):
    r = csa("check", PRO, "--batch", "0", "--json")
    assert r.code == 3
    assert {x["type"] for x in r.json()["refusals"]} == {"InvalidHeadGeometry"}
    r = csa("check", PRO, "--max-seq-len", str((1 << 20) + 1), "--json")
    assert r.code == 3


def test_unknown_command_is_one_line(csa):
    assert_one_line(csa("frobnicate"), "No such command")


def test_fifo_is_refused_without_blocking(csa, tmp_path):
    import os

    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    assert_one_line(csa("check", str(fifo)), str(fifo), "not a regular file")


def test_not_utf8(csa, tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b'{"a": "\xff\xfe"}')
    assert_one_line(csa("check", str(path)), str(path), "not UTF-8")


@pytest.mark.parametrize("name,text,needles", [
    ("config.json", '{"num_hidden_layers": 1' + "0" * 5000 + "}", ("num_hidden_layers", "5,001 digits", "MAX_INT_DIGITS")),
    ("m.yaml", "num_heads: 1" + "0" * 5000 + "\n", ("5,001 characters", "line 1", "MAX_STRING_CHARS"))])
def test_integer_literal_beyond_python_conversion_limit(csa, tmp_path, name, text, needles):
    """Refused before conversion, naming the limit (hostile campaign: bounded digit counts)."""
    path = write(tmp_path, name, text)
    assert_one_line(csa("check", path), path, *needles)


def test_huge_option_integer(csa):
    r = csa("check", PRO, "--batch", "9" * 5000)
    assert_one_line(r, "--batch", "too large")
    assert len(r.err) < 300


@pytest.mark.parametrize("command", [["check"], ["simulate", "--model", PRO], ["sweep"], ["compare"]])
def test_unusable_path_name_is_one_bounded_line(csa, command):
    """A 5,000-character name: the OS refuses it (ENAMETOOLONG); we say so in one short line."""
    name = "a" * 5000 + (".csv" if command[0] == "simulate" else "")
    r = csa(command[0], name, *command[1:])
    assert r.code == 2 and "Traceback" not in r.err and "internal error" not in r.err
    assert len(r.err.strip().splitlines()) == 1 and len(r.err) < 700
