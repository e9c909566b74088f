"""Fit the physics step time's coefficients on published serving rows, and report the error per row.

    python tools/fit_steptime.py [--csv benchmarks/published_serving.csv] [--write] [--max-requests 1024]

Each usable row (DeepSeek-V4, a card with figures in the card table ``planner/cards.py``, no
speculative decoding or EAGLE with its steps stated) is replayed once through csa-plan's own
engine runtime (SGLang rows: sglang-0.5.23; vLLM rows: vllm-0.33; fixed lengths at the row's
concurrency, a closed-loop client, one data-parallel replica of ``dp`` standing for all: the rows'
requests are all alike), every step lasting 1 ns, while each step's batch is recorded. In a closed
loop the schedule does not depend on how long steps take, so each request's TPOT and TTFT are
linear in the coefficients of the basis terms (``physics.BASIS``): a request's TPOT = g . beta; the rows publish
p50s, so each fit round takes the median request under the last round's coefficients.

Each rank is costed as the row's layout runs it (``physics.model_cost`` over the engine's shard
rules): SGLang ``--enable-dp-attention`` is attention TP tp/dp with dp ranks; an ``(a2a)`` MoE backend
is EP over all GPUs; vLLM ``--data-parallel-size`` with ``--enable-expert-parallel`` is DP ranks of
attention TP 1 and EP over all GPUs.

EAGLE rows (TPOT per accepted token): the replay has no drafts, so each decode step is costed
with every request verifying its draft tokens (``spec_draft_tokens``) and the drafter's chain of
passes (``physics.draft_rows`` for ``steptime/drafts.py``'s EAGLE), and TPOT divides that step by the
accepted length ``1 + p + ... + p^k`` at EAGLE's published default (0.65, the MTP layer's rate). Targets: TPOT of every fitted row, and TTFT of
every fitted row whose requests all run at once in the replay (no request waits for a slot: the
high-throughput cells, minutes of queueing, are left out).

ITL rows (the median gap between consecutive tokens over every request) are a check, never a target: the replay's
steps weighted by the tokens they give (``itl_p50``).

Fitted per engine and GPU family by bounded least squares on relative error (``nnls.bounded_nnls``): every roofline
coefficient at least 1 and at most its physical ceiling (``ceilings``: the HBM and FLOP terms held to it, the link
terms' ceilings reported, ``--link-ceilings`` to apply them), the floors (``step``, ``layer``, ``request``) at least 0:
SGLang on its V4-Flash cookbook rows at concurrency 1, 16, 64, 1024 and 4096; vLLM on its own rows
(TP8 and DP8, prompts up to 256K, concurrency up to 8), its ``VLLM_FREE`` terms free and the rest
SGLang's of the family. Held out, in this order: V4-Pro (another model); vLLM's TP4xDP2 and TP2xDP4
rows and Hopper's DP-attention rows (another layout); SGLang at concurrency 256 and 512, vLLM at 16
and at prompts over 256K (another regime); each family's rows under the other family's fit (another
GPU family); each engine's rows under the other engine's fit (another engine). ``--write`` stores the fits in ``planner/steptime/steptime_fit.json`` with every row's error.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FIT_PATH = ROOT / "planner" / "steptime" / "steptime_fit.json"
from csa_plan.planner.steptime.drafts import METHODS, DraftMethod

ACCEPTANCE = METHODS[DraftMethod.EAGLE].default_acceptance  # EAGLE rows: the method's published default
FIT_CONCURRENCY = (1, 16, 64, 1024, 4096)
ENGINES = {"sglang": "sglang-0.5.23", "vllm": "vllm-0.33"}
# No kernel beats its datasheet peak: the roofline terms' coefficients are at least 1 (the floors and the extra
# prefill terms at least 0), so rows that cannot tell two terms apart do not hand one term's cost to the other.
FIT_ROUNDS = 4
FLOOR = {"weights": 1.0, "state": 1.0, "flops": 1.0, "comm": 1.0, "a2a_decode": 1.0, "a2a_prefill": 1.0}
# vLLM (its own coefficients, fitted on vLLM rows): the terms its published rows constrain, each from the SGLang fit of
# the family as a start; the rest (the weights and GEMM rooflines, the decode state and all-to-all terms the 8K
# cookbook rows fit) stay SGLang's. Its rows are long-prompt TTFTs (32K and up): the position term, floors and link terms are
# free; the prefill GEMM term stays SGLang's (0), which the 8K cookbook TTFTs fit (freeing it fits the vLLM rows no better).
VLLM_FREE = ("step", "layer", "request", "state", "prefill_positions", "comm", "a2a_prefill")
VLLM_FIT_MAX_CONCURRENCY = 8  # vLLM rows above it (the ladder's concurrency 16) are held out: another regime
VLLM_FIT_MAX_PROMPT = 262_144  # and prompts over 256K tokens (512K, 1M, the 264,801-token decode row): another regime
TTFT_MAX = 256  # above it the cookbook's TTFT is minutes of queueing the replay admits at once (SERVING_DATA.md)
TTFT_MIN = 2  # at concurrency 1 the cookbook's TTFT is 150-430 ms for a prefill the roofline puts at 20-60 ms, and
# above the same cell's TTFT at concurrency 16 on some cells: time outside the engine's steps (docs/steptime.md)
TABLE_START, TABLE_END = "<!-- fit-table: tools/fit_steptime.py --write -->", "<!-- /fit-table -->"
# Physical ceilings (docs/steptime.md, "Physical bounds"): no roofline coefficient may say a kernel runs slower than the
# slowest published kernel of its kind would on the same work. Each is derived from one published figure:
# - HBM terms (weights, state; a MoE backend's term on top of weights): FlashMLA's sparse MLA decoding kernel, the one
#   both engines run over V4's top-k records, is compute-bound at 410 TFLOPS on H800 SXM5 and 350 TFLOPS on B200
#   (deepseek-ai/FlashMLA README.md@066b5ba, "Performance"). Computing on each record it reads (4 x heads x head_dim
#   FLOPs, V4-Pro's 128 heads the widest) at that rate takes at most this many times the record's HBM time on the
#   family's fastest HBM: the slowest a record read can be.
# - FLOP terms (flops; prefill_flops and prefill_positions on top of it): the same kernel's published rate against the
#   family's largest BF16 peak, the lowest published efficiency of an attention or GEMM kernel these steps run.
# - Link terms (comm, a2a_decode, a2a_prefill): DeepEP's low-latency EP8 kernels over RDMA at 128 tokens a rank, 77 us
#   dispatch (FP8) + 114 us combine (BF16) for 128 x 8 x 7168 x 3 x 7/8 bytes (deepseek-ai/DeepEP docs/legacy.md@0297fc8,
#   "Low-latency kernels with pure RDMA"), the slowest published expert-parallel transfer, against the card's link.
SPARSE_DECODE_FLOPS = {"hopper": 410e12, "blackwell": 350e12}
EP_SLOWEST_BYTES_S = 128 * 8 * 7168 * 3 * 7 / 8 / 191e-6
EXTRA = {"prefill_flops": "flops", "prefill_positions": "flops"}  # charged on top of another term: ceiling minus 1


def ceilings(family: str) -> dict[str, tuple[float, str]]:
    """The upper bound of every roofline coefficient of ``family``'s fit and why (see ``SPARSE_DECODE_FLOPS``)."""
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.steptime.hardware import PERF
    from csa_plan.planner.steptime.physics import MOE_TERMS, _record_bytes

    cards = [p for p in PERF.values() if p.family == family]
    hbm, bf16, link = (max(getattr(p, k) for p in cards) for k in ("hbm_bytes_s", "bf16_flops", "link_bytes_s"))
    rate = SPARSE_DECODE_FLOPS[family]
    widest = max((d for m in ("deepseek-v4-flash", "deepseek-v4-pro") for d in load_model(m).layers
                  if not d.is_mtp and d.compression_ratio > 1 and d.index_topk > 0), key=lambda d: d.num_heads)
    x_hbm = (4 * widest.num_heads * widest.head_dim / rate) / (_record_bytes(widest) / hbm)
    x_flops = bf16 / rate
    x_link = link / EP_SLOWEST_BYTES_S
    why_hbm = (f"FlashMLA sparse decode at {rate / 1e12:.0f} TFLOPS on {widest.num_heads} heads x {widest.head_dim}: "
               f"{x_hbm:.1f}x a {_record_bytes(widest)}-byte record's time at {hbm / 1e12:g} TB/s")
    why_flops = f"FlashMLA sparse decode at {rate / 1e12:.0f} of {bf16 / 1e12:g} dense BF16 TFLOPS: {x_flops:.1f}x"
    why_link = (f"DeepEP low-latency EP8 over RDMA at {EP_SLOWEST_BYTES_S / 1e9:.0f} GB/s against the "
                f"{link / 1e9:g} GB/s link: {x_link:.1f}x")
    out = {"weights": (x_hbm, why_hbm), "state": (x_hbm, why_hbm), "flops": (x_flops, why_flops),
           "prefill_flops": (x_flops - 1, why_flops + ", less the shared flops term"),
           "prefill_positions": (x_flops - 1, why_flops + ", less the shared flops term"),
           "comm": (x_link, why_link), "a2a_decode": (x_link, why_link), "a2a_prefill": (x_link, why_link)}
    for t in MOE_TERMS:  # the routed experts streamed once more, on top of the weights term
        out[t] = (x_hbm - 1, why_hbm + ", less the shared weights term")
    return out


