"""The hostile campaign's reproductions (issue 18), as builders shared by the tests and the
measurement script (``fuzz/measure_hostile.py``).

Each ``Case`` writes its inputs into a folder and returns the ``csa-plan`` arguments; it
names the exit codes it may end with (2 bad input, 3 a refusal, 0 for the cases that
must now *succeed* with a note) and the regression test that keeps it. ``scale``
shrinks the few multi-megabyte inputs for the test suite (the bound is crossed either
way); the measurement script runs them at the campaign's full size.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from helpers import EXAMPLES, ROOT

PRO = "deepseek-v4-pro"
SMALL_SWEEP = EXAMPLES / "sweeps" / "small.yaml"
ESC = "\x1b"
ANSI = f"{ESC}[31mRED{ESC}[0m{ESC}]0;pwned\x07{ESC}]8;;http://x\x1b\\"  # SGR, OSC title, OSC 8 link


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[Path, int], list[str]]  # (folder, scale) -> argv after "csa-plan"
    codes: tuple[int, ...]
    test: str  # the regression test that keeps it
    full_scale: int = 1  # the campaign's size (measure_hostile.py); the suite runs scale 1


# -- small builders ------------------------------------------------------------------------------

def _w(folder: Path, name: str, text: str | bytes) -> str:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    return str(path)


MODEL_YAML = "num_heads: 64\nmax_seq_len: 4096\nhead_dim: 512\nqk_rope_head_dim: 64\nlayers:\n  - compression_ratio: 128\n"


def alias_model(folder: Path, scale: int) -> list[str]:
    text = "name: &big [" + ", ".join(["x" * 100] * (8000 * scale)) + "]\n"  # expanded 99 times below
    text += "defaults: {num_heads: *big, max_seq_len: 4096}\nlayers:\n" + "".join(
        "  - {compression_ratio: 128, state_edges: *big}\n" for _ in range(98))
    return ["check", _w(folder, "alias.yaml", text)]


def alias_mix(field: str) -> Callable[[Path, int], list[str]]:
    def build(folder: Path, scale: int) -> list[str]:
        big = "[" + ", ".join(["x" * 100] * (8000 * scale)) + "]"
        text = (f"model: {PRO}\nrequests: 10\nseed: 1\n_: &big {big}\n"
                + "".join(f"_{i}: *big\n" for i in range(98)))
        if field == "memory.device":
            text += "memory: {device: *big}\nclasses: [{name: c, weight: 1, prompt: {dist: fixed, value: 8}, output: {dist: fixed, value: 8}}]\n"
        else:
            text += "classes: [{name: c, weight: 1, prompt: {dist: *big, value: 8}, output: {dist: fixed, value: 8}}]\n"
        return ["simulate", _w(folder, "mix.yaml", text)]
    return build


def deep_yaml(folder: Path, scale: int) -> list[str]:
    return ["check", _w(folder, "deep.yaml", "num_heads: " + "[" * 990 + "]" * 990 + "\n")]


def deep_json(folder: Path, scale: int) -> list[str]:
    return ["check", _w(folder, "config.json", '{"num_attention_heads": ' + "[" * 990 + "]" * 990 + "}")]


def deep_json_100k(folder: Path, scale: int) -> list[str]:
    return ["check", _w(folder, "config.json", '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")]


def deep_jsonl(folder: Path, scale: int) -> list[str]:
    return ["simulate", _w(folder, "t.jsonl", '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}\n"), "--model", PRO]


def varint(n: int) -> bytes:
    """A protobuf varint (the ONNX files are written field by field, without the onnx package)."""
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


JSON_COMMANDS = ("check", "simulate", "sweep")


def one_line(r) -> str:
    """The one stderr line of a bad-input exit (no traceback, no internal error)."""
    lines = [line for line in r.err.splitlines() if line.strip()]
    assert len(lines) == 1, r.err[:2000]
    assert "Traceback" not in r.err and "internal error" not in r.err, r.err[:2000]
    return lines[0]


def onnx_bytes(nodes: list[bytes], *, metadata: dict[str, str] | None = None, opset_csa: bool = True) -> bytes:
    """A ModelProto written field by field (no onnx package): ir_version, opsets, metadata, one graph."""
    model = varint(1 << 3) + varint(8)
    model += field(8, field(1, b"") + varint(2 << 3) + varint(17))
    if opset_csa:
        model += field(8, field(1, b"pkg.nxrt") + varint(2 << 3) + varint(1))
    for k, v in (metadata or {}).items():
        model += field(14, field(1, k.encode()) + field(2, v.encode()))
    return model + field(7, b"".join(field(1, n) for n in nodes))


def csa_node(*, name: bytes = b"n", domain: bytes = b"pkg.nxrt", inputs: list[bytes] | None = None,
             attrs: dict[str, int | bytes] | None = None) -> bytes:
    out = field(3, name) + field(4, b"CompressedSparseAttention") + field(7, domain)
    for i in inputs or []:
        out += field(1, i)
    for k, v in (attrs or {}).items():
        if isinstance(v, int):
            out += field(5, field(1, k.encode()) + varint(3 << 3) + varint(v) + varint(20 << 3) + varint(2))
        else:
            out += field(5, field(1, k.encode()) + field(4, v) + varint(20 << 3) + varint(3))
    return out


def _graph(folder: Path, name: str, **kw) -> str:
    from helpers.onnx_graphs import INTERLEAVED, build_model, builder

    return str(builder.write(build_model(INTERLEAVED, "per_layer", **kw), folder / name))


def onnx_metadata_digits(folder: Path, scale: int) -> list[str]:
    return ["check", _graph(folder, "meta.onnx", metadata={"max_seq_len": "9" * 5000})]


def onnx_name_digits(digits: str) -> Callable[[Path, int], list[str]]:
    def build(folder: Path, scale: int) -> list[str]:
        from helpers.onnx_graphs import INTERLEAVED, build_model, builder

        model = build_model(INTERLEAVED, "per_layer")
        for node in model.graph.node:
            if node.op_type == "CompressedSparseAttention":
                for i in (6, 7):
                    if i < len(node.input) and node.input[i]:
                        node.input[i] = f"past_key_values.{digits}.{i}"
                break
        return ["check", str(builder.write(model, folder / "names.onnx"))]
    return build


def onnx_attribute_string(folder: Path, scale: int) -> list[str]:
    size = (1 << 20) * scale  # the campaign: 100 MB
    node = csa_node(attrs={"compression_ratio": 128, "num_heads": 64, "cache_format": b"A" * size})
    return ["check", _w(folder, "attr.onnx", onnx_bytes([node]))]


def onnx_domain_escape(folder: Path, scale: int) -> list[str]:
    node = csa_node(domain=ANSI.encode(), attrs={"compression_ratio": 128})
    return ["check", _w(folder, "domain.onnx", onnx_bytes([node]))]


def onnx_many_nodes(folder: Path, scale: int) -> list[str]:
    node = csa_node(attrs={"compression_ratio": 128, "num_heads": 64})
    return ["check", _w(folder, "many.onnx", onnx_bytes([node] * 100_000), )]


def onnx_huge_name(folder: Path, scale: int) -> list[str]:
    """A node name declared far larger than the limit (a sparse file: the bytes are never read)."""
    size = (1 << 24) * scale  # the campaign: 1.9 GB
    head = b""
    # graph { node { name: <size bytes> } } written with the length prefix, then a sparse tail
    op = varint(4 << 3 | 2) + varint(25) + b"CompressedSparseAttention" + varint(7 << 3 | 2) + varint(8) + b"pkg.nxrt"
    name_hdr = varint(3 << 3 | 2) + varint(size)
    node_len = len(op) + len(name_hdr) + size
    node_hdr = varint(1 << 3 | 2) + varint(node_len)
    graph_len = len(node_hdr) + node_len
    model = varint(1 << 3) + varint(8) + varint(7 << 3 | 2) + varint(graph_len) + node_hdr + op + name_hdr + head
    path = folder / "huge.onnx"
    with open(path, "wb") as f:
        f.write(model)
        f.truncate(len(model) + size)  # sparse: no disk used
    return ["check", str(path)]


def yaml_cache_format(folder: Path, scale: int) -> list[str]:
    return ["check", _w(folder, "cf.yaml", MODEL_YAML.replace("layers:", f"cache_format: {'c' * (1 << 20) * scale}\nlayers:"))]


def kv_format_option(folder: Path, scale: int) -> list[str]:
    return ["check", PRO, "--kv-format", "x" * 100_000]


def csv_header_escape(folder: Path, scale: int) -> list[str]:
    return ["simulate", _w(folder, "t.csv", f"TIMESTAMP,{ANSI},GeneratedTokens\n2023-11-16 18:15:46,1,1\n"),
            "--model", PRO]


def yaml_name_escape(folder: Path, scale: int) -> list[str]:
    """A model name with escape sequences (YAML \\e and \\a escapes): printed in the report, escaped."""
    return ["check", _w(folder, "esc.yaml", 'name: "\\e[31mRED\\e[0m\\e]0;pwned\\a\\x9b2J"\n' + MODEL_YAML)]


def fifo_race(folder: Path, scale: int) -> list[str]:
    path = folder / "config.json"
    os.mkfifo(path)
    return ["check", str(path)]


def dp_huge(folder: Path, scale: int) -> list[str]:
    return ["simulate", str(EXAMPLES / "traces" / "sample.jsonl"), "--model", PRO, "--dp", "1000000"]


def max_wait_huge(folder: Path, scale: int) -> list[str]:
    return ["simulate", str(EXAMPLES / "traces" / "sample.jsonl"), "--model", PRO, "--device-memory", "h200",
            "--find-capacity", "--policy", "queue", "--max-wait", "1e300"]


def float_option(option: str, value: str) -> Callable[[Path, int], list[str]]:
    def build(folder: Path, scale: int) -> list[str]:
        return ["simulate", str(EXAMPLES / "traces" / "sample.jsonl"), "--model", PRO, option, value]
    return build


def plot_to(target: Callable[[Path], str]) -> Callable[[Path, int], list[str]]:
    def build(folder: Path, scale: int) -> list[str]:
        return ["simulate", str(EXAMPLES / "traces" / "sample.jsonl"), "--model", PRO, "--plot", target(folder)]
    return build


def resume_with(record_change: Callable[[dict], object] | None, *, raw: str | None = None,
                prefix_good: bool = False) -> Callable[[Path, int], list[str]]:
    """A --resume file for examples/sweeps/small.yaml whose one record (line 2, after the header
    of issue 24) is hostile."""
    def build(folder: Path, scale: int) -> list[str]:
        from csa_plan.planner.sweep.resume import ResumeIdentity
        from csa_plan.planner.sweep.spec import load_spec

        spec = load_spec(str(SMALL_SWEEP))
        record = {"schema": "csa-plan/sweep-point/v2", "spec_digest": spec.digest, "key": spec.points[0].key,
                  "devices": spec.points[0].devices, "requests": 200, "admitted": 200, "refused": 0, "refusals": {},
                  "wait_p99_ns": 0, "peak_bytes": 1, "mean_utilization": 0.1, "peak_utilization": 0.2,
                  "sustainable_rate_scale": 2.0, "at_least": False, "probes": 3, "sustainable_rate_per_s": 1.0,
                  "rate_per_device_per_s": 1.0, "feasible": True, "violations": [], "runtime": None}
        if raw is not None:
            line = raw.replace("DIGEST", spec.digest).replace("KEY", spec.points[0].key)
        else:
            record_change(record)
            line = json.dumps(record)
        header = ResumeIdentity.of(spec).header_line()
        return ["sweep", str(SMALL_SWEEP), "-j", "1", "--resume", _w(folder, "done.jsonl", header + "\n" + line + "\n")]
    return build


def sweep_spec(body: str, workload: str = "trace.csv", sparse_bytes: int = 0) -> Callable[[Path, int], list[str]]:
    def build(folder: Path, scale: int) -> list[str]:
        trace = folder / workload
        if sparse_bytes:
            with open(trace, "wb") as f:
                f.write(b"TIMESTAMP,ContextTokens,GeneratedTokens\n")
                f.truncate(sparse_bytes * scale)
        else:
            trace.write_bytes((EXAMPLES / "traces" / "azure_conv_sample_200.csv").read_bytes())
        return ["sweep", _w(folder, "s.yaml", f"workload: {workload}\n{body}"), "-j", "1"]
    return build


def zero_layers(folder: Path, scale: int) -> list[str]:
    cfg = json.loads((ROOT / "planner" / "presets" / "deepseek-v4-flash.json").read_text())
    cfg.update(num_hidden_layers=0, num_nextn_predict_layers=0, compress_ratios=[])
    return ["check", _w(folder, "m/config.json", json.dumps(cfg))[:-len("/config.json")]]


def dev_zero_symlink(folder: Path, scale: int) -> list[str]:
    (folder / "m").mkdir()
    os.symlink("/dev/zero", folder / "m" / "config.json")
    return ["check", str(folder / "m")]


def dev_zero_file(folder: Path, scale: int) -> list[str]:
    os.symlink("/dev/zero", folder / "zero.json")
    return ["check", str(folder / "zero.json")]


def unicode_digits_option(folder: Path, scale: int) -> list[str]:
    return ["check", PRO, "--batch", "\u0663"]  # ARABIC-INDIC DIGIT THREE


def unicode_digits_yaml(folder: Path, scale: int) -> list[str]:
    return ["check", _w(folder, "u.yaml", MODEL_YAML.replace("num_heads: 64", "num_heads: \u0666\u0664"))]


def sexagesimal(folder: Path, scale: int) -> list[str]:
    return ["check", _w(folder, "s.yaml", MODEL_YAML.replace("max_seq_len: 4096", "max_seq_len: 1:30"))]


def yaml_11_bool(folder: Path, scale: int) -> list[str]:
    return ["check", _w(folder, "b.yaml", MODEL_YAML.replace("compression_ratio: 128", "compression_ratio: 128\n    mtp: yes"))]


def duplicate_yaml(folder: Path, scale: int) -> list[str]:
    return ["check", _w(folder, "d.yaml", MODEL_YAML + "num_heads: 128\n")]


def duplicate_json(folder: Path, scale: int) -> list[str]:
    text = (ROOT / "planner" / "presets" / "deepseek-v4-flash.json").read_text()
    return ["check", _w(folder, "config.json", text.replace("{", '{"num_attention_heads": 1, ', 1))]


def json_nan(folder: Path, scale: int) -> list[str]:
    text = (ROOT / "planner" / "presets" / "deepseek-v4-flash.json").read_text()
    return ["check", _w(folder, "config.json", text.replace("{", '{"rope_theta_x": NaN, ', 1))]


def u2028_line(folder: Path, scale: int) -> list[str]:
    return ["check", _w(folder, "l.yaml", "name: 'a\u2028b'\nnum_heads: 64\nmax_seq_len: [\n")]


# -- the sizes of issue 18 that must now succeed in bounded memory (exit 0 or 3) ------------------

def short_rows_trace(rows_per_scale: int) -> Callable[[Path, int], list[str]]:
    """A trace of short rows (``arrival_s,prompt_tokens,output_tokens``, about 18 bytes each;
    the campaign's 5M rows were 110 MB): every request admitted (no device limit)."""
    def build(folder: Path, scale: int) -> list[str]:
        import numpy as np

        n = rows_per_scale * scale
        rng = np.random.default_rng(7)
        path = folder / "short.csv"
        with open(path, "w") as f:
            f.write("arrival_s,prompt_tokens,output_tokens\n")
            clock = 0.0
            for lo in range(0, n, 500_000):
                m = min(500_000, n - lo)
                t = clock + np.cumsum(rng.exponential(0.001, m))
                clock = float(t[-1])
                p, o = rng.integers(1, 8000, m), rng.integers(1, 1000, m)
                f.write("".join(f"{a:.3f},{b},{c}\n" for a, b, c in zip(t.tolist(), p.tolist(), o.tolist())))
        return ["simulate", str(path), "--model", PRO]
    return build


def many_rows_file(rows_per_scale: int) -> Callable[[Path, int], list[str]]:
    """``1,1,1`` rows (6 bytes each; the campaign's 87M rows were 498 MiB): beyond the trace's
    row limit at full size, refused from a line count before anything is parsed."""
    def build(folder: Path, scale: int) -> list[str]:
        from csa_plan.planner.workloads.workload import MAX_TRACE_REQUESTS

        path = folder / "rows.csv"
        n = rows_per_scale * scale if scale > 1 else MAX_TRACE_REQUESTS + 2  # just past the limit in the suite
        with open(path, "wb") as f:
            f.write(b"arrival_s,prompt_tokens,output_tokens\n")
            block = b"1,1,1\n" * 1_000_000
            for lo in range(0, n, 1_000_000):
                f.write(block[:6 * min(1_000_000, n - lo)])
        return ["simulate", str(path), "--model", PRO]
    return build


def generated_mix(requests_per_scale: int) -> Callable[[Path, int], list[str]]:
    """``examples/mixes/million-requests.yaml`` with more requests (the documented maximum,
    MAX_GENERATED_REQUESTS = 10,000,000, at full size)."""
    def build(folder: Path, scale: int) -> list[str]:
        text = (EXAMPLES / "mixes" / "million-requests.yaml").read_text()
        text = text.replace("requests: 1000000", f"requests: {requests_per_scale * scale}")
        return ["simulate", _w(folder, "mix.yaml", text), "--json"]
    return build


CASES: tuple[Case, ...] = (
    Case("yaml-alias-num_heads+state_edges+name", alias_model, (2,), "test_reproduction[yaml-alias-num_heads+state_edges+name]"),
    Case("yaml-alias-mix-memory.device", alias_mix("memory.device"), (2,), "test_reproduction[yaml-alias-mix-memory.device]"),
    Case("yaml-alias-mix-prompt.dist", alias_mix("prompt.dist"), (2,), "test_reproduction[yaml-alias-mix-prompt.dist]"),
    Case("yaml-990-deep", deep_yaml, (2,), "test_reproduction[yaml-990-deep]"),
    Case("json-990-deep", deep_json, (2,), "test_reproduction[json-990-deep]"),
    Case("json-100000-deep", deep_json_100k, (2,), "test_reproduction[json-100000-deep]"),
    Case("jsonl-100000-deep", deep_jsonl, (2,), "test_reproduction[jsonl-100000-deep]"),
    Case("fifo-instead-of-file", fifo_race, (2,), "test_fifo_swapped_in_never_blocks"),
    Case("onnx-metadata-5000-digits", onnx_metadata_digits, (2,), "test_reproduction[onnx-metadata-5000-digits]"),
    Case("onnx-name-5000-digit-layer", onnx_name_digits("9" * 5000), (2,), "test_reproduction[onnx-name-5000-digit-layer]"),
    Case("onnx-name-layer-2^70", onnx_name_digits(str(2 ** 70)), (2,), "test_reproduction[onnx-name-layer-2^70]"),
    Case("onnx-100MB-attribute", onnx_attribute_string, (2,), "test_reproduction[onnx-100MB-attribute]", 100),
    # 3 MB at full scale since issue 24: a 10 MB YAML file is now refused by its size (MAX_YAML_BYTES) before its
    # one oversized value is seen (issue 24's yaml reproductions, helpers/hostile_bounds.py)
    Case("yaml-10MB-cache_format", yaml_cache_format, (2,), "test_reproduction[yaml-10MB-cache_format]", 3),
    Case("kv-format-100000-chars", kv_format_option, (2,), "test_reproduction[kv-format-100000-chars]"),
    Case("onnx-domain-ansi-osc", onnx_domain_escape, (2,), "test_reproduction[onnx-domain-ansi-osc]"),
    Case("csv-header-ansi-osc", csv_header_escape, (2,), "test_reproduction[csv-header-ansi-osc]"),
    Case("onnx-100000-csa-nodes", onnx_many_nodes, (2,), "test_reproduction[onnx-100000-csa-nodes]"),
    Case("onnx-1.9GB-node-name", onnx_huge_name, (2,), "test_reproduction[onnx-1.9GB-node-name]", 113),
    Case("dp-1000000", dp_huge, (2,), "test_reproduction[dp-1000000]"),
    Case("max-wait-1e300", max_wait_huge, (2,), "test_reproduction[max-wait-1e300]"),
    Case("tpot-ms-nan", float_option("--tpot-ms", "nan"), (2,), "test_reproduction[tpot-ms-nan]"),
    Case("rate-scale-inf", float_option("--rate-scale", "inf"), (2,), "test_reproduction[rate-scale-inf]"),
    Case("plot-x.exe", plot_to(lambda d: str(d / "x.exe")), (2,), "test_reproduction[plot-x.exe]"),
    Case("plot-no-extension", plot_to(lambda d: str(d / "plot")), (2,), "test_reproduction[plot-no-extension]"),
    Case("plot-directory", plot_to(lambda d: str(d) + "/"), (2,), "test_reproduction[plot-directory]"),
    Case("plot-dir-named.png", plot_to(lambda d: (os.makedirs(d / "p.png"), str(d / "p.png"))[1]), (2,),
         "test_reproduction[plot-dir-named.png]"),
    Case("plot-missing-parent", plot_to(lambda d: str(d / "no" / "p.png")), (2,), "test_reproduction[plot-missing-parent]"),
    Case("plot-/dev/full", plot_to(lambda d: "/dev/full"), (2,), "test_reproduction[plot-/dev/full]"),
    Case("plot-empty", plot_to(lambda d: ""), (2,), "test_reproduction[plot-empty]"),
    Case("plot-symlink-to-/dev/full.png", plot_to(lambda d: (os.symlink("/dev/full", d / "full.png"), str(d / "full.png"))[1]),
         (2,), "test_reproduction[plot-symlink-to-/dev/full.png]"),
    Case("resume-devices-x", resume_with(lambda r: r.update(devices="x")), (2,), "test_reproduction[resume-devices-x]"),
    Case("resume-rate-1e308", resume_with(lambda r: r.update(sustainable_rate_per_s=1e308)), (2,),
         "test_reproduction[resume-rate-1e308]"),
    Case("resume-NaN", resume_with(None, raw='{"schema": "csa-plan/sweep-point/v2", "spec_digest": "DIGEST", '
                                          '"key": "KEY", "devices": NaN}'), (2,), "test_reproduction[resume-NaN]"),
    Case("resume-devices--5", resume_with(lambda r: r.update(devices=-5)), (2,), "test_reproduction[resume-devices--5]"),
    Case("resume-deep", resume_with(None, raw='{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"), (2,),
         "test_reproduction[resume-deep]"),
    Case("resume-5000-digits", resume_with(None, raw='{"schema": "csa-plan/sweep-point/v2", "spec_digest": "DIGEST", '
                                                  '"key": "KEY", "devices": 1' + "0" * 5000 + "}"), (2,),
         "test_reproduction[resume-5000-digits]"),
    Case("sweep-rel_tol-1e-17", sweep_spec("grid: {model: deepseek-v4-pro, device: h200}\nsearch: {rel_tol: 1.0e-17}\n"),
         (2,), "test_reproduction[sweep-rel_tol-1e-17]"),
    Case("sweep-6GB-sparse-workload", sweep_spec("grid: {model: deepseek-v4-pro, device: h200}\n", "big.csv",
                                                 sparse_bytes=600 << 20), (2,),
         "test_reproduction[sweep-6GB-sparse-workload]", 10),
    Case("sweep-dp-1000000", sweep_spec("grid: {model: deepseek-v4-pro, device: h200, dp: 1000000}\n"), (2,),
         "test_reproduction[sweep-dp-1000000]"),
    Case("zero-layer-model", zero_layers, (2,), "test_reproduction[zero-layer-model]"),
    Case("symlink-to-/dev/zero-in-dir", dev_zero_symlink, (2,), "test_reproduction[symlink-to-/dev/zero-in-dir]"),
    Case("symlink-to-/dev/zero", dev_zero_file, (2,), "test_reproduction[symlink-to-/dev/zero]"),
    Case("unicode-digits-option", unicode_digits_option, (2,), "test_reproduction[unicode-digits-option]"),
    Case("unicode-digits-yaml", unicode_digits_yaml, (2,), "test_reproduction[unicode-digits-yaml]"),
    Case("yaml-sexagesimal-1:30", sexagesimal, (2,), "test_reproduction[yaml-sexagesimal-1:30]"),
    Case("yaml-1.1-bool-yes", yaml_11_bool, (2,), "test_reproduction[yaml-1.1-bool-yes]"),
    Case("yaml-duplicate-key", duplicate_yaml, (2,), "test_reproduction[yaml-duplicate-key]"),
    Case("json-duplicate-key", duplicate_json, (2,), "test_reproduction[json-duplicate-key]"),
    Case("json-NaN", json_nan, (2,), "test_reproduction[json-NaN]"),
    Case("yaml-U+2028-line-numbers", u2028_line, (2,), "test_reproduction[yaml-U+2028-line-numbers]"),
    Case("yaml-name-ansi-osc", yaml_name_escape, (0, 3), "test_reproduction[yaml-name-ansi-osc]"),
    Case("trace-5M-short-rows", short_rows_trace(50_000), (0,), "test_reproduction[trace-5M-short-rows]", 100),
    Case("trace-87M-rows", many_rows_file(870_000), (2,), "test_reproduction[trace-87M-rows]", 100),
    Case("mix-10M-requests", generated_mix(100_000), (0, 3), "test_reproduction[mix-10M-requests]", 100),
)

# What the message of some cases must say (beyond exit code and one line).
EXPECT: dict[str, tuple[str, ...]] = {
    "yaml-alias-num_heads+state_edges+name": ("MAX_YAML_EXPANDED",),
    "yaml-alias-mix-memory.device": ("MAX_YAML_EXPANDED",),
    "yaml-alias-mix-prompt.dist": ("MAX_YAML_EXPANDED",),
    "yaml-990-deep": ("MAX_DEPTH",),
    "json-990-deep": ("MAX_DEPTH",),
    "json-100000-deep": ("MAX_DEPTH",),
    "onnx-metadata-5000-digits": ("metadata_props.max_seq_len", "too large"),
    "onnx-name-5000-digit-layer": ("MAX_INT_DIGITS",),
    "onnx-name-layer-2^70": ("MAX_INT_DIGITS",),
    "onnx-100MB-attribute": ("MAX_ONNX_STRING_BYTES",),
    "yaml-10MB-cache_format": ("MAX_STRING_CHARS",),
    "trace-87M-rows": ("more than 10,000,000 rows",),
    "kv-format-100000-chars": ("--kv-format",),
    "onnx-domain-ansi-osc": ("\\x1b",),
    "onnx-100000-csa-nodes": ("MAX_LAYERS",),
    "onnx-1.9GB-node-name": ("node.name", "MAX_ONNX_STRING_BYTES"),
    "dp-1000000": ("--dp", "MAX_DP"),
    "max-wait-1e300": ("--max-wait",),
    "plot-x.exe": ("--plot", ".exe"),
    "plot-no-extension": ("--plot", "no extension"),
    "plot-directory": ("--plot",),
    "plot-dir-named.png": ("--plot", "a directory"),
    "plot-missing-parent": ("--plot", "does not exist"),
    "plot-/dev/full": ("--plot", "no extension"),
    "plot-symlink-to-/dev/full.png": ("--plot", "character device"),
    "plot-empty": ("--plot", "empty"),
    "resume-devices-x": ("done.jsonl:2", "devices"),
    "resume-rate-1e308": ("done.jsonl:2", "sustainable_rate_per_s"),
    "resume-NaN": ("done.jsonl:2", "NaN"),
    "resume-devices--5": ("done.jsonl:2", "devices"),
    "resume-deep": ("done.jsonl:2",),
    "resume-5000-digits": ("done.jsonl:2", "devices", "MAX_INT_DIGITS"),
    "sweep-rel_tol-1e-17": ("search.rel_tol", "at least"),
    "sweep-6GB-sparse-workload": ("MAX_TRACE_BYTES",),
    "sweep-dp-1000000": ("grid.dp", "MAX_DP"),
    "zero-layer-model": ("at least one layer",),
    "symlink-to-/dev/zero-in-dir": ("config.json", "character device"),
    "symlink-to-/dev/zero": ("character device",),
    "unicode-digits-option": ("--batch", "not an integer"),
    "unicode-digits-yaml": ("num_heads", "expected a non-negative integer"),
    "yaml-sexagesimal-1:30": ("max_seq_len", "'1:30'"),
    "yaml-1.1-bool-yes": ("mtp", "'yes'"),
    "yaml-duplicate-key": ("num_heads", "duplicate key", "line 7"),
    "json-duplicate-key": ("num_attention_heads", "duplicate key"),
    "json-NaN": ("NaN",),
    "yaml-U+2028-line-numbers": ("line 4",),
}


def control_bytes(text: str) -> list[str]:
    """Characters a terminal would act on: below 0x20 except newline and tab, DEL, C1."""
    return sorted({repr(c) for c in text if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0})
