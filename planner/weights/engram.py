"""Where DeepSeek-V4.1's two Engram tables live under each engine release, and what they cost.

Why one module: the tables are 188.83 GiB of weights that are neither KV nor per-token state,
and the engines disagree on where they sit — SGLang 0.5.23 keeps them in device memory split
over its TP group, vLLM 0.33 in pinned host memory — so the device budget (GPU bytes per rank),
``check``'s host line (host bytes per node) and the host refusal all read this one answer.

Table geometry (both engines compute it the same way from the config): each table has
``(engram_max_ngram_size - 1) x engram_n_heads`` = 24 hash columns, column c owning a
prime-sized row range; the primes are the next unused primes above ``engram_vocab_size - 1``,
drawn in (table, n-gram order, head) order (vLLM ``models/deepseek_v41/common/engram.py:128-133,
219-242``; SGLang ``srt/layers/engram.py:108-112, 207-214``). Their sum is the table's row count
(SGLang asserts it, ``srt/layers/engram.py:970``). A row is ``head_dim`` FP8 bytes plus one UE8M0
scale per 32: 264 B at 256.

SGLang 0.5.23 (``srt/layers/engram.py:960-1060``): rows are split over the *whole* TP group
(its ``--tp``, csa-plan's tp x dp under DP attention): on hash-column boundaries when the 24
columns divide evenly, else an equal row split (``shard_range``). With
``SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=1`` (``srt/environ.py:1801``) the tables move to host
memory: ``SGLANG_DSV41_ENGRAM_HOST_TABLE_LAYOUT`` = ``shared`` (``:1808``, the default) maps one
whole copy per node (memfd + MAP_SHARED, ``_HostTable``, ``srt/layers/engram.py:684-720``),
registered with cudaHostRegister (no size rounding).

vLLM 0.33: ``EngramConfig.cpu_offload`` defaults to True (``config/engram.py:37``): each rank
pins its ``ceil(24 / tp)`` hash columns (``common/engram.py:1023-1037``) as two pinned tensors
(rows x 256 FP8, rows x 8 scales), and pinned allocations round up to a power of two
(``common/engram.py:1122``). With DP > 1, ``dp_shared_memory`` defaults on
(``config/engram.py:85-94``): one copy of every TP shard per node in ``/dev/shm``
(``DPSharedEngramStorage``, one mapping, not rounded). ``--engram-config '{"cpu_offload": false}'``
keeps each rank's columns in device memory. Either way a bf16 staging buffer
``[max_num_batched_tokens, ceil(24 / tp), head_dim]`` per Engram layer sits on the GPU
(``common/engram.py:1665-1671``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from csa_plan.planner.errors import BadInput, CsaPlanError, ExitCode
from csa_plan.planner.refusals import Clause, Refusal, RefusalType
from csa_plan.planner.units import GiB, ceil_div

SCALE_BLOCK = 32  # one UE8M0 scale per 32 FP8 values
GPUS_PER_NODE = 8  # the 8-GPU HGX/DGX nodes the node host memory below is for
SGLANG_ENV = "--enable-dsv41-engram-host-table"  # csa-plan's spelling of SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=1
VLLM_OPTION = "--engram-config"

# Node host memory of the 8-GPU systems csa-plan's cards come in, the --host-memory default.
NODE_HOST_MEMORY: dict[str, tuple[int, str]] = {
    "h100": (2048 * GiB, "NVIDIA DGX H100 datasheet: 2 TB system memory per 8-GPU node"),
    "h200": (2048 * GiB, "NVIDIA DGX H200 datasheet: 2 TB system memory per 8-GPU node"),
    "b200": (2048 * GiB, "NVIDIA DGX B200 datasheet: 2 TB system memory per 8-GPU node (4 TB optional)"),
}


def _is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin for n < 2**32, as both engines write it."""
    if n < 2:
        return False
    for p in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d //= 2
        r += 1
    for a in (2, 7, 61):
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


@dataclass(frozen=True)
class EngramTable:
    layer_id: int
    rows: int
    columns: tuple[int, ...]  # rows per hash column (the primes), in column order
    dim: int

    @property
    def row_bytes(self) -> int:
        return self.dim + self.dim // SCALE_BLOCK

    @property
    def nbytes(self) -> int:
        return self.rows * self.row_bytes