LINK_TERMS = ("comm", "a2a_decode", "a2a_prefill")
# Applied: the HBM and FLOP ceilings. The link ceilings are computed and reported but not applied: held to them, the fit
# moves the vLLM TP prefill's and the DP-attention decode's unexplained time onto the position and MoE terms and the
# held-out TTFT median gets worse (docs/steptime.md, "Physical bounds"); ``--link-ceilings`` applies them too.


def upper(basis: tuple[str, ...], family: str, bounded: bool, link: bool = False):
    """The applied ceilings as a vector over ``basis`` (the floors ``step``, ``layer`` and ``request`` are seconds:
    unbounded; the link terms only with ``link``)."""
    c = {t: v for t, v in ceilings(family).items() if link or t not in LINK_TERMS} if bounded else {}
    return np.array([c[t][0] if t in c else np.inf for t in basis])


def usable(row: dict) -> str | None:
    """Why a row is not replayed, or None."""
    from csa_plan.planner.steptime.hardware import card_perf

    if not row["model"].startswith("deepseek-v4"):
        return "not DeepSeek-V4 (the roofline reads V4's compressed layers)"
    if row["engine"] not in ENGINES:
        return f"engine {row['engine']} is not replayed"
    if card_perf(row["gpu"]) is None:
        return f"no card figures for {row['gpu']} in planner/cards.py"
    if row["spec_method"] not in ("", "none", "EAGLE") or (row["spec_method"] == "EAGLE" and not row["spec_steps"]):
        return f"speculative decoding ({row['spec_method']}) without its steps stated"
    if not (row["tpot_ms"] or row["ttft_ms"] or row.get("itl_ms")) or not row["max_concurrency"] or not row["isl"] \
            or not row["osl"]:
        return "no TPOT, TTFT or ITL, concurrency or lengths"
    return None


