"""``--from-log FILE``: a real vLLM or SGLang start-up log, read for its memory lines, checked against the
command (model, release, GPU, TP) and turned into one calibration step.

What the log implies is set beside what csa-plan predicts from the flags, term by term. The difference
is taken at the log's own flags (its ``non-default args``) and kept fixed when the command changes
max_num_batched_tokens or the capture sizes: the terms that read them rescale, the calibration does not.
At the log's flags the state pool is the one the log printed (its token count picks the bytes within the
0.01 GiB its KV line is rounded to; a count no byte count there gives is bad input, never replaced).

The log is read whole and checked whole (issue 47): through ``planner/files.py`` (a FIFO or a device is
said to be one, reads capped at ``MAX_LOG_BYTES``); each pattern tried once per line at its marker's
first place (linear); one start-up (a second ``non-default args`` / ``server_args`` is bad input), every
line of a kind saying what the first said; every number through the checked readers; its model (every
mention, any model), release, card, tp / dp / pp as the engine printed them and its utilization (either
line) compared with the command, each mismatch bad input naming the line.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from csa_plan.planner.errors import I63_LIMIT, BadInput
from csa_plan.planner.record import record
from csa_plan.planner.text import excerpt
from csa_plan.planner.units import GiB
from csa_plan.planner.values import parse_float_text, parse_int_text

MAX_LOG_BYTES = 64 << 20      # a start-up log is a few MB; larger is not one
MAX_LINE_CHARS = 1 << 16      # longer lines are skipped unless they hold a line csa-plan reads (then bad input)
MAX_GIB = 1 << 20             # a GiB / GB figure of one device beyond 1 PiB is not a device's
MAX_PARALLEL = 1 << 20        # tp, dp, pp as printed

# The reserve steps vLLM allocates while it builds the model, so inside its "Model loading took X GiB"
# (DeviceMemoryProfiler around load_model): the budget's step labels they start with. The rest of the
# non-KV memory (profile-run peak, non-torch, CUDA graphs) is measured after the load.
MODEL_BUILT_LABELS = ("top-k index buffer", "RoPE", "hc_attn_fn_broadcast", "MTP hidden buffer")


@record
class StartupLog:
    """The lines of one start-up log csa-plan reads (None: not in the log); ``lines``: where each was read."""

    path: str
    engine: str                    # "vllm" | "sglang"
    version: str | None            # "0.25.0"
    model: str | None              # the model path or id it names (every mention agrees, or it is bad input)
    capability: tuple[int, int] | None
    tp: int | None                 # as the engine printed it: vLLM per DP rank, SGLang over every rank
    args: dict[str, Any]           # from vLLM's non-default args: the flags the log ran with
    model_loading_gib: float | None = None      # vLLM "Model loading took X GiB"
    util: float | None = None                   # vLLM "--gpu-memory-utilization=u is equivalent to ... u_eq"
    util_eq: float | None = None
    graph_counts: str | None = None             # vLLM "Profiling CUDA graph memory: ..."
    kv_gib: float | None = None                 # vLLM "Available KV cache memory: X GiB"
    kv_tokens: int | None = None                # vLLM "GPU KV cache size: N tokens"; SGLang max_total_num_tokens
    total_gib: float | None = None              # vLLM "Free memory on device (free/total GiB)"
    actual: tuple[float, float, float] | None = None  # vLLM "Actual usage is W ... A ... G GiB" (after capture)
    actual_split: tuple[float, float] | None = None   # the other wording: weight and non-torch memory apart
    avail_gb: float | None = None               # SGLang "Load weight end ... avail mem=X GB"
    usage_gb: float | None = None               # SGLang "mem usage=Y GB"
    dp: int | None = None                       # data_parallel_size / dp_size as printed
    pp: int | None = None                       # pipeline_parallel_size / pp_size as printed
    architecture: str | None = None             # "Resolved architecture: X" / architectures=['X']
    util_read: float | None = None              # the utilization the log ran at (either line; SGLang's fraction)
    lines: dict[str, int] | None = None         # field -> 1-based line it was read from
    models: tuple[tuple[int, str], ...] = ()    # (line, name) of every place the log names its model


# Each kind: (markers, pattern). A line is searched for the first occurrence of each marker (str.find,
# linear), where the marker must not continue a word; the pattern is then matched at that position only,
# so no pattern is tried at more than one place of a line (the model-name pattern tried every
# 'model_path=' of a line and backtracked over the rest: quadratic). Captured numbers are read by the
# checked readers (planner/values.py), never by int()/float() of whatever matched.
_NUM = r"(\S{1,80}?)"
_KINDS: dict[str, tuple[tuple[str, ...], re.Pattern[str]]] = {
    "vllm_version": (("V1 LLM engine (v", "vLLM API server version ", "█  version "),
                     re.compile(r"(?:V1 LLM engine \(v|vLLM API server version |█  version )([^\s)]{1,80})")),
    "sglang_version": (("sglang version", "sglang==", "sglang v0.", "SGLang version", "SGLang v0."),
                       re.compile(r"(?i:sglang)(?:\s+version|==|\s+v(?=0\.))\s*([^\s,)]{1,80})")),
    "capability": (("Device capability ", "device capability "), re.compile(r"[Dd]evice capability ([^\s.,;:]{1,20})\.([^\s.,;:]{1,20})")),
    "tp": (("tensor_parallel_size=", "'tensor_parallel_size': ", "tp_size="),
           re.compile(r"(?:tensor_parallel_size=|'tensor_parallel_size': |tp_size=)([^\s,)}]{1,80})")),
    "dp": (("data_parallel_size=", "'data_parallel_size': ", "dp_size="),
           re.compile(r"(?:data_parallel_size=|'data_parallel_size': |dp_size=)([^\s,)}]{1,80})")),
    "pp": (("pipeline_parallel_size=", "'pipeline_parallel_size': ", "pp_size="),
           re.compile(r"(?:pipeline_parallel_size=|'pipeline_parallel_size': |pp_size=)([^\s,)}]{1,80})")),
    "loading": (("Model loading took ",), re.compile(r"Model loading took " + _NUM + r" GiB")),
    "util": (("--gpu-memory-utilization=",),
             re.compile(r"--gpu-memory-utilization=" + _NUM + r" is equivalent to --gpu-memory-utilization=([^\s,]{1,80})(?:\s|$)")),
    "graphs": (("Profiling CUDA graph memory: ",), re.compile(r"Profiling CUDA graph memory: (.{0,4096})$")),
    "kv": (("Available KV cache memory: ",), re.compile(r"Available KV cache memory: " + _NUM + r" GiB")),
    "tokens": (("GPU KV cache size: ",), re.compile(r"GPU KV cache size: " + _NUM + r" tokens")),
    "device": (("Free memory on device (",), re.compile(r"Free memory on device \(([^\s/]{1,80})/([^\s)]{1,80}) GiB\)")),
    # vLLM prints its after-capture line in two wordings: consumed memory (weights + non-torch) as one figure
    # (groups 1-3), or weight and non-torch memory apart (groups 1 and 4-6); either is read, neither skipped
    "actual": (("Actual usage is ",),
               re.compile(r"Actual usage is " + _NUM + r" GiB for (?:consumed memory \(weights \+ non-torch\), "
                          + _NUM + r" GiB for peak activation, and " + _NUM + r" GiB for CUDAGraph memory|weight, "
                          + _NUM + r" GiB for peak activation, " + _NUM + r" GiB for non-torch memory, and "
                          + _NUM + r" GiB for CUDAGraph memory)")),
    "sglang_load": (("Load weight end.",),
                    re.compile(r"Load weight end\.[^\n]{0,4096}?avail mem=" + _NUM + r" GB, mem usage=" + _NUM + r" GB")),
    "sglang_tokens": (("max_total_num_tokens=",), re.compile(r"max_total_num_tokens=([^\s,)]{1,80})")),
    "sglang_fraction": (("mem_fraction_static=",), re.compile(r"mem_fraction_static=([^\s,)]{1,80})")),
    "args": (("non-default args: ",), re.compile(r"non-default args: (\{.*\})\s*$")),
    "server_args": (("server_args=ServerArgs(",), re.compile(r"server_args=ServerArgs\(")),
    "architecture": (("Resolved architecture: ", "architectures=['", "'architectures': ['"),
                     re.compile(r"(?:Resolved architecture: |architectures=\['|'architectures': \[')([A-Za-z0-9_]{1,200})")),
}
# Where a log names the model it loads (the first of each per line). Any name: a Llama log names Llama.
_MODEL_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("'model': '", re.compile(r"'model': '([^']{1,4096})'")),
    ("'model_tag': '", re.compile(r"'model_tag': '([^']{1,4096})'")),
    ("model_path='", re.compile(r"model_path='([^']{1,4096})'")),
    ("model_path=", re.compile(r"model_path=([^\s',)]{1,4096})")),
    ("config: model='", re.compile(r"config: model='([^']{1,4096})'")),
    ("Starting to load model ", re.compile(r"Starting to load model ([^\s']{1,4096}?)(?:\.\.\.)?(?:\s|$)")),
    ("model=", re.compile(r"model=([^\s',)]{1,4096})")),
)
_BANNER_MODEL = re.compile(r"█\s{1,64}model\s{1,64}(\S{1,4096})\s*$")
_START_UP = ("args", "server_args")   # printed once per start-up
_VLLM_KINDS = ("loading", "kv", "tokens", "util", "device", "actual")
_SGLANG_KINDS = ("sglang_load", "sglang_tokens")
_LABEL = {"vllm_version": "vLLM version", "sglang_version": "SGLang version", "capability": "device capability",
          "tp": "tensor parallel size", "dp": "data parallel size", "pp": "pipeline parallel size",
          "loading": "Model loading took", "util": "--gpu-memory-utilization ... is equivalent to",
          "graphs": "Profiling CUDA graph memory", "kv": "Available KV cache memory",
          "tokens": "GPU KV cache size", "device": "Free memory on device", "actual": "Actual usage is",
          "sglang_load": "Load weight end", "sglang_tokens": "max_total_num_tokens",
          "sglang_fraction": "mem_fraction_static", "args": "non-default args", "server_args": "server_args",
          "architecture": "architecture", "model": "model"}
ARG_KEYS = ("max_num_batched_tokens", "max_num_seqs", "gpu_memory_utilization", "tensor_parallel_size",
            "data_parallel_size", "pipeline_parallel_size", "max_cudagraph_capture_size", "max_model_len",
            "num_speculative_tokens")
_FLOAT_ARGS = ("gpu_memory_utilization",)
_WORD = re.compile(r"\w")


def _find(line: str, marker: str) -> int:
    """The first place ``marker`` starts in ``line`` not continuing a word (``dp_size=`` is not
    ``attn_dp_size=``); -1 when none within 64 tries."""
    start = 0
    for _ in range(64):
        i = line.find(marker, start)
        if i < 0:
            return -1
        if i == 0 or not _WORD.match(marker[0]) or not _WORD.match(line[i - 1]):
            return i
        start = i + 1
    return -1


def _int(where: str, label: str, text: str, below: int = I63_LIMIT) -> int:
    return parse_int_text(where, label, text, below=below)


def _gib(where: str, label: str, text: str, *, signed: bool = False) -> float:
    return parse_float_text(where, label, text, low=-MAX_GIB if signed else 0.0, high=MAX_GIB)


def _fraction(where: str, label: str, text: str) -> float:
    return parse_float_text(where, label, text, low=0.0, high=1.0, low_open=True)


def _tokens(where: str, label: str, text: str) -> int:
    """A token count as vLLM prints it: plain digits or groups of three (1,993,100)."""
    if "," in text:
        if not re.fullmatch(r"[0-9]{1,3}(?:,[0-9]{3}){1,6}", text):
            raise BadInput(where, label, f"expected a count such as 1,993,100, got {excerpt(text)}")
        text = text.replace(",", "")
    return _int(where, label, text)


def _args(where: str, text: str) -> dict[str, Any]:
    """The flags csa-plan reads from vLLM's ``non-default args`` dict (a Python repr: read by pattern,
    never evaluated); each value by the checked readers."""
    out: dict[str, Any] = {}
    for key in ARG_KEYS:
        i = text.find(f"'{key}': ")
        if i < 0:
            continue
        m = re.compile(r"'\w+': ([^,}\s]{1,80})").match(text, i)
        if m is None:
            raise BadInput(where, f"non-default args '{key}'", f"expected a number, got {excerpt(text[i:i + 80])}")
        if key in _FLOAT_ARGS:
            out[key] = _fraction(where, f"non-default args '{key}'", m.group(1))
        else:
            out[key] = _int(where, f"non-default args '{key}'", m.group(1), below=1 << 40)
    return out


def _lines(data: bytes) -> Any:
    """(number, line) of the decoded log, one at a time (the text is never copied whole twice)."""
    text = data.decode("utf-8", errors="replace")
    start, n = 0, 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        n += 1
        yield n, text[start:end].rstrip("\r")
        start = end + 1


_ANY_MARKER = tuple({m for markers, _ in _KINDS.values() for m in markers} | {m for m, _ in _MODEL_KINDS})


def read_startup_log(path: str) -> StartupLog:
    """The log's memory lines, read whole through the one input boundary and checked whole: one start-up,
    every line of a kind saying the same; bad input naming the file and line otherwise."""
    from csa_plan.planner.files import read_bytes

    try:
        data = read_bytes(path, MAX_LOG_BYTES, "MAX_LOG_BYTES")
    except BadInput as e:  # what the file is (a FIFO, a character device ...), said for the option
        raise BadInput(e.source, "--from-log", e.problem) from None
    found: dict[str, tuple[int, tuple[str, ...]]] = {}   # kind -> (line, groups) of its first line
    models: list[tuple[int, str]] = []
    ranks: dict[str, dict[int, str | None]] = {}           # per-node kind -> {line: the worker rank that printed it}
    node_kv: list[tuple[int, tuple[str, ...]]] = []         # every node's 'Available KV cache memory' line
    for n, line in _lines(data):
        where = f"{path}:{n}"
        if len(line) > MAX_LINE_CHARS:
            hit = next((m for m in _ANY_MARKER if m in line), None)
            if hit is not None:
                raise BadInput(where, "--from-log", f"a line of {len(line):,} characters (more than "
                               f"{MAX_LINE_CHARS:,}, MAX_LINE_CHARS) holding {excerpt(hit.strip())}: not an engine's line")
            continue
        for name, (markers, pat) in _KINDS.items():
            m = None
            for marker in markers:
                i = _find(line, marker)
                if i >= 0:
                    m = pat.match(line, i)
                    if m is not None:
                        break
            if m is None:
                if name not in ("graphs", "args", "server_args", "architecture", "sglang_version") and any(
                        _find(line, mk) >= 0 for mk in markers):
                    raise BadInput(where, _LABEL[name], f"cannot read {excerpt(line.strip(), 120)}")
                continue
            groups = m.groups()
            if name in found:
                first, before = found[name]
                if name in _START_UP:
                    raise BadInput(where, "--from-log", f"a second start-up ('{_LABEL[name]}' again; the first at "
                                   f"line {first:,}): give the log of one start-up")
                if groups != before:
                    rank = _rank_tag(line)
                    if name in _PER_NODE and rank is not None and rank not in ranks.setdefault(name, {first: None}).values():
                        # another node's worker (vLLM logs these once per node): its own figure, not a contradiction
                        ranks[name][n] = rank
                        if name == "kv":  # the engine sizes every worker's pool from the smallest
                            node_kv.append((n, groups))
                        continue
                    raise BadInput(where, _LABEL[name], f"{excerpt(' '.join(x for x in groups if x), 80)} here, "
                                   f"{excerpt(' '.join(x for x in before if x), 80)} at line {first:,}: two start-ups or a "
                                   "contradiction; give the log of one start-up")
                continue
            found[name] = (n, groups)
            if name in _PER_NODE:
                ranks.setdefault(name, {})[n] = _rank_tag(line)
                if name == "kv":
                    node_kv.append((n, groups))
        for marker, pat in _MODEL_KINDS:
            i = _find(line, marker)
            if i >= 0 and (m := pat.match(line, i)) is not None:
                models.append((n, m.group(1)))
                break
        else:
            if "█" in line and (m := _BANNER_MODEL.search(line)) is not None:
                models.append((n, m.group(1)))
    if len(node_kv) > 1:  # several nodes: the smallest figure sizes the pool (read by the checked readers)
        values = [(_gib(f"{path}:{n}", _LABEL["kv"], g[0], signed=True), n, g) for n, g in node_kv]
        _, n, g = min(values)
        found["kv"] = (n, g)
    return _build(path, found, models)


_PER_NODE = ("kv", "loading", "util", "device", "actual", "capability")  # vLLM: info_once(scope="local")
_RANK = re.compile(r"\((Worker_[A-Za-z0-9_]{1,40})(?: pid=\d{1,12})?\)")


def _rank_tag(line: str) -> str | None:
    """The worker rank a vLLM line's prefix names (``(Worker_TP8 pid=1) ...`` -> ``Worker_TP8``), or None."""
    m = _RANK.match(line.lstrip()[:80])
    return m.group(1) if m else None


