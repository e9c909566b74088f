"""Cross-check the DP load balancers of ``planner/serving/balancer.py`` against the engines' own code (outside CI).

Run it with an interpreter that imports the engine (nothing here is a csa-plan dependency; csa-plan is
imported from this checkout):

* vLLM: ``PYTHONPATH=<vllm 0.33.0 tree> python tools/crosscheck_balancer.py --engine vllm`` (a CPU venv with
  vLLM's requirements; the same for 0.34.0 and 0.25.0). Drives ``DPLBAsyncMPClient.get_core_engine_for_request``
  (v1/engine/core_client.py) unbound, on a stand-in ``self`` that holds only what it reads (the front-end's
  table ``lb_engines``, ``engine_inflight``, ``eng_start_index``, ``client_count``), over random tables and
  bursts of requests, with its ``process_engine_outputs`` bookkeeping replaced by the test's own finishes.
* SGLang: ``PYTHONPATH=<sglang 0.5.23 wheel tree> python tools/crosscheck_balancer.py --engine sglang``: drives
  ``DPBudget`` (managers/data_parallel_controller.py, its class source executed alone: the module imports the
  server's plumbing) with ``update_budget`` on snapshot stand-ins and ``dispatch`` for ``total_requests`` and
  ``total_tokens``.

Every case's inputs and the engine's picks are compared with csa-plan's (``vllm_pick`` and the ``VllmDpLb``
bookkeeping; ``DPBudget``); ``--write`` stores them in ``tests/fixtures/balancer_expected.json``
(``tests/simulate/test_balancer.py`` replays them in CI). Exit 0 when every case agrees.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import types
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "balancer_expected.json"


def vllm_cases(seed: int, count: int) -> list[dict]:
    """Random cases for vLLM's ``get_core_engine_for_request``: picks under the engine's own code."""
    import vllm
    from vllm.v1.engine.core_client import DPLBAsyncMPClient

    old = not hasattr(DPLBAsyncMPClient, "process_engine_outputs") or "engine_inflight" not in \
        DPLBAsyncMPClient.__init__.__code__.co_names
    rng = random.Random(seed)
    cases = []
    for c in range(count):
        dp = rng.choice((2, 3, 4, 8))
        table = [[rng.choice((0, 0, 1, 2, 5)), rng.randrange(0, 40), round(rng.random(), 3)] for _ in range(dp)]
        if old:
            table = [row[:2] for row in table]
        inflight = [rng.randrange(0, 40) for _ in range(dp)]
        start = rng.randrange(dp)
        events = [rng.choice(("send", "send", "send", "finish")) for _ in range(rng.randrange(1, 24))]
        me = types.SimpleNamespace(streaming_reqs=set(), reqs_in_flight={}, lb_engines=[list(r) for r in table],
                                   client_count=1, eng_start_index=start,
                                   core_engines=[i.to_bytes(2, "little") for i in range(dp)],
                                   engine_inflight=Counter({i.to_bytes(2, "little"): n for i, n in enumerate(inflight)}))
        picks, finishes = [], []
        for j, ev in enumerate(events):
            if ev == "finish":
                k = rng.randrange(dp)
                finishes.append(k)
                me.engine_inflight[me.core_engines[k]] -= 1
                picks.append(None)
                continue
            req = types.SimpleNamespace(request_id=f"r{c}-{j}", resumable=False, data_parallel_rank=None,
                                        pooling_params=None)
            eng = DPLBAsyncMPClient.get_core_engine_for_request(me, req)
            picks.append(me.core_engines.index(eng))
        cases.append({"dp": dp, "table": table, "inflight": inflight, "start": start, "events": events,
                      "finishes": finishes, "picks": picks})
    return [{"engine": f"vllm-{vllm.__version__}", "old_score": old, "cases": cases}]


def check_vllm(doc: dict) -> list[str]:
    """csa-plan's ``VllmDpLb`` bookkeeping over each case: the same picks."""
    from csa_plan.planner.serving.balancer import Method, VllmDpLb

    method = Method.VLLM_QUEUE if doc["old_score"] else Method.VLLM_INFLIGHT
    bad = []
    for i, case in enumerate(doc["cases"]):
        lb = VllmDpLb(case["dp"], method, 0)
        lb.table = [list(r) + [0.0] * (3 - len(r)) for r in case["table"]]
        lb.inflight = list(case["inflight"])
        lb.start = case["start"]
        lb.last_publish_ns, lb.changed_ns = 0, None  # no publication inside a case (the engine's table is held)
        finishes = iter(case["finishes"])
        got = []
        for ev in case["events"]:
            if ev == "finish":
                lb.finished(next(finishes), 1)
                got.append(None)
            else:
                got.append(lb.choose(1, 0))
        if got != case["picks"]:
            bad.append(f"{doc['engine']} case {i}: engine {case['picks']} csa-plan {got}")
    return bad


