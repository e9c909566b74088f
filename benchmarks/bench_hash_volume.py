"""Time and peak memory of a Mooncake trace of 32.8M distinct prefix-block ids (issue 47 leftover).

100,000 records of 328 distinct ids each (325 MB, ``tests/helpers/hostile_round3.hash_id_volume`` at full
scale) through ``simulate TRACE --model deepseek-v4-flash`` (the ledger): the whole process's wall time
and peak RSS (``/usr/bin/time``). Round three refused the trace at 2^21 ids (``MAX_TRACE_HASH_IDS``); now
the bound is 2^26 and, past ``MAX_REPLAY_HASH_IDS`` (2^21), the ids are summarised (sorted in place for
the distinct count, then dropped) instead of kept beside a sorted copy; an engine replay refuses such a
trace naming ``MAX_REPLAY_HASH_IDS``. Figures: ``benchmarks/hash_volume.md``.

With ``--base-exe PATH`` (a ``csa-plan`` installed from an older commit) the trace also runs under it.

Run: python benchmarks/bench_hash_volume.py [--base-exe PATH] [--keep DIR]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from _timing import csa_plan_executable  # noqa: E402


def measure(exe: str, trace: Path) -> tuple[int, float, int]:
    """(exit code, wall seconds, peak RSS in KiB) of one run."""
    done = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M", exe, "simulate", str(trace), "--model",
                           "deepseek-v4-flash", "--brief"], capture_output=True, text=True)
    m = re.search(r"TIME ([\d.]+) (\d+)", done.stderr)
    code = done.returncode
    return code, float(m.group(1)), int(m.group(2))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-exe")
    ap.add_argument("--keep", help="folder for the trace (kept; reused when there)")
    args = ap.parse_args()
    from helpers.hostile_round3 import hash_id_volume

    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp())
    folder.mkdir(parents=True, exist_ok=True)
    trace = folder / "volume.jsonl"
    if not trace.exists():
        hash_id_volume(folder, 2)
    print(f"trace: {trace} ({trace.stat().st_size:,} bytes, 32.8M distinct ids)")
    for name, exe in (("this checkout", csa_plan_executable()), ("base", args.base_exe)):
        if exe:
            code, seconds, kib = measure(exe, trace)
            print(f"{name:14} exit {code}  {seconds:6.2f} s  {kib / 1024:8.1f} MiB peak")


if __name__ == "__main__":
    main()