def _build(path: str, found: dict[str, tuple[int, tuple[str, ...]]], models: list[tuple[int, str]]) -> StartupLog:
    at = lambda name: f"{path}:{found[name][0]}"  # noqa: E731
    g = lambda name, i=0: found[name][1][i] if name in found else None  # noqa: E731
    vllm = any(n in found for n in _VLLM_KINDS)
    sglang = any(n in found for n in _SGLANG_KINDS)
    if vllm == sglang:
        raise BadInput(path, "--from-log", "not a vLLM or SGLang start-up log csa-plan can read: it needs vLLM's "
                       "'Available KV cache memory' / 'GPU KV cache size' / 'Actual usage' lines or SGLang's 'Load weight end' / "
                       "'max_total_num_tokens=' lines" + (" (it has both)" if vllm else ""))
    engine = "vllm" if vllm else "sglang"
    if engine == "vllm" and "server_args" in found:
        raise BadInput(at("server_args"), "--from-log", "SGLang's server_args in a vLLM start-up log")
    if engine == "sglang" and "args" in found:
        raise BadInput(at("args"), "--from-log", "vLLM's non-default args in an SGLang start-up log")
    lines = {name: n for name, (n, _) in found.items()}
    version = None
    vkind = "vllm_version" if vllm else "sglang_version"
    if vkind in found:
        version = g(vkind)
        if not re.fullmatch(r"[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,6}[0-9A-Za-z.+_-]{0,60}", version):
            raise BadInput(at(vkind), _LABEL[vkind], f"expected a release such as 0.25.0, got {excerpt(version)}")
        version = re.match(r"[0-9]+\.[0-9]+\.[0-9]+", version).group(0)
    model = None
    for n, name in models:
        if model is None:
            model, lines["model"] = name, n
    cap = None
    if "capability" in found:
        cap = (_int(at("capability"), "device capability", g("capability"), below=1000),
               _int(at("capability"), "device capability", g("capability", 1), below=1000))
    args: dict[str, Any] = _args(at("args"), g("args")) if "args" in found else {}
    par = {}
    for name, key in (("tp", "tensor_parallel_size"), ("dp", "data_parallel_size"), ("pp", "pipeline_parallel_size")):
        value = _int(at(name), _LABEL[name], g(name), below=MAX_PARALLEL) if name in found else None
        if value is not None and key in args and args[key] != value:
            raise BadInput(at(name), _LABEL[name], f"{value} here, {args[key]} in the non-default args at line "
                           f"{lines['args']:,}: a contradiction")
        if value is None and key in args:
            value, lines[name] = args[key], lines["args"]
        if value is None and engine == "vllm" and "args" in found:
            value, lines[name] = 1, lines["args"]   # not among the non-default args: vLLM's default, 1
        if value is not None and value < 1:
            raise BadInput(f"{path}:{lines[name]}", _LABEL[name], f"must be at least 1, got {value}")
        par[name] = value
    arch = g("architecture")
    common = dict(path=path, version=version, model=model, capability=cap, tp=par["tp"], dp=par["dp"], pp=par["pp"],
                  args=args, architecture=arch, lines=lines, models=tuple(models))
    if vllm:
        util = util_eq = None
        if "util" in found:
            util = _fraction(at("util"), "--gpu-memory-utilization", g("util"))
            util_eq = parse_float_text(at("util"), "--gpu-memory-utilization (equivalent)", g("util", 1).rstrip("."),
                                       low=-1.0, high=1.0)
        util_read = util
        if "gpu_memory_utilization" in args:
            if util is not None and abs(util - args["gpu_memory_utilization"]) > 5e-5:
                raise BadInput(at("util"), "--gpu-memory-utilization", f"{util} here, {args['gpu_memory_utilization']} in "
                               f"the non-default args at line {lines['args']:,}: a contradiction")
            util_read = args["gpu_memory_utilization"]
            lines.setdefault("util", lines["args"])
        kv_gib = _gib(at("kv"), _LABEL["kv"], g("kv"), signed=True) if "kv" in found else None
        if kv_gib is not None and kv_gib <= 0:
            raise BadInput(at("kv"), _LABEL["kv"], f"{g('kv')} GiB: no memory was left for the KV cache, so vLLM "
                           "refused to start with these flags (there is no pool to calibrate on)")
        total = None
        if "device" in found:
            free = _gib(at("device"), "Free memory on device", g("device"))
            total = _gib(at("device"), "Free memory on device", g("device", 1))
            if free > total:
                raise BadInput(at("device"), "Free memory on device", f"{free} GiB free of {total} GiB")
        actual = actual_split = None
        if "actual" in found:
            parts = found["actual"][1]
            if parts[1] is not None:  # consumed memory (weights + non-torch), peak activation, CUDA graphs
                actual = tuple(_gib(at("actual"), _LABEL["actual"], x) for x in parts[:3])
            else:  # weight, peak activation, non-torch memory, CUDA graphs: each its own term
                w, peak, nt, graphs = (_gib(at("actual"), _LABEL["actual"], x, signed=True)
                                       for x in (parts[0], *parts[3:]))
                actual, actual_split = (round(w + nt, 2), peak, graphs), (w, nt)
        return StartupLog(engine="vllm", **common,
                          model_loading_gib=_gib(at("loading"), _LABEL["loading"], g("loading")) if "loading" in found else None,
                          util=util, util_eq=util_eq, util_read=util_read, graph_counts=g("graphs"), kv_gib=kv_gib,
                          kv_tokens=_tokens(at("tokens"), _LABEL["tokens"], g("tokens")) if "tokens" in found else None,
                          total_gib=total, actual=actual, actual_split=actual_split)
    fraction = _fraction(at("sglang_fraction"), "mem_fraction_static", g("sglang_fraction")) \
        if "sglang_fraction" in found else None
    return StartupLog(engine="sglang", **common, util_read=fraction,
                      avail_gb=_gib(at("sglang_load"), "Load weight end avail mem", g("sglang_load")) if "sglang_load" in found else None,
                      usage_gb=_gib(at("sglang_load"), "Load weight end mem usage", g("sglang_load", 1)) if "sglang_load" in found else None,
                      kv_tokens=_int(at("sglang_tokens"), "max_total_num_tokens", g("sglang_tokens")) if "sglang_tokens" in found else None)