def tables_of(config: dict[str, Any] | None, source: str = "config.json") -> tuple[EngramTable, ...]:
    """The model's Engram tables from its text config (empty: the model has none)."""
    if not config:
        return ()
    t = config.get("text_config", config)
    ids = t.get("engram_layer_ids")
    if not ids:
        return ()
    try:
        rows = [int(r) for r in t["engram_num_embeddings"]]
        orders, heads = int(t["engram_max_ngram_size"]) - 1, int(t["engram_n_heads"])
        vocab, dim = int(t["engram_vocab_size"]), int(t["engram_head_dim"])
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInput(source, "engram_*", f"incomplete Engram fields ({exc})") from None
    if len(rows) != len(ids) or orders < 1 or heads < 1 or dim % SCALE_BLOCK:
        raise BadInput(source, "engram_num_embeddings", "one row count per engram layer, orders >= 1, heads >= 1 "
                                                          "and head_dim a multiple of 32 expected")
    seen: set[int] = set()
    tables = []
    for layer, n in zip(ids, rows):
        columns = []
        for _ in range(orders):
            current = vocab - 1
            for _ in range(heads):
                current += 1
                while not _is_prime(current) or current in seen:
                    current += 1
                seen.add(current)
                columns.append(current)
        if sum(columns) != n:
            raise BadInput(source, "engram_num_embeddings", f"layer {layer}: {n:,} rows, but its hash columns (primes "
                                                              f"above engram_vocab_size) sum to {sum(columns):,}")
        tables.append(EngramTable(int(layer), n, tuple(columns), dim))
    return tuple(tables)


@dataclass(frozen=True)
class EngramChoice:
    """The options that move the tables: ``host_table`` is SGLang's env switch, ``engram_config`` vLLM's JSON."""

    host_table: bool | None = None
    engram_config: str | None = None
    engine: str | None = None  # the release that places the tables, where the budget runs without it (check of
    # a release whose shared-state pool is not modelled: the answer is refused, the tables' place is still its)


@dataclass(frozen=True)
class EngramPlacement:
    """The tables under one engine release and deployment."""

    engine: str
    where: str  # "gpu" | "host"
    gpu_bytes_per_rank: int  # the tables' rows on the busiest rank (0 on the host)
    staging_bytes_per_rank: int  # vLLM's bf16 staging buffers (on the GPU either way)
    host_bytes_per_node: int  # pinned / shared host memory on one node
    nodes: int
    source: str

    @property
    def total_gpu_bytes_per_rank(self) -> int:
        return self.gpu_bytes_per_rank + self.staging_bytes_per_rank

    def as_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "where": self.where, "gpu_bytes_per_rank": self.gpu_bytes_per_rank,
                "staging_bytes_per_rank": self.staging_bytes_per_rank,
                "host_bytes_per_node": self.host_bytes_per_node, "nodes": self.nodes, "source": self.source}


def pinned_bytes(nbytes: int) -> int:
    """CUDA's caching host allocator: a pinned block is the next power of two (common/engram.py:1122)."""
    return 1 << (nbytes - 1).bit_length() if nbytes > 1 else nbytes


def _family(engine: str | None) -> str:
    return "reference" if engine is None else engine.partition("-")[0]


def check_choice(tables: tuple[EngramTable, ...], engine: str | None, choice: EngramChoice) -> dict[str, Any]:
    """Bad input for an Engram option that cannot apply (no Engram tables, another engine's option, a
    malformed JSON); the parsed ``--engram-config``."""
    given = [name for name, value in ((SGLANG_ENV, choice.host_table), (VLLM_OPTION, choice.engram_config))
             if value is not None]
    if given and not tables:
        raise BadInput("options", given[0], "the model has no Engram tables (engram_layer_ids): the option cannot "
                                            "apply")
    family = _family(engine)
    if choice.host_table is not None and family != "sglang":
        raise BadInput("options", SGLANG_ENV, f"SGLang's switch (SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE); "
                                              f"{engine or 'no --engine'} has no such setting"
                                              + ("; vLLM spells it --engram-config '{\"cpu_offload\": true}'"
                                                 if family == "vllm" else ""))
    parsed: dict[str, Any] = {}
    if choice.engram_config is not None:
        if family != "vllm":
            raise BadInput("options", VLLM_OPTION, f"vLLM's option; {engine or 'no --engine'} has no such setting"
                                                   + (f"; SGLang spells it {SGLANG_ENV}" if family == "sglang" else ""))
        try:
            parsed = json.loads(choice.engram_config)
        except ValueError as exc:
            raise BadInput("options", VLLM_OPTION, f"not JSON ({exc.msg} at char {exc.pos})") from None
        if not isinstance(parsed, dict):
            raise BadInput("options", VLLM_OPTION, "a JSON object expected, e.g. '{\"cpu_offload\": false}'")
        known = ("cpu_offload", "embedding_across_dp", "dp_shared_memory", "use_thp")
        for key, value in parsed.items():
            if key not in known:
                raise BadInput("options", VLLM_OPTION, f"unknown field {key!r} (EngramConfig has {', '.join(known)})")
            if value is not None and not isinstance(value, bool):
                raise BadInput("options", VLLM_OPTION, f"{key} must be true, false or null")
        modelled = ("cpu_offload", "dp_shared_memory")
        for key in known:
            if key not in modelled and parsed.get(key):
                raise BadInput("options", VLLM_OPTION, f"{key} true is not modelled by csa-plan (fields modelled: "
                                                       f"{', '.join(modelled)})")
        if parsed.get("dp_shared_memory") and parsed.get("cpu_offload") is False:
            raise BadInput("options", VLLM_OPTION, "dp_shared_memory requires cpu_offload=True (config/engram.py:62)")
    return parsed


