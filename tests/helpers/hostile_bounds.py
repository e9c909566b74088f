"""The second hostile campaign's reproductions (issue 24), core bounds: integers, safetensors
headers and index files, engine and deployment option ranges, time bounds at the documented
limits, bad input that was called a refusal, and trace column mapping.

Kept apart from ``helpers/hostile.py`` (issue 18) and from issue 24's resume / output / worker
reproductions; ``fuzz/measure_hostile.py`` runs all of them. Each ``Case`` is the same as there:
a builder writing its inputs into a folder and returning the ``csa-plan`` arguments, the exit
codes it may end with, the regression test that keeps it, and ``full_scale`` for the few inputs
the suite runs smaller.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Callable

from helpers import EXAMPLES, ROOT
from helpers.hostile import PRO, Case, _w, csa_node, field, onnx_bytes, varint

FLASH = "deepseek-v4-flash"
TRACE = str(EXAMPLES / "traces" / "azure_conv_sample_200.csv")
MIB = 1 << 20


# -- integers ----------------------------------------------------------------------------------

def queue_clock(memory: str, *extra: str) -> Callable[[Path, int], list[str]]:
    """Five requests arriving together at 2.3e9 s, each holding 2.3e9 s, under --policy queue.
    On 5 GB one runs at a time: the fifth release passes 2^63 ns (old main: a wrapped span, exit 0;
    --verify: DIFFERS, exit 3). On 16 GB four run together and the event times fit, but the holds of
    one (replica, tier) summed past int64 (old main: mean utilisation -35.5%, --verify DIFFERS)."""
    def build(folder: Path, scale: int) -> list[str]:
        trace = _w(folder, "ovf.csv", "arrival_s,prompt_tokens,output_tokens\n" + "2300000000.0001,1,2300\n" * 5)
        return ["simulate", trace, "--model", FLASH, "--policy", "queue", "--device-memory", memory,
                "--weights", "1B", "--reserved", "1B", "--tpot-ms", "1e9", *extra]
    return build


def runtime_clock(folder: Path, scale: int) -> list[str]:
    """The same five requests through the step-level vLLM runtime, one running at a time: the steps'
    end times pass 2^63 ns (main before this: an internal error, OverflowError)."""
    trace = _w(folder, "ovf.csv", "arrival_s,prompt_tokens,output_tokens\n" + "2300000000.0001,1,2300\n" * 5)
    return ["simulate", trace, "--model", FLASH, "--engine", "vllm-0.33", "--max-num-seqs", "1", "--tpot-ms", "1e9",
            "--device-memory", "h200", "--tp", "2"]


# -- safetensors -------------------------------------------------------------------------------

def _model_dir(folder: Path, preset: str = FLASH) -> Path:
    d = folder / "m"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_bytes((ROOT / "planner" / "presets" / f"{preset}.json").read_bytes())
    return d


def shard_bytes(header: dict | str, data_bytes: int) -> tuple[bytes, int]:
    """(the 8-byte length and the JSON header, the file's full size); the data area is left sparse."""
    raw = (header if isinstance(header, str) else json.dumps(header)).encode()
    head = struct.pack("<Q", len(raw)) + raw
    return head, len(head) + data_bytes


def write_shard(path: Path, header: dict | str, data_bytes: int) -> None:
    head, size = shard_bytes(header, data_bytes)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)


def st_overlap(folder: Path, scale: int) -> list[str]:
    """200 BF16 tensors of 1 GiB, every one at [0, 1 GiB) of a 1 GiB data area (old main: 214,748,364,800 B
    of 'measured' weights from it)."""
    d = _model_dir(folder)
    n = 1 << 29
    write_shard(d / "model.safetensors", {f"t{i}": {"dtype": "BF16", "shape": [n], "data_offsets": [0, 2 * n]}
                                          for i in range(200)}, 2 * n)
    return ["check", str(d), "--device-memory", "h200"]


