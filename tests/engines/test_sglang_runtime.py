"""SGLang 0.5.23's scheduler pieces (planner/engines/sglang) against SGLang's own code.

Every expected figure marked "captured" was computed by SGLang 0.5.23's own functions and classes,
run on CPU (sglang==0.5.23 installed --no-deps; the fakes for the allocator, tree and requests are
the ones tools/crosscheck_sglang_runtime.py uses): ``estimate_swa_kv_tokens``,
``NewTokenRatioTracker``, ``ScheduleBatch._get_decode_retraction_order``,
``free_swa_out_of_window_slots`` and ``PrefillAdder.add_one_req`` / ``add_chunked_req`` with
``SWAPrefillBudget``. The radix cache cases are worked from the source (file:line in radix.py).
"""

from __future__ import annotations

import pytest

from csa_plan.planner.engines.sglang.adder import AddResult, PrefillAdder, estimate_swa_kv_tokens
from csa_plan.planner.engines.sglang.radix import RadixCache
from csa_plan.planner.engines.sglang.ratio import RatioRule, ratio_after_retract
from csa_plan.planner.engines.sglang.retract import retraction_order
from csa_plan.planner.engines.sglang.window import evicted_after

PAGE, WINDOW = 256, 128


@pytest.mark.parametrize("extend,max_new,limit,expected", [  # captured
    (0, 0, None, 256), (256, 100, None, 512), (8192, 4096, 8192, 8448), (20000, 0, 8192, 8448),
    (512, 4096, None, 768), (100, 20, 50, 376)])
def test_swa_estimate_is_sglangs(extend, max_new, limit, expected):
    assert estimate_swa_kv_tokens(extend, max_new, WINDOW, PAGE, limit) == expected


def test_new_token_ratio_is_sglangs():
    rule = RatioRule.from_config()
    assert (rule.init, rule.min, rule.decay) == (0.7, 0.098, 0.0010033333333333333)  # captured
    seq, cur = [], rule.init
    for _ in range(5):
        cur = rule.decayed(cur)
        seq.append(cur)
    assert seq == [0.6989966666666666, 0.6979933333333332, 0.6969899999999999, 0.6959866666666665,
                   0.6949833333333332]  # captured, bit for bit
    for _ in range(700):
        cur = rule.decayed(cur)
    assert cur == 0.098
    # estimate_new_token_ratio_after_retract over the kept requests (decoded, max_new): captured
    assert ratio_after_retract([(5, 50), (0, 10), (5, 40)]) == 0.693069306930693
    assert ratio_after_retract([(4000, 4096)] * 3) == 0.9813654487753275


def test_retraction_order_is_sglangs():
    decoded = [5, 0, 5, 12, 0, 0]
    prompt = [100, 900, 300, 10, 900, 50]
    assert retraction_order(decoded, prompt) == [3, 0, 2, 5, 1, 4]  # captured; popped from the end


@pytest.mark.parametrize("evicted,protected,pre_len,sharing,expected", [  # captured
    (0, 0, 300, True, 0), (0, 0, 511, True, 0), (0, 0, 512, True, 256), (0, 0, 1000, True, 512),
    (256, 0, 600, True, 256), (0, 512, 1000, True, 512), (0, 0, 300, False, 0), (0, 0, 1000, False, 768),
    (256, 0, 1000, False, 768), (0, 0, 383, True, 0), (0, 0, 384, True, 0), (0, 0, 640, True, 256)])
def test_window_eviction_is_sglangs(evicted, protected, pre_len, sharing, expected):
    # the scheduler starts a request's evicted mark at its tree-owned prefix (swa_dead_lo)
    assert evicted_after(max(evicted, protected), pre_len, WINDOW, PAGE, sharing) == expected


class Pools:
    def __init__(self, full, swa, size_swa, full_evictable=0, swa_evictable=0):
        self.full, self.swa, self.size_swa = full * PAGE, swa * PAGE, size_swa * PAGE
        self.fe, self.se = full_evictable * PAGE, swa_evictable * PAGE

    def full_available(self):
        return self.full

    def swa_available(self):
        return self.swa

    def full_evictable(self):
        return self.fe

    def swa_evictable(self):
        return self.se


def _pass(pools, running, ratio, waiting, chunked=None, chunk=8192):
    """The scheduler's loop around the adder, as the capture drove SGLang's PrefillAdder."""
    adder = PrefillAdder(pools, PAGE, WINDOW, ratio, 16384, chunk, running)
    got = []
    if chunked:
        fill, max_new, kv_len = chunked
        n = adder.add_chunked(kv_len, fill, max_new, 0)
        got.append(("chunk", None if n is None else kv_len + n, n is not None and kv_len + n < fill))
    for i, (prompt, max_new, prefix) in enumerate(waiting):
        if adder.budget_state() is AddResult.OTHER:
            got.append(("state", "OTHER"))
            break
        adm = adder.select(prefix, prompt, max_new, 0)
        if isinstance(adm, AddResult):
            got.append((i, adm.name, None, False))
            break
        res = adder.commit(adm)
        got.append((i, res.name, prefix + adm.extend_len, adm.is_chunked))
        if res is not AddResult.CONTINUE:
            break
    return got, (adder.remaining_total, adder.remaining_swa, adder.rem_chunk_tokens, adder.rem_input_tokens)