def placement(tables: tuple[EngramTable, ...], engine: str | None, tp: int, dp: int, choice: EngramChoice,
              max_num_batched_tokens: int = 0) -> EngramPlacement | None:
    """Where the tables sit and their bytes per rank and per node (None: the model has none).
    ``tp``, ``dp``: csa-plan's deployment (SGLang's TP group is tp x dp under DP attention)."""
    engine = choice.engine or engine
    parsed = check_choice(tables, engine, choice)
    if not tables:
        return None
    gpus = tp * dp
    nodes = ceil_div(gpus, GPUS_PER_NODE)
    family = _family(engine)
    if family == "vllm":
        return _vllm(tables, engine, tp, dp, nodes, parsed, max_num_batched_tokens)
    if family == "sglang":
        return _sglang(tables, engine, tp * dp, nodes, bool(choice.host_table))
    # the reference (and any engine without an Engram rule): device memory, rows split over tp
    per = sum(ceil_div(t.rows, tp) * t.row_bytes for t in tables)
    return EngramPlacement(engine or "reference", "gpu", per, 0, 0, nodes,
                           "no engine named: the tables in device memory, rows split over tp")


def _sglang(tables, engine: str, tp_group: int, nodes: int, host: bool) -> EngramPlacement:
    src = f"{engine} sglang/srt/layers/engram.py"
    if host:
        per_node = sum(t.nbytes for t in tables)
        return EngramPlacement(engine, "host", 0, 0, per_node, nodes,
                               f"SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=1 (srt/environ.py:1801), layout 'shared' "
                               f"(:1808): one whole copy of each table per node ({src}:684-720 _HostTable)")
    busiest = 0
    for rank in range(tp_group):
        busiest = max(busiest, sum(_sglang_rows(t, rank, tp_group) * t.row_bytes for t in tables))
    split = "on hash-column boundaries" if all(len(t.columns) % tp_group == 0 for t in tables) else "equal row split"
    return EngramPlacement(engine, "gpu", busiest, 0, 0, nodes,
                           f"device memory by default, rows split over the TP group of {tp_group} ({split}; "
                           f"{src}:960-1040 shard_range)")


def _sglang_rows(t: EngramTable, rank: int, size: int) -> int:
    """shard_range: whole columns when they divide evenly, else an equal row split."""
    n = len(t.columns)
    if n % size == 0:
        per = n // size
        return sum(t.columns[rank * per:(rank + 1) * per])
    return t.rows * (rank + 1) // size - t.rows * rank // size


def _vllm_rows(t: EngramTable, rank: int, shards: int) -> int:
    """ParallelEngramEmbedding: ceil(columns / shards) hash columns per rank, the last ones short."""
    part = ceil_div(len(t.columns), shards)
    return sum(t.columns[rank * part:(rank + 1) * part])


