"""The third hostile campaign's reproductions (issue 37): steps bombs, tiny rate scales on the engine
paths, falsy ``hash_ids``, forged resume records, and round two's leftovers (``--columns``, a wait
bound under policy refuse, safetensors dims and totals, long CSV rows and fields).

Each ``Case`` is as in ``helpers/hostile.py``: a builder writing its inputs into a folder and
returning the ``csa-plan`` arguments (``scale`` 1 for the suite; ``full_scale`` is the campaign's
size, run by ``fuzz/measure_hostile.py`` under ``prlimit`` and ``/usr/bin/time``), the exit codes
it may end with and the regression test that keeps it. The encodings (an environment, not an
argument) are ``ENCODINGS``, run as whole processes by ``tests/fuzz/test_fuzz_round3.py``.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Callable

from helpers import EXAMPLES, ROOT
from helpers.hostile import Case, _w, csa_node, field, onnx_bytes
from helpers.hostile_io import forged, resume_file

FLASH = "deepseek-v4-flash"
AZURE = str(EXAMPLES / "traces" / "azure_conv_sample_200.csv")
GAP_MS = 100_000_000  # 100,000 s between arrivals: a 1M-token output (20,000 s of decode steps) runs alone
ENGINE_ARGS = ("--model", FLASH, "--device-memory", "h200", "--tp", "2")


# -- steps bombs: memory flat in the number of steps ----------------------------------------------

def _size(scale: int, rows_full: int) -> tuple[int, int]:
    """(rows, output tokens): the campaign's at full scale, 4 x 50,000 steps in the suite."""
    return (rows_full, 1_000_000) if scale > 1 else (min(rows_full, 4), 50_000)


def steps_trace(engine: str, rows_full: int, *extra: str) -> Callable[[Path, int], list[str]]:
    """A Mooncake trace of requests asking for 1M output tokens each, spaced so each runs alone
    (old main: 32 rows ended after 12 s in MemoryError at 2.8 GB under vLLM; 8 rows took 795 MB)."""
    def build(folder: Path, scale: int) -> list[str]:
        rows, tokens = _size(scale, rows_full)
        text = "".join(json.dumps({"timestamp": i * GAP_MS, "input_length": 100, "output_length": tokens,
                                   "hash_ids": [i]}) + "\n" for i in range(rows))
        return ["simulate", _w(folder, "steps.jsonl", text), "--engine", engine, *ENGINE_ARGS, *extra]
    return build


def steps_mix(folder: Path, scale: int) -> list[str]:
    """A 10-line mix of 30 requests of 1M output tokens at one per 100,000 s (old main: 2.0 GB, SGLang)."""
    rows, tokens = _size(scale, 30)
    text = (f"name: steps\nseed: 1\nrequests: {rows}\nmodel: {FLASH}\nmemory: {{device: h200}}\n"
            "deployment: {tp: 2}\nclasses:\n  - name: long\n    rate: 0.00001\n"
            f"    prompt: {{dist: fixed, value: 100}}\n    output: {{dist: fixed, value: {tokens}}}\n")
    return ["simulate", _w(folder, "steps.yaml", text), "--engine", "sglang-0.5.23"]


def steps_prefill(folder: Path, scale: int) -> list[str]:
    """Prompts of 1M tokens prefilled one token a step (--max-num-batched-tokens 1): 24 rows took 2.3 GB."""
    rows, tokens = _size(scale, 24)
    text = "".join(json.dumps({"timestamp": i * GAP_MS, "input_length": tokens, "output_length": 1,
                               "hash_ids": []}) + "\n" for i in range(rows))
    return ["simulate", _w(folder, "prefill.jsonl", text), "--engine", "vllm-0.33", *ENGINE_ARGS,
            "--max-num-batched-tokens", "1"]