def st_gap(folder: Path, scale: int) -> list[str]:
    d = _model_dir(folder)
    write_shard(d / "model.safetensors", {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                          "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}}, 24)
    return ["check", str(d), "--device-memory", "h200"]


def st_duplicate(folder: Path, scale: int) -> list[str]:
    d = _model_dir(folder)
    entry = '{"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}'
    write_shard(d / "model.safetensors", '{"w": ' + entry + ', "w": ' + entry + '}', 8)
    return ["check", str(d), "--device-memory", "h200"]


def st_not_regular(kind: str) -> Callable[[Path, int], list[str]]:
    """A shard, or the index, that is a FIFO, a directory or /dev/zero (old main: exit 3 for the index)."""
    def build(folder: Path, scale: int) -> list[str]:
        d = _model_dir(folder)
        name = "model.safetensors.index.json" if kind.startswith("index") else "model-00001-of-00001.safetensors"
        target = d / name
        if kind.endswith("fifo"):
            os.mkfifo(target)
        elif kind.endswith("dir"):
            target.mkdir()
        else:
            os.symlink("/dev/zero", target)
        return ["check", str(d), "--device-memory", "h200"]
    return build


def st_many_shards(folder: Path, scale: int) -> list[str]:
    """163 shards of 560 tensors (91,280) whose 429 GB (sparse) never fit an 8 GiB card: the smallest-TP
    search builds every candidate from tp 101 up (old main: 51,345 header reads, 277 s; now 163). The
    suite runs 20 shards of 56."""
    d = _model_dir(folder, "deepseek-v4-pro")
    shards, per = (163, 560) if scale > 1 else (20, 56)
    n = 2_350_000  # BF16 elements: 4.7 MB per tensor, 429 GB in all (the search builds every tp from ~200 up)
    for s in range(shards):
        header = {f"model.layers.{s}.t{i}.weight": {"dtype": "BF16", "shape": [n],
                                                    "data_offsets": [2 * n * i, 2 * n * (i + 1)]}
                  for i in range(per)}
        write_shard(d / f"model-{s + 1:05d}-of-{shards:05d}.safetensors", header, 2 * n * per)
    return ["check", str(d), "--device-memory", "8GiB"]


def st_big_index(folder: Path, scale: int) -> list[str]:
    """A 181 MB index file (sparse; old main: re-read per smallest-TP candidate, 114 s, 2.1 GB):
    now past MAX_INDEX_BYTES, refused from its size."""
    d = _model_dir(folder, "deepseek-v4-pro")
    with open(d / "model.safetensors.index.json", "wb") as f:
        f.write(b'{"metadata": {"total_size": 1}, "weight_map": {')
        f.truncate(181_000_000)
    return ["check", str(d), "--device-memory", "2GiB"]


def st_big_headers(folder: Path, scale: int) -> list[str]:
    """10,000 shards with 1 MB headers (old main: every one parsed): the headers together are capped
    (MAX_CHECKPOINT_HEADER_BYTES, MAX_CHECKPOINT_TENSORS), so reading stops within the first 40; the
    suite writes 5 shards under lowered limits."""
    d = _model_dir(folder, "deepseek-v4-pro")
    shards = 10_000 if scale > 1 else 5  # the suite lowers the limits (tests/fuzz/test_fuzz_bounds.py)
    per = 9_000  # about 1 MB of JSON per header
    header = {f"t{i:07d}": {"dtype": "BF16", "shape": [1], "data_offsets": [2 * i, 2 * i + 2]} for i in range(per)}
    head, _ = shard_bytes(header, 2 * per)
    for s in range(shards):
        # full scale: the first 1,000 shards carry their whole header (0.7 GB), the rest only the length
        # prefix over a sparse file (never reached: the caps trip within the first 40)
        mine = _renamed(head, s) if s < 1_000 else _renamed(head, s)[:8]
        with open(d / f"model-{s + 1:05d}-of-{shards:05d}.safetensors", "wb") as f:
            f.write(mine)
            f.truncate(len(_renamed(head, s)) + 2 * per)
    return ["check", str(d), "--device-memory", "h200"]


def _renamed(head: bytes, shard: int) -> bytes:
    """The same header with tensor names unique to this shard."""
    raw = head[8:].replace(b'"t', b'"' + bytes([65 + shard % 26]) + b'%04d' % (shard % 10_000) + b't')
    return struct.pack("<Q", len(raw)) + raw


# -- option ranges -------------------------------------------------------------------------------

def engine_option(engine: str, *option: str, command: str = "check") -> Callable[[Path, int], list[str]]:
    def build(folder: Path, scale: int) -> list[str]:
        if command == "simulate":
            return ["simulate", TRACE, "--model", FLASH, "--engine", engine, *option]
        return ["check", PRO, "--engine", engine, *option]
    return build


def wide_deployment(folder: Path, scale: int) -> list[str]:
    """One request on --pp 43 --dp 1024 (44,032 devices; old main: 12.5 MB of text in 80 s)."""
    trace = _w(folder, "one.csv", "arrival_s,prompt_tokens,output_tokens\n0,100,100\n")
    return ["simulate", trace, "--model", PRO, "--pp", "43", "--dp", "1024"]


# -- time bounds ---------------------------------------------------------------------------------

def reserve_fit_lengths(folder: Path, scale: int) -> list[str]:
    """200,000 requests of distinct lengths under --reserve fit --bucket 1 (old main: a plan per length,
    past 1,200 s): more reservation tiers than MAX_RESERVE_TIERS is bad input naming --bucket."""
    rows = "".join(f"{i * 0.001:.3f},{i + 1},1\n" for i in range(200_000))
    trace = _w(folder, "lengths.csv", "arrival_s,prompt_tokens,output_tokens\n" + rows)
    return ["simulate", trace, "--model", FLASH, "--reserve", "fit", "--bucket", "1"]


def layers_spec(folder: Path, scale: int) -> list[str]:
    """A YAML spec of MAX_LAYERS (8,192) layers on a device (old main: 23 s for check --device-memory)."""
    text = ("num_heads: 64\nmax_seq_len: 65536\nhead_dim: 512\nqk_rope_head_dim: 64\n"
            "layers:\n  - {compression_ratio: 4, repeat: 4096}\n  - {compression_ratio: 128, repeat: 4096}\n")
    return ["check", _w(folder, "layers.yaml", text), "--device-memory", "h200"]


def _onnx_graph(graph_tail: bytes) -> bytes:
    node = csa_node(attrs={"compression_ratio": 128, "num_heads": 64})
    opsets = field(8, field(1, b"") + varint(2 << 3) + varint(17)) + field(8, field(1, b"pkg.nxrt")
                                                                               + varint(2 << 3) + varint(1))
    return varint(1 << 3) + varint(8) + opsets + field(7, field(1, node) + graph_tail)


def onnx_fields(where: str) -> Callable[[Path, int], list[str]]:
    """10M empty fields (campaign size) at the top level, as initializers or as value_info entries; the
    suite writes just past the limit (MAX_ONNX_MODEL_FIELDS, MAX_ONNX_GRAPH_FIELDS)."""
    def build(folder: Path, scale: int) -> list[str]:
        if where == "top":
            n = 10_000_000 if scale > 1 else 20_000
            data = onnx_bytes([csa_node(attrs={"compression_ratio": 128, "num_heads": 64})]) + b"\x12\x00" * n
        else:
            n = 10_000_000 if scale > 1 else 1_100_000
            data = _onnx_graph((b"\x2a\x00" if where == "initializer" else b"\x6a\x00") * n)
        return ["check", _w(folder, f"{where}.onnx", data)]
    return build


def onnx_docstring(where: str) -> Callable[[Path, int], list[str]]:
    """A 10M-byte doc_string on the model or on the CSA node (skipped by its length, never decoded)."""
    def build(folder: Path, scale: int) -> list[str]:
        doc = field(6, b"d" * (10_000_000 if scale > 1 else 1_000_000))
        node = csa_node(attrs={"compression_ratio": 128, "num_heads": 64})
        data = onnx_bytes([node]) + doc if where == "model" else onnx_bytes([node + doc])
        return ["check", _w(folder, f"doc-{where}.onnx", data), "--max-seq-len", "4096"]
    return build


def yaml_unknown_lists(lines_full: int, lines_suite: int) -> Callable[[Path, int], list[str]]:
    """A model spec followed by ``u<i>: [a, ..., h]`` unknown keys (10 nodes a line; 700,000 lines are
    the campaign's 20 MB, which took 285 s and 3 GB; 9,900 lines are just inside MAX_YAML_NODES)."""
    def build(folder: Path, scale: int) -> list[str]:
        from helpers.hostile import MODEL_YAML

        n = lines_full if scale > 1 else lines_suite
        return ["check", _w(folder, "unknown.yaml", MODEL_YAML + "".join(f"u{i}: [a, b, c, d, e, f, g, h]\n"
                                                                         for i in range(n)))]
    return build


def mix_classes(classes_full: int, classes_suite: int) -> Callable[[Path, int], list[str]]:
    """A mix of many classes (40,000 in 4 MB: the campaign; 5,800 fit MAX_YAML_NODES at 17 nodes each)."""
    def build(folder: Path, scale: int) -> list[str]:
        k = classes_full if scale > 1 else classes_suite
        text = f"model: {FLASH}\nrequests: 1000\nseed: 1\nclasses:\n" + "".join(
            f"  - {{name: c{i}, rate: 1, prompt: {{dist: fixed, value: 8}}, output: {{dist: fixed, value: 8}}}}\n"
            for i in range(k))
        return ["simulate", _w(folder, "classes.yaml", text)]
    return build


def empirical(values_full: int, values_suite: int) -> Callable[[Path, int], list[str]]:
    """An empirical prompt distribution of many values (1M: the campaign; 99,000 fit MAX_YAML_NODES)."""
    def build(folder: Path, scale: int) -> list[str]:
        k = values_full if scale > 1 else values_suite
        text = (f"model: {FLASH}\nrequests: 1000\nseed: 1\nclasses:\n  - {{name: c, rate: 1, prompt: "
                "{dist: empirical, values: [" + ", ".join(str(1 + i % 5000) for i in range(k))
                + "]}, output: {dist: fixed, value: 8}}\n")
        return ["simulate", _w(folder, "empirical.yaml", text)]
    return build


def sweep_spec_size(folder: Path, scale: int) -> list[str]:
    """A 16 MB sweep spec (the campaign's; the limit is now MAX_SPEC_BYTES = 4 MiB)."""
    body = "grid: {model: deepseek-v4-pro, device: h200}\n" + "".join(f"x{i}: [1, 2, 3]\n" for i in range(1_000_000))
    trace = folder / "trace.csv"
    trace.write_bytes((EXAMPLES / "traces" / "azure_conv_sample_200.csv").read_bytes())
    return ["sweep", _w(folder, "s.yaml", "workload: trace.csv\n" + body), "-j", "1"]


# -- bad input called a refusal -----------------------------------------------------------------

def onnx_duplicate_attribute(folder: Path, scale: int) -> list[str]:
    node = csa_node(attrs={"compression_ratio": 128, "num_heads": 64})
    extra = varint(1 << 3 | 2) + varint(17) + b"compression_ratio" + varint(3 << 3) + varint(4)
    extra += varint(20 << 3) + varint(2)  # type INT
    attr = varint(5 << 3 | 2) + varint(len(extra)) + extra
    return ["check", _w(folder, "dupattr.onnx", onnx_bytes([node + attr]))]


def onnx_duplicate_metadata(folder: Path, scale: int) -> list[str]:
    node = csa_node(attrs={"compression_ratio": 128, "num_heads": 64})
    model = onnx_bytes([node], metadata={"max_seq_len": "4096"})
    pair = varint(1 << 3 | 2) + varint(11) + b"max_seq_len" + varint(2 << 3 | 2) + varint(3) + b"128"
    return ["check", _w(folder, "dupmeta.onnx", model + varint(14 << 3 | 2) + varint(len(pair)) + pair)]


# -- trace columns --------------------------------------------------------------------------------

def columns(header: str, mapping: str) -> Callable[[Path, int], list[str]]:
    def build(folder: Path, scale: int) -> list[str]:
        trace = _w(folder, "t.csv", f"{header}\n1,2,3,4\n2,3,4,5\n")
        return ["simulate", trace, "--model", FLASH, "--columns", mapping]
    return build


def _t(name: str) -> str:
    return f"test_bounds_reproduction[{name}]"


def _case(name: str, build: Callable[[Path, int], list[str]], codes: tuple[int, ...], full: int = 1) -> Case:
    return Case(name, build, codes, _t(name), full)


CASES: tuple[Case, ...] = (
    _case("queue-release-past-int64", queue_clock("5GB"), (2,)),
    _case("queue-release-past-int64-verify", queue_clock("5GB", "--verify"), (2,)),
    _case("queue-hold-sum-past-int64-verify", queue_clock("16GB", "--verify"), (0,)),
    _case("runtime-step-past-int64", runtime_clock, (2,)),
    _case("safetensors-overlapping-offsets", st_overlap, (2,)),
    _case("safetensors-gap-in-data", st_gap, (2,)),
    _case("safetensors-duplicate-tensor-name", st_duplicate, (2,)),
    _case("safetensors-shard-fifo", st_not_regular("shard-fifo"), (2,)),
    _case("safetensors-shard-dir", st_not_regular("shard-dir"), (2,)),
    _case("safetensors-shard-/dev/zero", st_not_regular("shard-zero"), (2,)),
    _case("safetensors-index-fifo", st_not_regular("index-fifo"), (2,)),
    _case("safetensors-index-dir", st_not_regular("index-dir"), (2,)),
    _case("safetensors-index-/dev/zero", st_not_regular("index-zero"), (2,)),
    _case("safetensors-163-shards-8GiB", st_many_shards, (3,), 2),
    _case("safetensors-181MB-index", st_big_index, (2,)),
    _case("safetensors-10000-shards-1MB-headers", st_big_headers, (2,), 2),
    _case("max-num-batched-tokens-0", engine_option("vllm-0.33", "--max-num-batched-tokens", "0"), (2,)),
    _case("block-size-0", engine_option("vllm-0.33", "--block-size", "0"), (2,)),
    _case("page-size-0", engine_option("sglang-0.5.23", "--page-size", "0"), (2,)),
    _case("max-num-seqs-0", engine_option("vllm-0.33", "--max-num-seqs", "0", command="simulate"), (2,)),
    _case("max-running-requests-0", engine_option("sglang-0.5.23", "--max-running-requests", "0"), (2,)),
    _case("chunked-prefill-size-0", engine_option("sglang-0.5.23", "--chunked-prefill-size", "0"), (2,)),
    _case("num-speculative-tokens-1000000", engine_option("vllm-0.33", "--num-speculative-tokens", "1000000"), (2,)),
    _case("gpu-memory-utilization-1.5", engine_option("vllm-0.33", "--gpu-memory-utilization", "1.5"), (2,)),
    _case("kv-cache-dtype-unknown-vllm", engine_option("vllm-0.33", "--kv-cache-dtype", "fp9"), (2,)),
    _case("kv-cache-dtype-unknown-sglang", engine_option("sglang-0.5.23", "--kv-cache-dtype", "fp9"), (2,)),
    _case("indexer-kv-dtype-unknown-vllm", engine_option("vllm-0.33", "--indexer-kv-dtype", "int3"), (2,)),
    _case("indexer-kv-dtype-unknown-sglang", engine_option("sglang-0.5.23", "--indexer-kv-dtype", "int3"), (2,)),
    _case("kv-cache-dtype-known-refused", engine_option("vllm-0.33", "--kv-cache-dtype", "bfloat16"), (3,)),
    _case("pp-43-dp-1024-one-request", wide_deployment, (0,)),
    _case("reserve-fit-200000-lengths", reserve_fit_lengths, (2,)),
    _case("spec-8192-layers-device", layers_spec, (0, 3)),
    _case("onnx-10M-top-level-fields", onnx_fields("top"), (2,), 2),
    _case("onnx-10M-initializers", onnx_fields("initializer"), (2,), 2),
    _case("onnx-10M-value-info", onnx_fields("value_info"), (2,), 2),
    _case("onnx-10MB-model-docstring", onnx_docstring("model"), (0, 3), 2),
    _case("onnx-10MB-node-docstring", onnx_docstring("node"), (0, 3), 2),
    _case("yaml-20MB-unknown-key-lists", yaml_unknown_lists(700_000, 450_000), (2,), 2),
    _case("yaml-unknown-key-lists-at-node-limit", yaml_unknown_lists(9_900, 9_900), (2,)),
    _case("mix-40000-classes", mix_classes(40_000, 40_000), (2,)),
    _case("mix-5800-classes", mix_classes(5_800, 5_800), (0,)),
    _case("empirical-1M-values", empirical(1_000_000, 1_000_000), (2,)),
    _case("empirical-99000-values", empirical(99_000, 99_000), (0,)),
    _case("sweep-16MB-spec", sweep_spec_size, (2,)),
    _case("onnx-duplicate-attribute", onnx_duplicate_attribute, (2,)),
    _case("onnx-duplicate-metadata-key", onnx_duplicate_metadata, (2,)),
    _case("columns-one-column-two-roles", columns("a,b,c,d", "arrival=a,prompt=b,output=b"), (2,)),
    _case("columns-same-column-thrice", columns("a,b,c,d", "arrival=a,prompt=a,output=a"), (2,)),
    _case("columns-duplicate-header", columns("a,b,b,d", "arrival=a,prompt=b,output=d"), (2,)),
)

EXPECT: dict[str, tuple[str, ...]] = {
    "queue-release-past-int64": ("ovf.csv: request 5", "MAX_CLOCK_NS"),
    "queue-release-past-int64-verify": ("ovf.csv: request 5", "MAX_CLOCK_NS"),
    "runtime-step-past-int64": ("--tpot-ms", "MAX_CLOCK_NS"),
    "safetensors-overlapping-offsets": ("model.safetensors", "overlaps"),
    "safetensors-gap-in-data": ("model.safetensors", "gap of 8 bytes"),
    "safetensors-duplicate-tensor-name": ("model.safetensors", "duplicate key"),
    "safetensors-shard-fifo": ("model-00001-of-00001.safetensors", "FIFO"),
    "safetensors-shard-dir": ("model-00001-of-00001.safetensors", "a directory"),
    "safetensors-shard-/dev/zero": ("model-00001-of-00001.safetensors", "character device"),
    "safetensors-index-fifo": ("model.safetensors.index.json", "FIFO"),
    "safetensors-index-dir": ("model.safetensors.index.json", "a directory"),
    "safetensors-index-/dev/zero": ("model.safetensors.index.json", "character device"),
    "safetensors-181MB-index": ("model.safetensors.index.json", "MAX_INDEX_BYTES"),
    "safetensors-10000-shards-1MB-headers": ("MAX_CHECKPOINT_",),
    "max-num-batched-tokens-0": ("--max-num-batched-tokens", "1..16,777,216", "MAX_BATCH_TOKENS"),
    "block-size-0": ("--block-size", "1..1,048,576", "MAX_BLOCK_TOKENS"),
    "page-size-0": ("--page-size", "MAX_BLOCK_TOKENS"),
    "max-num-seqs-0": ("--max-num-seqs", "MAX_RUNNING_REQUESTS"),
    "max-running-requests-0": ("--max-running-requests", "MAX_RUNNING_REQUESTS"),
    "chunked-prefill-size-0": ("--chunked-prefill-size", "MAX_BATCH_TOKENS"),
    "num-speculative-tokens-1000000": ("--num-speculative-tokens", "0..256", "MAX_SPECULATIVE_TOKENS"),
    "gpu-memory-utilization-1.5": ("--gpu-memory-utilization", "0 < x <= 1"),
    "kv-cache-dtype-unknown-vllm": ("--kv-cache-dtype", "'fp9'", "CacheDType"),
    "kv-cache-dtype-unknown-sglang": ("--kv-cache-dtype", "'fp9'", "choices"),
    "indexer-kv-dtype-unknown-vllm": ("--indexer-kv-dtype", "'int3'", "IndexerKVDType"),
    "indexer-kv-dtype-unknown-sglang": ("--indexer-kv-dtype", "'int3'"),
    "reserve-fit-200000-lengths": ("--bucket", "MAX_RESERVE_TIERS"),
    "onnx-10M-top-level-fields": ("top.onnx", "MAX_ONNX_MODEL_FIELDS"),
    "onnx-10M-initializers": ("initializer.onnx", "MAX_ONNX_GRAPH_FIELDS"),
    "onnx-10M-value-info": ("value_info.onnx", "MAX_ONNX_"),
    "yaml-20MB-unknown-key-lists": ("unknown.yaml", "MAX_YAML_BYTES"),
    "yaml-unknown-key-lists-at-node-limit": ("unknown.yaml", "u0", "unknown"),
    "mix-40000-classes": ("classes.yaml", "MAX_YAML_NODES"),
    "empirical-1M-values": ("empirical.yaml", "MAX_YAML_BYTES"),
    "sweep-16MB-spec": ("s.yaml", "MAX_SPEC_BYTES"),
    "onnx-duplicate-attribute": ("dupattr.onnx", "compression_ratio", "given twice"),
    "onnx-duplicate-metadata-key": ("dupmeta.onnx", "metadata_props", "max_seq_len", "given twice"),
    "columns-one-column-two-roles": ("--columns", "'b'", "prompt and output"),
    "columns-same-column-thrice": ("--columns", "'a'"),
    "columns-duplicate-header": ("t.csv:1", "'b' twice"),
}