def _model_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower().rsplit("/", 1)[-1].replace("models--deepseek-ai--", ""))


def check_matches(log: StartupLog, *, model: str, engine: str, capability: tuple[int, int], card: str,
                  tp: int, dp: int = 1, pp: int = 1, card_bytes: int | None = None,
                  utilization: tuple[str, float | None, float | None] | None = None) -> None:
    """Bad input naming the first thing the log and the command disagree on, and the log's line.

    ``tp``, ``dp``, ``pp``: the command's. vLLM prints ``tensor_parallel_size`` per DP rank (it is the
    command's tp); SGLang's ``tp_size`` spans every rank (the command's tp x dp). ``utilization``:
    (option, the command's value or None, the engine's default or None when the card decides it)."""
    lines = log.lines or {}
    at = lambda name: f"{log.path}:{lines[name]}" if name in lines else log.path  # noqa: E731
    family, _, release = engine.partition("-")
    if family != log.engine:
        raise BadInput(log.path, "--from-log", f"engine: the log is {log.engine}'s, the command names {engine}")
    if log.version is not None and not log.version.startswith(release + "."):
        if not (release.count(".") == 2 and log.version == release):
            raise BadInput(at(f"{log.engine}_version"), "--from-log", f"release: the log is {log.engine} "
                           f"{log.version}, the command names {engine}")
    if log.architecture is not None and "deepseek" not in log.architecture.lower():
        raise BadInput(at("architecture"), "--from-log", f"model: the log's architecture is {excerpt(log.architecture)}, "
                       f"not DeepSeek's ({excerpt(model)})")
    want = _model_key(model)
    deepseek_arch = log.architecture is not None  # checked above: a DeepSeek architecture
    for line, name in log.models:
        got = re.sub(r"[^a-z0-9]", "", name.lower())
        if want in got:
            continue
        if "deepseek" not in got and deepseek_arch:
            continue  # a local path the name does not say (/data/dsv4): the architecture line does
        why = "" if "deepseek" in got else " (and no DeepSeek architecture line says it is this model)"
        raise BadInput(f"{log.path}:{line}", "--from-log", f"model: the log loads {excerpt(name)}, the command "
                       f"names {excerpt(model)}{why}")
    if log.capability is not None and log.capability != capability:
        raise BadInput(at("capability"), "--from-log", f"GPU: the log's device is sm_{log.capability[0]}"
                       f"{log.capability[1]}, the command's {card} is sm_{capability[0]}{capability[1]}")
    if log.total_gib is not None and card_bytes is not None and abs(log.total_gib - card_bytes / GiB) > 0.01:
        raise BadInput(at("device"), "--from-log", f"GPU memory: the log's device has {log.total_gib} GiB, the "
                       f"command's {card} {card_bytes / GiB:.2f} GiB")
    if card_bytes is not None:  # every memory figure of one device fits that device
        card_gib = card_bytes / GiB
        figures = (("loading", "Model loading took", log.model_loading_gib), ("kv", "Available KV cache memory", log.kv_gib),
                   ("sglang_load", "Load weight end ... avail mem", log.avail_gb),
                   ("sglang_load", "Load weight end ... mem usage", log.usage_gb),
                   *((("actual", "Actual usage is", x) for x in log.actual) if log.actual else ()))
        for name, label, value in figures:
            if value is not None and value > card_gib + 0.01:
                raise BadInput(at(name), label, f"{value:g} GiB is more than the command's {card} holds "
                               f"({card_gib:.2f} GiB): not this card's log")
    if log.engine == "vllm":
        pairs = (("tp", log.tp, tp, "tensor_parallel_size", "--tp"), ("dp", log.dp, dp, "data_parallel_size", "--dp"),
                 ("pp", log.pp, pp, "pipeline_parallel_size", "--pp"))
    else:
        pairs = (("tp", log.tp, tp * dp, "tp_size", "--tp x --dp"), ("dp", log.dp, dp, "dp_size", "--dp"),
                 ("pp", log.pp, pp, "pp_size", "--pp"))
    for name, got_n, want_n, printed, option in pairs:
        if got_n is not None and got_n != want_n:
            what = {"tp": "tensor parallel", "dp": "data parallel", "pp": "pipeline parallel"}[name]
            raise BadInput(at(name), "--from-log", f"{what}: the log ran {printed} {got_n}, the command's "
                           f"{option} is {want_n}")
    if utilization is not None and log.util_read is not None:
        option, given, default = utilization
        if given is None and default is None:
            raise BadInput(at("util" if log.engine == "vllm" else "sglang_fraction"), "--from-log",
                           f"{option.lstrip('-')}: the log ran {log.util_read:g}; the command leaves it to the "
                           f"engine's default for the card: give {option} {log.util_read:g}")
        value = default if given is None else given
        if abs(value - log.util_read) > 5e-5:
            shown = f"{value:g}" + (" (the default)" if given is None else "")
            raise BadInput(at("util" if log.engine == "vllm" else "sglang_fraction"), "--from-log",
                           f"{option.lstrip('-')}: the log ran {log.util_read:g}, the command {shown} (the share is "
                           f"not a flag to rescale: give {option} {log.util_read:g})")


