"""Cross-check ``simulate --engine sglang-0.5.23`` step by step against SGLang 0.5.23's own code (outside CI).

Run it with a virtualenv that has sglang==0.5.23 installed ``--no-deps`` and a CPU torch (the one
``tools/crosscheck_engines.py`` uses; docs/sglang-runtime.md says how). Nothing here is a csa-plan
dependency; csa-plan is imported from this checkout (no install needed). SGLang's package imports
a few GPU/vision modules at import time that a CPU venv lacks: they are replaced by inert stubs
(``_stub_imports``) before the first SGLang import; the code driven below never calls them.

Driven with SGLang's own classes and functions, every step of csa-plan's replay (the same trace,
pools, clock and step order as ``simulate``; the model output fabricated: one token per request
that finished its prompt or decoded):

* each prefill pass: SGLang's ``PrefillAdder`` (``managers/schedule_policy.py``) with its
  ``SWAPrefillBudget`` (``mem_cache/prefill_budget.py``), built over csa-plan's pools (an
  ``SWATokenToKVPoolAllocator`` subclass that reports csa-plan's free full / SWA tokens) and
  radix cache (a tree-cache view that reports csa-plan's evictable tokens and pins csa-plan's
  nodes), fed the continuing chunk (``add_chunked_req``) and the waiting queue (``add_one_req``)
  as the scheduler loop does: the requests admitted, their extend lengths and the new chunked
  request must equal csa-plan's;
* each decode step: ``ScheduleBatch._get_decode_retraction_order`` on the running batch must
  give csa-plan's order, and SGLang's ``NewTokenRatioTracker`` (``decay_step`` /
  ``estimate_new_token_ratio_after_retract``) followed along must equal csa-plan's ratio
  bit for bit;
* each SWA window eviction: ``mem_cache/common.py free_swa_out_of_window_slots`` on a
  ``ReqKvInfo`` must free exactly the pages csa-plan frees.

Then the compiled loop (``engines/sglang/csglang.c``, what ``simulate`` runs when it is built) replays the
same case and must give the same run (``RuntimeResult.same_as``): it agrees with SGLang's code through its
checked Python twin. A case fails when the extension is not built.

Not driven (checked on worked cases in tests/engines/test_sglang_runtime.py, from the source
with file:line): ``UnifiedRadixCache`` itself (match validator, insert, LRU eviction), the
scheduler loop around the adder (``get_next_batch_to_run``), ``retract_decode``'s loop and
``check_decode_mem``'s page count.

Usage: python tools/crosscheck_sglang_runtime.py [--quick]. Exit 0 when every case agrees.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GiB = 1 << 30


# -- imports -------------------------------------------------------------------------------------


class _Inert(types.ModuleType):
    __path__: list = []

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = type(name, (), {"__init__": lambda s, *a, **k: None, "__call__": lambda s, *a, **k: s,
                                "__getattr__": lambda s, n: s})()
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Inert modules for GPU kernels and SGLang's multimodal configs (imported, never called here)."""

    TOP = ("sgl_kernel", "flashinfer", "decord", "av", "soundfile", "librosa", "timm", "cv2")
    PREFIX = ("sglang.srt.configs",)

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.TOP or any(name == p or name.startswith(p + ".") for p in self.PREFIX):
            return importlib.machinery.ModuleSpec(name, self)
        return None

    def create_module(self, spec):
        return _Inert(spec.name)

    def exec_module(self, module):
        pass


def _stub_imports() -> None:
    sys.meta_path.insert(0, _StubFinder())


def _csa_plan_from_checkout() -> None:
    """Make ``csa_plan.planner`` this checkout's planner/ (pyproject's package-dir) when not installed."""
    try:
        import csa_plan.planner  # noqa: F401
        return
    except ImportError:
        pass
    pkg = types.ModuleType("csa_plan")
    pkg.__path__ = []
    sys.modules["csa_plan"] = pkg
    for sub in ("planner", "cli"):
        spec = importlib.util.spec_from_file_location(f"csa_plan.{sub}", os.path.join(ROOT, sub, "__init__.py"),
                                                      submodule_search_locations=[os.path.join(ROOT, sub)])
        mod = importlib.util.module_from_spec(spec)
        sys.modules[f"csa_plan.{sub}"] = mod
        spec.loader.exec_module(mod)
        setattr(pkg, sub, mod)


# -- SGLang-side views over csa-plan's state ------------------------------------------------------


