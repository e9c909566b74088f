"""Cross-check ``simulate --engine vllm-0.33`` step by step against vLLM 0.33.0's own scheduler (outside CI).

Run it in the virtualenv ``tools/crosscheck_engines.py`` uses (vLLM 0.33.0 ``--no-deps``, a
CPU torch, csa-plan importable; README "Cross-checking the engine models"). Nothing here is
a csa-plan dependency.

For each case it builds DeepSeek-V4's KV cache config with vLLM's own planning
(``crosscheck_engines.vllm_specs`` -> ``get_kv_cache_configs`` ->
``generate_scheduler_kv_cache_config``), constructs vLLM's ``Scheduler`` (``AsyncScheduler``
with async scheduling) over it, and drives it through csa-plan's own replay loop
(``planner/replay/loop.py``: the same arrivals, clock and step order as ``simulate``) with a
fabricated model output: one sampled token for every scheduled request whose chunk reached
the end of its tokens, plus the scheduled drafts ``--acceptance`` accepts (every one at 1, the
default; otherwise ``planner/replay/draft_acceptance.py``'s deterministic share, the same one
csa-plan's replay is given with ``RuntimeOptions(spec_acceptance=...)``). Token ids: Mooncake
``hash_ids`` become 512-token runs (equal ids, equal tokens); everything else is unique to
its request. Then the same trace runs through csa-plan's ``vllm-0.33`` runtime and every
step is compared: tokens scheduled per request, running, waiting, preempted, free blocks,
prefix-hit tokens; and every request's outcome (admission, first token, finish, preemptions).

``--release vllm-0.28`` / ``vllm-0.27`` / ``vllm-0.26`` / ``vllm-0.25`` (in a virtualenv holding that release):
that release's own KV cache config (its ``kv_cache_utils`` planning, ``crosscheck_engines.legacy_specs``) and its own
``Scheduler``, against csa-plan's replay of 0.33.0's scheduler over that release's pool: the
evidence for refusing ``simulate --engine vllm-0.2x`` (docs/vllm-runtime.md).

Exit 0 when every case agrees, 1 otherwise; one line per case.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

GiB = 1 << 30
# Token ids fit vLLM 0.34.0's int32 token buffers (v1/token_buffer.py:20-21): hash-id runs below 2^28, then per
# request a 2^20 range (prompt tokens outside any hash id, then output tokens from 2^19). Only equality matters.
UNIQUE_BASE = 1 << 28
REQUEST_SPAN = 1 << 20
OUT_OFFSET = 1 << 19
MAX_REQUESTS = ((1 << 31) - UNIQUE_BASE) // REQUEST_SPAN


def request_base(r: int) -> int:
    if not 0 <= r < MAX_REQUESTS:
        raise ValueError(f"request {r}: the int32 token ids cover {MAX_REQUESTS} requests")
    return UNIQUE_BASE + r * REQUEST_SPAN


class _Stub(types.SimpleNamespace):
    pass


def token_ids(trace, r: int, block_tokens: int) -> list[int]:
    """The prompt of request r: hash id k -> tokens k*B .. k*B+B-1 (equal ids, equal tokens)."""
    n = int(trace.prompt_tokens[r])
    ids = trace.ids_of(r)
    out: list[int] = []
    if ids is not None:
        for k in ids.tolist():
            base = 1 + int(k) * block_tokens
            if base + block_tokens > UNIQUE_BASE:
                raise ValueError(f"hash id {k}: beyond the int32 token ids' hash-id range")
            out.extend(range(base, base + block_tokens))
            if len(out) >= n:
                break
        del out[n:]
    start = len(out)
    if n > OUT_OFFSET:
        raise ValueError(f"request {r}: {n} prompt tokens, beyond its int32 token id range")
    base = request_base(r)
    out.extend(range(base + start, base + n))
    return out


def build_scheduler(model, max_model_len: int, kv_memory: int, mnbt: int, max_num_seqs: int, async_on: bool,
                    spec_tokens: int, caching: bool, release: str = "vllm-0.33", gpu: str = "h200"):
    import vllm.v1.core.kv_cache_utils as kcu
    from vllm.config import SchedulerConfig
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    shared = any(d.sharing is not None for d in model.layers)
    if shared:  # DeepSeek-V4.1: vLLM's own V4.1 specs (crosscheck_engines.v41_specs) on the named card
        from crosscheck_engines import _v41_text_config, v41_config_stub, v41_specs
        from vllm.v1.core import kv_cache_planning as kcp

        from csa_plan.planner.engines.settings import gpu_target

        cap = gpu_target(gpu).capability
        cfg = v41_config_stub(max_model_len, mnbt, async_on, spec_tokens, 128 if cap[0] == 10 else 64)
        cfg.scheduler_config.max_num_seqs = max_num_seqs
        specs = v41_specs(_v41_text_config("deepseek-v4.1-flash"), cap, cfg, False)
        groups = kcp.get_global_kv_cache_groups(cfg, [specs])
        configs = kcp.get_kv_cache_configs(cfg, [specs], [kv_memory], groups)
    elif release in ("vllm-0.33", "vllm-0.34"):  # 0.34: the same planning functions (kv_cache_planning.py)
        from crosscheck_engines import vllm_config_stub, vllm_specs
        from vllm.v1.core import kv_cache_planning as kcp

        cfg = vllm_config_stub(max_model_len, mnbt, max_num_seqs, async_on, spec_tokens, model.num_mtp_layers, 256)
        extra = max(0, cfg.num_prefill_lookahead_tokens - 1)
        specs = vllm_specs(model, 256, False, spec_tokens, extra)
        groups = kcp.get_global_kv_cache_groups(cfg, [specs])
        configs = kcp.get_kv_cache_configs(cfg, [specs], [kv_memory], groups)
    else:  # 0.25/0.26: their own planning in kv_cache_utils (crosscheck_engines.legacy_*)
        from crosscheck_engines import legacy_config_stub, legacy_specs

        cfg = legacy_config_stub(max_model_len, mnbt, async_on, spec_tokens, 256)
        cfg.scheduler_config.max_num_seqs = max_num_seqs
        for k, v in dict(attention_config=_Stub(hisparse_config=None), device_config=_Stub(device_type="cuda"),
                         diffusion_config=None).items():
            setattr(cfg, k, v)
        cfg.model_config.supports_kv_cache_grouping = False
        from vllm.config import VllmConfig

        for name in ("num_speculative_tokens", "num_prefill_lookahead_tokens"):  # that release's own properties
            prop = VllmConfig.__dict__.get(name)
            if isinstance(prop, property):
                setattr(cfg, name, prop.fget(cfg))
        specs = legacy_specs(model, 256, spec_tokens)
        configs = kcu.get_kv_cache_configs(cfg, [specs], [kv_memory])
    kv_cfg = kcu.generate_scheduler_kv_cache_config(configs)
    cfg.scheduler_config = SchedulerConfig(max_model_len=max_model_len, is_encoder_decoder=False,
                                           max_num_batched_tokens=mnbt, max_num_seqs=max_num_seqs,
                                           async_scheduling=async_on, enable_chunked_prefill=True)
    cfg.cache_config.num_gpu_blocks = kv_cfg.num_blocks
    cfg.cache_config.enable_prefix_caching = caching
    cfg.lora_config = None
    for k, v in dict(uses_mrope=False, is_encoder_decoder=False, runner_type="generate", is_diffusion=False,
                     supports_multimodal_inputs=False, return_sampling_mask=False, is_multimodal_model=False,
                     enable_return_routed_experts=False).items():
        setattr(cfg.model_config, k, v)
    cfg.kv_events_config = None
    cfg.is_encoder_only = False  # 0.28: read by Scheduler.__init__ (sched/scheduler.py:97)
    cfg.watermark_config = None  # 0.34: read once a request finishes prefill (sched/scheduler.py:2515-2523)
    cfg.observability_config = _Stub(per_request_spec_decode_metrics=None, kv_cache_metrics=False,
                                     enable_mfu_metrics=False, enable_logging_iteration_details=False)
    cfg.is_mm_encoder_only = False
    cfg.kv_transfer_config = None
    cfg.ec_transfer_config = None
    cfg.parallel_config.data_parallel_index = 0
    cfg.parallel_config.data_parallel_size = 1
    cfg.parallel_config.prefill_context_parallel_size = 1
    cfg.ec_manager_config = _Stub(get_encoder_cache_manager_obj=lambda: None)
    cfg.aux_output_config = _Stub(enabled=False)
    from vllm.config import VllmConfig

    spec = cfg.speculative_config
    if spec is not None and shared:  # DSpark: a hidden-state drafter without the EAGLE block drop (:2122-2128)
        for k, v in dict(num_speculative_tokens_per_batch_size=None, disable_eagle_block_drop=False,
                         disable_lookahead_block_hashes=False, max_num_new_slots_for_drafting=0,
                         parallel_drafting=True).items():
            setattr(spec, k, v)
        for k, v in dict(use_dflash=False, use_dspark=True, uses_draft_model=False,
                         needs_eagle_block_drop=False).items():
            setattr(spec, k, (lambda value: (lambda: value))(v))
        spec.use_eagle_block_drop = lambda: False
        try:  # 0.34: Scheduler.use_eagle reads it (sched/scheduler.py:330); DSpark's class (dflash/config.py:19)
            from vllm.v1.worker.gpu.spec_decode.dspark.config import DSparkSpeculatorConfig

            spec.uses_target_hidden_states = DSparkSpeculatorConfig.uses_target_hidden_states
            spec.custom_method = None
            spec.speculator_config = DSparkSpeculatorConfig(spec)  # its own lookaheads (dspark/config.py:129-137)
            cfg.num_prefill_lookahead_tokens = VllmConfig.__dict__["num_prefill_lookahead_tokens"].fget(cfg)
        except ImportError:  # 0.33 reads use_eagle()
            pass
    elif spec is not None:  # the SpeculativeConfig fields the scheduler and its managers read (method mtp)
        for k, v in dict(num_speculative_tokens_per_batch_size=None, disable_eagle_block_drop=False,
                         disable_lookahead_block_hashes=False, max_num_new_slots_for_drafting=0,
                         parallel_drafting=False).items():
            setattr(spec, k, v)
        for k, v in dict(use_dflash=False, use_dspark=False, uses_draft_model=False,
                         needs_eagle_block_drop=True).items():  # MTP: EAGLE-style drafter (speculative.py:2122)
            setattr(spec, k, (lambda value: (lambda: value))(v))
        from vllm.config.speculative import SpeculativeConfig

        for name in ("use_eagle_block_drop",):
            fn = SpeculativeConfig.__dict__.get(name)
            try:
                setattr(spec, name, (lambda f: (lambda: f(spec)))(fn))
                spec.use_eagle_block_drop()
            except Exception:
                setattr(spec, name, lambda: False)
    resolve_hash = getattr(VllmConfig, "_resolve_num_hash_lookahead_tokens", None)
    if release == "vllm-0.34":  # its own resolution, no fallback (config/vllm.py:601-655): a stub gap fails loudly
        cfg.num_lookahead_tokens = VllmConfig.__dict__["num_lookahead_tokens"].fget(cfg)
        cfg.num_hash_lookahead_tokens = resolve_hash(cfg)
    else:
        for name in ("num_lookahead_tokens", "num_hash_lookahead_tokens"):
            try:
                setattr(cfg, name, VllmConfig.__dict__[name].fget(cfg))
            except Exception:
                setattr(cfg, name, spec_tokens if name == "num_lookahead_tokens" else 0)
    sched_block, hash_block = kcu.resolve_kv_cache_block_sizes(kv_cfg, cfg)
    cls = AsyncScheduler if async_on else Scheduler
    sched = cls(cfg, kv_cfg, _Stub(accept_tokens=lambda *a: True, validate_tokens=lambda r, t: t,
                                   trim_spec_tokens=lambda r, t: t, should_advance=lambda r, **kw: False),
                block_size=sched_block,
                hash_block_size=hash_block)
    return sched, kv_cfg, hash_block


class VllmReference:
    """vLLM's own Scheduler behind csa-plan's EngineRuntime protocol."""

    def __init__(self, sched, trace, hash_block: int, max_model_len: int, spec_tokens: int, caching: bool,
                 acceptance: float = 1.0):
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

        from csa_plan.planner.replay.protocol import EngineRuntime

        EngineRuntime.register(type(self))
        self.sched, self.trace = sched, trace
        self.pools = tuple(f"group {i}" for i in range(len(sched.kv_cache_config.kv_cache_groups)))
        self.usable_units = sched.kv_cache_config.num_blocks - 1
        self.pipeline_depth = 2 if sched.vllm_config.scheduler_config.async_scheduling else 1
        import vllm

        self.label = f"vLLM {vllm.__version__} (its own Scheduler)"
        self.pool_units: tuple[int, ...] = ()  # what the replay loop's result reads (EngineRuntime)
        self.preemption_word = "preempt"
        self.max_model_len = max_model_len
        self.spec_tokens = spec_tokens
        from csa_plan.planner.replay.draft_acceptance import milli_table

        self.milli = None if acceptance >= 1.0 else milli_table(acceptance, max(spec_tokens, 1))
        self.credit: dict = {}
        hash_fn = get_hash_fn_by_name("sha256")
        init_none_hash(hash_fn)
        # engine/core.py:219-230: the request block hasher covers num_hash_lookahead_tokens (MTP + caching)
        lookahead = getattr(sched, "num_hash_lookahead_tokens", None)  # None: 0.25/0.26 hash no lookahead
        self.hasher = ((get_request_block_hasher(hash_block, hash_fn, lookahead) if lookahead is not None else
                        get_request_block_hasher(hash_block, hash_fn)) if caching else None)
        self.SamplingParams = SamplingParams
        self.log: list[dict] = []
        self.next_token: dict[str, int] = {}

    def refuse(self, r):
        p = int(self.trace.prompt_tokens[r])
        return "refused" if p >= self.max_model_len else None

    def add(self, r):
        from vllm.v1.request import Request

        p = int(self.trace.prompt_tokens[r])
        max_tokens = min(int(self.trace.output_tokens[r]), self.max_model_len - p)
        sp = self.SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        req = Request(str(r), token_ids(self.trace, r, self.trace.id_block_tokens), sp, None,
                      arrival_time=float(r), block_hasher=self.hasher)
        self.sched.add_request(req)

    def schedule(self):
        from csa_plan.planner.replay.protocol import Step

        s = self.sched
        before = {rid: rq.status for rid, rq in s.requests.items()}
        hits_before = {rid: rq.num_computed_tokens for rid, rq in s.requests.items()}
        out = s.schedule()
        step = Step()
        rows = []
        for rid, n in out.num_scheduled_tokens.items():
            rq = s.requests[rid]
            step.requests.append(int(rid))
            step.tokens.append(n)
            samples = not rq.is_prefill_chunk
            if rq.num_computed_tokens - n < rq.num_tokens - 1:  # the one step-time rule: prompt/recompute chunks
                step.prefill_tokens += n
            rows.append((rid, n, samples, len(out.scheduled_spec_decode_tokens.get(rid, ()))))
        # new and resumed requests alike: 0.33.0 with Model Runner V2 appends the resumed ones
        # (sched/scheduler.py:1642-1643), 0.34.0 lists both as new (:1619-1626)
        new_ids = [d.req_id for d in out.scheduled_new_reqs]
        hit = 0
        for d in out.scheduled_new_reqs:
            rq = s.requests[d.req_id]
            step.admitted.append(int(d.req_id))
            hit += rq.num_computed_tokens - out.num_scheduled_tokens[d.req_id]
        step.preempted = [int(x) for x in sorted(out.preempted_req_ids, key=int)]
        step.prefix_hit_tokens = hit
        step.payload = (out, rows)
        self.log.append({"sched": dict((int(k), v) for k, v in out.num_scheduled_tokens.items()),
                         "running": len(s.running), "waiting": len(s.waiting),
                         "preempted": sorted(int(x) for x in out.preempted_req_ids),
                         "free": s.kv_cache_manager.block_pool.get_num_free_blocks(), "hit": hit,
                         "admitted": sorted(int(x) for x in new_ids)})  # vLLM lists new before resumed
        return step

    def complete(self, step):
        from vllm.v1.outputs import ModelRunnerOutput

        from csa_plan.planner.replay.protocol import Completion

        out, rows = step.payload
        s = self.sched
        req_ids = [rid for rid, *_ in rows]
        sampled = []
        outputs_before = {}
        for rid, n, samples, spec in rows:
            rq = s.requests.get(rid)
            outputs_before[rid] = rq.num_output_tokens if rq is not None else None
            if samples:
                if spec and self.milli is not None and rq is not None and not rq.is_finished():
                    from csa_plan.planner.replay.draft_acceptance import accept

                    spec, self.credit[rid] = accept(self.credit.get(rid, 0), spec, self.milli)
                base = request_base(int(rid)) + OUT_OFFSET
                k = self.next_token.get(rid, 0)
                sampled.append([base + k + j for j in range(1 + spec)])
                self.next_token[rid] = k + 1 + spec
            else:
                sampled.append([])
        import dataclasses

        fields = {f.name for f in dataclasses.fields(ModelRunnerOutput)}
        extra = {"req_id_to_index": {r: i for i, r in enumerate(req_ids)}} if "req_id_to_index" in fields else {}
        mro = ModelRunnerOutput(req_ids=req_ids, sampled_token_ids=sampled, **extra)  # 0.34: index from req_ids
        s.update_from_output(out, mro)
        if self.spec_tokens and self.pipeline_depth == 1:  # sync engine core: the drafter's proposals after the step
            from vllm.v1.outputs import DraftTokenIds

            s.update_draft_token_ids(DraftTokenIds(req_ids, [[7] * self.spec_tokens for _ in req_ids]))
        c = Completion()
        for rid, *_ in rows:
            rq = s.requests.get(rid)
            if outputs_before[rid] == 0 and (rq is None or rq.num_output_tokens > 0):
                c.first_token.append(int(rid))
            if rq is None and outputs_before[rid] is not None:
                c.finished.append(int(rid))
        return c

    def used_units(self):
        mgrs = self.sched.kv_cache_manager.coordinator.single_type_managers
        return tuple(len({b.block_id for blocks in m.req_to_blocks.values() for b in blocks if not b.is_null})
                     for m in mgrs)

    def running(self):
        return len(self.sched.running)

    def waiting(self):
        return len(self.sched.waiting)

    def stranded(self):
        return tuple(int(r.request_id) for r in self.sched.waiting) + tuple(int(r.request_id) for r in self.sched.running)

    def notes(self):
        return ()


class Recorder:
    """Wraps csa-plan's runtime to log the same per-step figures."""

    def __init__(self, rt):
        self.rt = rt
        self.log: list[dict] = []
        self.pools, self.usable_units, self.pipeline_depth, self.label = rt.pools, rt.usable_units, \
            rt.pipeline_depth, rt.label

    def __getattr__(self, name):
        return getattr(self.rt, name)

    def schedule(self):
        step = self.rt.schedule()
        self.log.append({"sched": dict(zip(step.requests, step.tokens)), "running": self.rt.running(),
                         "waiting": self.rt.waiting(), "preempted": sorted(step.preempted),
                         "free": self.rt.kv.pool.num_free(), "hit": step.prefix_hit_tokens,
                         "admitted": sorted(step.admitted)})
        return step


