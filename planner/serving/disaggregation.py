"""Prefill/decode disaggregation: a prefill pool and a decode pool, each its own engine instance, composed
from the one replay loop (``loop.replay``) and the replicas (``replicas``) every served run uses.

What a request goes through (the engines' P/D paths, vLLM 0.33.0 with its NIXL connector, SGLang 0.5.23
``--disaggregation-mode prefill|decode``):

1. **Prefill.** The prefill worker (round-robin over ``--prefill-workers``) serves the request as
   a prefill-only request: ``max_tokens`` 1 (vLLM ``distributed/kv_transfer/kv_connector/v1/nixl/
   base_scheduler.py:440``; SGLang ``srt/disaggregation/prefill.py:480-482`` sets ``max_new_tokens = 1``
   "so PrefillAdder memory estimation is accurate"), through the engine's own scheduler, pool and
   prefix cache: the trace with every output set to 1, replayed as any served run.
2. **Transfer.** Its state moves to a decode worker (round-robin over ``--decode-workers``) over the
   link the deployment names (``--transfer-link``; ``cards.LINKS``): the bytes are the request's own,
   the decode engine's footprint of its prompt per GPU (``EnginePlan.footprint``, the blocks / pages
   the request holds, as the connectors move whole blocks: ``nixl/pull_scheduler.py:270``
   ``get_exchange_clipped_blocks``), every rank pulling its share over its own NIC at once; a
   worker's transfers queue one after another on its links (FIFO by the time prefill ended). Where the
   decode engine keeps a prefix cache (vLLM: ``disagg_decode_caching``), only the prompt past the decode
   side's own hit moves: the footprint of those tokens (``serve_disaggregated_trace``).
3. **Memory held during the transfer.** The prefill side keeps the request's blocks until the
   decode side has read them: vLLM's ``request_finished`` returns ``delay_free_blocks``
   (``nixl/pull_scheduler.py:248-278``; the scheduler skips ``_free_blocks``,
   ``v1/core/sched/scheduler.py:3057-3059``) until the consumer's notification; SGLang keeps the
   request in ``disagg_prefill_inflight_queue`` and calls ``release_kv_cache`` only when the
   sender polls ``KVPoll.Success`` (``srt/disaggregation/prefill.py:1151-1228``). Here each engine
   runtime holds them as its engine does, from the prefill's end to the transfer's end, so the
   prefill scheduler admits against the smaller free pool (``serving/transfer_hold.py``: the rounds
   that make the prefill ends, the link queue and the holds agree).
4. **Decode.** The decode worker admits the request at the transfer's end with its prompt's KV
   loaded: vLLM loads ``len(prompt)`` tokens (``nixl/pull_scheduler.py:59-65``, backoff 0 without
   MTP) and recomputes the last one so it can sample (``scheduler.py:3515-3516``); SGLang's
   decode side pre-allocates and receives the pages (``srt/disaggregation/decode.py:387``
   ``DecodePreallocQueue``). The decode engine's own scheduler runs (``RemoteKvRuntime``): its
   blocks are allocated as for a prompt (its prefix-cache hit, where it keeps one, adopted as in any
   replay), but the loaded and the hit positions cost no step time; only the last prompt token is
   computed. A request preempted (retracted) on the decode side recomputes its
   prompt there, as both engines do.

TTFT is the client's: arrival to the decode side's first token = prefill queue + prefill + transfer
(link queue included) + the decode side's queue and first step. TPOT is the decode side's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from csa_plan.planner.replay.protocol import EngineRuntime, Step, WrappedRuntime, admission_hits

if TYPE_CHECKING:
    from csa_plan.planner.replay.result import RuntimeResult
    from csa_plan.planner.serving.report import RuntimeReport
    from csa_plan.planner.serving.transfer_hold import HeldPrefill
    from csa_plan.planner.serving.serve import RuntimeSetup
    from csa_plan.planner.workloads import Workload


@dataclass(frozen=True)
class Role:
    """One role's deployment: ``workers`` independent engine instances, each of ``dp`` data-parallel ranks of
    ``tp`` GPUs (``tp x dp`` GPUs a worker), expert parallelism over ``ep`` of them. The shape reads as the
    aggregated ``--tp/--dp/--ep`` do (``engines/flags.py``): vLLM ``--data-parallel-size dp`` engine cores
    (with ``--enable-expert-parallel``: ep = tp x dp); SGLang ``--tp-size tp*dp --dp-size dp
    --enable-dp-attention`` (attention TP = tp-size / dp-size = ``tp``, ``--max-running-requests`` divided by
    dp per rank) and ``--ep-size ep``. Each rank has its own pool (the device budget per rank), as an
    aggregated ``--dp`` replay sizes and replays it."""

    workers: int
    tp: int
    dp: int = 1
    ep: int | None = None  # None: no expert parallelism (the engines' default)

    @property
    def gpus(self) -> int:
        return self.workers * self.tp * self.dp

    @property
    def ranks(self) -> int:
        """Data-parallel ranks of the role, each with its own scheduler and pool (requests dealt round-robin)."""
        return self.workers * self.dp

    @property
    def shape(self) -> str:
        """``tp8``, ``tp2 dp8 ep16``: the role's worker as the aggregated flags spell it."""
        text = f"tp{self.tp}" + (f" dp{self.dp}" if self.dp > 1 else "")
        return text + (f" ep{self.ep}" if self.ep is not None and self.ep > 1 else "")


