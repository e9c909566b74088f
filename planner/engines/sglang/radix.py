"""The radix cache over pages, with the SWA component, as SGLang 0.5.23 keeps it for DeepSeek-V4.

DeepSeek-V4 gets ``UnifiedRadixCache`` with the FULL and SWA components (``srt/mem_cache/registry.py:
83-145,148-171``). What this model keeps of it (``srt/mem_cache/unified_cache/components/swa.py``,
``srt/mem_cache/radix_cache.py``):

* keys are page-aligned (page size 256): one node per page here (SGLang splits nodes at page
  boundaries; a chain of page nodes matches, inserts and evicts the same pages);
* a node's full pages (c4/c128/indexer) and its SWA page are separate: the SWA value may be
  *tombstoned* while the full pages stay (swa.py:62-70);
* a match is valid only at a node whose preceding ``window`` tokens all have live SWA
  (``create_match_validator``, swa.py:357-377): the walk goes as deep as full pages match, and the
  result is the deepest such node;
* ``lock`` pins the full pages from the node to the root and the SWA of the nodes covering one
  window back from it (the lock a running request holds on its prefix);
* eviction is LRU (``--radix-eviction-policy lru``, ``arg_groups/fields/memory.py:25-46``) over
  unreferenced leaves for full pages (a leaf's live SWA goes with it), and over unlocked live SWA
  values for the SWA pool (an internal node is tombstoned, a leaf removed);
* ``insert`` of a finished request: pages already in the tree are duplicates (the request's copies
  are freed); a tombstoned node takes the request's live SWA page (``_recover_from_incoming``,
  swa.py:454-469).

Page counts, not tokens: callers multiply by the page size where SGLang counts tokens.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Hashable, Sequence


@dataclass(eq=False)
class Node:
    key: Hashable
    parent: "Node | None"
    children: dict = field(default_factory=dict)
    lock: int = 0  # full-page references (running requests whose prefix passes here)
    swa_lock: int = 0  # SWA references (within one window of a locked prefix's end)
    swa_live: bool = True
    last_access: int = 0
    depth: int = 0  # pages from the root, this node included
    alive: bool = True


@dataclass(frozen=True)
class Inserted:
    """What an insert did with the request's own pages (beyond the prefix it already shared)."""

    new_full: int  # pages the tree took over from the request
    dup_full: int  # the request's pages that were already cached (freed)
    new_swa: int  # SWA pages the tree took over (live in new nodes, or filling a tombstone)
    dup_swa: int  # the request's live SWA pages the tree did not need (freed)


@dataclass(frozen=True)
class Evicted:
    full_pages: int
    swa_pages: int