def sglang_classes() -> tuple:
    """``DPBudget`` and ``LoadBalanceMethod`` executed from the installed SGLang's own source file: the
    controller module itself imports the server's process plumbing (zmq, the OpenAI protocol, ...), which
    a CPU venv need not have; these two classes use only ``enum``."""
    import ast
    import enum
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    path = Path(spec.submodule_search_locations[0]) / "srt" / "managers" / "data_parallel_controller.py"
    tree = ast.parse(path.read_text())
    keep = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name in ("LoadBalanceMethod",
                                                                                           "DPBudget")]
    space: dict = {"Enum": enum.Enum, "auto": enum.auto}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(path), "exec"), space)
    return space["DPBudget"], space["LoadBalanceMethod"]


def sglang_cases(seed: int, count: int) -> list[dict]:
    """Random cases for SGLang's ``DPBudget``: snapshots then dispatches, under the engine's own code."""
    DPBudget, LoadBalanceMethod = sglang_classes()
    rng = random.Random(seed)
    out = []
    for method in ("TOTAL_REQUESTS", "TOTAL_TOKENS"):
        cases = []
        for _ in range(count):
            dp = rng.choice((2, 4, 8))
            budget = DPBudget(dp)
            events = []
            for _e in range(rng.randrange(1, 30)):
                if rng.random() < 0.3:
                    loads = [[k, rng.choice((1.0, 2.0, 3.0)), rng.randrange(0, 6), rng.randrange(0, 6),
                              rng.choice((0, 4096, 8192, 12288))] for k in rng.sample(range(dp), rng.randrange(1, dp + 1))]
                    budget.update_budget([types.SimpleNamespace(dp_rank=k, timestamp=ts, num_running_reqs=run,
                                                                num_waiting_reqs=wait, num_total_tokens=tok)
                                          for k, ts, run, wait, tok in loads])
                    events.append({"loads": loads})
                else:
                    tokens = rng.choice((128, 1024, 8192))
                    pick = budget.dispatch(LoadBalanceMethod[method], estimated_tokens=tokens)
                    events.append({"tokens": tokens, "pick": pick})
            cases.append({"dp": dp, "events": events})
        out.append({"engine": "sglang-0.5.23", "method": method.lower(), "cases": cases})
    return out


def check_sglang(doc: dict) -> list[str]:
    from csa_plan.planner.serving.balancer import DPBudget, Method, SglangLoad

    method = Method(doc["method"])
    bad = []
    for i, case in enumerate(doc["cases"]):
        budget = DPBudget(case["dp"])
        budget.last_timestamp = [0.0] * case["dp"]  # the engine's initial stamp
        for j, ev in enumerate(case["events"]):
            if "loads" in ev:
                budget.update_budget([(k, ts, SglangLoad(run, wait, tok)) for k, ts, run, wait, tok in ev["loads"]])
                continue
            got = budget.dispatch(method, ev["tokens"] if method is Method.TOTAL_TOKENS else 0)
            if got != ev["pick"]:
                bad.append(f"{doc['method']} case {i} event {j}: engine {ev['pick']} csa-plan {got}")
                break
    return bad


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", choices=("vllm", "sglang"), required=True)
    parser.add_argument("--cases", type=int, default=40)
    parser.add_argument("--seed", type=int, default=44)
    parser.add_argument("--write", action="store_true", help=f"store the cases in {FIXTURE.relative_to(ROOT)}")
    args = parser.parse_args()
    package = types.ModuleType("csa_plan")  # this checkout's csa_plan, whatever the interpreter has installed
    package.__path__ = [str(ROOT)]
    sys.modules["csa_plan"] = package
    docs = vllm_cases(args.seed, args.cases) if args.engine == "vllm" else sglang_cases(args.seed, args.cases)
    bad = [b for d in docs for b in (check_vllm(d) if args.engine == "vllm" else check_sglang(d))]
    for d in docs:
        print(f"{d['engine']} {d.get('method', '')}: {len(d['cases'])} cases, "
              f"{sum(1 for c in d['cases'] for e in c['events'] if e == 'send' or 'pick' in e)} picks")
    for b in bad[:20]:
        print("DIFFERS:", b)
    if args.write and not bad:
        stored = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {}
        for d in docs:
            stored[d["engine"] + ("/" + d["method"] if "method" in d else "")] = d
        FIXTURE.write_text(json.dumps(stored, sort_keys=True, separators=(",", ":")) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
