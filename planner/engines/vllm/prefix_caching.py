"""vLLM 0.33.0's prefix caching for DeepSeek-V4's hybrid groups (``--enable-prefix-caching``, the default).

Token identity (issue 25 item 2): a request's prompt token at position p lies in id chunk
``p // 512``; a trace's ``hash_ids`` name those chunks (Mooncake: one id per 512 prompt
tokens), so two requests' first T tokens are equal iff T lies within both requests' id
chunks and their id chains up to T's chunk are equal. Tokens past the ids, and every
output token, are unique to the request — so a trace without ids shares nothing, and a
preempted request re-admitted finds its own earlier blocks. ``prefix_key(r, T)`` is that
identity: vLLM's chained block hash of the first T tokens (``kv_cache_utils.py``
``get_request_block_hasher``, 4-token hash blocks for these groups: the gcd of the group
block sizes, ``resolve_kv_cache_block_sizes``).

What vLLM 0.33.0 does with it, for this configuration (hybrid coordinator, partial hash
hits off, so hits are 256-token aligned; ``prefix_cache_retention_interval`` 0):

* lookup (``HybridKVCacheCoordinator.find_longest_cache_hit``, kv_cache_coordinator.py:806-941):
  full attention first (``FullAttentionManager.find_longest_cache_hit``,
  single_type_kv_cache_manager.py:743-838: the leading run of cached 256-token blocks, up to
  ``num_tokens - 1``), then each sliding-window spec (``SlidingWindowManager`` :969-1065:
  from the candidate end backwards, the first aligned end with ``cdiv(window - 1, block)``
  contiguous cached blocks below it), repeated until no group shortens the hit; the
  full-attention blocks are trimmed to the final hit; a full hit longer than the final one
  becomes the request's ``shared_prefix_boundary`` (kv_cache_manager.py:266-328);
* caching (``KVCacheCoordinator.cache_blocks`` :358-381, ``SingleTypeKVCacheManager.cache_blocks``
  :477-543, ``BlockPool.cache_full_blocks`` block_pool.py:230-356): every full block up to
  the computed tokens rounded down to 256 (and to the hashed tokens); a sliding-window group
  caches only the ``cdiv(window - 1, block)`` blocks below each reachable boundary
  (``reachable_block_mask`` :1067-1146 with retention 0: ``prompt - 1`` —
  ``replay_boundaries`` kv_cache_coordinator.py:65-86 — and the shared-prefix boundary);
  the full group's partial prompt-tail entry (:859-897) is lookup metadata that 256-aligned
  hits never read, so it is not modelled.

MTP (``--num-speculative-tokens N``) with prefix caching: DeepSeek-V4's drafter is ``mtp``, an
EAGLE-style one (config/speculative.py:2116-2149 ``use_eagle`` / ``needs_eagle_block_drop`` /
``use_eagle_block_drop``: true unless ``disable_eagle_block_drop``), so vLLM's default is
*lookahead block hashes* (config/vllm.py:677-690 ``num_hash_lookahead_tokens``: with caching on,
no KV connector and ``disable_lookahead_block_hashes`` off it is ``num_prefill_lookahead_tokens``,
:654-675: N for multi-module MTP, 1 for DeepSeek-V4's one MTP module), and lookahead hashes turn
the EAGLE trailing-block drop off (sched/scheduler.py:342-345 ``use_eagle_block_drop = False``,
passed as the KV cache manager's ``use_eagle`` :350-358; kv_cache_coordinator.py:130-137: groups
stay flagged ``eagle_group_ids`` but ``drop_eagle_group_ids`` is empty, so no manager sets
``use_eagle`` :771-775, no lookup drops a block or adds the EAGLE margin :867-905, SWA needs no
extra block :957-968, ``replay_boundaries`` keeps the one ``prompt - 1`` boundary :65-86, and the
hybrid ``get_num_cacheable_tokens`` :789-803 is the 256-aligned computed count, ignoring
``num_reprefillable_tokens``). What changes is the hash (kv_cache_utils.py:953-1036
``get_request_block_hasher``, built with ``num_hash_lookahead_tokens`` by engine/core.py:219-230):
with L lookahead tokens the hash of the block ending at T also covers tokens T .. T+L-1, and it
exists only once the request has T+L tokens (``num_tokens - L``). So the block ending at T is
shared iff the first T+L tokens are equal (``key``), and a request's hashed tokens are
``(num_tokens - L)`` rounded down to 4 (``hashed_tokens``): a prompt's last block is cached,
and found, one token later than without MTP.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from csa_plan.planner.engines.vllm.kv_cache_manager import NULL, cdiv

if TYPE_CHECKING:
    from csa_plan.planner.engines.vllm.kv_cache_manager import GroupSpec, KvCacheManager
    from csa_plan.planner.replay.protocol import RuntimeTrace

HASH_BLOCK = 4  # gcd of DeepSeek-V4's group block sizes (256, 64, 8, 4)
ALIGN = 256  # scheduler_block_size: the lcm of the group block sizes; hits land on it


def block_sizes(specs: tuple["GroupSpec", ...]) -> tuple[int, int]:
    """(scheduler_block_size, hash_block_size) as kv_cache_utils.py:816-918 resolve_kv_cache_block_sizes
    does with prefix caching on: the lcm of every group's block size, the gcd of the prefix-cacheable
    groups' (DeepSeek-V4: 256 and 4; V4.1: 64 / 128, the compressed group's, on sm_90 / sm_100)."""
    from math import gcd, lcm

    cacheable = [s.block_size for s in specs if s.cacheable] or [s.block_size for s in specs]
    return lcm(*(s.block_size for s in specs)), gcd(*cacheable)


class PrefixCache:
    """Block identities and vLLM's hit / cache rules over a ``KvCacheManager``."""

    def __init__(self, trace: "RuntimeTrace", specs: tuple["GroupSpec", ...], plan=None,
                 hash_lookahead_tokens: int = 0) -> None:
        self.trace = trace
        self.lookahead = hash_lookahead_tokens  # VllmConfig.num_hash_lookahead_tokens (0 without MTP)
        self.specs = specs
        # V4.1 (rings / uncached windows): resolved from its groups; V4 keeps the constants its replay (and the
        # compiled twin, compiled.py) was checked with at the default block size 256, where they are the same
        shared = any(s.ring or not s.cacheable for s in specs)
        self.align, self.hash_block = block_sizes(specs) if shared else (ALIGN, HASH_BLOCK)
        self.chunk = trace.id_block_tokens
        self._chains: dict[tuple[int, int], int] = {}  # (parent chain, id) -> chain id: exact, no collisions
        # spec groups as the coordinator forms them (verify_and_split_kv_cache_groups :718-775):
        # equal specs share one lookup; full attention first.
        buckets: dict[GroupSpec, list[int]] = {}
        for i, s in enumerate(specs):
            if s.cacheable:  # a group that opts out never takes part in the lookup (:727-731)
                buckets.setdefault(s, []).append(i)
        order = sorted(buckets.items(), key=lambda kv: kv[0].window is not None)
        self.lookup_groups = [(s, ids) for s, ids in order]
        self.need = {s: cdiv(s.window - 1, s.block_size) for s in specs if s.window is not None and s.cacheable}

    # -- identities ------------------------------------------------------------------------------

    def identity(self, req) -> tuple[int, list[int]]:
        """(tokens shared through ids, chain id per id chunk) for request ``req``."""
        if req.hashes is None:
            ids = self.trace.ids_of(req.rid)
            chains: list[int] = []
            if ids is not None and len(ids):
                parent = -1
                table = self._chains
                for k in ids.tolist():
                    key = (parent, int(k))
                    c = table.get(key)
                    if c is None:
                        c = table[key] = len(table)
                    chains.append(c)
                    parent = c
            shared = min(req.num_prompt, len(chains) * self.chunk)
            req.hashes = (shared, chains)
        return req.hashes

    def key(self, req, tokens: int, gid: int) -> tuple:
        """The cache key of the block ending at ``tokens`` in group ``gid`` (BlockHashWithGroupId): the
        chained hash covers the first ``tokens + lookahead`` tokens (kv_cache_utils.py:1002-1017)."""
        shared, chains = self.identity(req)
        covered = tokens + self.lookahead
        if covered <= shared:
            return (chains[(covered - 1) // self.chunk], tokens, gid)
        return (-1 - req.rid, tokens, gid)

    def hashed_tokens(self, req) -> int:
        """len(request.block_hashes) * hash_block_size: full 4-token hash blocks whose lookahead tokens
        exist too (kv_cache_utils.py:974-983, ``num_tokens - num_hash_lookahead_tokens``)."""
        n = req.num_tokens - self.lookahead
        return n // self.hash_block * self.hash_block if n > 0 else 0

    # -- lookup ----------------------------------------------------------------------------------

    def _full_hit(self, kv, req, spec, gids, max_length: int) -> tuple[list[list[int]], int]:
        pool = kv.pool
        b = spec.block_size
        hashed_blocks = self.hashed_tokens(req) // b
        out: list[list[int]] = [[] for _ in gids]
        for j in range(min(max_length // b, hashed_blocks)):
            found = []
            for gid in gids:
                blk = pool.get_one(self.key(req, (j + 1) * b, gid))
                if blk is None:
                    break
                found.append(blk)
            if len(found) < len(gids):
                break
            for lst, blk in zip(out, found):
                lst.append(blk)
        hit = len(out[0]) * b
        hit -= hit % self.align
        n = cdiv(hit, b)
        for lst in out:
            del lst[n:]
        return out, hit

    def _window_hit(self, kv, req, spec, gids, max_length: int) -> tuple[list[list[int]], int]:
        pool = kv.pool
        b = spec.block_size
        need = self.need[spec]
        max_blocks = max_length // b
        ALIGN = self.align
        if need * b <= ALIGN and ALIGN % b == 0:
            # The same answer from the aligned ends only: a run of `need` blocks never spans an
            # aligned end without completing, and a run from block 0 shorter than `need` rounds to 0.
            for e in range(max_blocks * b // ALIGN * ALIGN, 0, -ALIGN):
                end = e // b
                found_blocks: list[list[int]] = [[] for _ in gids]
                for i in range(end - need, end):
                    for k, gid in enumerate(gids):
                        blk = pool.get_one(self.key(req, (i + 1) * b, gid))
                        if blk is None:
                            break
                        found_blocks[k].append(blk)
                    else:
                        continue
                    break
                else:
                    return [[NULL] * (end - need) + lst for lst in found_blocks], e
            return [[] for _ in gids], 0
        computed = [[NULL] * max_blocks for _ in gids]
        run = 0
        found = False
        for i in range(max_blocks - 1, -1, -1):
            blocks = []
            for gid in gids:
                blk = pool.get_one(self.key(req, (i + 1) * b, gid))
                if blk is None:
                    break
                blocks.append(blk)
            if len(blocks) == len(gids):
                if run == 0 and b != ALIGN and ((i + 1) * b) % ALIGN:
                    continue
                for lst, blk in zip(computed, blocks):
                    lst[i] = blk
                run += 1
                if run >= need:
                    for lst in computed:
                        del lst[i + run:]
                    found = True
                    break
            else:
                run = 0
        if not found:
            for lst in computed:
                del lst[run:]
            while b != ALIGN and len(computed[0]) * b % ALIGN:
                for lst in computed:
                    lst.pop()
        return computed, len(computed[0]) * b

    def computed_blocks(self, kv: "KvCacheManager", req) -> tuple[list[list[int]] | None, int]:
        """get_computed_blocks (kv_cache_manager.py:266-328): per-group hit blocks and the hit tokens."""
        max_hit = req.num_tokens - 1
        hashed = self.hashed_tokens(req)
        n = len(self.specs)
        blocks: list[list[int] | None] = [None] * n
        lengths = [0] * n
        hit = max_hit
        longest = 0
        while True:
            curr = hit
            for spec, gids in self.lookup_groups:
                if spec.window is None and blocks[gids[0]] is not None:
                    curr = min(curr, lengths[gids[0]])
                    continue
                if spec.window is None:
                    found, new = self._full_hit(kv, req, spec, gids, curr)
                else:
                    found, new = self._window_hit(kv, req, spec, gids, min(curr, hashed))
                curr = new
                for gid, lst in zip(gids, found):
                    blocks[gid] = lst
                    lengths[gid] = new
                longest = max(longest, curr)
            if curr >= hit:
                break
            hit = curr
        for spec, gids in self.lookup_groups:
            if spec.window is None:
                k = cdiv(hit, spec.block_size)
                for gid in gids:
                    if blocks[gid] is not None:
                        del blocks[gid][k:]
        req_spb = longest if longest > hit else 0
        req.spb = req_spb
        out = [lst if lst is not None else [] for lst in blocks]
        if not any(out):
            return None, hit
        return out, hit

    # -- caching ---------------------------------------------------------------------------------

    def cache_blocks(self, kv: "KvCacheManager", req, tokens: int) -> None:
        """KVCacheCoordinator.cache_blocks -> SingleTypeKVCacheManager.cache_blocks per group."""
        ALIGN = self.align
        n = tokens - tokens % ALIGN  # HybridKVCacheCoordinator._align_cacheable (partial hits off)
        if n == req.cache_n and kv.fast:
            return  # every group's num_full is unchanged: each would return at once
        hashed = self.hashed_tokens(req)
        # With lookahead hashes the hashed tokens can lag n (a prompt's last block waits for the next
        # token): then the same n must look again once hashes have grown, so it is not remembered.
        req.cache_n = n if n <= hashed else -1
        pool = kv.pool
        for g in kv.groups:
            s = g.spec
            if not s.cacheable:  # SingleTypeKVCacheManager.cache_blocks returns at once (:499-500)
                continue
            b = s.block_size
            cached = g.num_cached.get(req.rid, 0)
            full = min(n, hashed) // b
            if cached >= full:
                continue
            table = g.tables[req.rid]
            lo, hi = cached, full
            if s.window is None:
                allowed = None
            else:
                need = self.need[s]
                allowed = set()
                bounds = [req.num_prompt - 1]
                if getattr(req, "spb", 0):
                    bounds.append(req.spb)
                for bd in bounds:
                    end = (bd // ALIGN * ALIGN) // b
                    allowed.update(range(max(lo, end - need), min(hi, end)))
            # a windowed group caches only its allowed blocks: those visited alone, in the same ascending order
            for j in (range(lo, hi) if allowed is None else sorted(allowed)):
                blk = table[j]
                if blk == NULL:
                    continue
                pool.insert(self.key(req, (j + 1) * b, g.gid), blk)
            g.num_cached[req.rid] = full
