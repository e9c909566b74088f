"""csa-plan simulate as whole processes: wall time (median) and peak RSS of each run.

Cases: the 1,000,000-request mix (examples/mixes/million-requests.yaml), V4-Pro on 8
devices, refuse and queue; the Azure conversation trace (19,366 requests); a
5,000,000-request synthetic trace in BurstGPT's published layout (generated here,
deterministically, ~200 MB in a temporary folder; 2% failed requests, two models); and the
sizes of issue 18: the same mix with 10,000,000 requests (MAX_GENERATED_REQUESTS, the
documented maximum) and 5,000,000 short rows of our CSV layout (~88 MB) with no device
limit, so every request is admitted and the whole event timeline is built.

With ``--base-exe PATH`` (a ``csa-plan`` installed from an older commit, e.g.
``git worktree add /tmp/base <commit>`` and a venv with ``pip install -e /tmp/base``) every
case also runs under that executable, interleaved run by run with the current one so both
see the same machine load, and the table shows both medians and their ratio. An older
commit that cannot read BurstGPT gets the same requests hand-converted into the Azure
CSV layout (timestamps as seconds), with the failed requests left out as the new reader does.

Run: python benchmarks/bench_simulate.py [--runs 5] [--base-exe PATH] [--only NAME]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import csa_plan_executable  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MIX = ROOT / "examples" / "mixes" / "million-requests.yaml"
AZURE = ROOT / "examples" / "traces" / "azure_llm_inference_2023_conv.csv"
BURST_ROWS = 5_000_000


# Each run is a process as a user starts it: with Python's bytecode caches (written by the
# warm-up run), even where the environment sets PYTHONDONTWRITEBYTECODE for development.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_once(argv: list[str]) -> tuple[float, int, int]:
    """(wall seconds, exit code, max RSS KiB) of one process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 3):
        raise SystemExit(f"{' '.join(argv)} exited {code}: {err[-400:]}")
    return elapsed, code, usage.ru_maxrss


def _digits(values, width: int):
    """Right-aligned ASCII digits of non-negative ints, 0 bytes as padding: (n, width) uint8."""
    import numpy as np

    out = np.zeros((len(values), width), dtype=np.uint8)
    v = values.astype(np.int64).copy()
    ndigits = 1 + sum((values >= 10 ** k).astype(np.int64) for k in range(1, width))
    for k in range(width - 1, -1, -1):
        out[:, k] = np.where(width - k <= ndigits, v % 10 + 48, 0)
        v //= 10
    return out


def _text(choice, names: list[bytes]):
    import numpy as np

    width = max(len(n) for n in names)
    table = np.zeros((len(names), width), dtype=np.uint8)
    for i, n in enumerate(names):
        table[i, :len(n)] = np.frombuffer(n, dtype=np.uint8)
    return table[choice]


