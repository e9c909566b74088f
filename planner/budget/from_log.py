"""``--from-log FILE``: a real vLLM or SGLang start-up log, read for its memory lines, checked against the
command (model, release, GPU, TP) and turned into one calibration step.

What the log implies is set beside what csa-plan predicts from the flags, term by term. The difference
is taken at the log's own flags (its ``non-default args``) and kept fixed when the command changes
max_num_batched_tokens or the capture sizes: the terms that read them rescale, the calibration does not.
At the log's flags the state pool is the one the log printed (its token count picks the bytes within the
0.01 GiB its KV line is rounded to).
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable

from csa_plan.planner.errors import BadInput
from csa_plan.planner.record import record
from csa_plan.planner.text import excerpt
from csa_plan.planner.units import GiB

MAX_LOG_BYTES = 64 << 20      # a start-up log is a few MB; larger is not one
MAX_LINE_CHARS = 1 << 16      # longer lines are skipped (a progress bar, a dump)


@record
class StartupLog:
    """The lines of one start-up log csa-plan reads (None: not in the log)."""

    path: str
    engine: str                    # "vllm" | "sglang"
    version: str | None            # "0.25.0"
    model: str | None              # the model path or id it names
    capability: tuple[int, int] | None
    tp: int | None
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
    unread: tuple[str, ...] = ()                # memory lines of a wording csa-plan does not read (said, not skipped)
    avail_gb: float | None = None               # SGLang "Load weight end ... avail mem=X GB"
    usage_gb: float | None = None               # SGLang "mem usage=Y GB"


_PATTERNS: dict[str, re.Pattern[str]] = {
    "vllm_version": re.compile(r"(?:version |V1 LLM engine \(v)(\d+\.\d+\.\d+)"),
    "sglang_version": re.compile(r"sglang(?:\s+version|==|\s+v)\s*(\d+\.\d+\.\d+)", re.I),
    "model": re.compile(r"(?:model\s+|Starting to load model |model_path=|'model': ')([^\s',]*DeepSeek-V\d[^\s',.]*)", re.I),
    "capability": re.compile(r"[Dd]evice capability (\d+)\.(\d+)"),
    "tp": re.compile(r"tensor_parallel_size[=': ]+(\d+)|tp_size=(\d+)"),
    "loading": re.compile(r"Model loading took ([\d.]+) GiB"),
    "util": re.compile(r"--gpu-memory-utilization=([\d.]+) is equivalent to --gpu-memory-utilization=([\d.]+)"),
    "graphs": re.compile(r"Profiling CUDA graph memory: (.*)$"),
    "kv": re.compile(r"Available KV cache memory: ([\d.]+) GiB"),
    "tokens": re.compile(r"GPU KV cache size: ([\d,]+) tokens"),
    "device": re.compile(r"Free memory on device \(([\d.]+)/([\d.]+) GiB\)"),
    "actual": re.compile(r"Actual usage is ([\d.]+) GiB for consumed memory \(weights \+ non-torch\), "
                         r"([\d.]+) GiB for peak activation, and ([\d.]+) GiB for CUDAGraph memory"),
    "actual_split": re.compile(r"Actual usage is (-?[\d.]+) GiB for weight, (-?[\d.]+) GiB for peak activation, "
                               r"(-?[\d.]+) GiB for non-torch memory, and (-?[\d.]+) GiB for CUDAGraph memory"),
    "sglang_load": re.compile(r"Load weight end\..*avail mem=([\d.]+) GB, mem usage=([\d.]+) GB"),
    "sglang_tokens": re.compile(r"max_total_num_tokens=(\d+)"),
    "args": re.compile(r"non-default args: (\{.*\})\s*$"),
}
ARG_KEYS = ("max_num_batched_tokens", "max_num_seqs", "gpu_memory_utilization", "tensor_parallel_size",
            "max_cudagraph_capture_size", "max_model_len")


def _args(text: str) -> dict[str, Any]:
    """The flags csa-plan reads from vLLM's ``non-default args`` dict (a Python repr: read by pattern,
    never evaluated)."""
    out: dict[str, Any] = {}
    for key in ARG_KEYS:
        m = re.search(rf"'{key}': ([\d.]+)", text)
        if m:
            out[key] = float(m.group(1)) if "." in m.group(1) else int(m.group(1))
    m = re.search(r"'num_speculative_tokens': (\d+)", text)
    if m:
        out["num_speculative_tokens"] = int(m.group(1))
    return out


def read_startup_log(path: str) -> StartupLog:
    """The log's memory lines; bad input naming the file when it is unreadable, too large or has none."""
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise BadInput(path, "--from-log", f"cannot read the log: {exc.strerror or exc}") from None
    if size > MAX_LOG_BYTES:
        raise BadInput(path, "--from-log", f"{size:,} bytes: a start-up log is at most {MAX_LOG_BYTES:,}")
    found: dict[str, Any] = {}
    unread: list[str] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if len(line) > MAX_LINE_CHARS:
                    continue
                for name, pat in _PATTERNS.items():
                    if name in found:  # the first of each (every worker prints its own)
                        continue
                    m = pat.search(line)
                    if m:
                        found.setdefault(name, m)
                if ("Actual usage is" in line and not _PATTERNS["actual"].search(line)
                        and not _PATTERNS["actual_split"].search(line) and len(unread) < 3):
                    unread.append(excerpt(line.strip()[line.strip().find("Actual usage is"):], 120))
    except OSError as exc:
        raise BadInput(path, "--from-log", f"cannot read the log: {exc.strerror or exc}") from None
    g = lambda n, i=1: found[n].group(i) if n in found else None  # noqa: E731
    vllm = any(n in found for n in ("loading", "kv", "tokens", "util", "device", "actual", "actual_split"))
    sglang = any(n in found for n in ("sglang_load", "sglang_tokens"))
    if vllm == sglang:
        raise BadInput(path, "--from-log", "not a vLLM or SGLang start-up log csa-plan can read: it needs vLLM's "
                       "'Available KV cache memory' / 'GPU KV cache size' / 'Actual usage' lines or SGLang's 'Load weight end' / "
                       "'max_total_num_tokens=' lines" + (" (it has both)" if vllm else ""))
    cap = (int(g("capability")), int(g("capability", 2))) if "capability" in found else None
    tp_m = found.get("tp")
    tp = int(tp_m.group(1) or tp_m.group(2)) if tp_m else None
    common = dict(path=path, model=g("model"), capability=cap, tp=tp,
                  args=_args(found["args"].group(1)) if "args" in found else {}, unread=tuple(unread))
    if vllm:
        tokens = g("tokens")
        return StartupLog(engine="vllm", version=g("vllm_version"), **common,
                          model_loading_gib=float(g("loading")) if g("loading") else None,
                          util=float(g("util")) if g("util") else None,
                          util_eq=float(g("util", 2)) if g("util") else None, graph_counts=g("graphs"),
                          kv_gib=float(g("kv")) if g("kv") else None,
                          kv_tokens=int(tokens.replace(",", "")) if tokens else None,
                          total_gib=float(g("device", 2)) if g("device") else None,
                          actual=_actual(g), actual_split=(float(g("actual_split")), float(g("actual_split", 3)))
                          if g("actual_split") else None)
    return StartupLog(engine="sglang", version=g("sglang_version"), **common,
                      avail_gb=float(g("sglang_load")) if g("sglang_load") else None,
                      usage_gb=float(g("sglang_load", 2)) if g("sglang_load") else None,
                      kv_tokens=int(g("sglang_tokens")) if g("sglang_tokens") else None)