@record
class Calibration:
    """The log's implied terms beside csa-plan's, and the one step that makes the pool the log's."""

    source: str
    offset_bytes: int                   # predicted KV - implied KV, at the log's flags
    implied_kv_bytes: int
    terms: tuple[tuple[str, int | None, int], ...]  # (term, implied bytes or None: not in the log, predicted)
    log_flags: dict[str, Any]
    notes: tuple[str, ...] = ()         # what the reading did not take word for word (another length)

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "offset_bytes": self.offset_bytes, "implied_kv_bytes": self.implied_kv_bytes,
                "log_flags": self.log_flags, "notes": list(self.notes),
                "terms": [{"term": t, "implied_bytes": i, "predicted_bytes": p} for t, i, p in self.terms]}


def _pool_bytes_for(tokens_at: Callable[[int], int], tokens: int, lo: int, hi: int) -> int | None:
    """The least KV memory in [lo, hi] whose pool holds ``tokens`` (pool tokens grow with the bytes)."""
    if tokens_at(hi) < tokens:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if tokens_at(mid) >= tokens:
            hi = mid
        else:
            lo = mid + 1
    return lo if tokens_at(lo) == tokens else None


def calibrate(log: StartupLog, at_log: Any, tokens_at: Callable[[int], int]) -> Calibration:
    """``at_log``: csa-plan's budget at the log's flags; ``tokens_at(kv)``: the engine's pool tokens."""
    s = at_log.binding
    card = at_log.card_bytes
    by = lambda *prefixes: sum(x.bytes for x in s.steps if x.label.startswith(prefixes))  # noqa: E731
    model_built = MODEL_BUILT_LABELS
    graphs = by("CUDA graph")
    predicted_model = s.weights_bytes + by(*model_built)
    predicted_rest = s.reserve_bytes - by(*model_built) - graphs
    if log.engine == "vllm":
        if log.kv_gib is None:
            raise BadInput(log.path, "--from-log", "no 'Available KV cache memory: X GiB' line to calibrate on")
        lo, hi = int((log.kv_gib - 0.005) * GiB), int((log.kv_gib + 0.005) * GiB)
        kv = _pool_bytes_for(tokens_at, log.kv_tokens, lo, hi) if log.kv_tokens is not None else None
        if log.kv_tokens is not None and kv is None:
            lines = log.lines or {}
            raise BadInput(f"{log.path}:{lines.get('tokens', '?')}", "GPU KV cache size",
                           f"{log.kv_tokens:,} tokens is no pool {log.engine} {log.version or ''} gives this command from "
                           f"{log.kv_gib} GiB (line {lines.get('kv', '?')}): the log is not of this model and flags")
        kv = kv if kv is not None else int(log.kv_gib * GiB)
        g = round((log.util - log.util_eq) * card) if log.util is not None and log.util_eq is not None else None
        m = int(log.model_loading_gib * GiB) if log.model_loading_gib is not None else None
        rest = s.usable_bytes - kv - (g or 0) - (m or 0) if g is not None and m is not None else None
        if log.actual is not None:  # after capture: consumed (weights + non-torch), peak activation, graphs
            w_nt, peak, actual_graphs = (int(x * GiB) for x in log.actual)
            nt_pred = by("non-torch memory")
            if log.actual_split is not None:  # "... GiB for weight, ... GiB for non-torch memory": each its own term
                w, nt = (int(x * GiB) for x in log.actual_split)
                apart = (("weights ('Actual usage ... for weight')", w, predicted_model),
                         ("non-torch memory ('Actual usage ... for non-torch memory')", nt, nt_pred))
            else:
                apart = (("weights + non-torch ('Actual usage ... consumed memory')", w_nt, predicted_model + nt_pred),)
            extra = (*apart,
                     ("peak activation ('Actual usage ... peak activation')", peak, predicted_rest - nt_pred),
                     ("CUDA graphs as captured ('Actual usage ... CUDAGraph memory')", actual_graphs, graphs))
        else:
            extra = ()
        terms = (("weights + buffers built with the model ('Model loading took')", m, predicted_model),
                 ("profile-run peak + non-torch (what is left)", rest, predicted_rest),
                 ("CUDA graph estimate ((u - u_eq) x total)", g, graphs),
                 ("KV cache memory ('Available KV cache memory')", kv, s.kv_memory_bytes), *extra)
    else:
        if log.kv_tokens is None:
            raise BadInput(log.path, "--from-log", "no 'max_total_num_tokens=' line to calibrate on")
        kv = _pool_bytes_for(tokens_at, log.kv_tokens, 1, max(s.usable_bytes, 1))
        if kv is None:
            raise BadInput(log.path, "--from-log", f"max_total_num_tokens={log.kv_tokens} is no pool size "
                           "sglang-0.5.23's rules give for this command")
        pre = (card - int((log.avail_gb + log.usage_gb) * GiB)) if log.avail_gb is not None else None
        weights = int(log.usage_gb * GiB) if log.usage_gb is not None else None
        from csa_plan.planner.budget.startup import SGLANG_PRELOAD_BYTES

        pre_pred = SGLANG_PRELOAD_BYTES
        terms = (("weights ('Load weight end ... mem usage')", weights, s.weights_bytes),
                 ("memory in use before the weights load (card - avail - usage)", pre, pre_pred),
                 ("KV pool (from max_total_num_tokens)", kv, s.kv_memory_bytes))
    flags = {k: v for k, v in log.args.items()}
    return Calibration(log.path, s.kv_memory_bytes - kv, kv, terms, flags)