def sglang_side(sched):
    """SGLang's objects bound to one csa-plan scheduler's live pools and tree."""
    import sglang.srt.managers.schedule_batch as sb
    import sglang.srt.managers.schedule_policy as sp
    from sglang.srt.managers.schedule_batch import ReqKvInfo, ScheduleBatch
    from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder
    from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker
    from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
    from sglang.srt.mem_cache.common import free_swa_out_of_window_slots
    from sglang.srt.mem_cache.unified_cache.components import ComponentType

    schedule = types.SimpleNamespace(retraction_policy="length", schedule_conservativeness=1.0,
                                     schedule_low_priority_values_first=False, prefill_max_requests=None)
    sb.get_schedule = lambda: schedule  # server args as `sglang serve` defaults them
    sp.get_exec = lambda: types.SimpleNamespace(features=types.SimpleNamespace(
        enable_encoder_swa_bounded_replay=False))
    import sglang.srt.managers.scheduler_components.new_token_ratio_tracker as nt
    nt.get_schedule = lambda: schedule
    cfg = sched.cfg

    class Alloc(SWATokenToKVPoolAllocator):
        def __init__(self):  # the allocator's accounting, not its tensors
            self.page_size = cfg.page
            self._swa_req_ring = False
            self._swa_ring_cost = 0

        def full_available_size(self):
            return sched.full_available()

        def swa_available_size(self):
            return sched.swa_available()

        @property
        def size_swa(self):
            return sched.size_swa

    class Tree:
        sliding_window_size = cfg.window
        disable = not cfg.radix_cache
        buffer_pipeline = None

        def full_evictable_size(self):
            return sched.full_evictable()

        def swa_evictable_size(self):
            return sched.swa_evictable()

        evictable_size = full_evictable_size

        def supports_mamba(self):
            return False

        def supports_prefix_sharing(self):
            return cfg.radix_cache

        def lock(self, node):
            if node is not None:
                sched.tree.lock_path(node)
            return node

        def unlock(self, node):
            if node is not None:
                sched.tree.unlock_path(node)

        def finish_storage_prefetch_admission(self, *a, **k):
            pass

        def discard_storage_prefetch_accounting(self, *a, **k):
            pass

    class FakeReq:
        def __init__(self, r, prefix_len, node):
            self.r = r
            self.rid = r.rid
            self.sampling_params = types.SimpleNamespace(max_new_tokens=r.max_new, ignore_eos=False)
            self.output_ids = [0] * r.out
            self.origin_input_ids = [0] * r.prompt
            self.full_untruncated_fill_ids = [0] * r.fill_len
            self.prefix_len = prefix_len
            self.kv = types.SimpleNamespace(holds_mamba=False, req_pool_idx=None, holds_kv=False)
            self.last_node = node
            self.host_hit_length = self.swa_host_hit_length = self.auxiliary_swa_host_hit_length = 0
            self.retracted_stain = r.retractions > 0
            self.storage_hit_length = self.storage_hit_start = 0
            self.host_hit_is_storage = False
            self.cache_request_handle = None
            self.beam_group = None
            self.priority = None
            self.lock = None

        def needs_host_load_back(self):
            return False

        def materialized_host_hit_len(self):
            return 0

        def fulfilled_storage_hit_len(self, p):
            return 0

        def init_next_round_input(self, *a):
            pass

        @property
        def extend_len(self):
            return self.extend_end - self.prefix_len

    class Running:
        def __init__(self, reqs):
            self.reqs = reqs

        def batch_size(self):
            return len(self.reqs)

    alloc, tree = Alloc(), Tree()
    tracker = NewTokenRatioTracker.from_config()

    def prefill_pass():
        """What SGLang's PrefillAdder admits on the current state: [(rid, extend, chunk continues)]."""
        running = [FakeReq(r, r.prefix_len, None) for r in sched.running]
        adder = PrefillAdder(cfg.page, tree, alloc, Running(running), sched.ratio, cfg.max_prefill_tokens,
                             cfg.chunked_prefill_size, 0, 0, max_prefill_bs=0,
                             max_running_requests=cfg.max_running_requests)
        out, pinned = [], []
        chunked = None
        if sched.chunked is not None:
            c = FakeReq(sched.chunked, sched.chunked.kv_len, None)
            c.kv.req_pool_idx = 0
            before = len(adder.can_run_list)
            chunked = adder.add_chunked_req(c)
            if len(adder.can_run_list) > before:
                out.append((c.rid, c.extend_end - c.prefix_len, chunked is not None))
        holds_row = 1 if sched.chunked is not None else 0
        for r in sched.waiting:
            if adder.budget_state() == AddReqResult.OTHER:
                break
            running_bs = len(running)
            held = 1 if out and sched.chunked is not None and out[0][0] == sched.chunked.rid else 0
            if len(adder.can_run_list) >= min(cfg.max_running_requests - running_bs,
                                              cfg.max_running_requests - running_bs - holds_row + held):
                break
            limit = (r.fill_len - 1) // cfg.page
            node, pages = sched.tree.match(sched._keys(r, limit), limit) if cfg.radix_cache else (None, 0)
            fr = FakeReq(r, pages * cfg.page, node if pages else None)
            res = adder.add_one_req(fr, has_chunked_req=chunked is not None, truncation_align_size=None)
            if fr.lock is not None:
                pinned.append(fr.lock)
            if fr in adder.can_run_list:
                out.append((fr.rid, fr.extend_end - fr.prefix_len, adder.new_chunked_req is fr))
            if res != AddReqResult.CONTINUE:
                break
        for node in pinned:  # undo the commits' locks: csa-plan's own pass takes them next
            tree.unlock(node)
        return out

    def retraction_order(batch):
        fakes = [FakeReq(r, 0, None) for r in batch]
        return ScheduleBatch._get_decode_retraction_order(fakes)

    def follow_ratio(kept, retracted: bool):
        if retracted:
            tracker.current = NewTokenRatioTracker.estimate_new_token_ratio_after_retract(
                [FakeReq(r, 0, None) for r in kept])
        else:
            tracker.decay_step()
        return tracker.current

    class Rows:
        def __getitem__(self, key):
            _row, sl = key
            return range(sl.start, sl.stop)

    pool = types.SimpleNamespace(req_to_token=Rows())

    def window(evicted: int, protected: int, pre_len: int) -> int:
        kv = ReqKvInfo(req_pool_idx=0, cache_protected_len=protected)
        kv.set_evicted_seqlen(ComponentType.SWA, evicted)
        req = types.SimpleNamespace(kv=kv)
        freed: list = []
        free_swa_out_of_window_slots(req, pre_len, sliding_window_size=cfg.window, page_size=cfg.page,
                                     req_to_token_pool=pool, token_to_kv_pool_allocator=None,
                                     supports_prefix_sharing=cfg.radix_cache,
                                     free_segment=lambda slots, start_pos: freed.append((start_pos, len(slots))))
        return kv.get_evicted_seqlen(ComponentType.SWA)

    return prefill_pass, retraction_order, follow_ratio, window, tracker


