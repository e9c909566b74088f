"""vLLM 0.33.0's block pool and KV cache manager for DeepSeek-V4's groups, in motion.

File:line pointers are into vllm-0.33.0 (``v1/core/``). Only the paths DeepSeek-V4 reaches
under ``vllm serve`` are modelled (no KV connector, no encoder, no Mamba, no DCP, the
watermark 0, ``scheduler_reserve_full_isl`` on):

* ``BlockPool`` (block_pool.py): ``num_blocks`` blocks, block 0 taken as the null block at
  start-up; ``get_new_blocks`` pops the free queue's head (block_pool.py:706-740) and
  evicts a cached block's hash; ``free_blocks`` (block_pool.py:816-850) drops a reference and
  puts a block whose count reaches 0 at the queue's *front* when it has no hash (LIFO
  reuse) and at its *back* when it is cached (LRU eviction); ``touch`` (block_pool.py:792-810)
  takes a hit block out of the free queue. The free queue is an ordered dict here (same
  order as vLLM's linked list, kv_cache_utils.py:347-480).
* One ``GroupManager`` per KV cache group (single_type_kv_cache_manager.py): full attention
  (``FullAttentionManager``, never skips) or a sliding window (``SlidingWindowManager``,
  ~946-1185: ``get_num_skipped_tokens = max(0, computed - window + 1 - extra_retained)``),
  with the admission cap ``max_admission_blocks_per_request`` for windowed groups
  (single_type_kv_cache_manager.py:2642-2650, kv_cache_interface.py ``SlidingWindowSpec``);
  ``get_num_blocks_to_allocate`` (:176-266, the running-request fast path included),
  ``allocate_new_blocks`` (:370-411), ``remove_skipped_blocks`` / ``_remove_blocks_in_range``
  (:655-720: freed from the window's edge backwards, replaced by the null block),
  ``free`` (:571-601: the table without its null head, in reverse).
* ``KvCacheManager.allocate_slots`` (kv_cache_manager.py:380-627): the full-sequence
  admission check (capped), the free of skipped blocks on the *processed* basis
  (``total_computed - num_in_flight_tokens``), the per-step check, the new computed
  blocks, the allocation, and ``cache_blocks``.
* Prefix caching (``prefix``): the longest hit per group and block hashing — see
  ``prefix_caching``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

NULL = 0  # block 0: the null block (block_pool.py: null_block = free_block_queue.popleft())


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class BlockPool:
    """block_pool.py BlockPool: reference counts, cached hashes and the free queue."""

    __slots__ = ("num_blocks", "ref", "hash", "free", "front", "fresh", "cached", "caching", "in_use")

    def __init__(self, num_blocks: int, caching: bool, groups: int = 1) -> None:
        self.num_blocks = num_blocks
        self.in_use = [0] * groups  # distinct blocks with a reference, per group (a shared hit counts once)
        self.ref = [0] * num_blocks
        self.hash: list[object | None] = [None] * num_blocks
        # The free queue (vLLM's linked list): without caching every free goes to the front, so a list used
        # as a stack whose END is the queue's front holds the same order. With caching, ``front`` (a stack
        # the same way) holds the unhashed blocks freed to the front, then come the blocks never taken yet
        # (``fresh`` .. num_blocks - 1, in order: the queue as start-up left it, kept as a counter rather than
        # built block by block for every rank), then ``free`` (an ordered dict: touch takes hit blocks out of
        # its middle; never-taken blocks have no hash, so touch never looks for one), hashed ones appended.
        self.free: OrderedDict[int, None] | list[int] = OrderedDict() if caching else list(range(num_blocks - 1, 0, -1))
        self.front: list[int] = []
        self.fresh = 1 if caching else num_blocks
        self.cached: dict[object, list[int]] = {}  # (prefix, group) -> blocks in insertion order (BlockHashToBlockMap)
        self.caching = caching

    def num_free(self) -> int:
        return len(self.free) + len(self.front) + self.num_blocks - self.fresh

    def queue(self) -> list[int]:
        """The free queue, front first (tests)."""
        if not self.caching:
            return self.free[::-1]
        return self.front[::-1] + list(range(self.fresh, self.num_blocks)) + list(self.free)

    def get_new_blocks(self, n: int, gid: int) -> list[int]:
        """block_pool.py:706-740: the free queue's first n, a cached one's hash evicted."""
        if n <= 0:
            return []
        self.in_use[gid] += n
        free, ref = self.free, self.ref
        if not self.caching:
            out = free[-n:]
            del free[-n:]
            out.reverse()
            for b in out:
                ref[b] += 1
            return out
        # the front stack's top first, then the never-taken blocks, then the ordered dict's head; evicting one
        # block's hash does not touch another's, so the blocks are taken first and their hashes evicted after
        front, hashes = self.front, self.hash
        if n == 1:  # a window's edge crossing a block: the most frequent call
            if front:
                b = front.pop()
            elif self.fresh < self.num_blocks:
                b = self.fresh
                self.fresh += 1
            else:
                b = free.popitem(False)[0]
            if hashes[b] is not None:
                self._evict(b)
            ref[b] += 1
            return [b]
        take = n if n < len(front) else len(front)
        if take:
            out = front[-take:]
            del front[-take:]
            out.reverse()
        else:
            out = []
        fresh = min(n - take, self.num_blocks - self.fresh)
        if fresh > 0:
            out.extend(range(self.fresh, self.fresh + fresh))
            self.fresh += fresh
        if n > take + fresh:
            popitem = free.popitem
            out.extend([popitem(False)[0] for _ in range(n - take - fresh)])
        for b in out:
            if hashes[b] is not None:
                self._evict(b)
            ref[b] += 1
        return out

    def _evict(self, b: int) -> None:
        """_maybe_evict_cached_block / _remove_cached_block_hashes (block_pool.py:630-650, 769-790)."""
        key = self.hash[b]
        blocks = self.cached.get(key)
        if blocks is not None and b in blocks:
            blocks.remove(b)
            if not blocks:
                del self.cached[key]
        self.hash[b] = None

    def get_one(self, key: object) -> int | None:
        """BlockHashToBlockMap.get_one_block (block_pool.py:63-72): the first block cached under the key."""
        blocks = self.cached.get(key)
        return blocks[0] if blocks else None

    def insert(self, key: object, b: int) -> None:
        """_insert_block_hash (block_pool.py:666-686) for a block with no hash yet (a fresh full block)."""
        if self.hash[b] == key:
            return
        self.hash[b] = key
        self.cached.setdefault(key, []).append(b)

    def touch(self, blocks: list[int], gid: int) -> None:
        """block_pool.py:792-810."""
        for b in blocks:
            if b == NULL:
                continue
            if self.ref[b] == 0:
                if b in self.free:
                    del self.free[b]
                else:
                    self.front.remove(b)
                self.in_use[gid] += 1
            self.ref[b] += 1

    def free_one(self, b: int, gid: int) -> None:
        """``free_blocks([b], gid)`` for one real block (a window's edge passing one block: the commonest free)."""
        ref = self.ref
        ref[b] -= 1
        if ref[b] == 0:
            self.in_use[gid] -= 1
            if not self.caching:
                self.free.append(b)
            elif self.hash[b] is None:
                self.front.append(b)
            else:
                self.free[b] = None

    def free_blocks(self, ordered: list[int], gid: int) -> None:
        """block_pool.py:816-850: first to be evicted first; unhashed to the front, hashed to the back."""
        first: list[int] = []
        ref, free = self.ref, self.free
        if not self.caching:
            for b in ordered:
                if b != NULL:
                    ref[b] -= 1
                    if ref[b] == 0:
                        first.append(b)
            self.in_use[gid] -= len(first)
            first.reverse()
            free.extend(first)
            return
        hashes = self.hash
        for b in ordered:
            if b == NULL:
                continue
            ref[b] -= 1
            if ref[b] == 0:
                if hashes[b] is None:
                    first.append(b)
                else:
                    free[b] = None
                    self.in_use[gid] -= 1
        self.in_use[gid] -= len(first)
        self.front.extend(reversed(first))  # prepend_n keeps the list's order at the front


@dataclass(frozen=True)
class GroupSpec:
    """One KV cache group as the managers see it."""

    block_size: int
    window: int | None  # None: full attention
    extra_retained: int = 0
    admission_cap: int | None = None  # max_admission_blocks_per_request (windowed groups)
    # DeepSeek-V4.1: a CircularBufferSpec ring (CircularBufferManager, single_type_kv_cache_manager.py:1186-1243:
    # one block per request for its life, never a hit) and whether the group takes part in prefix caching
    # (kv_cache_interface.py prefix_cacheable: False for rings and for bounded-replay windows, :998-1000, :1027-1029)
    ring: bool = False
    cacheable: bool = True

    def skipped_tokens(self, computed: int) -> int:
        """SlidingWindowManager.get_num_skipped_tokens (single_type_kv_cache_manager.py:1148-1183)."""
        if self.window is None:
            return 0
        return max(0, computed - self.window + 1 - self.extra_retained)


class GroupManager:
    """single_type_kv_cache_manager.py SingleTypeKVCacheManager for one group."""

    __slots__ = ("spec", "pool", "gid", "tables", "num_cached", "nulls")

    def __init__(self, spec: GroupSpec, pool: BlockPool, gid: int) -> None:
        self.spec, self.pool, self.gid = spec, pool, gid
        self.tables: dict[int, list[int]] = {}
        self.nulls: dict[int, int] = {}  # leading null blocks of each table (everything below is null)
        self.num_cached: dict[int, int] = {}  # num_cached_block: running requests once cached

    def num_blocks_to_allocate(self, r: int, num_tokens: int, new_computed: list[int], total_computed: int,
                               cap: bool) -> int:
        """get_num_blocks_to_allocate (single_type_kv_cache_manager.py:176-266)."""
        s = self.spec
        if s.ring:  # CircularBufferManager.get_num_blocks_to_allocate (:1203-1214)
            return 0 if self.tables.get(r) else 1
        required = cdiv(num_tokens, s.block_size)
        if cap and s.admission_cap is not None:
            required = min(required, s.admission_cap)
        table = self.tables.get(r)
        n_req = len(table) if table else 0
        if r in self.num_cached:
            return max(required - n_req, 0)
        skipped_blocks = s.skipped_tokens(total_computed) // s.block_size
        new = max(required - max(skipped_blocks, len(new_computed) + n_req), 0)
        skip_new = max(0, skipped_blocks - n_req)
        ref = self.pool.ref
        evictable = sum(1 for b in new_computed[skip_new:] if b != NULL and ref[b] == 0)
        return new + evictable

    def add_computed(self, r: int, new_computed: list[int], total_computed: int) -> None:
        """add_local_computed_blocks (single_type_kv_cache_manager.py:268-325), hits end on blocks."""
        s = self.spec
        skipped_blocks = s.skipped_tokens(total_computed) // s.block_size
        hit = new_computed[skipped_blocks:] if skipped_blocks > 0 else new_computed
        if self.pool.caching:
            self.pool.touch(hit, self.gid)
        table = [NULL] * skipped_blocks + list(hit)
        self.tables[r] = table
        lead = 0
        while lead < len(table) and table[lead] == NULL:
            lead += 1
        self.nulls[r] = lead
        self.num_cached[r] = len(table)

    def allocate_new(self, r: int, num_tokens: int) -> None:
        """allocate_new_blocks (single_type_kv_cache_manager.py:370-411)."""
        table = self.tables.setdefault(r, [])
        if self.spec.ring:  # _claim_ring_block (:1191-1201): the one block, once
            if not table:
                table.extend(self.pool.get_new_blocks(1, self.gid))
            return
        n = cdiv(num_tokens, self.spec.block_size) - len(table)
        if n > 0:
            table.extend(self.pool.get_new_blocks(n, self.gid))

    def remove_skipped(self, r: int, processed: int) -> None:
        """remove_skipped_blocks + _remove_blocks_in_range (single_type_kv_cache_manager.py:655-720)."""
        s = self.spec
        if s.window is None:
            return
        skipped = processed - s.window + 1 - s.extra_retained  # GroupSpec.skipped_tokens
        if skipped <= 0:
            return
        table = self.tables.get(r)
        if table is None:
            return
        last = min(skipped // s.block_size, len(table))
        lead = self.nulls.get(r, 0)
        if last <= lead:
            return
        self.nulls[r] = last
        seg = table[lead:last]  # everything below `lead` is null: the walk down stops there at the latest
        if NULL not in seg:
            seg.reverse()
            freed = seg
            table[lead:last] = [NULL] * (last - lead)
        else:
            freed = []
            for i in range(last - 1, -1, -1):
                b = table[i]
                if b == NULL:
                    break
                freed.append(b)
                table[i] = NULL
        if freed:
            self.pool.free_blocks(freed, self.gid)

    def free(self, r: int) -> None:
        """free / pop_blocks_for_free (single_type_kv_cache_manager.py:571-601): reverse order, null head trimmed."""
        table = self.tables.pop(r, None)
        self.num_cached.pop(r, None)
        start = self.nulls.pop(r, 0)  # everything below it is null: the scan for the null head starts there
        if not table:
            return
        while start < len(table) and table[start] == NULL:
            start += 1
        blocks = table[start:]
        blocks.reverse()
        self.pool.free_blocks(blocks, self.gid)


class KvCacheManager:
    """kv_cache_manager.py KVCacheManager over the groups' managers and one block pool."""

    __slots__ = ("pool", "groups", "max_model_len", "prefix", "fast", "edges")

    def __init__(self, specs: tuple[GroupSpec, ...], num_blocks: int, max_model_len: int, prefix=None,
                 fast: bool = True) -> None:
        # fast=False: every allocate_slots takes the full pass and every cache_blocks call walks every
        # group (the step-by-step twin the fast paths are checked against, tests/simulate/test_vllm_fast.py)
        self.fast = fast
        self.pool = BlockPool(num_blocks, prefix is not None, len(specs))
        self.groups = tuple(GroupManager(s, self.pool, i) for i, s in enumerate(specs))
        # what _touched_groups reads of each group, unpacked once: (manager, block size, window or None,
        # extra retained, its tables, its leading-null counts)
        self.edges = tuple((g, g.spec.block_size, g.spec.window, g.spec.extra_retained, g.tables, g.nulls)
                           for g in self.groups)
        self.max_model_len = max_model_len
        self.prefix = prefix  # a prefix_caching.PrefixCache when prefix caching is on

    def held(self) -> tuple[int, ...]:
        """Distinct blocks in use per group (a block shared by prefix-cache hits counts once)."""
        return tuple(self.pool.in_use)

    def allocate_slots(self, req, num_new: int, num_new_computed: int = 0, new_computed=None,
                       lookahead: int = 0, full_sequence_must_fit: bool = False) -> bool:
        """allocate_slots (kv_cache_manager.py:380-627), no connector / encoder / watermark."""
        groups = self.groups
        empty = new_computed is None
        local = req.num_computed + num_new_computed
        total = min(local, self.max_model_len)
        if empty and not full_sequence_must_fit and req.next_slot >= 0 and self.fast:
            # Nothing to free, nothing to allocate: every group's table already covers the slots and no
            # window edge crossed a block since the last full pass (the same outcome, computed in O(1)).
            need_slot = min(total + num_new + lookahead, self.max_model_len)
            processed = max(0, total - req.num_in_flight)
            if need_slot > req.next_slot or processed >= req.next_free:
                if not self._touched_groups(req, need_slot, processed, local):
                    return False
            if self.prefix is not None:
                self.prefix.cache_blocks(self, req, min(total + num_new, req.num_prompt + req.num_output))
            return True
        ok = self._allocate(req, num_new, num_new_computed, new_computed, lookahead, full_sequence_must_fit,
                            empty, local, total)
        if self.fast:
            self._thresholds(req)
        return ok

    def _touched_groups(self, req, need_slot: int, processed: int, local: int) -> bool:
        """``_allocate`` for a running request without new hits, over only the groups whose thresholds the
        step crosses: every other group would free nothing and need 0 blocks (its table covers the slots),
        so only the touched groups' thresholds move."""
        groups, slot_th, free_th, rid = self.groups, req.slot_th, req.free_th, req.rid
        pool = self.pool
        if processed >= req.next_free:  # below every group's free threshold nothing moves
            edges = self.edges
            for i, th in enumerate(free_th):
                if processed >= th:
                    g, bs, window, extra, tables, nulls = edges[i]
                    lead = nulls.get(rid, 0)
                    table = tables.get(rid)
                    if (window is not None and table is not None and lead < len(table)
                            and (processed - window + 1 - extra) // bs == lead + 1):
                        # the window's edge passed one block: remove_skipped's walk is that block alone
                        lead += 1
                        nulls[rid] = lead
                        b = table[lead - 1]
                        if b != NULL:
                            table[lead - 1] = NULL
                            pool.free_one(b, i)  # group i's manager has gid i
                    else:
                        g.remove_skipped(rid, processed)
                        lead = nulls.get(rid, 0)
                    free_th[i] = (lead + 1) * bs + window - 1 + extra
            req.next_free = min(free_th)
        if need_slot <= req.next_slot:  # every table covers the slots: nothing to check or take
            return True
        need = 0
        grow = []  # (group, its table, blocks to add): num_blocks_to_allocate without new hits, inlined
        for i, th in enumerate(slot_th):
            if need_slot > th:
                g = groups[i]
                s = g.spec
                b = s.block_size
                table = g.tables[rid]
                required = -(-need_slot // b)
                n_req = len(table)
                add = required - n_req  # what allocate_new takes
                if rid in g.num_cached:
                    need += add if add > 0 else 0
                else:
                    skipped = 0 if s.window is None else local - s.window + 1 - s.extra_retained
                    skipped = skipped // b if skipped > 0 else 0
                    new = required - (skipped if skipped > n_req else n_req)
                    need += new if new > 0 else 0
                grow.append((i, g, table, add))
        if need > pool.num_free():
            return False
        for i, g, table, add in grow:
            if add > 0:
                table.extend(pool.get_new_blocks(add, g.gid))
            slot_th[i] = len(table) * g.spec.block_size
        req.next_slot = min(slot_th)
        return True

    def _thresholds(self, req) -> None:
        """Per group, the slot count and processed-token count up to which ``allocate_slots`` changes nothing."""
        slots, frees = [], []
        for g in self.groups:
            table = g.tables.get(req.rid)
            if table is None:
                req.next_slot = -1
                return
            s = g.spec
            slots.append(len(table) * s.block_size if not s.ring else 1 << 62)  # a ring never grows
            frees.append((g.nulls.get(req.rid, 0) + 1) * s.block_size + s.window - 1 + s.extra_retained
                         if s.window is not None else 1 << 62)
        req.slot_th, req.free_th = slots, frees
        req.next_slot, req.next_free = min(slots), min(frees)

    def _allocate(self, req, num_new, num_new_computed, new_computed, lookahead, full_sequence_must_fit,
                  empty, local, total) -> bool:
        groups = self.groups
        free = self.pool.num_free()
        if full_sequence_must_fit:  # kv_cache_manager.py:537-553, apply_admission_cap=True
            full = min(req.num_prompt + req.num_output, self.max_model_len)
            need = 0
            for i, g in enumerate(groups):
                need += g.num_blocks_to_allocate(req.rid, full, () if empty else new_computed[i], total, True)
            if need > free:
                return False
        main = total + num_new
        need_slot = min(main + lookahead, self.max_model_len)
        processed = max(0, total - req.num_in_flight)
        for g in groups:  # kv_cache_manager.py:568-572: before the check, freed even on failure
            g.remove_skipped(req.rid, processed)
        need = 0
        for i, g in enumerate(groups):
            need += g.num_blocks_to_allocate(req.rid, need_slot, () if empty else new_computed[i], local, False)
        if need > self.pool.num_free():
            return False
        if not empty and req.rid not in groups[0].num_cached:  # allocate_new_computed_blocks (coordinator.py:265-313)
            for i, g in enumerate(groups):
                g.add_computed(req.rid, new_computed[i], local)
        for g in groups:
            g.allocate_new(req.rid, need_slot)
        if self.prefix is not None:
            self.prefix.cache_blocks(self, req, min(total + num_new, req.num_prompt + req.num_output))
        return True

    def free(self, req) -> None:
        """KVCacheManager.free -> coordinator.free: group by group (kv_cache_coordinator.py:404-412)."""
        for g in self.groups:
            g.free(req.rid)
        req.next_slot = -1
        req.cache_n = -1
