"""A host KV tier under an engine's replayed runtime: vLLM 0.33.0's ``--kv-offloading-size`` (its native
OffloadingConnector) and SGLang 0.5.23's ``--enable-hierarchical-cache`` (HiCache, ``--hicache-size`` /
``--hicache-ratio``).

What each engine does, and what is modelled:

* **Capacity.** vLLM: ``--kv-offloading-size`` GiB is the total over the TP ranks
  (``config/cache.py:383-387``; ``config/vllm.py:1172-1175`` passes ``cpu_bytes_to_use = size * 2**30``),
  split into whole chunks of every rank's block bytes (``v1/kv_offload/cpu/spec.py:106-123``). SGLang:
  ``--hicache-size`` GB per rank, ``int(size * 1e9 // size_per_token)`` tokens
  (``srt/mem_cache/pool_host/base.py:221-224``), else ``--hicache-ratio`` times the device pool's tokens
  (``:226``; default 2.0, ``srt/arg_groups/hicache_hook.py:119-122``). Here: the tier's bytes per GPU over
  the engine's own marginal bytes per token of a request (``EnginePlan.footprint``), in whole prefix blocks
  of the trace (its ``hash_ids``, 512 tokens for Mooncake).
* **What is offloaded, and when.** Both engines write through: vLLM stores every full block of a
  request as it is computed (``distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py:448-483``,
  the leading chunks eligible for store); SGLang's default ``--hicache-write-policy write_through``
  backs a node up on its first insert (``srt/arg_groups/fields/memory.py:121-127``,
  ``srt/mem_cache/unified_radix_cache.py:558-560``: threshold 1). Here: a request's full prefix blocks
  enter the tier when its prompt is computed; the tier evicts least recently used (vLLM's default
  ``eviction_policy`` lru, ``spec.py:142``).
* **What is reloaded, at what cost.** At admission the engine looks the prompt up in HBM first, then
  in the host tier for the tokens beyond (vLLM ``get_num_new_matched_tokens(request,
  num_computed_tokens)``, ``offloading/scheduler.py:1210``; SGLang ``load_back``,
  ``unified_radix_cache.py:1820``, host to device). The host-hit tokens get HBM blocks as any prompt
  does (the engine's own scheduler allocates them) but are not computed; their bytes (the request's
  footprint difference) cross the card's HBM<->host link (``cards.HOSTS``: PCIe, or NVLink-C2C on
  GH200/GB200) and the step that admits the request lasts that much longer. vLLM loads asynchronously
  (the request waits, others run on): charging the step is an upper bound for the others' latency there.
* **What does not change.** A running request's working set stays in HBM: neither engine runs a
  request from host memory, so the tier adds no concurrency and no context length; it only turns
  recomputation of an evicted prefix into a reload.

A request preempted (retracted) and readmitted is not looked up in the tier again (its prompt is
recomputed as without one); a trace without prefix ids shares nothing, so the tier never hits.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from csa_plan.planner.replay.protocol import EngineRuntime, Step, WrappedRuntime, admission_hits

if TYPE_CHECKING:
    from csa_plan.planner.replay.protocol import RuntimeTrace


@dataclass(frozen=True)
class HostTierFlags:
    """The host-tier flags as given (None / False: not given), each engine's own spelling."""

    kv_offloading_size_gib: float | None = None  # vLLM
    enable_hierarchical_cache: bool = False  # SGLang
    hicache_size_gb: float | None = None  # SGLang
    hicache_ratio: float | None = None  # SGLang

    @property
    def given(self) -> bool:
        return (self.kv_offloading_size_gib is not None or self.enable_hierarchical_cache
                or self.hicache_size_gb is not None or self.hicache_ratio is not None)

    def check_for(self, engine: str, caching: bool | None) -> str:
        """The field to name in errors; bad input for a flag the engine lacks, a size without the switch,
        or a tier under a disabled prefix cache."""
        from csa_plan.planner.errors import BadInput

        vllm = engine.startswith("vllm")
        field = "--kv-offloading-size" if self.kv_offloading_size_gib is not None else "--enable-hierarchical-cache"
        if vllm:
            for flag, value in (("--enable-hierarchical-cache", self.enable_hierarchical_cache),
                                ("--hicache-size", self.hicache_size_gb), ("--hicache-ratio", self.hicache_ratio)):
                if value:
                    raise BadInput("options", flag, f"SGLang's host KV tier; {engine} has no such flag (its host "
                                                    "tier is --kv-offloading-size GiB)")
        else:
            if self.kv_offloading_size_gib is not None:
                raise BadInput("options", "--kv-offloading-size", f"vLLM's host KV tier; {engine} has no such flag "
                                                                  "(its host tier is --enable-hierarchical-cache)")
            if not self.enable_hierarchical_cache:
                raise BadInput("options", "--hicache-size" if self.hicache_size_gb is not None else "--hicache-ratio",
                               "sizes SGLang's host tier: add --enable-hierarchical-cache")
        for flag, value in (("--kv-offloading-size", self.kv_offloading_size_gib),
                            ("--hicache-size", self.hicache_size_gb), ("--hicache-ratio", self.hicache_ratio)):
            if value is not None and not value > 0:
                raise BadInput("options", flag, f"must be a positive number, got {value:g}")
        if caching is False:
            raise BadInput("options", field, "the host tier sits beneath the prefix cache, which is disabled "
                                             "(--no-enable-prefix-caching / --disable-radix-cache)")
        return field