FLAGS = {"sglang": {"max-running-requests": ("max_running_requests", int),
                    "mem-fraction-static": ("mem_fraction_static", float),
                    "chunked-prefill-size": ("chunked_prefill_size", int)},
         "vllm": {"max-num-batched-tokens": ("max_num_batched_tokens", int), "max-num-seqs": ("max_num_seqs", int),
                  "block-size": ("block_size", int)}}


def row_settings(row: dict) -> dict:
    """The cell's own engine flags that csa-plan's engine settings take (from the row's notes)."""
    import re

    out = {}
    for flag, (name, kind) in FLAGS[row["engine"]].items():
        m = re.search(rf"{flag} ([0-9.]+)", row["notes"])
        if m:
            out[name] = kind(m.group(1))
    return out


def layout(row: dict) -> tuple[int, int, int]:
    """(attention TP, DP ranks, EP) of the row's deployment as csa-plan's placement spells it."""
    world = int(row["num_gpus"] or row["tp"])
    dp = int(row["dp"] or 1)
    if row["engine"] == "sglang":
        if row["dp_attention"] != "true":
            dp = 1
        ep = int(row["ep"]) if row["ep"] else (world if "a2a" in row["moe_backend"] else 1)
        return world // dp, dp, ep
    ep = int(row["ep"]) if row["ep"] else 1
    return world // dp, dp, ep


def layout_name(row: dict) -> str:
    tp, dp, ep = layout(row)
    kind = ("DP-attention" if row["engine"] == "sglang" and dp > 1
            else "TP+DP" if dp > 1 and tp > 1 else "DP" if dp > 1 else "TP")
    return f"{kind} {tp}x{dp}" + (f" EP{ep}" if ep > 1 else "")


def split(row: dict) -> str:
    from csa_plan.planner.steptime.hardware import card_perf

    if row["model"] != "deepseek-v4-flash":
        return "held out: model"
    if row["engine"] != "sglang":  # vLLM: fitted on its own rows at whole-TP and whole-DP layouts
        tp, dp, _ = layout(row)
        if tp > 1 and dp > 1:
            return "held out: layout"  # TP4xDP2, TP2xDP4: neither fitted shape
        if int(row["max_concurrency"]) > VLLM_FIT_MAX_CONCURRENCY or int(row["isl"]) > VLLM_FIT_MAX_PROMPT:
            return "held out: regime"
        return "fit"
    if layout(row)[1] > 1 and card_perf(row["gpu"]).family == "hopper":
        return "held out: layout"
    if int(row["max_concurrency"]) not in FIT_CONCURRENCY:
        return "held out: regime"
    return "fit"


class _Captured(Exception):
    pass