def write_burstgpt(path: Path, rows: int = BURST_ROWS, azure_copy: Path | None = None) -> None:
    """A BurstGPT-layout CSV (v1 columns): bursty integer-second arrivals, lognormal token counts,
    2% failures (0 response tokens), ChatGPT / GPT-4, conversation / API logs. Byte-built with
    numpy (no Python object per row). ``azure_copy``: the kept requests in the Azure layout."""
    import numpy as np

    rng = np.random.default_rng(2025)
    comma = np.full((1, 1), 44, dtype=np.uint8)
    with path.open("wb") as f, (azure_copy.open("wb") if azure_copy else open(os.devnull, "wb")) as g:
        f.write(b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
        g.write(b"TIMESTAMP,ContextTokens,GeneratedTokens\n")
        clock = 0.0
        step = 500_000
        for start in range(0, rows, step):
            n = min(step, rows - start)
            gaps = rng.gamma(0.25, 4.0, n)  # mean 1 s, bursty (shape < 1)
            stamps = np.floor(clock + np.cumsum(gaps)).astype(np.int64)
            clock += float(gaps.sum())
            req = np.clip(np.rint(rng.lognormal(np.log(600), 1.0, n)), 1, 60_000).astype(np.int64)
            resp = np.clip(np.rint(rng.lognormal(np.log(250), 0.9, n)), 1, 8_000).astype(np.int64)
            resp[rng.random(n) < 0.02] = 0
            model = _text((rng.random(n) < 0.25).astype(np.int64), [b"ChatGPT", b"GPT-4"])
            log = _text((rng.random(n) < 0.4).astype(np.int64), [b"Conversation log", b"API log"])
            nl = np.full((n, 1), 10, dtype=np.uint8)
            c = np.broadcast_to(comma, (n, 1))
            m = np.hstack([_digits(stamps, 10), c, model, c, _digits(req, 6), c, _digits(resp, 5), c,
                           _digits(req + resp, 6), c, log, nl]).ravel()
            f.write(m[m != 0].tobytes())
            if azure_copy:
                keep = resp > 0
                k = int(keep.sum())
                a = np.hstack([_digits(stamps[keep], 10), c[:k], _digits(req[keep], 6), c[:k], _digits(resp[keep], 5),
                               nl[:k]]).ravel()
                g.write(a[a != 0].tobytes())


def _base_reads(base: str, what: str, tmp: str) -> bool:
    """Does the older ``csa-plan`` read a mix's ``memory.weights`` / a BurstGPT trace? (Older
    commits get the same work in a form they read: the weights inside ``reserved``, the kept
    BurstGPT requests in the Azure layout.)"""
    if what == "weights":
        probe = Path(tmp) / "probe-weights.yaml"
        probe.write_text(MIX.read_text().replace("requests: 1000000", "requests: 10"))
    else:
        probe = ROOT / "examples" / "traces" / "burstgpt_v1_head42.csv"
    argv = [base, "simulate", str(probe), "--json"] + ([] if what == "weights" else ["--model", "deepseek-v4-pro"])
    return subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode in (0, 3)


def write_short_rows(path: Path, rows: int = BURST_ROWS) -> None:
    """``arrival_s,prompt_tokens,output_tokens`` rows of about 18 bytes (Poisson arrivals at
    1,000/s written to the millisecond, uniform token counts), byte-built with numpy."""
    import numpy as np

    rng = np.random.default_rng(7)
    dot = np.full((1, 1), 46, dtype=np.uint8)
    comma = np.full((1, 1), 44, dtype=np.uint8)
    with path.open("wb") as f:
        f.write(b"arrival_s,prompt_tokens,output_tokens\n")
        clock = 0.0
        for start in range(0, rows, 500_000):
            n = min(500_000, rows - start)
            gaps = rng.exponential(0.001, n)
            ms = np.floor((clock + np.cumsum(gaps)) * 1000).astype(np.int64)
            clock += float(gaps.sum())
            prompt, output = rng.integers(1, 8000, n), rng.integers(1, 1000, n)
            c, d, nl = (np.broadcast_to(comma, (n, 1)), np.broadcast_to(dot, (n, 1)),
                        np.full((n, 1), 10, dtype=np.uint8))
            whole = _digits(ms // 1000, 8)
            whole[:, -1] = (ms // 1000) % 10 + 48  # a 0 second is written "0", not left empty
            m = np.hstack([whole, d, _digits(ms % 1000 + 1000, 4)[:, 1:], c, _digits(prompt, 4), c,
                           _digits(output, 3), nl]).ravel()
            f.write(m[m != 0].tobytes())


def bench(name: str, new: list[str], old: list[str] | None, runs: int) -> dict:
    run_once(new)  # warm-up (file cache, bytecode)
    old_note = ""
    if old:
        try:
            run_once(old)
        except SystemExit as exc:  # the older commit cannot read this input: say so, time the new one
            old, old_note = None, f"   | before: cannot run it ({str(exc).splitlines()[-1][-90:]})"
    times, rss, old_times, old_rss = [], [], [], []
    for _ in range(runs):  # interleaved: both executables see the same load
        seconds, _, maxrss = run_once(new)
        times.append(seconds)
        rss.append(maxrss)
        if old:
            seconds, _, maxrss = run_once(old)
            old_times.append(seconds)
            old_rss.append(maxrss)
    row = {"name": name, "median_s": statistics.median(times), "rss_mib": max(rss) / 1024}
    line = f"{name:<46} {row['median_s']:7.2f} s {row['rss_mib']:7.0f} MiB"
    if old:
        row.update(old_median_s=statistics.median(old_times), old_rss_mib=max(old_rss) / 1024)
        row["ratio"] = row["median_s"] / row["old_median_s"]
        line += f"   | before {row['old_median_s']:7.2f} s {row['old_rss_mib']:7.0f} MiB   x{row['ratio']:.2f}"
    line += old_note
    print(line, flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--base-exe", default=None, help="csa-plan of an older commit, run side by side")
    parser.add_argument("--only", default=None, help="run only the cases whose name contains this")
    args = parser.parse_args()
    exe = csa_plan_executable()
    base = args.base_exe
    pro = ["--model", "deepseek-v4-pro", "--tp", "8", "--device-memory", "h200"]
    with tempfile.TemporaryDirectory(prefix="bench-simulate-") as tmp:
        burst = Path(tmp) / "burstgpt_5m.csv"
        azure_form = Path(tmp) / "burstgpt_5m_azure.csv"
        # an older commit knows no ``memory.weights`` (here 0: the weights are inside ``reserved``)
        old_mix = Path(tmp) / "million-requests-before.yaml"
        old_mix.write_text(MIX.read_text() if base and _base_reads(base, "weights", tmp)
                           else MIX.read_text().replace("weights: 0, ", ""))
        burst_for_base = bool(base) and not _base_reads(base, "burstgpt", tmp)  # else the Azure-layout copy
        mix10 = Path(tmp) / "ten-million-requests.yaml"
        mix10.write_text(MIX.read_text().replace("requests: 1000000", "requests: 10000000"))
        old_mix10 = Path(tmp) / "ten-million-requests-before.yaml"
        old_mix10.write_text(old_mix.read_text().replace("requests: 1000000", "requests: 10000000"))
        short = Path(tmp) / "short_rows_5m.csv"
        cases = [
            ("1M-request mix, V4-Pro, tp 8, refuse", [str(MIX), "--json"], [str(old_mix), "--json"]),
            ("1M-request mix, V4-Pro, tp 8, queue", [str(MIX), "--policy", "queue", "--json"],
             [str(old_mix), "--policy", "queue", "--json"]),
            ("Azure conv trace (19,366), refuse", [str(AZURE), *pro, "--reserved", "20GiB", "--rate-scale", "0.5",
                                                   "--json"], None),
            ("Azure conv trace (19,366), queue", [str(AZURE), *pro, "--reserved", "20GiB", "--rate-scale", "0.5",
                                                  "--policy", "queue", "--json"], None),
            ("BurstGPT-layout 5M rows, V4-Pro, tp 8, refuse", [str(burst), *pro, "--reserved", "60GiB", "--json"],
             [str(azure_form if burst_for_base else burst), *pro, "--reserved", "60GiB", "--json"]),
            ("10M-request mix (the maximum), refuse", [str(mix10), "--json"], [str(old_mix10), "--json"]),
            ("5M short rows, V4-Pro, no limit", [str(short), "--model", "deepseek-v4-pro", "--json"], None),
        ]
        cases = [c for c in cases if not args.only or args.only.lower() in c[0].lower()]
        if any("BurstGPT" in c[0] for c in cases):
            start = time.perf_counter()
            # in a child process: this one stays small, and a child forked from it reports its own peak
            # RSS only (a forked child's maximum includes the parent's pages until it execs)
            code = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); "
                    f"from pathlib import Path; from bench_simulate import write_burstgpt; "
                    f"write_burstgpt(Path({str(burst)!r}), azure_copy={f'Path({str(azure_form)!r})' if burst_for_base else None})")
            subprocess.run([sys.executable, "-c", code], check=True)
            print(f"(generated {burst.stat().st_size / 2**20:.0f} MiB, {BURST_ROWS:,} rows, "
                  f"in {time.perf_counter() - start:.1f} s)", flush=True)
        if any("short rows" in c[0] for c in cases):
            write_short_rows(short)
        print(f"{'run (median of ' + str(args.runs) + ', whole process)':<46} {'time':>9} {'peak RSS':>11}", flush=True)
        for name, argv, old_argv in cases:
            bench(name, [exe, "simulate", *argv], [base, "simulate", *(old_argv or argv)] if base else None, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
