"""Round-robin against each engine's own DP load balancer (issue 44, item 2), and what the replay costs.

V4-Flash on 8xB200 as DP8 (vLLM ``--dp 8 --ep 8``: one engine core per rank; SGLang ``--dp 8 --ep 8``:
DP attention), a closed-loop client at concurrency 256, for the fixed 8K/1K mix and a variable one
(``--random-range-ratio 0.5``: prompts 4,096-8,192, outputs 512-1,024). For each: the engine's balancer
(what ``simulate`` now replays: vLLM's DP coordinator, not configurable; SGLang ``--load-balance-method
round_robin`` (its default), ``total_requests`` and ``total_tokens``, all with the ranks replayed together
and one unpinned client pool) and round-robin as ``simulate`` replayed it before ("alone": each rank alone
with its pinned share of the connections, put in lockstep after; reached here by handing the setup a
round-robin balancer; for vLLM also "together"), with
TTFT and TPOT p50/p99, output tok/s per GPU and the whole command's wall time (in-process, median of
``--runs``).

With ``--base-python PATH`` (the python of a virtualenv with an older commit installed: ``git worktree add
--detach /tmp/base main``, ``python -m venv /tmp/base/.venv``, ``pip install -e /tmp/base``) every case runs in
a fresh process of each build in turn (this script, ``--case N``, under either interpreter), the wall times
side by side with their ratio, and the two builds' runtime figures compared (``same``: equal JSON).

Run: python benchmarks/bench_balancer.py [--runs 3] [--only NAME] [--base-python PATH]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import time
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXED = str(ROOT / "examples" / "mixes" / "fixed-8k-1k.yaml")
VARIED = str(ROOT / "examples" / "mixes" / "random-8k-1k.yaml")
DP8 = ["--gpu", "b200", "--tp", "1", "--dp", "8", "--ep", "8", "--max-concurrency", "256"]


def cases() -> list[tuple[str, list[str], str | None]]:
    """(name, simulate's arguments, the round-robin forced: "alone" the per-rank replay, "together" the
    co-simulation with one unpinned client pool)."""
    out = []
    for mix_name, mix in (("8k/1k fixed", FIXED), ("8k/1k ratio 0.5", VARIED)):
        vllm = ["simulate", mix, *DP8, "--engine", "vllm-0.33", "--json"]
        out.append((f"{mix_name} vllm-0.33 round-robin (before)", vllm, "alone"))
        out.append((f"{mix_name} vllm-0.33 round-robin together", vllm, "together"))
        out.append((f"{mix_name} vllm-0.33 its DP balancer", vllm, None))
        sglang = ["simulate", mix, *DP8, "--engine", "sglang-0.5.23", "--json"]
        out.append((f"{mix_name} sglang round_robin alone (before)", sglang, "alone"))
        out.append((f"{mix_name} sglang round_robin (default, together)", sglang, None))
        for method in ("total_requests", "total_tokens"):
            out.append((f"{mix_name} sglang {method}", sglang + ["--load-balance-method", method], None))
    return out


def run(args: list[str], round_robin: str | None) -> tuple[dict, float]:
    from dataclasses import dataclass

    from csa_plan.cli.main import main
    from csa_plan.planner.serving import serve
    from csa_plan.planner.serving.balancer import Balancer, Method

    @dataclass(frozen=True)
    class Together(Balancer):  # round-robin through serving/balanced.py: one client pool, connections unpinned
        pass

    real = serve.dp_balancer
    if round_robin is not None:
        forced = None if round_robin == "alone" else Together(Method.ROUND_ROBIN, "round-robin (together)")
        serve.dp_balancer = lambda engine, settings, dp: forced  # None: each rank alone (replicas.py)
    buf = io.StringIO()
    t = time.perf_counter()
    try:
        with redirect_stdout(buf):
            try:
                main(list(args))
            except SystemExit as e:
                if e.code not in (0, None):
                    raise
    finally:
        serve.dp_balancer = real
    return json.loads(buf.getvalue())["runtime"], time.perf_counter() - t


def in_process(python: str, index: int) -> tuple[dict, float, float]:
    """Case ``index`` run by ``python`` (this build's or an older one's) in a fresh process: its runtime
    figures and the command's in-process wall and CPU times (the CPU time: on a shared machine)."""
    import subprocess

    p = subprocess.run([python, str(Path(__file__).resolve()), "--case", str(index)], capture_output=True,
                       text=True)
    if p.returncode != 0:
        raise SystemExit(f"{python} case {index}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
    out = json.loads(p.stdout)
    return out["runtime"], out["wall_s"], out["cpu_s"]


def side_by_side(runs: int, only: str | None, base_python: str) -> int:
    import sys

    print(f"{'case':54} {'wall: this':>10} {'base':>6} {'ratio':>5}  {'CPU: this':>9} {'base':>6} {'ratio':>5}  same")
    for index, (name, _args, _rr) in enumerate(cases()):
        if only and only not in name:
            continue
        mine, base, same = [], [], True
        for _ in range(runs):
            rt, wall, cpu = in_process(sys.executable, index)
            mine.append((wall, cpu))
            rt_base, wall, cpu = in_process(base_python, index)
            base.append((wall, cpu))
            same = same and rt == rt_base
        a, b = [statistics.median(w for w, _ in x) for x in (mine, base)]
        c, d = [statistics.median(u for _, u in x) for x in (mine, base)]
        print(f"{name:54} {a:10.2f} {b:6.2f} {a / b:5.2f}  {c:9.2f} {d:6.2f} {c / d:5.2f}  {'yes' if same else 'NO'}",
              flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only")
    ap.add_argument("--base-python", help="an older build's python: each case in fresh processes, side by side")
    ap.add_argument("--case", type=int, help=argparse.SUPPRESS)  # one case, its figures and wall time as JSON
    a = ap.parse_args()
    if a.case is not None:
        _name, args, rr = cases()[a.case]
        cpu = time.process_time()
        rt, wall = run(args, rr)
        print(json.dumps({"runtime": rt, "wall_s": wall, "cpu_s": time.process_time() - cpu}))
        return 0
    if a.base_python:
        return side_by_side(a.runs, a.only, a.base_python)
    print(f"{'case':48} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9} {'TPOT p99':>9} {'tok/s/GPU':>9} "
          f"{'wall (s)':>8}")
    for name, args, rr in cases():
        if a.only and a.only not in name:
            continue
        walls, rt = [], None
        for _ in range(a.runs):
            rt, wall = run(args, rr)
            walls.append(wall)
        print(f"{name:48} {rt['ttft']['p50_s']:9.3f} {rt['ttft']['p99_s']:9.3f} {rt['tpot']['p50_s'] * 1e3:9.2f} "
              f"{rt['tpot']['p99_s'] * 1e3:9.2f} {rt['output_tok_s_per_gpu']:9.1f} {statistics.median(walls):8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
