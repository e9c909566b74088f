"""The vLLM block pool (``kv_cache_manager.BlockPool``) against a plain model of vLLM 0.33.0's free queue.

The pool keeps its free queue in three parts for speed (an unhashed-front stack, the blocks never taken as a
counter, an ordered dict for the rest) and takes one block or many by separate paths; vLLM keeps one linked
list (``kv_cache_utils.py`` ``FreeKVCacheBlockQueue``): ``get_new_blocks`` pops its head
(block_pool.py:706-740, a cached block's hash evicted), ``free_blocks`` puts unhashed blocks at the front in
their order and hashed ones at the back (:816-850), ``touch`` takes a hit block out of the middle
(:792-810). Random sequences of those calls must leave the same queue, reference counts, hashes and
blocks-in-use counts in both, after every call, with and without prefix caching.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from csa_plan.planner.engines.vllm.kv_cache_manager import NULL, BlockPool


class Model:
    """vLLM's free queue as one list, front first, and the pool's other state, by the engine's rules."""

    def __init__(self, num_blocks: int, caching: bool, groups: int) -> None:
        self.queue = list(range(1, num_blocks))
        self.ref = [0] * num_blocks
        self.hash: list[object | None] = [None] * num_blocks
        self.in_use = [0] * groups
        self.caching = caching

    def get(self, n: int, gid: int) -> list[int]:
        out, self.queue = self.queue[:n], self.queue[n:]
        for b in out:
            self.hash[b] = None
            self.ref[b] += 1
        self.in_use[gid] += len(out)
        return out

    def free(self, ordered: list[int], gid: int) -> None:
        front, back = [], []
        for b in ordered:
            if b == NULL:
                continue
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.in_use[gid] -= 1
                (back if self.caching and self.hash[b] is not None else front).append(b)
        self.queue = front + self.queue + back

    def touch(self, b: int, gid: int) -> None:
        if self.ref[b] == 0:
            self.queue.remove(b)
            self.in_use[gid] += 1
        self.ref[b] += 1


@settings(max_examples=200, deadline=None)
@given(caching=st.booleans(), num_blocks=st.integers(2, 40),
       ops=st.lists(st.tuples(st.sampled_from("gfoht"), st.integers(0, 1 << 30), st.integers(0, 1)), max_size=60))
def test_the_pool_keeps_vllms_free_queue(caching, num_blocks, ops):
    pool, model = BlockPool(num_blocks, caching, 2), Model(num_blocks, caching, 2)
    held: list[tuple[list[int], int]] = []  # what callers hold: (blocks, group)
    keys = 0
    for op, x, gid in ops:
        if op == "g":  # take n blocks, n up to what is free
            n = x % (pool.num_free() + 1)
            got = pool.get_new_blocks(n, gid)
            assert got == model.get(n, gid)
            if got:
                held.append((got, gid))
        elif op in "fo" and held:  # free a holder's blocks (in reverse, as a table is freed), or one of them
            blocks, g = held.pop(x % len(held))
            if op == "o":
                b = blocks[0]
                pool.free_one(b, g)
                model.free([b], g)
                if blocks[1:]:
                    held.append((blocks[1:], g))
            else:
                pool.free_blocks(blocks[::-1], g)
                model.free(blocks[::-1], g)
        elif op == "h" and caching and held:  # a held block filled: its hash inserted
            blocks, _ = held[x % len(held)]
            b = blocks[x % len(blocks)]
            if pool.hash[b] is None:
                keys += 1
                pool.insert(("k", keys), b)
                model.hash[b] = ("k", keys)
        elif op == "t" and caching:  # a prefix hit on a cached block, free or held
            cached = [b for b in range(1, num_blocks) if pool.hash[b] is not None]
            if cached:
                b = cached[x % len(cached)]
                pool.touch([b], gid)
                model.touch(b, gid)
                held.append(([b], gid))
        assert pool.queue() == model.queue
        assert pool.num_free() == len(model.queue)
        assert pool.ref == model.ref and pool.in_use == model.in_use
        assert [h is None for h in pool.hash] == [h is None for h in model.hash]