# -- one case --------------------------------------------------------------------------------------


def run_case(label: str, trace, cfg, steps_limit: int | None = None) -> tuple[bool, str]:
    from csa_plan.planner.engines.sglang import scheduler as S
    from csa_plan.planner.engines.sglang.retract import retraction_order as ours_order
    from csa_plan.planner.engines.sglang.runtime import SglangRuntime
    from csa_plan.planner.engines.sglang.compiled import replay_for
    from csa_plan.planner.replay.loop import replay
    from csa_plan.planner.steptime.model import StepTime

    rt = SglangRuntime(cfg, trace, "sglang-0.5.23", compiled=replay_for)
    sched = rt.sched
    prefill_pass, sg_order, follow_ratio, sg_window, _tracker = sglang_side(sched)
    counts = {"prefill": 0, "decode": 0, "window": 0, "retractions": 0}
    mismatches: list[str] = []
    orig_prefill, orig_decode, orig_evict = sched._prefill, sched._decode, sched._evict_window

    def checked_prefill():
        theirs = prefill_pass()
        d = orig_prefill()
        ours = [] if d is None else [(r.rid, n, c) for r, n, c in d.batch]
        counts["prefill"] += 1
        if theirs != ours and len(mismatches) < 5:
            mismatches.append(f"prefill pass {counts['prefill']}: sglang {theirs[:6]} vs csa-plan {ours[:6]}")
        return d

    def checked_decode():
        batch = list(sched.running)
        theirs = sg_order(batch)
        mine = ours_order([r.out for r in batch], [r.prompt for r in batch])
        if theirs != mine and len(mismatches) < 5:
            mismatches.append(f"decode {counts['decode']}: retraction order {theirs[:8]} vs {mine[:8]}")
        d = orig_decode()
        counts["decode"] += 1
        counts["retractions"] += len(d.retracted)
        ratio = follow_ratio(sched.running, bool(d.retracted))
        if ratio != sched.ratio and len(mismatches) < 5:
            mismatches.append(f"decode {counts['decode']}: new_token_ratio {ratio!r} vs {sched.ratio!r}")
        return d

    def checked_evict(req, pre_len, interval):
        before = req.swa_from
        theirs = sg_window(before, req.prefix_len, pre_len)
        orig_evict(req, pre_len, interval)
        counts["window"] += 1
        if theirs != req.swa_from and len(mismatches) < 5:
            mismatches.append(f"window: evicted {before} at {pre_len}: sglang {theirs} vs csa-plan {req.swa_from}")

    sched._prefill, sched._decode, sched._evict_window = checked_prefill, checked_decode, checked_evict
    res = replay(rt, trace, StepTime(20.0, 10_000.0), compiled=False)  # the Python model, checked step by step
    # the compiled loop (csglang.c) must give the same run, so it agrees with SGLang's code through the twin
    compiled = SglangRuntime(cfg, trace, "sglang-0.5.23", compiled=replay_for)
    if compiled.compiled_replay() is None:
        mismatches.append("the compiled loop (csa_plan.planner.engines.sglang.csglang) is not built")
    elif not replay(compiled, trace, StepTime(20.0, 10_000.0), compiled=True).same_as(res):
        mismatches.append("the compiled loop's run differs from the Python model's")
    ok = not mismatches
    line = (f"{'OK  ' if ok else 'FAIL'} {label}: {res.series.steps:,} steps; {counts['prefill']:,} prefill passes, "
            f"{counts['decode']:,} decode steps, {counts['window']:,} window evictions agree; "
            f"{counts['retractions']:,} retractions, {res.prefix_hit_tokens:,} hit tokens, "
            f"{sum(1 for f in res.finished_ns if f >= 0):,}/{len(trace):,} finished; compiled loop equal")
    return ok, line + ("" if ok else "\n    " + "\n    ".join(mismatches))


