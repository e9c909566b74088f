"""Run every reproduction of the hostile campaign (issue 18) as a whole process, at full size,
and print a table: exit code, one line or not, seconds and peak memory.

    python fuzz/measure_hostile.py [NAME ...]          # all cases, or the named ones

Each case runs as ``prlimit --as=4000000000 /usr/bin/time -v csa-plan ARGS`` (a 4 GB
address-space cap, as in the campaign) in a fresh temporary folder; the inputs are the
campaign's sizes (``Case.full_scale``: a 100 MB ONNX attribute, a 1.9 GB sparse node name,
a 6 GB sparse trace). The bound each must meet: exit 2 (or its listed codes), one line on
stderr, no traceback, under 5 s and under 500 MB, no control byte in the output.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from helpers.hostile import CASES, EXPECT, control_bytes  # noqa: E402

# -- issue 24, core bounds (integers, safetensors, option ranges, time bounds, columns) -----------------
# Kept in their own module and block; bound: 10 s and 500 MB at the documented maximum.
from helpers import hostile_bounds  # noqa: E402

CASES = CASES + hostile_bounds.CASES
EXPECT = {**EXPECT, **hostile_bounds.EXPECT}
LIMIT_S_BY_CASE = {c.name: 10.0 for c in hostile_bounds.CASES}
# -- end issue 24, core bounds ------------------------------------------------------------------------

LIMIT_S = 5.0
LIMIT_MB = 500.0


def run(case) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="csa-hostile-"))
    try:
        args = case.build(folder, case.full_scale)
        csa = shutil.which("csa-plan") or "csa-plan"
        cmd = ["prlimit", "--as=4000000000", "/usr/bin/time", "-v", csa, *args]
        proc = subprocess.run(cmd, capture_output=True, timeout=300)
        err = proc.stderr.decode("utf-8", "surrogateescape")
        stats, _, _ = err.rpartition("\tCommand being timed:")[2], None, None
        own = err[: err.rfind("\tCommand being timed:")]
        wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", err)
        seconds = (int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3))) if wall else -1.0
        rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
        mb = int(rss.group(1)) / 1024 if rss else -1.0
        out = proc.stdout.decode("utf-8", "surrogateescape")
        lines = [line for line in own.splitlines() if line.strip() and not line.startswith("Command exited")]
        code = proc.returncode
        one_line = len(lines) == 1 if code == 2 else True
        clean = not control_bytes(out + own) and "Traceback" not in own
        needles = all(n in own for n in EXPECT.get(case.name, ())) if code == 2 else True
        limit_s = LIMIT_S_BY_CASE.get(case.name, LIMIT_S)
        ok = code in case.codes and one_line and clean and needles and 0 <= seconds < limit_s and 0 <= mb < LIMIT_MB
        return {"name": case.name, "code": code, "lines": len(lines), "s": seconds, "mb": mb, "ok": ok,
                "test": case.test, "message": lines[-1][:160] if lines else ""}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(names: list[str]) -> int:
    rows = [run(c) for c in CASES if not names or c.name in names]
    print(f"| reproduction | exit | stderr lines | wall s | peak MB | ok | regression test |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['name']} | {r['code']} | {r['lines']} | {r['s']:.2f} | {r['mb']:.0f} | "
              f"{'yes' if r['ok'] else 'NO'} | `{r['test']}` |")
    bad = [r for r in rows if not r["ok"]]
    for r in bad:
        print(f"NOT OK: {r['name']}: exit {r['code']}, {r['lines']} lines, {r['s']:.2f} s, {r['mb']:.0f} MB: "
              f"{r['message']}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