@dataclass(frozen=True)
class HostTier:
    """A host tier's size as the engine's flags give it, resolved: bytes per GPU and tokens of prefix."""

    engine_flag: str  # the flag as the engine spells it
    host_bytes_per_gpu: int
    capacity_tokens: int
    bytes_per_token: float  # the engine's marginal footprint per token per GPU (what capacity divides)
    link: str
    link_bytes_s: float
    source: str

    def as_dict(self) -> dict[str, Any]:
        return {"flag": self.engine_flag, "host_bytes_per_gpu": self.host_bytes_per_gpu,
                "capacity_tokens": self.capacity_tokens, "bytes_per_token": self.bytes_per_token,
                "link": self.link, "link_bytes_s": self.link_bytes_s, "source": self.source}


def marginal_bytes_per_token(plan: Any) -> float:
    """Bytes per GPU one more token of a long request holds (the plan's footprint between half and all of
    max_seq_len: windows and fixed states cancel out)."""
    from csa_plan.planner.engines.engine import Phase

    top = plan.max_seq_len
    half = top // 2
    return (plan.footprint(top, Phase.DECODE).total_bytes - plan.footprint(half, Phase.DECODE).total_bytes) \
        / (top - half)


def resolve_tier(plan: Any, sizing: Any, tp: int, gpu: Any, *, offloading_gib: float | None = None,
                 hicache_gb: float | None = None, hicache_ratio: float | None = None,
                 field: str = "--kv-offloading-size") -> HostTier:
    """The tier ``plan``'s flags ask for, on ``tp`` GPUs of ``gpu``; bad input when it exceeds the host memory
    the card table gives its GPUs (``cards.HOSTS``)."""
    from csa_plan.planner.cards import host_side
    from csa_plan.planner.errors import BadInput

    host = host_side(gpu, field=field)
    per_token = marginal_bytes_per_token(plan)
    if offloading_gib is not None:
        per_gpu = int(offloading_gib * (1 << 30)) // tp  # the total over the TP ranks (config/cache.py:384-386)
        flag = f"--kv-offloading-size {offloading_gib:g}"
        tokens = int(per_gpu // per_token)
    elif hicache_gb is not None:
        per_gpu = int(hicache_gb * 1e9)  # per rank (pool_host/base.py:223)
        flag = f"--hicache-size {hicache_gb:g}"
        tokens = int(per_gpu // per_token)
    else:
        ratio = 2.0 if hicache_ratio is None else hicache_ratio
        tokens = int(sizing.tokens * ratio)  # pool_host/base.py:226
        per_gpu = int(tokens * per_token)
        flag = f"--enable-hierarchical-cache --hicache-ratio {ratio:g}"
    if per_gpu > host.host_memory_bytes_per_gpu:
        raise BadInput("options", field, f"{flag}: {per_gpu:,} B of host memory per GPU, more than the "
                                         f"{host.host_memory_bytes_per_gpu:,} B per GPU of a {gpu.name} node "
                                         f"({host.source})")
    return HostTier(flag, per_gpu, tokens, per_token, host.link, host.link_bytes_s, host.source)


class HostTierRuntime(WrappedRuntime):
    """The engine's runtime (``inner``) with a host tier beneath its prefix cache (module docstring).

    The inner scheduler reports each step's HBM prefix hits in total; a fresh admission's own hit is
    ``protocol.admission_hits``."""

    def __init__(self, inner: EngineRuntime, trace: "RuntimeTrace", tier: HostTier, plan: Any) -> None:
        super().__init__(inner)
        self.trace = trace
        self.tier = tier
        self.plan = plan
        self.block = trace.id_block_tokens
        self.capacity_blocks = tier.capacity_tokens // self.block
        self.lru: OrderedDict[int, None] = OrderedDict()
        self._prompt = trace.prompt_tokens.tolist()
        self._seen: set[int] = set()
        self._lost: set[int] = set()
        self._computed: dict[int, int] = {}
        self._free: dict[int, tuple[int, int]] = {}  # request -> (first, last) positions reloaded, not computed
        self._stored: set[int] = set()
        self._fp: dict[int, int] = {}
        self.host_hit_tokens = 0
        self.reload_bytes = 0
        self.reload_ns = 0
        self.stored_blocks = 0
        self.evicted_blocks = 0

    def add(self, r: int) -> None:
        self.inner.add(r)

    def _bytes(self, tokens: int) -> int:
        from csa_plan.planner.engines.engine import Phase

        b = self._fp.get(tokens)
        if b is None:
            b = self._fp[tokens] = self.plan.footprint(tokens, Phase.DECODE).total_bytes if tokens else 0
        return b

    def _host_prefix(self, r: int) -> int:
        ids = self.trace.ids_of(r)
        if ids is None:
            return 0
        k = 0
        for i in ids.tolist():
            if i not in self.lru:
                break
            k += 1
        for i in ids[:k].tolist():
            self.lru.move_to_end(i)
        return k * self.block

    def schedule(self) -> Step:
        import math

        step = self.inner.schedule()
        for r in step.preempted:
            self._lost.add(r)
            self._free.pop(r, None)
        hits = admission_hits(step, self._prompt, self._seen)
        for r in hits:
            self._seen.add(r)
            h = hits[r]
            self._computed[r] = h
            extra = min(self._host_prefix(r), self._prompt[r] - 1) - h
            if extra > 0:
                self._free[r] = (h + 1, h + extra)
                b = self._bytes(h + extra) - self._bytes(h)
                self.host_hit_tokens += extra
                self.reload_bytes += b
                ns = math.ceil(b / self.tier.link_bytes_s * 1e9)
                self.reload_ns += ns
                step.extra_ns += ns
        free_n, free_pos = 0, 0.0
        for r, n in zip(step.requests, step.tokens):
            before = self._computed.get(r, 0) if r not in step.preempted else 0
            self._computed[r] = before + n
            span = self._free.get(r)
            if span is not None and r not in self._lost:
                lo, hi = max(span[0], before + 1), min(span[1], before + n)
                if hi >= lo:
                    k = hi - lo + 1
                    free_n += k
                    free_pos += float(k * (lo + hi) // 2)  # positions lo .. hi summed
            if r not in self._stored and before + n >= self._prompt[r]:
                self._store(r)
        if free_n:
            step.batch.prefill -= free_n
            step.batch.prefill_pos -= free_pos
            step.prefill_tokens -= free_n
        return step

    def _store(self, r: int) -> None:
        """Write-through: the request's full prefix blocks enter the tier once its prompt is computed."""
        self._stored.add(r)
        ids = self.trace.ids_of(r)
        if ids is None or self.capacity_blocks <= 0:
            return
        full = self._prompt[r] // self.block
        for i in ids[:full].tolist():
            if i in self.lru:
                self.lru.move_to_end(i)
                continue
            self.lru[i] = None
            self.stored_blocks += 1
            if len(self.lru) > self.capacity_blocks:
                self.lru.popitem(last=False)
                self.evicted_blocks += 1

    def notes(self) -> tuple[str, ...]:
        t = self.tier
        return self.inner.notes() + (
            f"host KV tier ({t.engine_flag}): {t.capacity_tokens:,} tokens of prefix "
            f"({t.host_bytes_per_gpu:,} B per GPU), write-through, LRU; a hit beyond HBM's is reloaded over "
            f"{t.link} ({t.link_bytes_s / 1e9:g} GB/s per GPU), its time added to the admitting step; running "
            "requests stay in HBM",)

    def counters(self) -> dict[str, int]:
        return {"host_hit_tokens": self.host_hit_tokens, "reload_bytes": self.reload_bytes,
                "reload_ns": self.reload_ns, "stored_blocks": self.stored_blocks,
                "evicted_blocks": self.evicted_blocks}