def steps_sweep(folder: Path, scale: int) -> list[str]:
    """A one-point engine sweep over 8 such rows (old main: 800 MB): the rate search replays each probe."""
    rows, tokens = _size(scale, 8)
    trace = "".join(json.dumps({"timestamp": i * GAP_MS, "input_length": 100, "output_length": tokens,
                                "hash_ids": [i]}) + "\n" for i in range(rows))
    _w(folder, "steps.jsonl", trace)
    spec = (f"name: steps\nworkload: steps.jsonl\ngrid:\n  model: {FLASH}\n  device: h200\n  tp: 2\n"
            "  engine: vllm-0.33\nobjective: fewest_devices\nconstraints: {wait_p99_max_s: 1e9}\n"
            "search: {rel_tol: 0.5, max_scale: 2}\n")
    return ["sweep", _w(folder, "steps.yaml", spec), "-j", "1"]


# -- tiny rate scales on the engine paths --------------------------------------------------------

def rate_scale(engine: str) -> Callable[[Path, int], list[str]]:
    """--rate-scale 1e-12 (old main: vLLM 'internal error: ValueError: cvllm.run: inconsistent arrays';
    SGLang exit 0 with a queue wait p50 of -9,223,372,030 s)."""
    def build(folder: Path, scale: int) -> list[str]:
        return ["simulate", AZURE, "--engine", engine, *ENGINE_ARGS, "--rate-scale", "1e-12"]
    return build


def mix_rate_scale(folder: Path, scale: int) -> list[str]:
    """The same value as a mix's rate_scale (old main: an internal error)."""
    text = (f"name: tiny\nseed: 1\nrequests: 10\nmodel: {FLASH}\nrate_scale: 1e-12\nclasses:\n  - name: a\n"
            "    rate: 1.0\n    prompt: {dist: fixed, value: 100}\n    output: {dist: fixed, value: 10}\n")
    return ["simulate", _w(folder, "tiny.yaml", text), "--engine", "vllm-0.33", "--device-memory", "h200", "--tp", "2"]


# -- falsy hash_ids ------------------------------------------------------------------------------

HASH_VALUES = {"null": "null", "0": "0", "false": "false", "0.0": "0.0", "empty-string": '""', "empty-object": "{}"}


def hash_ids(value: str, fmt: str, engine: str | None = None) -> Callable[[Path, int], list[str]]:
    """A record whose hash_ids is present and falsy (old main: null, 0, false, 0.0 an internal TypeError;
    "" and {} accepted while "abc" and {"a": 1} were refused)."""
    def build(folder: Path, scale: int) -> list[str]:
        text = ('{"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": [0]}\n'
                f'{{"timestamp": 1, "input_length": 100, "output_length": 10, "hash_ids": {value}}}\n')
        extra = ["--engine", engine, "--device-memory", "h200", "--tp", "2"] if engine else []
        return ["simulate", _w(folder, "h.jsonl", text), "--model", FLASH, "--format", fmt, *extra]
    return build


# -- forged resume records (examples/sweeps/small.yaml, policy refuse) ----------------------------

def _blank_flood(folder: Path, scale: int) -> list[str]:
    """The header, then blank lines (old main: 100 MB of them took 21 s and were accepted silently)."""
    lines = 100_000_000 if scale > 1 else 5_000
    return resume_file(lambda h, r: [h, "\n" * (lines - 1)])(folder, scale)


def _at_least(h: dict, r: dict) -> list[dict]:
    return [h, {**r, "at_least": True}]


# -- round two's leftovers -----------------------------------------------------------------------

def columns_prompt_is_output(folder: Path, scale: int) -> list[str]:
    """--columns prompt=output_tokens: prompt and output both read one column (old main: exit 0)."""
    trace = _w(folder, "c.csv", "arrival_s,prompt_tokens,output_tokens\n0,100,10\n1,200,20\n")
    return ["simulate", trace, "--model", FLASH, "--columns", "prompt=output_tokens"]


