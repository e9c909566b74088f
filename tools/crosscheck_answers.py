"""Cross-check csa-plan's engine-authority capacity answers against the engines' own code (outside CI).

For many (model, GPU, tp, dp, max_num_batched_tokens, async scheduling, speculative tokens, N)
points this runs ``check --engine`` (``planner/commands/check.py`` -> ``planner/budget/answer.py``)
and asks the engine's own code the same two questions:

* requests of max_seq_len admitted: vLLM 0.33.0's start-up planning (``get_kv_cache_configs``,
  ``generate_scheduler_kv_cache_config``, ``get_max_concurrency_for_kv_cache_config``) sizes the
  pool, then its own ``KVCacheManager`` admits fresh requests of max_seq_len one after another
  through the scheduler's gate (``allocate_slots(..., full_sequence_must_fit=True)``, the
  scheduler's default ``scheduler_reserve_full_isl``), each admitted request holding the
  reservation the gate charged it (``coordinator.get_num_blocks_to_allocate(...,
  apply_admission_cap=True)``: vLLM's "sum(reservations) <= pool" invariant), until the gate
  refuses or max_num_seqs run. A refused start-up (vLLM's ValueError) admits 0.
* the longest max_model_len for N concurrent requests: csa-plan's answer L* is right when
  vLLM admits >= N at L* and < N at L* + 1 (counts fall as L grows: the pool shrinks and the
  charge grows); ``--bisect`` also finds L by bisection with vLLM's own count alone.

SGLang 0.5.23: ``DSV4PoolConfigurator.calculate_pool_sizes`` + ``finalize_with_max_running_requests``
size the pools at each L; the count is its full-token pool over the pages a request of L
tokens takes, capped by max_running_requests (the configurator is SGLang's code; the
per-request page count is the scheduler's paged allocation, cdiv(L, page) pages).

The KV memory at each length is csa-plan's device budget (card -> usable share -> weights ->
start-up reserves at that max_seq_len): vLLM's and SGLang's profiling runs need a GPU, so the
budget is the input and the engine's planning and admission are what is checked.

Run in the engines' virtualenv (vLLM --no-deps, torch CPU; README "Cross-checking the engine
models"); csa-plan is imported from this checkout when it is not installed there.
Exit 0 when every case agrees, 1 otherwise; one line per case and a count at the end.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GiB = 1 << 30


def _import_csa_plan() -> None:
    """csa_plan is a namespace over this checkout's cli/, planner/ and kernels/ folders."""
    try:
        import csa_plan.planner  # noqa: F401
    except ImportError:
        module = types.ModuleType("csa_plan")
        module.__path__ = [ROOT]  # type: ignore[attr-defined]
        sys.modules["csa_plan"] = module
    sys.path.insert(0, os.path.join(ROOT, "tools"))


# -- csa-plan's answer ------------------------------------------------------------------------


def ours(model: str, engine: str, gpu: str, tp: int, dp: int, settings, length: int, n: int):
    from csa_plan.planner.budget.deployment import Deployment, card_settings, deployment_budget
    from csa_plan.planner.cards import CardBytes, card
    from csa_plan.planner.commands.check import CheckRequest, run_check
    from csa_plan.planner.plan import PlanOptions

    memory = CardBytes(card(gpu))  # the card's memory, naming the card (its engine rules and defaults)
    deployment = Deployment(tp=tp, dp=dp)
    settings = card_settings(settings, memory, engine)
    out = run_check(CheckRequest(model, PlanOptions(max_seq_len=length, tp=tp), memory, 0, n, engine=engine,
                                 engine_settings=settings, deployment=deployment))

    def kv_at(n_tokens: int) -> int | None:
        b = deployment_budget(model, memory, deployment, n_tokens, engine, settings, search=False)
        return b.kv_memory_bytes if b is not None and b.fits else None

    return out.report["fit"], kv_at, settings


# -- vLLM 0.33.0 ------------------------------------------------------------------------------