def load_trace(path: str, n: int, skip: int = 0):
    """Requests skip .. skip + n of a trace, as csa-plan's tests slice it (planner/replay/trace.py)."""
    from csa_plan.planner.replay.trace import runtime_trace, slice_trace
    from csa_plan.planner.workloads import load_workload

    return slice_trace(runtime_trace(load_workload(path)), skip, n)


def mix_trace(traces):
    """Interleave traces by arrival; a request keeps its prefix ids (none for a trace without them)."""
    import numpy as np

    from csa_plan.planner.replay.protocol import RuntimeTrace

    arr = np.concatenate([t.arrival_ns for t in traces])
    order = np.argsort(arr, kind="stable")
    cat = lambda f: np.concatenate([getattr(t, f) for t in traces])[order]
    per = [list(t.ids_of(i)) if t.block_ids is not None else [] for t in traces for i in range(len(t))]
    ids, offs = [], [0]
    for k in order:
        ids.extend(int(x) for x in per[k])
        offs.append(len(ids))
    return RuntimeTrace(arr[order], cat("prompt_tokens"), cat("output_tokens"), np.array(ids, dtype=np.int64),
                        np.array(offs, dtype=np.int64))


def run_case(label, model_name, trace, kv_gib, mnbt, seqs, caching, async_on=True, spec=0, max_model_len=131072,
             verbose=False, release="vllm-0.33", acceptance=1.0, gpu=None):
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.replay.loop import replay
    from csa_plan.planner.replay.protocol import RuntimeOptions
    from csa_plan.planner.steptime.model import StepTime
    import numpy as np

    model = load_model(model_ref(model_name), max_seq_len=max_model_len)
    kv = int(kv_gib * GiB)
    time_model = StepTime(20.0, 10_000.0)
    t0 = time.time()
    sched, kv_cfg, hash_block = build_scheduler(model, max_model_len, kv, mnbt, seqs, async_on, spec, caching,
                                                release, gpu or "h200")
    ref = VllmReference(sched, trace, hash_block, max_model_len, spec, caching, acceptance)
    shared = any(d.sharing is not None for d in model.layers)
    if spec and caching and release in ("vllm-0.33", "vllm-0.34") and not shared and not sched.num_hash_lookahead_tokens:
        raise RuntimeError("vLLM's num_hash_lookahead_tokens resolved to 0 for MTP with caching")
    a = replay(ref, trace, time_model, compiled=False)  # vLLM's own objects, stepped by the Python loop
    t1 = time.time()
    settings = EngineSettings(max_num_batched_tokens=mnbt, max_num_seqs=seqs, async_scheduling=async_on,
                              num_speculative_tokens=spec or None, gpu=gpu)
    engine = get_engine(release)
    if engine.release.scheduler_replayed is False:  # the question: would 0.33's replay equal this release's own?
        from dataclasses import replace

        engine = replace(engine, release=replace(engine.release, scheduler_replayed=True))
    plan = engine.configure(model, settings, max_model_len)
    sizing = plan.size_pool(kv)
    ours = Recorder(plan.runtime(sizing, trace, RuntimeOptions(enable_prefix_caching=caching, spec_acceptance=acceptance)))
    b = replay(ours, trace, time_model, compiled=False)  # the Python twin, step by step (it is what is logged)
    t2 = time.time()
    problems = []
    # the compiled loop (cvllm) where built: per-request outcomes and per-step counts against vLLM's own run
    c = None
    fresh = plan.runtime(sizing, trace, RuntimeOptions(enable_prefix_caching=caching, spec_acceptance=acceptance))
    if fresh.compiled_replay() is not None:
        c = replay(fresh, trace, time_model, compiled=True)
        t3 = time.time()
        if not c.same_as(b):
            problems.append("the compiled loop differs from the Python loop")
        for f in ("admitted_ns", "first_token_ns", "finished_ns", "preemptions"):
            if list(getattr(a, f)) != [int(x) for x in getattr(c, f)]:
                problems.append(f"compiled: {f} differs from vLLM's")
        for f in ("end_ns", "running", "waiting", "tokens"):
            if not np.array_equal(getattr(a.series, f), getattr(c.series, f)):
                problems.append(f"compiled: per-step {f} differs from vLLM's")
        if a.refused.keys() != c.refused.keys() or a.prefix_hit_tokens != c.prefix_hit_tokens:
            problems.append("compiled: refusals or prefix-hit tokens differ from vLLM's")
    elif verbose:
        print("  (the cvllm extension is not built: the compiled loop is not checked)")
    if sizing.total_units != kv_cfg.num_blocks:
        problems.append(f"num_blocks {sizing.total_units} != {kv_cfg.num_blocks}")
    for k, (x, y) in enumerate(zip(ref.log, ours.log)):
        if x != y:
            diff = {f: (x[f], y[f]) for f in x if x[f] != y[f]}
            if "sched" in diff:
                sx, sy = diff["sched"]
                diff["sched"] = {r: (sx.get(r), sy.get(r)) for r in set(sx) | set(sy) if sx.get(r) != sy.get(r)}
            problems.append(f"step {k}: {diff}")
            break
    if len(ref.log) != len(ours.log) and not problems:
        problems.append(f"steps {len(ref.log)} vs {len(ours.log)}")
    if not problems:
        for f in ("admitted_ns", "first_token_ns", "finished_ns", "preemptions"):
            if getattr(a, f) != getattr(b, f):
                i = next(i for i, (x, y) in enumerate(zip(getattr(a, f), getattr(b, f))) if x != y)
                problems.append(f"{f} differs first at request {i}: {getattr(a, f)[i]} vs {getattr(b, f)[i]}")
        if set(a.refused) != set(b.refused):
            problems.append(f"refused {sorted(a.refused)[:5]} vs {sorted(b.refused)[:5]}")
    ok = not problems
    pre = sum(a.preemptions)
    summary = (f"{len(trace)} requests, {len(ref.log)} steps, {pre} preemptions of "
               f"{sum(1 for p in a.preemptions if p)} requests, peak running {int(a.series.running.max())}, "
               f"prefix-hit tokens {a.prefix_hit_tokens:,}, refused {len(a.refused)} "
               f"[vLLM {t1 - t0:.1f} s, csa-plan {t2 - t1:.1f} s"
               + (f", compiled {t3 - t2:.2f} s (equal)" if c is not None else ", compiled loop not built") + "]")
    line = (f"{'OK  ' if ok else 'FAIL'} {label} {model_name} kv={kv_gib}GiB mnbt={mnbt} seqs={seqs} "
            f"caching={'on' if caching else 'off'} async={'on' if async_on else 'off'} spec={spec}: "
            + (summary if ok else "; ".join(problems)[:2000]))
    return ok, line