def _actual(g: Callable[..., Any]) -> tuple[float, float, float] | None:
    """(weights + non-torch, peak activation, CUDA graphs) from either wording of vLLM's after-capture line."""
    if g("actual"):
        return tuple(float(g("actual", i)) for i in (1, 2, 3))  # type: ignore[return-value]
    if g("actual_split"):
        w, peak, nt, graphs = (float(g("actual_split", i)) for i in (1, 2, 3, 4))
        return (round(w + nt, 2), peak, graphs)
    return None


def _model_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower().rsplit("/", 1)[-1].replace("models--deepseek-ai--", ""))


def check_matches(log: StartupLog, *, model: str, engine: str, capability: tuple[int, int], card: str,
                  tp_dp: int, card_bytes: int | None = None) -> None:
    """Bad input naming the first thing the log and the command disagree on."""
    family, _, release = engine.partition("-")
    if family != log.engine:
        raise BadInput(log.path, "--from-log", f"engine: the log is {log.engine}'s, the command names {engine}")
    if log.version is not None and not log.version.startswith(release + "."):
        if not (release.count(".") == 2 and log.version == release):
            raise BadInput(log.path, "--from-log", f"release: the log is {log.engine} {log.version}, the command "
                           f"names {engine}")
    if log.model is not None:
        want = _model_key(model)
        got = re.sub(r"[^a-z0-9]", "", log.model.lower())
        if want not in got:
            raise BadInput(log.path, "--from-log", f"model: the log loads {excerpt(log.model)}, the command names "
                           f"{excerpt(model)}")
    if log.capability is not None and log.capability != capability:
        raise BadInput(log.path, "--from-log", f"GPU: the log's device is sm_{log.capability[0]}{log.capability[1]}, "
                       f"the command's {card} is sm_{capability[0]}{capability[1]}")
    if log.total_gib is not None and card_bytes is not None and abs(log.total_gib - card_bytes / GiB) > 0.01:
        raise BadInput(log.path, "--from-log", f"GPU memory: the log's device has {log.total_gib} GiB, the command's "
                       f"{card} {card_bytes / GiB:.2f} GiB")
    if log.tp is not None and log.tp != tp_dp:
        raise BadInput(log.path, "--from-log", f"tensor parallel: the log ran tp {log.tp}, the command tp x dp "
                       f"{tp_dp}")


@record
class Calibration:
    """The log's implied terms beside csa-plan's, and the one step that makes the pool the log's."""

    source: str
    offset_bytes: int                   # predicted KV - implied KV, at the log's flags
    implied_kv_bytes: int
    terms: tuple[tuple[str, int | None, int], ...]  # (term, implied bytes or None: not in the log, predicted)
    log_flags: dict[str, Any]
    notes: tuple[str, ...] = ()         # what the reading did not take word for word (unread lines, another length)

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
    model_built = ("top-k index buffer", "RoPE", "hc_attn_fn_broadcast", "MTP hidden buffer")
    graphs = by("CUDA graph")
    predicted_model = s.weights_bytes + by(*model_built)
    predicted_rest = s.reserve_bytes - by(*model_built) - graphs
    if log.engine == "vllm":
        if log.kv_gib is None:
            raise BadInput(log.path, "--from-log", "no 'Available KV cache memory: X GiB' line to calibrate on")
        lo, hi = int((log.kv_gib - 0.005) * GiB), int((log.kv_gib + 0.005) * GiB)
        kv = _pool_bytes_for(tokens_at, log.kv_tokens, lo, hi) if log.kv_tokens else None
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
    notes = tuple(f"a line of a wording csa-plan does not read, left out: {line}" for line in log.unread)
    return Calibration(log.path, s.kv_memory_bytes - kv, kv, terms, flags, notes)