def wait_under_refuse(folder: Path, scale: int) -> list[str]:
    """A ledger-only sweep (policy refuse, no engine) with a wait bound nothing can reach (old main: accepted)."""
    spec = (f"name: w\nworkload: {AZURE}\ngrid:\n  model: {FLASH}\n  device: h200\n  tp: 2\n"
            "objective: fewest_devices\nconstraints: {wait_p99_max_s: 5}\n")
    return ["sweep", _w(folder, "w.yaml", spec), "-j", "1"]


def _model_dir(folder: Path) -> Path:
    d = folder / "m"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_bytes((ROOT / "planner" / "presets" / f"{FLASH}.json").read_bytes())
    return d


def st_many_dims(folder: Path, scale: int) -> list[str]:
    """A tensor of 20,000 dimensions of 10 (old main: internal error, a 20,000-digit element count)."""
    d = _model_dir(folder)
    raw = json.dumps({"t": {"dtype": "BF16", "shape": [10] * 20_000, "data_offsets": [0, 2]}}).encode()
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0\0")
    return ["check", str(d), "--device-memory", "h200"]


def st_huge_total(folder: Path, scale: int) -> list[str]:
    """An index whose metadata.total_size is 10^4000 (old main: internal error, OverflowError)."""
    d = _model_dir(folder)
    (d / "model.safetensors.index.json").write_text(
        '{"metadata": {"total_size": 1' + "0" * 4000 + '}, "weight_map": {"a": "model-00001-of-00001.safetensors"}}')
    return ["check", str(d), "--device-memory", "h200"]


def csv_long(where: str) -> Callable[[Path, int], list[str]]:
    """A 2 MB data row (last, or in the middle) or a 5,000-byte unread field (old main: accepted, past the
    documented 1 MiB row and 1,024-byte field limits)."""
    def build(folder: Path, scale: int) -> list[str]:
        head = "arrival_s,prompt_tokens,output_tokens,note\n"
        long = "0,100,10," + ("x" * (5_000 if where == "field" else 2_000_000)) + "\n"
        body = head + long + "1,100,10,a\n" if where != "last" else head + "1,100,10,a\n" + long.replace("0,", "2,", 1)
        return ["simulate", _w(folder, "long.csv", body), "--model", FLASH]
    return build


def onnx_node_flood(where: str) -> Callable[[Path, int], list[str]]:
    """Ten million empty inputs on a non-CSA node (old main: 12.7 s), or ten million doc strings on the CSA
    node (29.3 s): every field of a node that could be a CSA node was walked; now at most NODE_FIELDS_WALKED."""
    def build(folder: Path, scale: int) -> list[str]:
        n = 10_000_000 if scale > 1 else 600_000
        node = csa_node(attrs={"compression_ratio": 128, "num_heads": 64})
        if where == "inputs":
            nodes = [node, field(3, b"o") + field(4, b"Add") + b"\x0a\x00" * n]
        else:
            nodes = [node + b"\x32\x00" * n]
        return ["check", _w(folder, f"flood-{where}.onnx", onnx_bytes(nodes)), "--max-seq-len", "4096"]
    return build


def distinct_layers(folder: Path, scale: int) -> list[str]:
    """A spec of 8,192 layers, 4,096 distinct groups (old main: 11.7 s, rendering 8,192-column tables)."""
    lines = "".join(f"  - {{compression_ratio: {(4, 128)[i % 2]}, window: {128 + i}}}\n" for i in range(8192))
    text = "num_heads: 64\nmax_seq_len: 65536\nhead_dim: 512\nqk_rope_head_dim: 64\nlayers:\n" + lines
    return ["check", _w(folder, "layers.yaml", text), "--device-memory", "h200"]


def sweep_workload(target: str) -> Callable[[Path, int], list[str]]:
    """A sweep whose workload: is a directory or /dev/null (old main: "no such file")."""
    def build(folder: Path, scale: int) -> list[str]:
        path = str(folder) if target == "dir" else target
        spec = (f"name: s\nworkload: {path}\ngrid:\n  model: {FLASH}\n  device: h200\n  tp: 2\n"
                "objective: fewest_devices\n")
        return ["sweep", _w(folder, "s.yaml", spec), "-j", "1"]
    return build