class RadixCache:
    def __init__(self, window_tokens: int, page_tokens: int) -> None:
        self.root = Node(key=None, parent=None, swa_live=True)
        self.window_tokens = window_tokens
        self.page_tokens = page_tokens
        self.clock = 0
        self.nodes = 0  # full pages held by the tree
        self.locked = 0  # nodes with lock > 0
        self.swa_nodes = 0  # live SWA pages held by the tree
        self.swa_locked = 0  # live SWA pages with swa_lock > 0
        self._leaf_heap: list = []
        self._swa_heap: list = []
        self._seq = 0

    # -- sizes --------------------------------------------------------------------------------

    @property
    def evictable_full_pages(self) -> int:
        return self.nodes - self.locked

    @property
    def evictable_swa_pages(self) -> int:
        return self.swa_nodes - self.swa_locked

    # -- LRU bookkeeping ----------------------------------------------------------------------

    def _touch(self, node: Node) -> None:
        self.clock += 1
        node.last_access = self.clock
        self._offer(node)

    def _offer(self, node: Node) -> None:
        self._seq += 1
        if not node.children and node.lock == 0:
            heapq.heappush(self._leaf_heap, (node.last_access, self._seq, node))
        if node.swa_live and node.swa_lock == 0:
            heapq.heappush(self._swa_heap, (node.last_access, self._seq, node))

    # -- match, lock ----------------------------------------------------------------------------

    def match(self, keys: Sequence[Hashable], max_pages: int) -> tuple[Node, int]:
        """The deepest valid match of ``keys[:max_pages]``: (node, pages). swa.py:357-377."""
        node, best, best_depth = self.root, self.root, 0
        live_tokens = float("inf")  # the root is a valid boundary
        for i in range(min(max_pages, len(keys))):
            child = node.children.get(keys[i])
            if child is None:
                break
            node = child
            self._touch(node)
            if node.swa_live:
                live_tokens += self.page_tokens
            else:
                live_tokens = 0
            if live_tokens >= self.window_tokens:
                best, best_depth = node, i + 1
        return best, best_depth

    def _swa_span(self, node: Node):
        covered = 0
        while node is not self.root and covered < self.window_tokens:
            yield node
            covered += self.page_tokens
            node = node.parent

    def lock_path(self, node: Node) -> None:
        n = node
        while n is not self.root:
            if n.lock == 0:
                self.locked += 1
            n.lock += 1
            n = n.parent
        for n in self._swa_span(node):
            if n.swa_lock == 0 and n.swa_live:
                self.swa_locked += 1
            n.swa_lock += 1

    def unlock_path(self, node: Node) -> None:
        n = node
        while n is not self.root:
            n.lock -= 1
            if n.lock == 0:
                self.locked -= 1
                self._offer(n)
            n = n.parent
        for n in self._swa_span(node):
            n.swa_lock -= 1
            if n.swa_lock == 0 and n.swa_live:
                self.swa_locked -= 1
                self._offer(n)

    # -- insert -----------------------------------------------------------------------------------

    def insert(self, keys: Sequence[Hashable], shared_pages: int, swa_live_from: int) -> tuple[Inserted, Node]:
        """Insert a request's page keys; its first ``shared_pages`` are the prefix it matched (already
        the tree's); pages ``>= swa_live_from`` still have the request's live SWA. Returns the last node."""
        node = self.root
        new_full = dup_full = new_swa = dup_swa = 0
        for i, key in enumerate(keys):
            child = node.children.get(key)
            own = i >= shared_pages
            live = i >= swa_live_from
            if child is None:
                child = Node(key=key, parent=node, swa_live=live, depth=i + 1)
                node.children[key] = child
                self.nodes += 1
                if live:
                    self.swa_nodes += 1
                    new_swa += 1
                new_full += 1
            elif own:
                dup_full += 1
                if live and not child.swa_live:
                    child.swa_live = True  # the tombstone takes the request's window
                    self.swa_nodes += 1
                    if child.swa_lock:
                        self.swa_locked += 1
                    new_swa += 1
                elif live:
                    dup_swa += 1
            node = child
            self._touch(node)
        return Inserted(new_full, dup_full, new_swa, dup_swa), node

    # -- eviction ---------------------------------------------------------------------------------

    def _remove_leaf(self, node: Node) -> int:
        del node.parent.children[node.key]
        node.alive = False
        self.nodes -= 1
        swa = 0
        if node.swa_live:
            self.swa_nodes -= 1
            if node.swa_lock:
                self.swa_locked -= 1
            swa = 1
        parent = node.parent
        if parent is not self.root and not parent.children and parent.lock == 0:
            self._offer(parent)
        return swa

    def evict_full(self, pages: int) -> Evicted:
        """Free at least ``pages`` full pages (fewer if nothing more is unreferenced): LRU leaves."""
        full = swa = 0
        heap = self._leaf_heap
        while full < pages and heap:
            stamp, _, node = heapq.heappop(heap)
            if not node.alive or node.children or node.lock or node.last_access != stamp:
                continue
            swa += self._remove_leaf(node)
            full += 1
        return Evicted(full, swa)

    def evict_swa(self, pages: int) -> Evicted:
        """Free at least ``pages`` SWA pages: LRU over unlocked live SWA; a leaf goes whole, an
        internal node is tombstoned."""
        full = swa = 0
        heap = self._swa_heap
        while swa < pages and heap:
            stamp, _, node = heapq.heappop(heap)
            if not node.alive or not node.swa_live or node.swa_lock or node.last_access != stamp:
                continue
            if not node.children and node.lock == 0:
                swa += self._remove_leaf(node)
                full += 1
            else:
                node.swa_live = False
                self.swa_nodes -= 1
                swa += 1
        return Evicted(full, swa)