def replay_row(row: dict, max_requests: int) -> dict:
    """The row's workload through the SGLang runtime (1 ns steps): every step's batch and every request's times."""
    import csa_plan.planner.serving.serve as serve_mod
    from csa_plan.planner.cards import CardBytes, card
    from csa_plan.planner.commands.simulate import SimulateRequest, run_simulate
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.errors import BadInput
    from csa_plan.planner.replay.loop import replay
    from csa_plan.planner.steptime.model import StepSource, StepTime
    from csa_plan.planner.replay.trace import runtime_trace
    from csa_plan.planner.workloads import MixSettings

    tp, dp, ep = layout(row)
    conc = int(row["max_concurrency"])
    n = min(int(row["num_prompts"] or 2 * conc), max_requests * dp)
    feats: list[tuple[float, ...]] = []

    def record(step):
        b = step.batch
        feats.append((b.prefill, b.prefill_pos, b.decode_reqs, b.decode_tokens, b.decode_ctx))

    one_ns = StepTime(20.0, 10_000.0, linear=(0.5e-9, 0, 0, 0, 0, 0, 0, -1.0), source=StepSource.FIXED)
    captured = {}

    def serve(setup, wl, rate_scale, progress=None):
        from csa_plan.planner.serving.replicas import split_round_robin

        trace = runtime_trace(wl, rate_scale)
        if setup.dp > 1:  # replica 0 stands for all: the rows' requests are all alike
            trace = split_round_robin(trace, setup.dp)[0][0]
        res = replay(setup.plan.runtime(setup.sizing, trace, setup.options), trace, one_ns,
                     max_concurrency=-(-conc // setup.dp), on_step=record)
        captured["res"] = res
        raise _Captured  # the replay is all the fit needs: no report of one replica

    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for _ in range(n):
            f.write(json.dumps({"arrival_s": 0, "prompt_tokens": int(row["isl"]), "output_tokens": int(row["osl"])})
                    + "\n")
        path = f.name
    original = serve_mod.serve
    serve_mod.serve = serve
    try:
        given = MixSettings(model=row["model"], tp=tp, dp=dp, ep=ep if ep > 1 else None,
                            device_memory_bytes=CardBytes(card(row["gpu"])), step_time="fixed", max_concurrency=conc,
                            max_seq_len=max(8192, int(row["isl"]) + int(row["osl"])))
        try:
            outcome = run_simulate(SimulateRequest(path, given, engine=ENGINES[row["engine"]],
                                                   engine_settings=EngineSettings(gpu=row["gpu"],
                                                                                  **row_settings(row))))
        except _Captured:
            outcome = None
        except BadInput as exc:  # the engine refuses the cell before its runtime is planned (too little memory)
            return {"refused": str(exc)[:200]}
    finally:
        serve_mod.serve = original
        Path(path).unlink()
    if "res" not in captured:
        why = (outcome.report.get("engine_refusal") or {}).get("message") or f"exit {int(outcome.exit_code)}"
        return {"refused": str(why)[:200]}
    res = captured["res"]
    return {"feats": np.asarray(feats, dtype=np.float64), "end": np.asarray(res.series.end_ns, dtype=np.int64),
            "first": np.asarray(res.first_token_ns), "fin": np.asarray(res.finished_ns),
            "arr": np.asarray(res.arrival_ns), "requests": n, "peak_running": int(np.max(res.series.running)),
            "replica_concurrency": -(-conc // dp)}


def row_backend(row: dict) -> str | None:
    """The MoE backend term of the row (``physics.moe_backend_key``): its published backend, or, where none
    is stated, the engine's default as csa-plan's engine model resolves it for the row's card."""
    from csa_plan.planner.steptime.physics import moe_backend_key

    name = row["moe_backend"]
    if not name and row["engine"] == "sglang":
        from csa_plan.planner.engines.settings import gpu_target
        from csa_plan.planner.engines.sglang.startup import moe_runner

        name = str(moe_runner(None, gpu_target(row["gpu"])).value)
    return moe_backend_key(row["engine"], name)


def basis_vectors(row: dict, rec: dict) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(TPOT basis, TTFT basis), each per request (one row a request) or None: the steps' basis terms summed
    over each request's decode (per output token) and over its wait for the first token."""
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.steptime.hardware import card_perf
    from csa_plan.planner.steptime.physics import ALL_TERMS as BASIS, basis_rows, model_cost
    from csa_plan.planner.serving.step_source import model_inputs
    from csa_plan.planner.steptime.model import linear_seconds

    from csa_plan.planner.placement import Placement
    from csa_plan.planner.weights.rules import rules_for

    spec = load_model(row["model"])
    data, inventory = model_inputs(spec)
    tp, dp, ep = layout(row)
    cost = model_cost(spec, data, inventory, rules_for(ENGINES[row["engine"]]),
                      Placement(tp=tp, dp=dp, ep=ep if ep > 1 else None))
    from csa_plan.planner.steptime.drafts import DraftMethod, draft_plan

    perf = card_perf(row["gpu"])
    backend = row_backend(row)
    vecs = basis_rows(cost, perf, None, backend)
    f = rec["feats"]
    steps = int(row["spec_steps"] or 0) if row["spec_method"] == "EAGLE" else 0
    draft = (int(row["spec_draft_tokens"] or steps + 1) - 1) if steps else 0
    plan = draft_plan(DraftMethod.EAGLE, draft)
    spec_vecs = basis_rows(cost, perf, plan, backend) if plan is not None else vecs  # the drafter's passes and verify pass

    def phi(feats: np.ndarray, spec: bool) -> np.ndarray:
        out = np.empty((len(feats), len(BASIS)))
        v = spec_vecs if spec else vecs
        for k, (p, pos, dreq, dtok, dctx) in enumerate(feats):
            if spec and dreq:
                dtok = dreq * (1 + draft)
            tokens = int(p + dtok)
            for j, term in enumerate(BASIS):
                out[k, j] = linear_seconds(v[term], tokens, int(p), pos, int(dreq), int(dctx))
        return out

    end = rec["end"]
    at = lambda t: np.searchsorted(end, t, side="left") + 1  # steps ended by t (t is a step end, or 0)
    first, fin, arr = rec["first"], rec["fin"], rec["arr"]
    ok = (fin >= 0) & (first >= 0)
    osl = int(row["osl"])
    per_step = phi(f, bool(steps))
    cum = np.vstack([np.zeros((1, len(BASIS))), np.cumsum(per_step, axis=0)])
    accept = sum(ACCEPTANCE ** j for j in range(draft + 1))
    tpot = ((cum[at(fin[ok])] - cum[at(first[ok])]) / (osl - 1)) / accept if row["tpot_ms"] else None
    ttft = None
    if row["ttft_ms"] and TTFT_MIN <= int(row["max_concurrency"]) <= TTFT_MAX:
        plain = np.vstack([np.zeros((1, len(BASIS))), np.cumsum(phi(f, False), axis=0)])
        start = np.where(arr[ok] > 0, at(arr[ok]), 0)
        ttft = plain[at(first[ok])] - plain[start]
    # ITL (a check, never a target): each decoding request of a step gets its next token when the step ends, so the
    # gaps between consecutive tokens are the steps' durations, one per decoding request (its first token comes from
    # the step that finished its prompt, not a decode)
    itl = None
    if row.get("itl_ms") and not steps:
        gaps = f[:, 2] > 0
        itl = (per_step[gaps], f[gaps, 2])
    return tpot, ttft, itl


def itl_p50(itl: tuple[np.ndarray, np.ndarray] | None, beta: np.ndarray) -> np.ndarray | None:
    """The basis vector of the step whose duration is the median inter-token gap under ``beta``: the steps weighted
    by the tokens they give (``basis_vectors``)."""
    if itl is None:
        return None
    steps, tokens = itl
    order = np.argsort(steps @ beta, kind="stable")
    count = np.cumsum(tokens[order])
    return steps[order[int(np.searchsorted(count, count[-1] / 2.0))]]


def p50(per_request: np.ndarray | None, beta: np.ndarray) -> np.ndarray | None:
    """The basis vector of the request whose time is the median under ``beta`` (the rows publish p50s; each
    fit round picks the median request again under the last round's coefficients)."""
    if per_request is None:
        return None
    times = per_request @ beta
    return per_request[int(np.argsort(times, kind="stable")[(len(times) - 1) // 2])]


def exercised(fitted) -> np.ndarray:
    """Which basis terms any request of the fitted rows exercises (a non-zero column in a TPOT or TTFT basis)."""
    mask = None
    for u in fitted:
        for kind in ("tpot", "ttft"):
            if u[kind] is not None:
                col = np.any(np.asarray(u[kind]) != 0, axis=0)
                mask = col if mask is None else mask | col
    return mask


def borrow_unexercised(betas: dict, seen: dict, basis: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """A term no fitted row of a GPU family exercises is not identified by that family's fit: NNLS leaves it at its
    floor (the roofline, for a link or memory term), which no row has checked. It takes the other family's fitted value
    instead, where that family's rows exercise it: every coefficient is a multiple of its own card's roofline (bytes,
    FLOPs, link bytes over that card's datasheet figure), so it carries across cards as vLLM's unfitted terms carry
    from SGLang's (``VLLM_FREE``). Returns, per family, each term it took and the family it took it from (reported in
    the output and the fit file)."""
    taken = {}
    for fam, mask in seen.items():
        others = [f for f in seen if f != fam and seen[f] is not None]
        if mask is None or len(others) != 1:
            continue
        donor = others[0]
        terms = [j for j in range(len(basis)) if not mask[j] and seen[donor][j]]
        for j in terms:
            betas[fam][j] = betas[donor][j]
        taken[fam] = {basis[j]: donor for j in terms}
    return taken


def replay_all(rows: list[dict], max_requests: int, cache: str | None) -> list[dict]:
    """Every usable row's basis vectors (replayed, or read from ``cache``, keyed by the row's text)."""
    import pickle

    store = {}
    if cache and Path(cache).exists():
        store = pickle.loads(Path(cache).read_bytes())
    used = []
    for i, row in enumerate(rows):
        if usable(row) is not None:
            continue
        key = json.dumps(row, sort_keys=True)
        if key not in store:  # the replay's step batches: the basis is computed from them on every run
            print(f"replaying row {i}: {row['engine']} {row['model']} {row['gpu']} x{row['num_gpus']} "
                  f"{layout_name(row)} c{row['max_concurrency']} {row['spec_method'] or 'no spec'}", file=sys.stderr,
                  flush=True)
            rec = replay_row(row, max_requests)
            if "refused" in rec:
                print(f"row {i}: not replayed: {rec['refused']}", file=sys.stderr)
                store[key] = None
                continue
            store[key] = rec
        if store[key] is None:
            continue
        rec = store[key]
        tpot, ttft, itl = basis_vectors(row, rec)
        used.append({"i": i, "row": row, "tpot": tpot, "ttft": ttft, "itl": itl, "split": split(row),
                     "peak_running": rec["peak_running"], "requests": rec["requests"]})
    if cache:
        Path(cache).write_bytes(pickle.dumps(store))
    return used


def main(argv: list[str] | None = None) -> int:
    from csa_plan.planner.steptime.hardware import card_perf
    from csa_plan.planner.steptime.nnls import bounded_nnls
    from csa_plan.planner.steptime.physics import ALL_TERMS as BASIS, MOE_TERMS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default=str(ROOT / "benchmarks" / "published_serving.csv"))
    ap.add_argument("--max-requests", type=int, default=1024)
    ap.add_argument("--cache", help="keep the replays' basis vectors in this file (a rerun reads them)")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--no-ceilings", action="store_true",
                    help="fit without the physical ceilings (``ceilings``): the coefficients only floored")
    ap.add_argument("--link-ceilings", action="store_true",
                    help="hold the link terms (comm, a2a_*) to their ceilings too (reported, not shipped)")
    args = ap.parse_args(argv)
    rows = list(csv.DictReader(open(args.csv, newline="", encoding="utf-8")))
    used = replay_all(rows, args.max_requests, args.cache)
    family = lambda r: card_perf(r["gpu"]).family
    betas, seen = {}, {}
    for fam in sorted({family(u["row"]) for u in used if u["split"] == "fit" and u["row"]["engine"] == "sglang"}):
        lo = np.array([FLOOR.get(t, 0.0) for t in BASIS])
        hi = np.maximum(upper(BASIS, fam, not args.no_ceilings, args.link_ceilings), lo)
        beta = lo.copy()
        for _ in range(FIT_ROUNDS):
            a = []
            for u in used:
                if u["split"] != "fit" or family(u["row"]) != fam or u["row"]["engine"] != "sglang":
                    continue
                if u["tpot"] is not None:
                    a.append(p50(u["tpot"], beta) / (float(u["row"]["tpot_ms"]) / 1e3))
                if u["ttft"] is not None:
                    a.append(p50(u["ttft"], beta) / (float(u["row"]["ttft_ms"]) / 1e3))
            a = np.array(a)
            beta = lo + bounded_nnls(a, np.ones(len(a)) - a @ lo, hi - lo)
        betas[fam] = beta
        seen[fam] = exercised(u for u in used if u["split"] == "fit" and family(u["row"]) == fam
                              and u["row"]["engine"] == "sglang")
    borrowed = borrow_unexercised(betas, seen, BASIS)
    # vLLM: its own coefficients per family, fitted on the vLLM rows of the "fit" split (NNLS on relative error, as
    # SGLang's): the VLLM_FREE terms are free (floors and prefill terms at least 0, roofline terms at least 1), the
    # rest are SGLang's of the family; SGLang's MoE backend terms are not vLLM's kernels and are 0
    vbetas = {}
    for fam in sorted({family(u["row"]) for u in used if u["split"] == "fit" and u["row"]["engine"] == "vllm"}):
        mine = [u for u in used if u["split"] == "fit" and u["row"]["engine"] == "vllm" and family(u["row"]) == fam]
        beta = betas[fam].copy()
        for t in MOE_TERMS:
            beta[BASIS.index(t)] = 0.0
        free = [BASIS.index(t) for t in VLLM_FREE]
        fixed = [j for j in range(len(BASIS)) if j not in free]
        lo = np.array([FLOOR.get(BASIS[j], 0.0) for j in free])
        hi = np.maximum(upper(BASIS, fam, not args.no_ceilings, args.link_ceilings)[free], lo)
        beta[free] = lo
        for _ in range(FIT_ROUNDS):
            a = np.array([p50(u[kind], beta) / (float(u["row"][f"{kind}_ms"]) / 1e3)
                          for u in mine for kind in ("tpot", "ttft") if u[kind] is not None])
            beta[free] = lo + bounded_nnls(a[:, free], np.ones(len(a)) - a[:, fixed] @ beta[fixed] - a[:, free] @ lo,
                                           hi - lo)
        vbetas[fam] = beta
    table = []
    err = lambda pred, m: None if pred is None or not m else round(pred / m - 1, 4)
    for u in used:
        row, fam = u["row"], family(u["row"])
        own = (vbetas if row["engine"] == "vllm" and fam in vbetas else betas).get(fam, betas["hopper"])
        other = [b for f_, b in betas.items() if f_ != fam]
        m_tpot = float(row["tpot_ms"]) if row["tpot_ms"] else None
        m_ttft = float(row["ttft_ms"]) if row["ttft_ms"] else None
        tpot = None if u["tpot"] is None else float(p50(u["tpot"], own) @ own) * 1e3
        ttft = None if u["ttft"] is None else float(p50(u["ttft"], own) @ own) * 1e3
        m_itl = float(row["itl_ms"]) if row.get("itl_ms") else None
        itl = None if u["itl"] is None else float(itl_p50(u["itl"], own) @ own) * 1e3
        cross = float(p50(u["tpot"], other[0]) @ other[0]) * 1e3 if other and u["tpot"] is not None else None
        table.append({"row": u["i"], "source": row["source_id"], "engine": row["engine"], "model": row["model"],
                      "gpu": row["gpu"], "gpus": int(row["num_gpus"] or row["tp"]), "layout": layout_name(row),
                      "isl": int(row["isl"]), "concurrency": int(row["max_concurrency"]),
                      "spec": row["spec_method"] or "none", "moe_backend": row_backend(row) or "-",
                      "split": u["split"], "tpot_ms": m_tpot,
                      "tpot_pred_ms": None if tpot is None else round(tpot, 2), "tpot_err": err(tpot, m_tpot),
                      "tpot_err_other_family_fit": err(cross, m_tpot),
                      "ttft_ms": m_ttft, "ttft_pred_ms": None if ttft is None else round(ttft, 1),
                      "ttft_err": err(ttft, m_ttft), "itl_ms": m_itl, "itl_pred_ms": None if itl is None else round(itl, 2),
                      "itl_err": err(itl, m_itl), "peak_running": u["peak_running"], "requests": u["requests"]})
    for fam, beta in betas.items():
        print(f"beta sglang/{fam}: {dict(zip(BASIS, (float(b) for b in beta)))}")
        if borrowed.get(fam):
            print(f"  sglang/{fam} took from the other family (no fitted {fam} row exercises them): "
                  f"{', '.join(borrowed[fam])}")
    for fam, beta in vbetas.items():
        print(f"beta vllm/{fam}: {dict(zip(BASIS, (float(b) for b in beta)))}")
    fmt = lambda v: "-" if v is None else f"{v:+.1%}"
    num = lambda v, f: "-" if v is None else format(v, f)
    print(f"{'row':>4} {'engine':6} {'model':18} {'gpu':5} {'n':>2} {'layout':22} {'isl':>7} {'conc':>5} {'spec':6} "
          f"{'split':17} {'TPOT':>7} {'pred':>7} {'err':>7} {'x-fam':>7} {'TTFT':>8} {'pred':>8} {'err':>7} "
          f"{'ITL':>7} {'pred':>7} {'err':>7}")
    for t in table:
        print(f"{t['row']:>4} {t['engine']:6} {t['model']:18} {t['gpu']:5} {t['gpus']:>2} {t['layout']:22} {t['isl']:>7} "
              f"{t['concurrency']:>5} {t['spec']:6} {t['split']:17} {num(t['tpot_ms'], '7.2f'):>7} "
              f"{num(t['tpot_pred_ms'], '7.2f'):>7} {fmt(t['tpot_err']):>7} {fmt(t['tpot_err_other_family_fit']):>7} "
              f"{num(t['ttft_ms'], '8.0f'):>8} {num(t['ttft_pred_ms'], '8.0f'):>8} {fmt(t['ttft_err']):>7} "
              f"{num(t['itl_ms'], '7.1f'):>7} {num(t['itl_pred_ms'], '7.1f'):>7} {fmt(t['itl_err']):>7}")
    summary = {}

    def add(name, errs):
        errs = [abs(e) for e in errs if e is not None]
        if errs:
            summary[name] = {"rows": len(errs), "median_abs_err": round(float(np.median(errs)), 4),
                             "max_abs_err": round(float(max(errs)), 4)}

    for part in sorted({t["split"] for t in table}):
        add(f"TPOT {part}", [t["tpot_err"] for t in table if t["split"] == part])
        add(f"TTFT {part}", [t["ttft_err"] for t in table if t["split"] == part])
    add("TPOT held out: GPU family (the other family's fit)",
        [t["tpot_err_other_family_fit"] for t in table if t["split"] == "fit" and t["engine"] == "sglang"])
    for eng in ("vllm", "sglang"):  # each engine's rows on their own
        name = {"vllm": "vLLM", "sglang": "SGLang"}[eng]
        for part in sorted({t["split"] for t in table if t["engine"] == eng}):
            for m in ("TPOT", "TTFT"):
                add(f"{m} {name} {part}", [t[f"{m.lower()}_err"] for t in table if t["engine"] == eng and t["split"] == part])

    def engine_cross(eng: str, other: dict, metric: str) -> list:
        """Another engine: ``eng``'s rows under the other engine's coefficients of their family, unadjusted."""
        out = []
        for u in used:
            fam = family(u["row"])
            if u["row"]["engine"] == eng and u[metric] is not None and fam in other and fam in vbetas:
                b = other[fam]
                out.append(float(p50(u[metric], b) @ b) / (float(u["row"][f"{metric}_ms"]) / 1e3) - 1)
        return out

    for m in ("TPOT", "TTFT"):
        add(f"{m} held out: engine (vLLM rows under the SGLang fit)", engine_cross("vllm", betas, m.lower()))
        add(f"{m} held out: engine (SGLang rows under the vLLM fit)", engine_cross("sglang", vbetas, m.lower()))
    add("TPOT all held out", [t["tpot_err"] for t in table if t["split"] != "fit"])
    add("TTFT all held out", [t["ttft_err"] for t in table if t["split"] != "fit"])
    add("ITL vLLM held out (a check: ITL is never a fit target)", [t["itl_err"] for t in table if t["engine"] == "vllm"])
    for kind in ("TP", "DP", "TP+DP", "DP-attention"):
        mine = [t for t in table if t["layout"].split()[0] == kind]
        add(f"TPOT by layout: {kind}", [t["tpot_err"] for t in mine])
        add(f"TTFT by layout: {kind}", [t["ttft_err"] for t in mine])
    for b in sorted({t["moe_backend"] for t in table}):
        add(f"TPOT by MoE backend: {b}", [t["tpot_err"] for t in table if t["moe_backend"] == b])
    print(json.dumps(summary, indent=1))
    if args.write:
        fits = {}

        def bounds(fam: str) -> dict:
            """Each roofline coefficient's ceiling, why, and whether the fit was held to it (``ceilings``)."""
            return {t: {"max": round(v, 3), "why": why, "applied": not args.no_ceilings
                        and (args.link_ceilings or t not in LINK_TERMS)} for t, (v, why) in ceilings(fam).items()}
        for fam, beta in betas.items():
            mine = [t for t in table if family(t) == fam and t["engine"] == "sglang"]
            own = [abs(t["tpot_err"]) for t in mine if t["split"] == "fit" and t["tpot_err"] is not None]
            held = [abs(t["tpot_err"]) for t in mine if t["split"] != "fit" and t["tpot_err"] is not None]
            ttft = [abs(t["ttft_err"]) for t in mine if t["split"] == "fit" and t["ttft_err"] is not None]
            ttft_held = [abs(t["ttft_err"]) for t in mine if t["split"] != "fit" and t["ttft_err"] is not None]
            band = f"TPOT median |error| {np.median(own):.0%} in-sample ({len(own)} rows, max {max(own):.0%})"
            if held:
                band += f", {np.median(held):.0%} held out ({len(held)} rows, max {max(held):.0%})"
            cross = summary.get("TPOT held out: GPU family (the other family's fit)")
            if cross:
                band += f", {cross['median_abs_err']:.0%} on the other GPU family"
            if ttft:
                band += f"; TTFT {np.median(ttft):.0%} in-sample ({len(ttft)} rows)"
            if ttft_held:
                band += f", {np.median(ttft_held):.0%} held out ({len(ttft_held)} rows, max {max(ttft_held):.0%})"
            gpus = sorted({t["gpu"] for t in mine if t["split"] == "fit"})
            fits[f"sglang/{fam}"] = {"beta": dict(zip(BASIS, (float(b) for b in beta))),
                                     "data": f"{len(own)} SGLang 0.5.12-0.5.16 V4-Flash rows on {', '.join(gpus)} "
                                             "(the SGLang cookbook, benchmarks/published_serving.csv)"
                                             + "".join(f"; {', '.join(t for t, d in borrowed[fam].items() if d == donor)} "
                                                       f"from sglang/{donor}'s fit (no fitted {fam} row exercises them)"
                                                       for donor in sorted(set(borrowed.get(fam, {}).values()))),
                                     "band": band, "ceilings": bounds(fam),
                                     "borrowed": borrowed.get(fam, {}),
                                     "moe_rows": {b: sum(1 for t in mine if t["split"] == "fit" and t["moe_backend"] == b)
                                                  for b in sorted({t["moe_backend"] for t in mine
                                                                   if t["split"] == "fit" and t["moe_backend"] != "-"})}}
        for fam, beta in vbetas.items():
            mine = [t for t in table if family(t) == fam and t["engine"] == "vllm"]

            def med(metric: str, fitted: bool) -> str:
                errs = [abs(t[f"{metric}_err"]) for t in mine
                        if t[f"{metric}_err"] is not None and (t["split"] == "fit") == fitted]
                if len(errs) == 1:
                    return f"{errs[0]:.0%} {'in-sample' if fitted else 'held out'} (one row)"
                return (f"{np.median(errs):.0%} {'in-sample' if fitted else 'held out'} ({len(errs)} rows, max "
                        f"{max(errs):.0%})") if errs else f"no {'fitted' if fitted else 'held-out'} rows"

            held = {part: [abs(t["ttft_err"]) for t in mine if t["split"] == part and t["ttft_err"] is not None]
                    for part in sorted({t["split"] for t in mine} - {"fit"})}
            by = ", ".join(f"{part.split(': ')[1]} {np.median(e):.0%} ({len(e)})" for part, e in held.items() if e)
            gpus = sorted({t["gpu"] for t in mine if t["split"] == "fit"})
            n_fit = sum(t["split"] == "fit" for t in mine)
            itl_rows = ", ".join(f"{t['model'].removeprefix('deepseek-')} {t['isl']:,}-token prompts {t['itl_err']:+.0%}"
                                 for t in mine if t["itl_err"] is not None)
            batch = ", ".join(f"{t['model'].removeprefix('deepseek-')} {t['isl']:,}-token prompts at {t['concurrency']} {t['tpot_err']:+.0%}"
                              for t in mine if t["tpot_err"] is not None and t["split"] != "fit"
                              and int(t["concurrency"]) > 1)
            fits[f"vllm/{fam}"] = {"beta": dict(zip(BASIS, (float(b) for b in beta))),
                                   "data": f"{n_fit} vLLM 0.25 V4-Flash-0731 rows on {', '.join(gpus)} (TP8 and DP8 with EP8, "
                                           "32K-256K prompts at concurrency 1-8: vllm-project/vllm#51454 and "
                                           "stewtong/dsv4-flash-0731, benchmarks/published_serving.csv; "
                                           f"{', '.join(VLLM_FREE)} fitted, the rest sglang/{fam}'s)",
                                   "band": f"TTFT median |error| {med('ttft', True)}, {med('ttft', False)}: by split {by}; "
                                           f"TPOT {med('tpot', True)}, {med('tpot', False)} (fitted: DP8 at concurrency 1 "
                                           f"only; held out at a decode batch: {batch or 'no rows'}"
                                           + (f"; ITL p50 held out: {itl_rows}" if itl_rows else "") + ")",
                                   "ceilings": bounds(fam)}
        out = {"schema": "csa-plan/steptime-fit/v2", "default": "sglang/hopper",
               "method": "tools/fit_steptime.py: NNLS (roofline coefficients at least 1 and at most their physical "
                         "ceilings, each fit's `ceilings`) on the relative p50 TPOT and "
                         f"TTFT (TTFT at concurrency {TTFT_MIN} to {TTFT_MAX}) of closed-loop replays of "
                         "benchmarks/published_serving.csv, each rank costed "
                         f"by its engine's shard rules at the row's layout; EAGLE rows at acceptance {ACCEPTANCE}",
               "acceptance": ACCEPTANCE, "fits": fits, "rows": table, "summary": summary}
        FIT_PATH.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        from csa_plan.planner.steptime.physics import fit_table_markdown

        doc = ROOT / "docs" / "steptime.md"
        text = doc.read_text(encoding="utf-8")
        head, rest = text.split(TABLE_START, 1)
        _, tail = rest.split(TABLE_END, 1)
        doc.write_text(head + TABLE_START + "\n" + fit_table_markdown(out) + TABLE_END + tail, encoding="utf-8")
        print(f"wrote {FIT_PATH} and the table in {doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