def hash_id_volume(folder: Path, scale: int) -> list[str]:
    """A Mooncake trace of 100,000 records of 328 distinct ids, 32.8M in all (325 MB; round two: about 45 s
    and 2.5 GB; round three refused it at 2^21 ids). Issue 47 serves it: the ids are summarised (sorted in
    place for the distinct count) and not kept past MAX_REPLAY_HASH_IDS; the suite writes just past that
    (6,400 records, 2.1M ids)."""
    rows = 100_000 if scale > 1 else 6_400
    path = folder / "volume.jsonl"
    with open(path, "w") as f:
        for i in range(rows):
            ids = ", ".join(map(str, range(i * 328, (i + 1) * 328)))
            f.write(f'{{"timestamp": {i * 1000}, "input_length": 167936, "output_length": 10, "hash_ids": [{ids}]}}\n')
    return ["simulate", str(path), "--model", FLASH]


def _t(name: str) -> str:
    return f"test_round3_reproduction[{name}]"


def _case(name: str, build: Callable[[Path, int], list[str]], codes: tuple[int, ...], full: int = 1) -> Case:
    return Case(name, build, codes, _t(name), full)


STEPS_CASES: tuple[Case, ...] = (
    _case("steps-mooncake-32x1M-vllm", steps_trace("vllm-0.33", 32), (0,), 2),
    _case("steps-mooncake-8x1M-vllm", steps_trace("vllm-0.33", 8), (0,), 2),
    _case("steps-mooncake-32x1M-sglang", steps_trace("sglang-0.5.23", 32), (0,), 2),
    _case("steps-mix-30x1M-sglang", steps_mix, (0,), 2),
    _case("steps-prefill-24x1M-mnbt-1-vllm", steps_prefill, (0,), 2),
    _case("steps-sweep-8x1M-vllm", steps_sweep, (0,), 2),
)

CASES: tuple[Case, ...] = STEPS_CASES + (
    _case("rate-scale-1e-12-vllm", rate_scale("vllm-0.33"), (2,)),
    _case("rate-scale-1e-12-sglang", rate_scale("sglang-0.5.23"), (2,)),
    _case("mix-rate-scale-1e-12-vllm", mix_rate_scale, (2,)),
    *(_case(f"hash-ids-{name}-{fmt}", hash_ids(value, fmt), (2,))
      for name, value in HASH_VALUES.items() for fmt in ("mooncake", "bailian")),
    _case("hash-ids-false-vllm", hash_ids("false", "mooncake", "vllm-0.33"), (2,)),
    _case("hash-ids-0.0-sglang", hash_ids("0.0", "mooncake", "sglang-0.5.23"), (2,)),
    _case("resume-peak-bytes-1e18", forged(peak_bytes=10 ** 18), (2,)),
    _case("resume-peak-bytes-contradicts-utilization", forged(peak_bytes=1), (2,)),
    _case("resume-wait-123s-under-refuse", forged(wait_p99_ns=123_000_000_000), (2,)),
    _case("resume-at-least-at-rate-scale-2", resume_file(_at_least), (2,)),
    _case("resume-100MB-blank-lines", _blank_flood, (2,), 2),
    _case("columns-prompt-is-the-output-column", columns_prompt_is_output, (2,)),
    _case("sweep-wait-bound-under-policy-refuse", wait_under_refuse, (2,)),
    _case("safetensors-20000-dims", st_many_dims, (2,)),
    _case("safetensors-index-total-size-10^4000", st_huge_total, (2,)),
    _case("csv-2MB-row-in-the-middle", csv_long("middle"), (2,)),
    _case("csv-2MB-row-last", csv_long("last"), (2,)),
    _case("csv-5000-byte-unread-field", csv_long("field"), (2,)),
    _case("onnx-non-csa-node-10M-empty-inputs", onnx_node_flood("inputs"), (2,), 2),
    _case("onnx-csa-node-10M-doc-strings", onnx_node_flood("docs"), (2,), 2),
    _case("spec-8192-layers-4096-distinct-groups", distinct_layers, (0, 3)),
    _case("sweep-workload-a-directory", sweep_workload("dir"), (2,)),
    _case("sweep-workload-/dev/null", sweep_workload("/dev/null"), (2,)),
    _case("mooncake-32.8M-distinct-hash-ids", hash_id_volume, (0,), 2),
)