class VllmAdmission:
    """vLLM's own count of requests of max_model_len admitted into the pool kv_memory yields."""

    def __init__(self, model, settings) -> None:
        import crosscheck_engines as ce

        from csa_plan.planner.engines.registry import get_engine

        self.ce, self.model = ce, model
        plan = get_engine("vllm-0.33").configure(model, settings, 1)  # the resolved settings, by vLLM's rules
        r = plan.resolved
        self.gpu = r.gpu.name
        try:
            tokens, seqs = ce.vllm_defaults(self.gpu)  # EngineArgs.get_batch_defaults answering as this GPU
        except Exception:  # noqa: BLE001
            tokens, seqs = None, None
        self.mnbt = settings.max_num_batched_tokens or tokens or r.max_num_batched_tokens
        self.max_num_seqs = settings.max_num_seqs or seqs or r.max_num_seqs
        self.defaults_agree = (tokens, seqs) == (None, None) or \
            (settings.max_num_batched_tokens or tokens, settings.max_num_seqs or seqs) == \
            (r.max_num_batched_tokens, r.max_num_seqs)
        self.async_on, self.spec, self.fp4 = r.async_scheduling, r.num_speculative_tokens, r.indexer_fp4
        self.cache: dict[tuple[int, int], tuple[int, float | None]] = {}

    def count(self, length: int, kv_memory: int | None) -> tuple[int, float | None]:
        """(requests admitted, vLLM's "Maximum concurrency" figure or None when it refuses to start)."""
        if kv_memory is None or kv_memory <= 0:
            return 0, None
        key = (length, kv_memory)
        if key not in self.cache:
            self.cache[key] = self._count(length, kv_memory)
        return self.cache[key]

    def _count(self, length: int, kv_memory: int) -> tuple[int, float | None]:
        import vllm.v1.core.kv_cache_utils as kcu
        from vllm.sampling_params import SamplingParams
        from vllm.v1.core import kv_cache_planning as kcp
        from vllm.v1.core.kv_cache_manager import KVCacheManager
        from vllm.v1.request import Request

        ce = self.ce
        cfg = ce.vllm_config_stub(length, self.mnbt, self.max_num_seqs, self.async_on, self.spec,
                                  self.model.num_mtp_layers, 256)
        specs = ce.vllm_specs(self.model, 256, self.fp4, self.spec, max(0, cfg.num_prefill_lookahead_tokens - 1))
        groups = kcp.get_global_kv_cache_groups(cfg, [specs])
        try:
            configs = kcp.get_kv_cache_configs(cfg, [specs], [kv_memory], groups)
        except ValueError:  # vLLM refuses to start: nothing is admitted
            return 0, None
        sched = kcu.generate_scheduler_kv_cache_config(configs)
        figure = kcu.get_max_concurrency_for_kv_cache_config(cfg, sched)
        try:
            from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes

            block, hash_block = resolve_kv_cache_block_sizes(sched, cfg)
        except Exception:  # noqa: BLE001  (the stub lacks a field it reads: every group's block divides 256)
            block = hash_block = 256
        manager = KVCacheManager(sched, max_model_len=length, scheduler_block_size=block, hash_block_size=hash_block,
                                 max_in_flight_tokens=cfg.max_in_flight_tokens, enable_caching=False,
                                 num_prefill_lookahead=cfg.num_prefill_lookahead_tokens)
        pool = manager.block_pool
        prompt = [0] * length

        def request(i: int):
            return Request(f"r{i}", prompt, SamplingParams(max_tokens=1), None)

        probe = request(-1)
        charge = manager.coordinator.get_num_blocks_to_allocate(
            request_id=probe.request_id, num_tokens=length, new_computed_blocks=manager.empty_kv_cache_blocks.blocks,
            num_encoder_tokens=0, total_computed_tokens=0, num_local_computed_tokens=0,
            num_tokens_main_model=length, apply_admission_cap=True, prefill_end=length)
        admitted = 0
        # identical fresh requests are charged alike: hold all but the last few reservations at once,
        # then let the gate decide the boundary request by request
        bulk = max(0, min(self.max_num_seqs, pool.get_num_free_blocks() // max(charge, 1)) - 2)
        if bulk and charge:
            pool.get_new_blocks(bulk * charge)
        admitted = bulk
        while admitted < self.max_num_seqs:  # the scheduler's running cap (max_num_seqs)
            before = pool.get_num_free_blocks()
            if manager.allocate_slots(request(admitted), min(length, self.mnbt), full_sequence_must_fit=True) is None:
                break
            held = before - pool.get_num_free_blocks()
            if charge > held:
                pool.get_new_blocks(charge - held)  # the rest of its reservation
            admitted += 1
        return admitted, figure


def vllm_point(model_name: str, gpu: str, tp: int, dp: int, mnbt: int | None, async_on: bool, spec: int,
               length: int, n: int, bisect: bool) -> tuple[bool, str]:
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.loaders.model_files import load_model

    settings = EngineSettings(max_num_batched_tokens=mnbt, async_scheduling=async_on,
                              num_speculative_tokens=spec or None)
    fit, kv_at, settings = ours(model_name, "vllm-0.33", gpu, tp, dp, settings, length, n)
    model = load_model(model_name)
    v = VllmAdmission(model, settings)
    label = (f"vllm {model_name} {gpu} tp {tp} dp {dp} mnbt {v.mnbt} async {'on' if async_on else 'off'} "
             f"spec {spec} L {length:,} N {n}")
    problems = []
    if not v.defaults_agree:
        problems.append("vLLM's batch defaults differ from csa-plan's")
    count, figure = v.count(length, kv_at(length))
    if fit["requests_that_fit"] != (count if fit["answered"] else None) and not (count == 0 and not fit["answered"]):
        problems.append(f"requests of {length:,}: csa-plan {fit['requests_that_fit']} ({fit['no_answer'] or ''}) "
                        f"!= vLLM {count}")
    longest = fit["longest_context"]
    upper = max(d.max_seq_len for d in model.layers)
    upper = max(upper, length)
    if longest is not None:
        at, _ = v.count(longest, kv_at(longest))
        if at < n:
            problems.append(f"longest {longest:,}: vLLM admits only {at} there")
        if longest < upper:
            above, _ = v.count(longest + 1, kv_at(longest + 1))
            if above >= n:
                problems.append(f"longest {longest:,} is not the largest: vLLM admits {above} at {longest + 1:,}")
    elif fit["answered"] or count:
        one, _ = v.count(1, kv_at(1))
        if one >= n:
            problems.append(f"csa-plan has no longest context but vLLM admits {one} at 1 token")
    if bisect:
        from csa_plan.planner.budget.answer import longest_length

        theirs = longest_length(lambda t: v.count(t, kv_at(t))[0], n, upper)
        if theirs != longest:
            problems.append(f"longest by vLLM's own bisection {theirs} != csa-plan {longest}")
    fig = "refuses to start" if figure is None else f"concurrency {figure:.2f}x"
    text = (f"admits {count} ({fig}); longest for {n}: {longest:,}" if longest is not None
            else f"admits {count} ({fig}); no length fits {n}")
    ok = not problems
    return ok, f"{'OK  ' if ok else 'FAIL'} {label}: " + (text if ok else "; ".join(problems))


def vllm_points(quick: bool, seed: int, limit: int | None):
    grid = list(itertools.product(
        ("deepseek-v4-flash", "deepseek-v4-pro"), ("h200", "b200", "h100"), (4, 8), (1, 2), (None, 2048, 16384),
        (True, False), (0, 1, 3), (1_048_576, 131_072, 8_192), (1, 4, 16, 64)))
    grid = [p for p in grid if not (p[0] == "deepseek-v4-pro" and p[2] < 8)]  # V4-Pro's weights need tp 8
    rng = random.Random(seed)
    rng.shuffle(grid)
    return grid[:limit or (6 if quick else 48)]


# -- SGLang 0.5.23 ----------------------------------------------------------------------------


def sglang_count(model, length: int, kv_memory: int | None, mrr: int, chunk: int, drafts: int) -> int:
    import crosscheck_engines as ce
    import sglang.srt.model_executor.pool_configurator as pc

    if kv_memory is None or kv_memory <= 0:
        return 0
    main = [d for d in model.layers if not d.is_mtp]
    algo = types.SimpleNamespace(is_dspark=lambda: False, is_eagle=lambda: bool(drafts), is_none=lambda: not drafts)
    ns = types.SimpleNamespace
    kvc = ns(kv_cache_dtype_str="fp8_e4m3",
             model_config=ns(qk_nope_head_dim=448, qk_rope_head_dim=64, index_head_dim=128, context_len=length,
                             compress_ratios=[d.compression_ratio for d in main], hf_config=ns(kv_source_layer_ids=[]),
                             window_size=128),
             layer_info=ns(start_layer=0, end_layer=len(main)), pp_size=1, pp_group=None, spec_algorithm=algo,
             spec_aux_config=None, sliding_window_size=128, page_size=256, attn_dp_size=1)
    _stub_sglang(mrr, chunk, drafts)
    conf = pc.DSV4PoolConfigurator(kvc)
    try:
        cfg = conf.calculate_pool_sizes(kv_memory, 256)
    except Exception:  # noqa: BLE001  (SGLang refuses: no full pool)
        return 0
    cfg.max_running_requests = mrr
    cfg = conf.finalize_with_max_running_requests(cfg)
    if cfg.full_max_total_num_tokens <= 0:
        return 0
    pages = -(-length // 256)
    return min(cfg.max_running_requests, cfg.full_max_total_num_tokens // 256 // pages)


def _stub_sglang(mrr: int, chunk: int, drafts: int) -> None:
    import crosscheck_engines as ce
    import sglang.srt.mem_cache.deepseek_v4_memory_pool as pool_mod
    import sglang.srt.model_executor.pool_configurator as pc
    from sglang.srt.mem_cache import allocation_sizing

    ctx = ce.sglang_stub_context(mrr, chunk, drafts)
    for mod in (pc, pool_mod, allocation_sizing):
        for name, bag in ctx.items():
            if hasattr(mod, name):
                setattr(mod, name, (lambda b: (lambda: b))(bag))
    for mod in (pc, allocation_sizing):
        if hasattr(mod, "max_speculative_num_draft_tokens"):
            mod.max_speculative_num_draft_tokens = lambda: drafts or None
    if hasattr(allocation_sizing, "get_alloc_page_size"):
        allocation_sizing.get_alloc_page_size = lambda: 256


def sglang_point(model_name: str, gpu: str, tp: int, dp: int, mrr: int | None, chunk: int | None, drafts: int,
                 length: int, n: int) -> tuple[bool, str]:
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.loaders.model_files import load_model

    # SGLang's spelling: N draft steps verify N + 1 draft tokens (top-k 1, DeepSeek-V4's only choice)
    settings = EngineSettings(max_running_requests=mrr, chunked_prefill_size=chunk,
                              speculative_num_steps=drafts - 1 if drafts else None)
    fit, kv_at, settings = ours(model_name, "sglang-0.5.23", gpu, tp, dp, settings, length, n)
    model = load_model(model_name)
    r = get_engine("sglang-0.5.23").configure(model, settings, length).resolved
    mrr_, chunk_ = r.max_running_requests, r.chunked_prefill_size
    assert r.draft_tokens == drafts, (r.draft_tokens, drafts)
    cache: dict[int, int] = {}

    def count(t: int) -> int:
        if t not in cache:
            cache[t] = sglang_count(model, t, kv_at(t), mrr_, chunk_, drafts)
        return cache[t]

    label = f"sglang {model_name} {gpu} tp {tp} dp {dp} mrr {mrr_} chunk {chunk_} drafts {drafts} L {length:,} N {n}"
    problems = []
    here = count(length)
    ours_count = fit["requests_that_fit"] if fit["answered"] else 0
    if ours_count != here:
        problems.append(f"requests of {length:,}: csa-plan {fit['requests_that_fit']} ({fit['no_answer'] or ''}) "
                        f"!= SGLang {here}")
    longest = fit["longest_context"]
    upper = max(max(d.max_seq_len for d in model.layers), length)
    if longest is not None:
        if count(longest) < n:
            problems.append(f"longest {longest:,}: SGLang admits only {count(longest)} there")
        if longest < upper and count(longest + 1) >= n:
            problems.append(f"longest {longest:,} is not the largest: SGLang admits {count(longest + 1)} at "
                            f"{longest + 1:,}")
    elif count(1) >= n:
        problems.append(f"csa-plan has no longest context but SGLang admits {count(1)} at 1 token")
    ok = not problems
    text = f"admits {here}; longest for {n}: {longest if longest is None else format(longest, ',')}"
    return ok, f"{'OK  ' if ok else 'FAIL'} {label}: " + (text if ok else "; ".join(problems))


def stub_torchvision() -> bool:
    """SGLang's pool_configurator imports its model-config registry, whose multimodal configs (and
    transformers' image utilities) import torchvision, which the engines' venv lacks; the pool sizing
    never calls it. A stand-in package is put in its place when torchvision is missing (True)."""
    import enum
    import importlib.machinery
    import importlib.util

    if importlib.util.find_spec("torchvision") is not None:
        return False

    class Stub(types.ModuleType):
        def __getattr__(self, name: str):
            if name.startswith("__"):
                raise AttributeError(name)
            return type(name, (), {"__init__": lambda self, *a, **k: None, "__call__": lambda self, *a, **k: None})

    class InterpolationMode(enum.Enum):
        NEAREST, NEAREST_EXACT, BILINEAR, BICUBIC = "nearest", "nearest-exact", "bilinear", "bicubic"
        BOX, HAMMING, LANCZOS = "box", "hamming", "lanczos"

    for name in ("torchvision", "torchvision.transforms", "torchvision.transforms.functional",
                 "torchvision.transforms.v2", "torchvision.transforms.v2.functional", "torchvision.io",
                 "torchvision.ops"):
        module = Stub(name)
        module.__path__ = []  # type: ignore[attr-defined]
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules[name] = module
        if "." in name:
            parent, child = name.rsplit(".", 1)
            setattr(sys.modules[parent], child, module)
    sys.modules["torchvision"].__version__ = "0.28.0"  # type: ignore[attr-defined]
    for name in ("torchvision.transforms", "torchvision.transforms.functional"):
        sys.modules[name].InterpolationMode = InterpolationMode  # type: ignore[attr-defined]
    return True


def sglang_points(quick: bool, seed: int, limit: int | None):
    grid = list(itertools.product(
        ("deepseek-v4-flash", "deepseek-v4-pro"), ("h200", "b200"), (4, 8), (1, 2), (None, 64), (None, 16384),
        (0, 2), (1_048_576, 131_072, 8_192), (1, 4, 16, 64)))
    grid = [p for p in grid if not (p[0] == "deepseek-v4-pro" and p[2] < 8)]
    rng = random.Random(seed + 1)
    rng.shuffle(grid)
    return grid[:limit or (4 if quick else 24)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few points")
    parser.add_argument("--engine", choices=("vllm", "sglang", "all"), default="all")
    parser.add_argument("--points", type=int, default=None, help="points per engine [default: 48 vLLM, 24 SGLang]")
    parser.add_argument("--seed", type=int, default=23, help="which points of the grid (shuffled)")
    parser.add_argument("--bisect", action="store_true", help="also bisect the longest context with vLLM alone")
    args = parser.parse_args(argv)
    _import_csa_plan()
    results: list[tuple[bool, str]] = []

    from csa_plan.planner.errors import BadInput

    skipped: list[str] = []

    def run(fn, *point):
        try:
            ok, line = fn(*point)
        except BadInput as exc:  # csa-plan refuses the deployment itself as bad input: not a case
            line = f"SKIP {fn.__name__} {point}: csa-plan: bad input: {exc}"
            print(line, flush=True)
            skipped.append(line)
            return
        except Exception as exc:  # noqa: BLE001  (one broken case is reported, the rest still run)
            ok, line = False, f"FAIL {fn.__name__} {point}: {type(exc).__name__}: {exc}"
        print(line, flush=True)
        results.append((ok, line))

    if args.engine in ("vllm", "all"):
        for p in vllm_points(args.quick, args.seed, args.points):
            run(vllm_point, *p, args.bisect)
    if args.engine in ("sglang", "all"):
        if stub_torchvision():
            print("note: torchvision is missing: a stand-in package is imported in its place (SGLang's model-config "
                  "registry imports it; the pool sizing does not use it)")
        try:
            import sglang.srt.model_executor.pool_configurator  # noqa: F401
        except Exception as exc:  # noqa: BLE001
            print(f"SKIP sglang: pool_configurator did not import: {type(exc).__name__}: {exc}")
        else:
            for p in sglang_points(args.quick, args.seed, args.points):
                run(sglang_point, *p)
    bad = sum(1 for ok, _ in results if not ok)
    print(f"{len(results)} cases: {len(results) - bad} equal, {bad} different"
          + (f" ({len(skipped)} points skipped: bad input to csa-plan)" if skipped else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