@dataclass(frozen=True)
class Disaggregation:
    """``--prefill-workers/--prefill-tp/--prefill-dp/--prefill-ep``, the decode role's alike, ``--transfer-link``."""

    prefill: Role
    decode: Role
    link: str | None = None  # None: nvlink when both roles fit one NVLink domain, else ib-ndr

    @property
    def gpus(self) -> int:
        return self.prefill.gpus + self.decode.gpus

    @property
    def label(self) -> str:
        """``1P tp8 + 2D tp8`` (xPyD, each role's shape), with the link when one is named."""
        text = f"{self.prefill.workers}P {self.prefill.shape} + {self.decode.workers}D {self.decode.shape}"
        return text if self.link is None else f"{text} over {self.link}"


from csa_plan.planner.cards import default_link  # noqa: E402,F401  (its home: the link table; pipeline stages use it too)


class RemoteKvRuntime(WrappedRuntime):
    """The decode side: the engine's own runtime (``inner``), its prompt's KV loaded from the prefill
    side. The inner scheduler allocates and schedules the prompt as it would (blocks, token budget,
    preemption, and its own prefix cache where the decode side keeps one: a hit is not scheduled at all);
    this wrapper takes the loaded positions (past the hit, up to prompt - 1) out of each step's batch,
    so only the last prompt token is computed (vLLM ``scheduler.py:3515-3516``). A request that was
    preempted recomputes everything (its loaded blocks were freed). ``hit_tokens``: each request's decode-side
    prefix hit at its first admission (``protocol.admission_hits``), the tokens its transfer did not carry."""

    def __init__(self, inner: EngineRuntime, prompt_tokens: list[int], cached: bool = False) -> None:
        super().__init__(inner)
        self._prompt = prompt_tokens
        self._cached = cached  # the decode side looks up its own prefix cache (disagg_decode_caching)
        self._computed: dict[int, int] = {}
        self._lost: set[int] = set()
        self.loaded_tokens = 0  # prompt tokens taken from the transfer instead of computed
        self.hit_tokens: dict[int, int] = {}

    def add(self, r: int) -> None:
        self._computed[r] = 0
        self.inner.add(r)

    def schedule(self) -> Step:
        step = self.inner.schedule()
        for r in step.preempted:
            self._lost.add(r)
        if self._cached:
            for r, h in admission_hits(step, self._prompt, self.hit_tokens).items():
                self.hit_tokens[r] = h
                self._computed[r] = h
        free_n, free_pos = 0, 0.0
        for r, n in zip(step.requests, step.tokens):
            before = 0 if r in step.preempted else self._computed.get(r, 0)
            self._computed[r] = before + n
            if r in self._lost:
                continue
            last = self._prompt[r] - 1  # positions hit + 1 .. last arrive over the link
            if before < last:
                k = min(n, last - before)
                free_n += k
                free_pos += float(k * before + k * (k + 1) // 2)
        if free_n:
            step.batch.prefill -= free_n
            step.batch.prefill_pos -= free_pos
            step.prefill_tokens -= free_n
            self.loaded_tokens += free_n
        return step

    def notes(self) -> tuple[str, ...]:
        cache = ("the decode side's own prefix cache looked up at its admission (vLLM: local hit first, the "
                 "connector pulls the rest), the transfer carrying only the blocks it lacks" if self._cached else
                 "no prefix cache on the decode side (SGLang's --disaggregation-decode-enable-radix-cache is off "
                 "by default; with prefix caching off)")
        return self.inner.notes() + ("decode side of a disaggregated deployment: each prompt's KV is loaded, not "
                                     "computed (its last token is), and its blocks are allocated as the scheduler "
                                     "admits it; the loaded prompt still passes the token budget as chunks "
                                     "(the engines load it outside the budget: up to ceil(prompt / budget) - 1 "
                                     f"extra decode steps before the first token); {cache}",)


@dataclass(frozen=True)
class Transfers:
    """Per request (-1 / 0 where the prefill side refused it): when its transfer started and ended, its
    bytes per GPU (each rank's share) and over all ranks, and the bytes per GPU the decode side's prefix hit
    spared it (its whole prompt's footprint less what moved)."""

    start_ns: Any
    end_ns: Any
    bytes_per_gpu: Any
    bytes_total: Any
    link_bytes_s: float
    saved_bytes_per_gpu: Any = None  # None: no prefix cache on the decode side
    gpus: int = 1  # a decode rank's GPUs, each pulling its share at once (bytes_total = bytes_per_gpu x gpus)


def footprint_of(plan: Any, tokens: int, cache: dict[int, Any]) -> Any:
    """The request's footprint per GPU once its prompt is in (decode phase: windows at their bound)."""
    from csa_plan.planner.engines.engine import Phase

    fp = cache.get(tokens)
    if fp is None:
        fp = cache[tokens] = plan.footprint(tokens, Phase.DECODE)
    return fp


def schedule_transfers(ready_ns: Any, bytes_per_gpu: Any, link_bytes_s: float, prefill_of: Any, decode_of: Any) -> tuple[Any, Any]:
    """FIFO by ready time: a transfer starts when its prefill worker's and its decode worker's links are both
    free, and lasts its bytes per GPU over the link (every rank at once). Returns (start_ns, end_ns)."""
    import numpy as np

    n = len(ready_ns)
    start = np.full(n, -1, dtype=np.int64)
    end = np.full(n, -1, dtype=np.int64)
    p_free: dict[int, int] = {}
    d_free: dict[int, int] = {}
    for i in np.argsort(ready_ns, kind="stable"):
        t = int(ready_ns[i])
        if t < 0:
            continue
        p, d = int(prefill_of[i]), int(decode_of[i])
        s = max(t, p_free.get(p, t), d_free.get(d, t))
        e = s + int(np.ceil(int(bytes_per_gpu[i]) / link_bytes_s * 1e9))
        start[i], end[i] = s, e
        p_free[p] = d_free[d] = e
    return start, end


def _int_quantiles(values: Any) -> dict[str, int | None]:
    import numpy as np

    v = np.asarray(values, dtype=np.int64)
    if not len(v):
        return {"p50": None, "p99": None, "max": None}
    q = np.quantile(v, [0.5, 0.99], method="inverted_cdf")
    return {"p50": int(q[0]), "p99": int(q[1]), "max": int(v.max())}


DECODE_CACHE_ROUNDS = 8  # rounds of transfers and decode replays before a run says its decode hits did not settle


def disagg_decode_caching(engine: str, caching: bool | None) -> bool:
    """The decode role's prefix caching, as the engine's disaggregated decode instance keeps one: vLLM looks up
    its local cache before the pull (with ``--enable-prefix-caching`` as asked, on by default: ``EngineModel.
    decode_side_prefix_cache``); SGLang 0.5.23's decode server has none by default
    (``--disaggregation-decode-enable-radix-cache`` off, ``srt/arg_groups/fields/disagg.py:88-91``)."""
    from csa_plan.planner.engines.registry import get_engine

    if not get_engine(engine).decode_side_prefix_cache:
        return False
    return True if caching is None else caching


@dataclass(frozen=True)
class DecodeCache:
    """The decode side's prefix cache in a run: each request's hit at its decode admission (tokens its transfer
    did not carry), the rounds the transfers and the decode replays took to reproduce those hits, and whether
    they did (``serve_disaggregated_trace``). ``enabled`` False: the decode side keeps none."""

    enabled: bool
    hit_tokens: Any
    rounds: int
    converged: bool

    def note(self) -> str:
        if not self.enabled:
            return "no prefix cache on the decode side: every transfer carries its whole prompt's KV"
        settled = (f"the hits reproduced themselves after {self.rounds} round(s)" if self.converged else
                   f"NOT settled after {self.rounds} rounds (DECODE_CACHE_ROUNDS): the last round's figures are shown")
        return ("decode side's prefix cache looked up at its admission, each transfer carrying only the blocks it "
                f"lacks (the footprint of the prompt past the hit): {settled}")


@dataclass(frozen=True)
class DisaggregatedRun:
    """What a disaggregated replay observed: the client's view (``result``: arrival to decode), each role's own
    replay and the transfers."""

    result: "RuntimeResult"
    prefill: "RuntimeResult"
    decode: "RuntimeResult"
    transfers: Transfers
    hold: "HeldPrefill"  # the prefill pool's replay rounds with the transfer holds (serving/transfer_hold.py)
    loaded_tokens: int
    decode_cache: DecodeCache | None = None

    @property
    def prefill_hold_peak_units(self) -> int:
        """The prefill pool's peak units (summed over its ranks), the blocks held for transfers among them."""
        s = self.prefill.series
        return int(s.total_used.max()) if s.buckets else 0


def serve_disaggregated(prefill: "RuntimeSetup", decode: "RuntimeSetup", wl: "Workload", rate_scale: float,
                        link_bytes_s: float) -> DisaggregatedRun:
    """The workload through the prefill pool, the link and the decode pool (module docstring)."""
    from csa_plan.planner.replay.trace import runtime_trace

    return serve_disaggregated_trace(prefill, decode, runtime_trace(wl, rate_scale), link_bytes_s)


def _ids_subset(trace: Any, mine: Any) -> tuple[Any, Any]:
    """The prefix block ids (and their offsets) of requests ``mine`` of ``trace``, in that order."""
    import numpy as np

    offs = np.asarray(trace.block_offsets, dtype=np.int64)
    ids = np.asarray(trace.block_ids, dtype=np.int64)
    parts = [ids[offs[i]:offs[i + 1]] for i in mine.tolist()]
    counts = np.array([len(x) for x in parts], dtype=np.int64)
    out = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return out.astype(np.int64), np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def serve_disaggregated_trace(prefill: "RuntimeSetup", decode: "RuntimeSetup", trace: Any,
                              link_bytes_s: float) -> DisaggregatedRun:
    """A runtime trace (``replay.trace.runtime_trace``) through the prefill pool, the link and the decode pool.

    **The decode side's prefix cache** (where the engine keeps one: ``disagg_decode_caching``, the decode
    setup's ``caching``). vLLM's decode scheduler looks up its local cache when it admits the request
    (``v1/core/sched/scheduler.py:1122-1141``) and the NIXL consumer pulls only the tokens beyond that hit
    (``nixl/pull_scheduler.py:34-65``: ``count = actual - num_computed_tokens``). Here the decode engine's own
    runtime looks up its own prefix cache at its admission (the code an aggregated replay runs, over the
    request's prefix block ids), and the transfer carries the decode plan's footprint of the prompt past that
    hit (whole blocks). A hit depends on when the request reaches the decode side, which depends on its
    transfer's bytes: the first round moves every whole prompt, each next round what the round before's decode
    replay did not hit (the prefill pool replayed again with its holds, as the transfers end sooner), until a round's hits
    reproduce the bytes it moved (``DECODE_CACHE_ROUNDS`` bound them; a run that did not settle says so)."""
    import numpy as np

    from csa_plan.planner.replay.loop import replay
    from csa_plan.planner.replay.protocol import RuntimeTrace
    from csa_plan.planner.serving.replicas import merge_replicas
    from csa_plan.planner.serving.transfer_hold import prefill_with_holds

    # A role's requests are dealt round-robin over its ranks: the link queues and the decode ranks below are
    # keyed by that deal (idx % dp), so a prefill role's ranks are not replayed under the engine's own DP
    # balancer here (aggregated --dp replays are: serving/balanced.py); said in the notes.
    dealt = ()
    if prefill.dp > 1 and prefill.balancer is not None and not prefill.balancer.round_robin:
        dealt = (f"each role's requests dealt round-robin over its data-parallel ranks ({prefill.balancer.label} "
                 "is modelled for an aggregated --dp replay, not for disaggregated roles)",)
        prefill = replace(prefill, balancer=None)
    n = len(trace)
    ones = np.ones(n, dtype=np.int64)
    ptrace = RuntimeTrace(trace.arrival_ns, trace.prompt_tokens, ones, trace.block_ids, trace.block_offsets,
                          trace.id_block_tokens)
    prompt = trace.prompt_tokens.astype(np.int64)
    cached = decode.caching and trace.block_ids is not None and trace.block_offsets is not None
    dcache: dict[int, Any] = {}
    idx = np.arange(n, dtype=np.int64)
    hit = np.zeros(n, dtype=np.int64)
    dplan, dsizing, dtime = decode.plan, decode.sizing, decode.time
    rounds = 0
    while True:
        rounds += 1
        per_gpu = np.zeros(n, dtype=np.int64)

        def transfers_of(done: Any, per_gpu: Any = per_gpu, hit: Any = hit) -> tuple[Any, Any]:
            for i in np.nonzero((done >= 0) & (per_gpu == 0))[0]:  # the footprint of the prompt past the hit
                per_gpu[i] = footprint_of(dplan, int(prompt[i] - hit[i]), dcache).total_bytes
            return schedule_transfers(done, per_gpu, link_bytes_s, idx % prefill.dp, idx % decode.dp)

        held = prefill_with_holds(prefill, ptrace, transfers_of)  # the held blocks in the prefill's admission
        pres, start, end = held.result, held.start_ns, held.end_ns
        results, owners, loaded = [], [], 0
        got = np.zeros(n, dtype=np.int64)
        for k in range(decode.dp):
            mine = idx[(idx % decode.dp == k) & (end >= 0)]
            mine = mine[np.argsort(end[mine], kind="stable")]
            ids, offs = _ids_subset(trace, mine) if cached else (None, None)
            sub = RuntimeTrace(end[mine], prompt[mine], trace.output_tokens[mine], ids, offs, trace.id_block_tokens)
            rt = RemoteKvRuntime(dplan.runtime(dsizing, sub, decode.options), sub.prompt_tokens.tolist(), cached)
            results.append(replay(rt, sub, dtime))
            owners.append(mine)
            loaded += rt.loaded_tokens
            for j, h in rt.hit_tokens.items():
                got[mine[j]] = h
        if not cached or np.array_equal(got, hit) or rounds >= DECODE_CACHE_ROUNDS:
            break
        hit = got
    settled = not cached or bool(np.array_equal(got, hit))
    sent_bytes = np.where(end >= 0, per_gpu, 0)
    saved = None
    if decode.caching:
        whole = np.array([footprint_of(dplan, int(prompt[i]), dcache).total_bytes if end[i] >= 0 else 0
                          for i in range(n)], dtype=np.int64)
        saved = whole - sent_bytes
    transfers = Transfers(start, end, sent_bytes, sent_bytes * decode.plan_devices, link_bytes_s, saved,
                          decode.plan_devices)
    dres = merge_replicas(results, owners, trace, decode.dp) if decode.dp > 1 else _placed(results[0], owners[0], n)
    refused = dict(pres.refused)
    refused.update(dres.refused)
    # the decode side keeps its cache whether or not the trace names prefix blocks (without them nothing is shared)
    dc = DecodeCache(bool(decode.caching), hit if cached else np.zeros(n, dtype=np.int64), rounds, settled)
    client = replace(dres, arrival_ns=trace.arrival_ns, admitted_ns=np.asarray(pres.admitted_ns, dtype=np.int64),
                     refused=refused, prefix_hit_tokens=pres.prefix_hit_tokens,
                     prefix_query_tokens=pres.prefix_query_tokens,
                     recomputed_tokens=pres.recomputed_tokens + dres.recomputed_tokens,
                     preemptions=np.asarray(pres.preemptions, dtype=np.int64)
                     + np.asarray(dres.preemptions, dtype=np.int64),
                     notes=notes(pres, dres, held.note()) + (dc.note(),) + dealt)
    return DisaggregatedRun(client, pres, replace(dres, arrival_ns=np.where(end >= 0, end, -1)), transfers, held,
                            loaded, dc)


def _placed(res: "RuntimeResult", owner: Any, n: int) -> "RuntimeResult":
    """One decode worker's result under the requests' own indices (-1 for the ones it never received)."""
    import numpy as np

    out = {}
    for name in ("arrival_ns", "admitted_ns", "first_token_ns", "finished_ns"):
        a = np.full(n, -1, dtype=np.int64)
        a[owner] = np.asarray(getattr(res, name), dtype=np.int64)
        out[name] = a
    pre = np.zeros(n, dtype=np.int64)
    pre[owner] = np.asarray(res.preemptions, dtype=np.int64)
    refused = {int(owner[j]): why for j, why in res.refused.items()}
    return replace(res, preemptions=pre, refused=refused, **out)


def notes(pres: "RuntimeResult", dres: "RuntimeResult", hold: str) -> tuple[str, ...]:
    return (("disaggregated: prefill-only requests (max_tokens 1) on the prefill pool, the KV moved over the link, "
             "decode on the decode pool; queue wait is the prefill side's, TTFT the client's (to the decode side's "
             "first token), blocks in use the decode pool's"),
            "prefill pool: " + "; ".join(pres.notes),
            "decode pool: " + "; ".join(dres.notes),
            hold)


def disaggregation_section(run: DisaggregatedRun, setups: tuple["RuntimeSetup", "RuntimeSetup"],
                           reports: tuple["RuntimeReport", "RuntimeReport"], plan: Disaggregation,
                           link: Any) -> dict[str, Any]:
    """``runtime.disaggregation``: both pools (their peaks, the prefill's with the transfer hold), the link and
    the transfers' bytes (integers) and seconds (p50/p99), and where TTFT goes."""
    import numpy as np

    from csa_plan.planner.serving.report import quantiles

    t = run.transfers
    sent = np.asarray(t.end_ns, dtype=np.int64) >= 0
    start, end = np.asarray(t.start_ns)[sent], np.asarray(t.end_ns)[sent]
    pdone = np.asarray(run.prefill.finished_ns, dtype=np.int64)[sent]
    arrival = np.asarray(run.result.arrival_ns, dtype=np.int64)
    padm = np.asarray(run.prefill.admitted_ns, dtype=np.int64)
    first = np.asarray(run.result.first_token_ns, dtype=np.int64)
    ok = sent & (first >= 0)

    def q(v: Any) -> dict[str, Any]:
        x = quantiles(np.asarray(v, dtype=np.int64))
        return {"p50_s": x.p50_s, "p99_s": x.p99_s, "max_s": x.max_s}

    def pool(role: Role, setup: "RuntimeSetup", rep: "RuntimeReport", hold: int | None) -> dict[str, Any]:
        occ = rep.occupancy
        d = {"workers": role.workers, "tp": role.tp, "dp": role.dp, "ep": role.ep, "ranks": role.ranks,
             "shape": role.shape, "gpus": role.gpus, "engine": rep.engine,
             "unit": occ.unit, "unit_bytes": setup.sizing.unit_bytes, "usable_units": occ.usable_units,
             "peak_units": occ.peak_units, "peak_running": occ.peak_running, "peak_waiting": occ.peak_waiting,
             "steps": rep.steps, "preemptions": rep.preemptions.count,
             "prefix_cache": {"hit_tokens": rep.prefix_cache.hit_tokens,
                              "queried_tokens": rep.prefix_cache.queried_tokens}}
        if hold is not None:  # the held blocks are in the replay (its admission and its peak): serving/transfer_hold.py
            h = run.hold
            d["peak_units_with_transfer_hold"] = run.prefill_hold_peak_units
            d["transfer_hold"] = {"in_admission": True, "rounds": h.rounds, "converged": h.converged,
                                  "admitted_later": h.admitted_later(),
                                  "peak_units_without_hold": int(h.unheld.series.total_used.max())
                                  if h.unheld.series.buckets else 0}
        return d

    return {
        "prefill": pool(plan.prefill, setups[0], reports[0], run.prefill_hold_peak_units),
        "decode": pool(plan.decode, setups[1], reports[1], None) | {"loaded_prompt_tokens": run.loaded_tokens},
        "link": {"name": link.name, "bytes_s_per_gpu": t.link_bytes_s, "source": link.source,
                 "band": "line rate: achieved transfer throughput is below it, so the seconds are a floor"},
        "transfer": {"requests": int(sent.sum()),
                     "bytes_per_gpu": _int_quantiles(np.asarray(t.bytes_per_gpu)[sent]),
                     "bytes": _int_quantiles(np.asarray(t.bytes_total)[sent]),
                     "bytes_total": int(np.asarray(t.bytes_total)[sent].sum()),
                     "seconds": q(end - start), "link_wait": q(start - pdone),
                     "decode_prefix_cache": decode_cache_figures(run)},
        "ttft_parts": {"prefill_queue": q((padm - arrival)[ok]), "prefill": q((pdone - padm[sent])[ok[sent]]),
                       "transfer": q((end - pdone)[ok[sent]]),
                       "decode_first_token": q((first[sent] - end)[ok[sent]])},
    }


DECODE_RADIX_REFUSAL = ("SGLang's decode-side radix cache is not modelled (matched at pre-allocation with its SWA "
                        "tail moved fresh and the prefill told decode_prefix_len, srt/disaggregation/decode.py:860-874, "
                        ":1498-1545); the decode side replays without it, SGLang's default (vLLM's decode side keeps "
                        "its prefix cache as --enable-prefix-caching says)")


def disaggregation_from(prefill_workers: int | None, prefill_tp: int | None, decode_workers: int | None,
                        decode_tp: int | None, link: str | None, source: str = "options", *,
                        prefill_dp: int | None = None, decode_dp: int | None = None, prefill_ep: int | None = None,
                        decode_ep: int | None = None, decode_radix_cache: bool = False) -> Disaggregation | None:
    """The roles the options name (None: none, an aggregated run); a role without the other, a count
    below 1, a role's dp or ep without that role, or ``--transfer-link`` without roles is bad input. A role's
    workers, tp and dp default to 1, its ep to none. Whether a role's ep fits its tp x dp is the engine's
    shard rule (``weights/rules.py``), checked where the role is set up (``commands/disaggregated.py``)."""
    from csa_plan.planner.errors import BadInput

    if decode_radix_cache:
        raise BadInput(source, "--disaggregation-decode-enable-radix-cache", DECODE_RADIX_REFUSAL)
    given = {"--prefill-workers": prefill_workers, "--prefill-tp": prefill_tp, "--prefill-dp": prefill_dp,
             "--prefill-ep": prefill_ep, "--decode-workers": decode_workers, "--decode-tp": decode_tp,
             "--decode-dp": decode_dp, "--decode-ep": decode_ep}
    for flag, value in given.items():
        if value is not None and value < 1:
            raise BadInput(source, flag, f"must be at least 1, got {value}")
    has_prefill = prefill_workers is not None or prefill_tp is not None
    has_decode = decode_workers is not None or decode_tp is not None
    for flag, value, role, named in (("--prefill-dp", prefill_dp, "prefill", has_prefill),
                                     ("--prefill-ep", prefill_ep, "prefill", has_prefill),
                                     ("--decode-dp", decode_dp, "decode", has_decode),
                                     ("--decode-ep", decode_ep, "decode", has_decode)):
        if value is not None and not named:
            raise BadInput(source, flag, f"shapes the {role} role's workers: name the role "
                                         f"(--{role}-workers/--{role}-tp; the aggregated shape is --dp/--ep)")
    if not has_prefill and not has_decode:
        if link is not None:
            raise BadInput(source, "--transfer-link", "moves KV between a prefill and a decode pool: add "
                                                      "--prefill-workers/--prefill-tp and --decode-workers/--decode-tp")
        return None
    if has_prefill != has_decode:
        missing = "--decode-workers/--decode-tp" if has_prefill else "--prefill-workers/--prefill-tp"
        have = "a prefill pool" if has_prefill else "a decode pool"
        raise BadInput(source, missing.split("/")[0], f"{have} without the other role: add {missing}")
    return Disaggregation(Role(prefill_workers or 1, prefill_tp or 1, prefill_dp or 1, prefill_ep),
                          Role(decode_workers or 1, decode_tp or 1, decode_dp or 1, decode_ep), link)


@dataclass(frozen=True)
class Composition:
    """The two pools and the link as one served deployment: called with a runtime trace, it returns the client's
    result (``serve_disaggregated_trace``). ``serve.serve_trace`` calls it for a setup that carries it, so the
    one rate search and steady probe (``serve.runtime_capacity``, ``serve.steady_probe``) judge a disaggregated
    deployment exactly as they judge one pool."""

    prefill: "RuntimeSetup"
    decode: "RuntimeSetup"
    link_bytes_s: float

    def __call__(self, trace: Any) -> "RuntimeResult":
        return serve_disaggregated_trace(self.prefill, self.decode, trace, self.link_bytes_s).result


def composed_setup(prefill: "RuntimeSetup", decode: "RuntimeSetup", link_bytes_s: float) -> "RuntimeSetup":
    """The setup the rate search and the reports take for a disaggregated deployment: the decode pool's plan,
    sizing and clock (what the client's TPOT, blocks in use and unit are), every GPU of both roles as its
    devices (``plan_devices``; one replica), and the composition that serves a trace."""
    return replace(decode, dp=1, plan_devices=prefill.devices + decode.devices, max_concurrency=None,
                   composed=Composition(prefill, decode, link_bytes_s))


def decode_cache_figures(run: DisaggregatedRun) -> dict[str, Any]:
    """The decode side's prefix cache in ``runtime.disaggregation.transfer``: whether the decode side keeps one,
    the prompt tokens its hits spared the transfers (in all), the bytes they spared (integers: per GPU and over
    all ranks), and the rounds the hits took to reproduce themselves."""
    import numpy as np

    dc, t = run.decode_cache, run.transfers
    sent = np.asarray(t.end_ns, dtype=np.int64) >= 0
    if dc is None or not dc.enabled or t.saved_bytes_per_gpu is None:
        return {"enabled": False, "hit_tokens": 0, "requests_hit": 0, "bytes_saved_per_gpu": 0, "bytes_saved": 0}
    saved = np.asarray(t.saved_bytes_per_gpu, dtype=np.int64)[sent]
    hits = np.asarray(dc.hit_tokens, dtype=np.int64)[sent]
    per_gpu_total = int(saved.sum())
    return {"enabled": True, "hit_tokens": int(hits.sum()), "requests_hit": int((hits > 0).sum()),
            "bytes_saved_per_gpu": per_gpu_total, "bytes_saved": per_gpu_total * t.gpus,
            "rounds": dc.rounds, "converged": dc.converged}


def transfer_figures(run: DisaggregatedRun) -> dict[str, Any]:
    """The transfers of a run in brief (a sweep row, a plan answer): requests moved, bytes per request over all
    ranks (integers: p50, p99, max, total) and seconds on the link (p50, p99), the link wait (p99), the prefill
    pool's peak with the held blocks, the rounds its replay took and the admissions the hold delayed."""
    import numpy as np

    from csa_plan.planner.serving.report import quantiles

    t = run.transfers
    sent = np.asarray(t.end_ns, dtype=np.int64) >= 0
    secs = quantiles(np.asarray(t.end_ns, dtype=np.int64)[sent] - np.asarray(t.start_ns, dtype=np.int64)[sent])
    wait = quantiles(np.asarray(t.start_ns, dtype=np.int64)[sent]
                     - np.asarray(run.prefill.finished_ns, dtype=np.int64)[sent])
    total = np.asarray(t.bytes_total, dtype=np.int64)[sent]
    return {"requests": int(sent.sum()), "bytes": _int_quantiles(total), "bytes_total": int(total.sum()),
            "seconds_p50": secs.p50_s, "seconds_p99": secs.p99_s, "link_wait_p99_s": wait.p99_s,
            "link_bytes_s_per_gpu": t.link_bytes_s, "prefill_peak_units_with_transfer_hold": run.prefill_hold_peak_units,
            "transfer_hold_rounds": run.hold.rounds, "transfer_hold_converged": run.hold.converged,
            "decode_prefix_cache": decode_cache_figures(run),
            "prefill_admitted_later_for_hold": run.hold.admitted_later()}