EXPECT: dict[str, tuple[str, ...]] = {
    "rate-scale-1e-12-vllm": ("--rate-scale", "int64 nanosecond clock"),
    "rate-scale-1e-12-sglang": ("--rate-scale", "int64 nanosecond clock"),
    "mix-rate-scale-1e-12-vllm": ("tiny.yaml", "rate_scale", "at least"),
    **{f"hash-ids-{name}-{fmt}": ("h.jsonl:2", "hash_ids", "expected a list of block ids")
       for name in HASH_VALUES for fmt in ("mooncake", "bailian")},
    "hash-ids-false-vllm": ("h.jsonl:2", "hash_ids", "expected a list of block ids"),
    "hash-ids-0.0-sglang": ("h.jsonl:2", "hash_ids", "expected a list of block ids"),
    "resume-peak-bytes-1e18": ("done.jsonl:2", "peak_bytes", "does not agree"),
    "resume-peak-bytes-contradicts-utilization": ("done.jsonl:2", "peak_bytes", "peak utilization"),
    "resume-wait-123s-under-refuse": ("done.jsonl:2", "wait_p99_ns", "policy refuse"),
    "resume-at-least-at-rate-scale-2": ("done.jsonl:2", "at_least", "ceiling"),
    "resume-100MB-blank-lines": ("done.jsonl", "blank lines", "MAX_RESUME_BLANK_LINES"),
    "columns-prompt-is-the-output-column": ("--columns", "'output_tokens'", "prompt and output"),
    "sweep-wait-bound-under-policy-refuse": ("w.yaml", "constraints.wait_p99_max_s", "policy refuse"),
    "safetensors-20000-dims": ("model.safetensors", "shape", "MAX_TENSOR_DIMS"),
    "safetensors-index-total-size-10^4000": ("model.safetensors.index.json", "metadata.total_size", "2^64"),
    "csv-2MB-row-in-the-middle": ("long.csv:2", "MAX_LINE_BYTES"),
    "csv-2MB-row-last": ("long.csv:3", "MAX_LINE_BYTES"),
    "csv-5000-byte-unread-field": ("long.csv:2", "note", "MAX_FIELD_BYTES"),
    "onnx-non-csa-node-10M-empty-inputs": ("flood-inputs.onnx", "node #1", "MAX_ONNX_NODE_FIELDS"),
    "onnx-csa-node-10M-doc-strings": ("flood-docs.onnx", "node #0", "MAX_ONNX_NODE_FIELDS"),
    "sweep-workload-a-directory": ("s.yaml", "workload", "a directory"),
    "sweep-workload-/dev/null": ("s.yaml", "workload", "a character device"),
}

# An output encoding that cannot carry text (old main: idna exited 0 printing nothing, or 1 with an
# interpreter dump ending in "lost sys.stderr"): (encoding, argv) run as a whole process. UTF-16 and
# UTF-32 carry every character: written (issue 47, tests/cli/test_wide_encodings.py).
ENCODINGS: tuple[tuple[str, tuple[str, ...]], ...] = tuple(
    (enc, argv) for enc in ("idna", "punycode")
    for argv in (("check", FLASH, "--brief"), ("check", FLASH), ("check", "no-such-model"), ("--help",),
                 ("check", FLASH, "--json")))