def cases(quick: bool):
    import numpy as np

    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.replay.protocol import RuntimeTrace
    from csa_plan.planner.workloads import load_workload

    def trace_of(path: str, n: int):
        wl = load_workload(os.path.join(ROOT, path))
        n = min(n, len(wl))
        ho = wl.hash_offsets[:n + 1] if wl.hash_offsets is not None else None
        return RuntimeTrace(wl.arrival_ns[:n].astype(np.int64), wl.prompt_tokens[:n].astype(np.int64),
                            np.maximum(wl.output_tokens[:n], 1).astype(np.int64),
                            wl.hash_ids if ho is not None else None, ho)

    n = 60 if quick else 400
    rng = np.random.default_rng(7)
    m = 100 if quick else 300  # long outputs arriving over a minute: the ratio decays, admission overshoots
    storm = RuntimeTrace(np.sort(rng.integers(0, 60_000_000_000, m)).astype(np.int64),
                         rng.integers(200, 6000, m).astype(np.int64), rng.integers(500, 6000, m).astype(np.int64))
    head = ("mooncake head", trace_of("examples/traces/mooncake_conversation_head200.jsonl", n))
    azure = ("azure conv", trace_of("examples/traces/azure_llm_inference_2023_conv.csv", n))
    synth = ("mooncake synthetic", trace_of("examples/traces/mooncake_synthetic_head100.jsonl", n))
    plan_cases = (
        ("deepseek-v4-flash", 8, 64, 8192, (head, azure, synth)),  # shared prefixes and none; no retraction
        ("deepseek-v4-flash", 30, 64, 2048, (head, azure, synth)),  # small chunks
        ("deepseek-v4-pro", 12, 32, 8192, (head, synth)),
        ("deepseek-v4-flash", 6, 64, 8192, (("long outputs", storm),)),  # retraction storm
        ("deepseek-v4-pro", 8, 64, 8192, (azure,)),  # retracts on a real trace
    )
    from csa_plan.planner.replay.protocol import RuntimeOptions

    for model, gib, mrr, chunk, trs in plan_cases:
        spec = load_model(model)
        plan = get_engine("sglang-0.5.23").configure(
            spec, EngineSettings(max_running_requests=mrr, chunked_prefill_size=chunk), 131072)
        sizing = plan.size_pool(gib * GiB)
        for radix in (True, False):
            for name, tr in trs:
                rt = plan.runtime(sizing, tr, RuntimeOptions(enable_prefix_caching=radix))
                yield (f"{model} {gib} GiB mrr {mrr} chunk {chunk} {'radix' if radix else 'no-radix'} "
                       f"{name} ({len(tr)} req)"), tr, rt.cfg


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="60 requests per trace instead of 400")
    args = ap.parse_args()
    _stub_imports()
    _csa_plan_from_checkout()
    import sglang  # noqa: F401  (fail here, clearly, if SGLang is missing)

    all_ok, agreed, total = True, 0, 0
    for label, trace, cfg in cases(args.quick):
        ok, line = run_case(label, trace, cfg)
        all_ok &= ok
        agreed += ok
        total += 1
        print(line, flush=True)
    print(f"{agreed}/{total} agree (SGLang's code per step, and the compiled loop with the Python model)")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