TWO_MTP = "deepseek-v4-flash+2mtp"  # V4-Flash with two MTP modules: multi-module MTP (no released V4 has it)
_REFS: dict[str, str] = {}


def model_ref(name: str) -> str:
    """A preset name, or for TWO_MTP a temporary config directory: the preset with num_nextn_predict_layers 2."""
    if name != TWO_MTP:
        return name
    if name not in _REFS:
        import json
        import tempfile
        from pathlib import Path

        from csa_plan.planner import presets
        from csa_plan.planner.loaders.model_files import PRESETS

        cfg = json.loads((Path(presets.__file__).parent / PRESETS["deepseek-v4-flash"]).read_text())
        cfg["num_nextn_predict_layers"] = 2
        cfg["compress_ratios"] = list(cfg["compress_ratios"]) + [0]
        d = tempfile.mkdtemp(prefix="csa-plan-2mtp-")
        (Path(d) / "config.json").write_text(json.dumps(cfg))
        _REFS[name] = d
    return _REFS[name]


TIGHT_GIB = {"deepseek-v4-flash": 8, "deepseek-v4-pro": 10}  # vLLM preempts here (Mooncake, caching on)
ROOMY_GIB = 40


def cases(n: int):
    """(label, model, trace loader, kv GiB, max_num_batched_tokens, max_num_seqs, caching, async, MTP drafts)."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "traces")
    conv = os.path.join(root, "azure_llm_inference_2023_conv.csv")
    mooncake = os.environ.get("CSA_MOONCAKE", os.path.join(root, "mooncake_conversation_head200.jsonl"))
    burst = os.path.join(root, "burstgpt_v1_head42.csv")
    traces = {
        "azure-conv@1000": lambda: load_trace(conv, n, 1000),
        "azure-conv@12000": lambda: load_trace(conv, n, 12000),
        "mooncake-head": lambda: load_trace(mooncake, n),
        "mix": lambda: mix_trace([load_trace(conv, n // 2, 5000), load_trace(mooncake, n // 2, 0),
                                  load_trace(burst, 40, 0)]),
    }
    out = []
    for model in ("deepseek-v4-flash", "deepseek-v4-pro"):
        tight = TIGHT_GIB[model]
        for label, load in traces.items():
            settings = [(tight, 8192, 1024, True, True), (ROOMY_GIB, 2048, 8, True, True),
                        (tight, 2048, 1024, True, False)]
            if label == "mooncake-head":
                settings += [(tight, 8192, 1024, False, True), (ROOMY_GIB, 8192, 1024, False, False)]
            for kv, mnbt, seqs, caching, async_on in settings:
                out.append((label, model, load, kv, mnbt, seqs, caching, async_on, 0))
        out.append(("azure-conv@3000-mtp", model, lambda: load_trace(conv, n // 2, 3000), tight, 2048, 1024, False,
                    True, 2))
        out.append(("azure-conv@3000-mtp", model, lambda: load_trace(conv, n // 2, 3000), tight, 8192, 8, False,
                    False, 1))
        # MTP with prefix caching (vLLM's default: lookahead block hashes, no EAGLE block drop)
        mtp_cached = [("mooncake-head-mtp", traces["mooncake-head"], s) for s in
                      [(tight, 8192, 1024, True, 1), (tight, 2048, 1024, False, 3), (ROOMY_GIB, 2048, 8, True, 2),
                       (ROOMY_GIB, 8192, 1024, False, 1)]]
        mtp_cached += [("azure-conv@12000-mtp", traces["azure-conv@12000"], s) for s in
                       [(tight, 8192, 1024, True, 2), (ROOMY_GIB, 2048, 8, False, 1)]]
        mtp_cached += [("mix-mtp", traces["mix"], (tight, 2048, 1024, True, 3))]
        for label, load, (kv, mnbt, seqs, async_on, spec) in mtp_cached:
            out.append((label, model, load, kv, mnbt, seqs, True, async_on, spec))
    # DeepSeek-V4.1 (shared compressed state): rings, bounded-replay windows, DSpark drafts, on H200 and B200
    for gpu in ("h200", "b200"):
        for label, load, (kv, mnbt, seqs, caching, async_on, spec) in [
                ("mooncake-head", traces["mooncake-head"], (4, 8192, 1024, True, True, 0)),
                ("mooncake-head", traces["mooncake-head"], (ROOMY_GIB, 2048, 8, True, False, 0)),
                ("mooncake-head", traces["mooncake-head"], (4, 2048, 1024, False, True, 0)),
                ("mooncake-head-dspark", traces["mooncake-head"], (4, 8192, 1024, True, True, 5)),
                ("azure-conv@12000-dspark", traces["azure-conv@12000"], (ROOMY_GIB, 2048, 1024, True, False, 3)),
                ("mix", traces["mix"], (4, 2048, 1024, True, True, 0)),
                ("mooncake-head-tight", traces["mooncake-head"], (0.7, 8192, 1024, True, True, 0)),
                ("mooncake-head-tight-dspark", traces["mooncake-head"], (0.5, 2048, 1024, True, False, 5)),
                ("mix-tight", traces["mix"], (0.7, 2048, 1024, True, True, 0))]:
            out.append((f"{label}@{gpu}", "deepseek-v4.1-flash", load, kv, mnbt, seqs, caching, async_on, spec))
    # multi-module MTP: N lookahead tokens in every hash, N - 1 extra retained tokens in every window
    for label, load, (kv, mnbt, seqs, async_on, spec) in [
            ("mooncake-head-mtp", traces["mooncake-head"], (8, 8192, 1024, True, 2)),
            ("mooncake-head-mtp", traces["mooncake-head"], (8, 2048, 1024, False, 3)),
            ("mooncake-head-mtp", traces["mooncake-head"], (ROOMY_GIB, 2048, 8, True, 3)),
            ("azure-conv@12000-mtp", traces["azure-conv@12000"], (8, 8192, 1024, False, 2))]:
        out.append((label, TWO_MTP, load, kv, mnbt, seqs, True, async_on, spec))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=100, help="requests per trace slice [default: 100]")
    p.add_argument("--only", default=None, help="run the cases whose label contains this")
    p.add_argument("--release", default=None, help="the installed vLLM release's registry name (vllm-0.33, "
                   "vllm-0.26, vllm-0.25): its own Scheduler over its own start-up pool, against csa-plan's "
                   "0.33 replay over that pool [default: the installed release]")
    p.add_argument("--no-mtp", action="store_true", help="skip the MTP cases")
    p.add_argument("--acceptance", type=float, default=1.0,
                   help="each draft's acceptance rate in the fabricated output [default: 1, every draft]")
    args = p.parse_args(argv)
    from crosscheck_engines import installed_vllm_release

    release = args.release or installed_vllm_release()
    if release != installed_vllm_release():
        p.error(f"--release {release}: the installed vLLM is {installed_vllm_release()}")
    results = []
    for label, model, load, kv, mnbt, seqs, caching, async_on, spec in cases(args.requests):
        if args.only and args.only not in f"{label} {model}" or (args.no_mtp and spec):
            continue
        try:
            gpu = label.rsplit("@", 1)[1] if label.endswith(("@h200", "@b200")) else None
            ok, line = run_case(label, model, load(), kv, mnbt, seqs, caching, async_on, spec, release=release,
                                acceptance=args.acceptance, gpu=gpu)
        except Exception as exc:  # a case that cannot run is a failure, named
            ok, line = False, f"FAIL {label} {model} kv={kv} mnbt={mnbt} seqs={seqs}: {type(exc).__name__}: {exc}"
        print(line, flush=True)
        results.append(ok)
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