@pytest.mark.parametrize("pools,running,ratio,waiting,chunked,expected,budget", [  # captured
    (Pools(100, 30, 40, 10, 2), [(500, 10), (3000, 2000), (100, 99)], 0.5,
     [(3000, 500, 0), (9000, 200, 512), (300, 50, 0), (20000, 10, 0)], None,
     [(0, "CONTINUE", 3000, False), (1, "NO_TOKEN", None, False)], (23586.5, 4864, 5120, 13312)),
    (Pools(400, 60, 80), [], 0.7, [(3000, 500, 0), (9000, 200, 512), (300, 50, 0)], None,
     [(0, "CONTINUE", 3000, False), (1, "OTHER", 5632, True)], (93196, 6656, 0, 8192)),
    (Pools(400, 60, 80), [(4096, 0)] * 5, 0.7, [(600, 100, 0)], (20000, 100, 8192),
     [("chunk", 16384, True), ("state", "OTHER")], (79616.0, 6912, 0, 8192)),
    (Pools(400, 10, 12), [], 0.7, [(5000, 300, 0), (100, 10, 0)], None,  # SWA never fits: the chunk is capped
     [(0, "CONTINUE", 2048, True), (1, "NO_TOKEN", None, False)], (100096, 256, 6144, 14336)),
    (Pools(50, 60, 80), [(2000, 100)], 0.3, [(8000, 4000, 0), (100, 10, 0)], None,
     [(0, "NO_TOKEN", None, False)], (12230.0, 15360, 8192, 16384)),
])
def test_prefill_adder_is_sglangs(pools, running, ratio, waiting, chunked, expected, budget):
    got, left = _pass(pools, running, ratio, waiting, chunked)
    assert got == expected
    assert left == budget


# -- the radix cache, worked from the source ---------------------------------------------------


def test_match_stops_where_the_window_is_tombstoned():
    """swa.py:357-377: a boundary is valid only after `window` tokens of live SWA; a tombstone resets."""
    t = RadixCache(WINDOW, PAGE)
    t.insert(["a", "b", "c", "d"], 0, swa_live_from=3)  # pages a-c tombstoned, d live
    assert t.match(["a", "b", "c", "d"], 4)[1] == 4
    assert t.match(["a", "b", "c"], 3)[1] == 0  # the prefix ends in a tombstone: nothing usable
    t.insert(["a", "b", "x"], 2, swa_live_from=2)
    assert t.match(["a", "b", "x", "y"], 4)[1] == 3
    wide = RadixCache(512, PAGE)  # a window wider than a page needs two live pages in a row
    wide.insert(["a", "b", "c"], 0, swa_live_from=1)
    assert [wide.match(["a", "b", "c"][:k], k)[1] for k in (1, 2, 3)] == [0, 0, 3]


def test_tombstone_takes_a_later_requests_window():
    """_recover_from_incoming (swa.py:454-469): an inserted live page fills a tombstoned node."""
    t = RadixCache(WINDOW, PAGE)
    t.insert(["a", "b"], 0, swa_live_from=2)  # both tombstoned
    assert (t.nodes, t.swa_nodes) == (2, 0)
    got, _node = t.insert(["a", "b", "c"], 0, swa_live_from=1)
    assert (got.new_full, got.dup_full, got.new_swa, got.dup_swa) == (1, 2, 2, 0)
    assert t.match(["a", "b"], 2)[1] == 2


def test_lru_eviction_spares_locked_paths():
    t = RadixCache(WINDOW, PAGE)
    _g, n1 = t.insert(["a", "b"], 0, 0)
    _g, n2 = t.insert(["c", "d"], 0, 0)
    t.lock_path(n1)
    assert t.evictable_full_pages == 2 and t.evictable_swa_pages == 3  # the lock pins b's SWA (one window)
    ev = t.evict_full(10)
    assert (ev.full_pages, ev.swa_pages) == (2, 2) and t.nodes == 2  # c, d went; a, b are referenced
    t.unlock_path(n1)
    t.match(["a"], 1)  # touches a: b is older, but b is a's child (a leaf goes first)
    assert t.evict_full(1).full_pages == 1 and "b" not in t.root.children["a"].children


def test_swa_eviction_tombstones_internal_nodes_and_removes_leaves():
    t = RadixCache(WINDOW, PAGE)
    t.insert(["a", "b"], 0, 0)
    ev = t.evict_swa(1)  # LRU: a (older, internal) is tombstoned, its full page stays
    assert (ev.full_pages, ev.swa_pages, t.nodes, t.swa_nodes) == (0, 1, 2, 1)
    ev = t.evict_swa(1)  # b is a leaf: it goes whole
    assert (ev.full_pages, ev.swa_pages, t.nodes, t.swa_nodes) == (1, 1, 1, 0)


@pytest.mark.parametrize("window,page", [(128, 256), (512, 256), (100, 64), (256, 256)])
@pytest.mark.parametrize("sharing", [True, False])
def test_next_change_is_the_first_length_that_frees(window, page, sharing):
    from csa_plan.planner.engines.sglang.window import next_change

    for evicted in range(0, 3 * page, page // 4):
        first = next(pre for pre in range(evicted, evicted + 8 * page)
                     if evicted_after(evicted, pre, window, page, sharing) > evicted)
        assert next_change(evicted, window, page, sharing) == first
