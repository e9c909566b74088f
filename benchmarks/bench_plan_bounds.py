"""The 96-point engine grid over the Azure 2023 conversation trace: exhaustive replay against bound-first (issue 45 item 5).

The grid: 4 cards x tp 1/2/4/8 x dp 1/2/4 x 2 engines (vllm-0.33, sglang-0.5.23), DeepSeek-V4-Flash,
the trace at its own rate (the question ``plan`` asks: does this shape serve it, TTFT p99 <= 2 s and
TPOT p99 <= 50 ms, in steady state), skipped statically as any sweep is (``sweep/evaluate.py triage``).

* exhaustive: every point that is not skipped is evaluated by the exact replay (``evaluate``) -- what the
  current main does for each point of such a sweep;
* bound-first (what ``plan`` does): each card and engine's shapes in order of GPU count; a shape with more
  GPUs than a feasible one of its card and engine is dominated and not replayed; each other point's
  busy-time bound (``sweep/bounds.py``) is checked first and a point it proves infeasible is not
  replayed; the rest are evaluated by the same ``evaluate`` with early exit (``Task.early_exit``:
  ``replay/early_exit.py``), and a shape of the found count only while it may still be preferred.

Both run in this one process on this machine; the answer (the fewest-GPU feasible point, and the whole
feasible set) must be the same. Wall times are reported in seconds and in units of one whole-trace replay
(``serve`` of the trace at rate scale 1 on the grid's first replayed point, timed here).
Run: python benchmarks/bench_plan_bounds.py [--cards h200,b200,...] [--engines ...] [--skip-exhaustive]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "examples" / "traces" / "azure_llm_inference_2023_conv.csv"


def main() -> int:
    from csa_plan.planner.serving.serve import runtime_setup, serve
    from csa_plan.planner.sweep.evaluate import (Task, _sim_config, evaluate, load_context_workload,
                                                 load_point_model, point_bound, triage)
    from csa_plan.planner.sweep.spec import parse_spec

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cards", default="h100,h200,b200,b300")
    ap.add_argument("--engines", default="vllm-0.33,sglang-0.5.23")
    ap.add_argument("--skip-exhaustive", action="store_true", help="bound-first only (no same-answer check)")
    args = ap.parse_args()
    data = {"workload": str(TRACE),
            "grid": {"model": "deepseek-v4-flash", "device": args.cards.split(","), "tp": [1, 2, 4, 8],
                     "dp": [1, 2, 4], "engine": args.engines.split(",")},
            "objective": "fewest_devices", "constraints": {"ttft_p99_max_s": 2, "tpot_p99_max_ms": 50},
            "search": {"min_scale": 1.0, "max_scale": 1.000001}}  # the trace's own rate: one steady probe
    spec = parse_spec(data, str(ROOT / "benchmarks" / "plan-bounds.yaml"))
    t0 = time.perf_counter()
    plan = triage(spec)
    triage_s = time.perf_counter() - t0
    wl = load_context_workload(spec.context.workload, spec.context.sort, spec.context.seed)
    first = plan.to_run[0]
    setup = runtime_setup(load_point_model(first.model, first.max_seq_len), _sim_config(spec.context, first))
    t0 = time.perf_counter()
    serve(setup, wl, 1.0)
    replay_s = time.perf_counter() - t0

    def run(bounded: bool) -> tuple[float, dict, dict]:
        """exhaustive: every point replayed in full and searched, in grid order (``evaluate``, main's path).
        bound-first: plan's path (``commands/plan.py``): each card and engine by GPU count; a point with more
        GPUs than a feasible one of its card and engine is dominated (not replayed); a point the busy-time
        bound proves infeasible is not replayed; the rest are evaluated with early exit (a replay stops once a
        bound is decided, no rate search once the target rate's replay breaks one) and a shape of the found
        count only while it may still be preferred to the found one (its TPOT p99 not yet decided above)."""
        from csa_plan.planner.sweep.evaluate import NOT_JUDGED

        start = time.perf_counter()
        out: dict = {}
        counts = {"pruned_by_bound": 0, "dominated": 0, "not_judged": 0, "stopped_early": 0, "search_skipped": 0,
                  "replayed": 0}
        groups: dict = {}
        for i, p in enumerate(plan.to_run):
            groups.setdefault((p.device, p.engine) if bounded else i, []).append(p)
        for points in groups.values():
            points.sort(key=lambda p: p.devices)
            found = beat = None
            for p in points:
                if bounded and found is not None and p.devices > found:
                    counts["dominated"] += 1
                    continue
                task = Task(spec.context, p, early_exit=bounded, beat=beat)
                b = point_bound(task) if bounded else None
                if b is not None and b.infeasible:
                    out[p.key] = (False, p.devices, b.line(), None)
                    counts["pruned_by_bound"] += 1
                    continue
                r = evaluate(task)
                counts["replayed"] += 1
                if r.steady.startswith(NOT_JUDGED):
                    counts["not_judged"] += 1
                    continue
                counts["stopped_early"] += r.violations[:1] != () and r.violations[0].startswith("stopped early")
                counts["search_skipped"] += r.probes == 0 and not r.feasible
                rt = r.runtime
                figures = None if rt is None else (rt.tpot_p99_s or 0.0, rt.ttft_p99_s or 0.0)
                out[p.key] = (r.feasible, p.devices, "; ".join(r.violations), figures)
                if r.feasible and bounded:
                    found, beat = p.devices, figures
        return time.perf_counter() - start, out, counts

    bounded_s, bounded, counts = run(True)
    exhaustive_s, exhaustive = (None, None) if args.skip_exhaustive else run(False)[:2]

    def answer(res: dict) -> dict:
        """plan's answer (``reports/plan.py``): per card the feasible shape of the fewest GPUs, then the lowest
        TPOT p99, then TTFT p99, the first evaluated on a tie; and the best card's."""
        per_card: dict = {}
        for p in plan.to_run:
            ok, devices, _, figures = res.get(p.key, (False, 0, "", None))
            if ok and (p.device not in per_card or (devices, *figures) < per_card[p.device][0]):
                per_card[p.device] = ((devices, *figures), p.key)
        best = min(per_card.values(), default=None, key=lambda v: v[0][0])
        return {"per_card": {c: v[0][0] for c, v in per_card.items()}, "best": None if best is None else best[1]}

    report = {"grid_points": len(spec.points), "skipped_statically": len(plan.skipped), "replayable": len(plan.to_run),
              "requests": len(wl), "one_replay_s": round(replay_s, 3), "triage_s": round(triage_s, 3),
              "bound_first": {"wall_s": round(bounded_s, 2), "replays": round(bounded_s / replay_s, 1),
                              **counts, "answer": answer(bounded)}}
    if exhaustive is not None:
        report["exhaustive"] = {"wall_s": round(exhaustive_s, 2), "replays": round(exhaustive_s / replay_s, 1),
                                "answer": answer(exhaustive)}
        wrong = [k for k in bounded if exhaustive[k][0] != bounded[k][0]]  # the points both judged
        report["same_answer"] = answer(exhaustive) == answer(bounded) and not wrong
        report["disagreeing_points"] = wrong
    json.dump(report, sys.stdout, indent=1)
    print()
    return 0 if report.get("same_answer", True) else 1


if __name__ == "__main__":
    raise SystemExit(main())