def _vllm(tables, engine: str, tp: int, dp: int, nodes: int, parsed: dict[str, Any],
          mnbt: int) -> EngramPlacement:
    src = f"{engine} vllm/models/deepseek_v41/common/engram.py"
    cpu_offload = parsed.get("cpu_offload")
    cpu_offload = True if cpu_offload is None else cpu_offload
    shared = parsed.get("dp_shared_memory")
    shared = (cpu_offload and dp > 1) if shared is None else shared
    if len(tables[0].columns) <= (tp - 1) * ceil_div(len(tables[0].columns), tp):
        raise BadInput("options", "--tp", f"{tp} ranks leave some without Engram hash heads ({len(tables[0].columns)} "
                                          f"columns; {src}:1026-1031 asserts)")
    part_cols = ceil_div(len(tables[0].columns), tp)
    staging = mnbt * part_cols * tables[0].dim * 2 * len(tables)  # bf16 [mnbt, ceil(24/tp), dim] per layer
    stage_src = f"a bf16 staging buffer [{mnbt:,}, {part_cols}, {tables[0].dim}] per Engram layer ({src}:1665-1671)"
    if not cpu_offload:
        if dp > 1:
            raise BadInput("options", VLLM_OPTION, "cpu_offload false with --dp > 1 (rows split over the DP group, "
                                                   "peer reads) is not modelled by csa-plan")
        busiest = max(sum(_vllm_rows(t, r, tp) * t.row_bytes for t in tables) for r in range(tp))
        return EngramPlacement(engine, "gpu", busiest, staging, 0, nodes,
                               f"--engram-config cpu_offload false: each rank's ceil(24/{tp}) = {part_cols} hash "
                               f"columns in device memory ({src}:1023-1037); {stage_src}")
    if shared:  # one copy of every TP shard per node in /dev/shm, one mapping per shard and table
        per_node = sum(_vllm_rows(t, r, tp) * t.row_bytes for t in tables for r in range(tp))
        how = (f"dp_shared_memory (default with --dp {dp} > 1, vllm/config/engram.py:85-94): one copy of every TP "
               f"shard per node in /dev/shm ({src} DPSharedEngramStorage)")
    else:  # each rank pins its own columns: two tensors, each rounded up to a power of two
        per_rank = [sum(pinned_bytes(_vllm_rows(t, r, tp) * t.dim)
                        + pinned_bytes(_vllm_rows(t, r, tp) * (t.dim // SCALE_BLOCK)) for t in tables)
                    for r in range(tp)]
        per_node = max(sum(per_rank[g % tp] for g in range(first, min(first + GPUS_PER_NODE, tp * dp)))
                       for first in range(0, tp * dp, GPUS_PER_NODE))
        how = (f"cpu_offload (default True, vllm/config/engram.py:37): each rank pins its ceil(24/{tp}) = {part_cols} "
               f"hash columns, weight and scales each rounded up to a power of two ({src}:1122)")
    return EngramPlacement(engine, "host", 0, staging, per_node, nodes, f"{how}; {stage_src}")


def node_host_memory(card: str | None) -> tuple[int, str] | None:
    """The --host-memory default for a card's node (None: not known for that card)."""
    return NODE_HOST_MEMORY.get(card or "")


class HostMemoryRefused(CsaPlanError):
    """The node's host memory cannot hold the Engram tables the engine puts there; ``refusal`` is typed."""

    exit_code = ExitCode.REFUSED

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


@dataclass(frozen=True)
class HostLine:
    """check's host-memory line: what one node's host holds of the tables against its capacity."""

    host_bytes_per_node: int
    capacity_bytes: int | None  # None: no --host-memory and no default for the card
    capacity_source: str

    def as_dict(self) -> dict[str, Any]:
        return {"host_bytes_per_node": self.host_bytes_per_node, "capacity_bytes": self.capacity_bytes,
                "capacity_source": self.capacity_source,
                "fits": None if self.capacity_bytes is None else self.host_bytes_per_node <= self.capacity_bytes}


def host_line(p: EngramPlacement | None, host_memory_bytes: int | None, card: str | None) -> HostLine | None:
    """The host line of a deployment, refused (HostMemoryShort, exit 3) when the host cannot hold the
    tables. ``--host-memory`` on a model without Engram tables cannot apply: bad input."""
    if host_memory_bytes is not None and host_memory_bytes <= 0:
        raise BadInput("options", "--host-memory", "must be positive")
    if p is None:
        if host_memory_bytes is not None:
            raise BadInput("options", "--host-memory", "the model has no Engram tables (engram_layer_ids): nothing "
                                                       "of it lives in host memory, so the option cannot apply")
        return None
    if host_memory_bytes is not None:
        capacity, source = host_memory_bytes, "option --host-memory"
    else:
        known = node_host_memory(card)
        capacity, source = known if known else (None, f"no default for {card or 'this device'}: give --host-memory")
    line = HostLine(p.host_bytes_per_node, capacity, source)
    if capacity is not None and p.host_bytes_per_node > capacity:
        raise HostMemoryRefused(Refusal.from_clauses(RefusalType.HOST_MEMORY_SHORT, None, [Clause(
            "--host-memory", f">= {p.host_bytes_per_node:,} B per node", f"{capacity:,} B ({source})",
            f"{p.engine} keeps the Engram tables in host memory ({p.source}): {p.host_bytes_per_node:,} B "
            f"({p.host_bytes_per_node / GiB:.2f} GiB) per node, more than the node's {capacity:,} B "
            f"({capacity / GiB:.2f} GiB); give a larger --host-memory or move the tables to the GPUs "
            + ("(--engram-config '{\"cpu_offload\": false}')" if p.engine.startswith("vllm")
               else f"(drop {SGLANG_ENV})"))]))
    return line
