/* SGLang 0.5.23's scheduler replayed over a whole trace, compiled: the twin of the Python model.
 *
 * A line-for-line port of loop.replay (pipeline depth 1) driving runtime.SglangRuntime /
 * SglangScheduler: the clock, arrivals, refusals at arrival, the one step-time rule and the
 * stranded end; prefill passes (PrefillAdder with SWAPrefillBudget, the continuing chunk first,
 * FCFS, max-running-requests), decode steps (check_decode_mem, the retraction loop and its order,
 * the new-token ratio), the radix cache over pages (the SWA match validator, lock paths, insert
 * with tombstone recovery, LRU eviction of unreferenced leaves and of unlocked live SWA) and the
 * SWA window frees. Each function below names the Python function it ports (scheduler.py, adder.py,
 * radix.py, window.py, retract.py, ratio.py); the rules and their SGLang file:line are cited there.
 *
 * Floats: the adder's total offset is a double summed in the Python order (Python 3.12+ sums a
 * list of floats with Neumaier compensation: the caller passes which summation its sum() does),
 * so every admission is the Python model's bit for bit. Everything else is int64; the caller only
 * calls with token and page counts below 2^40, so no sum here can overflow.
 *
 * Memory: per-request state allocated once; the radix tree's nodes in one array with a free list
 * and one open-addressing child table; the two LRU heaps keep lazily deleted entries as the Python
 * heaps do, compacted when they outgrow the tree (dropping only entries that can never pop as
 * valid: every node that becomes evictable is offered again, so the pop sequence is unchanged);
 * the step series bounded (planner/replay/stepseries.h: at most `cap` buckets of steps, whatever the
 * number of steps), written at the end into bytearrays the caller wraps without a copy.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../replay/loop.h"
#include "../../replay/stepseries.h"

#define CSGLANG_ABI 6
/* every count the loop takes stays below this, so no int64 sum it forms overflows; the Python caller
 * (compiled.py `takes`) reads it from this module as BOUND */
#define BOUND (1LL << 40)
#define CLIP_MAX_NEW 4096 /* adder.CLIP_MAX_NEW_TOKENS */
#define EVICTION_INTERVAL 128 /* window.EVICTION_INTERVAL */
#define RETRACT_DECODE_STEPS 20 /* ratio.RETRACT_DECODE_STEPS */
#define LIVE_INF (INT64_MAX / 4) /* radix.match: the root is a valid boundary (float("inf")) */

enum { NONE = 0, CONTINUE = 0, NO_TOKEN = 1, OTHER = 2 };

/* -- the radix tree (radix.py) --------------------------------------------------------------- */

typedef struct {
    int64_t k1, k2; /* the page key: (interned id, 0) for a shared page, (-1 - rid, page) for a request's own */
    int64_t last_access;
    int32_t parent, nchild, lock, swa_lock;
    int8_t swa_live, alive;
} Node;

typedef struct { int64_t stamp, seq; int32_t node; } HeapEnt;

typedef struct { HeapEnt *a; int64_t n, cap, limit; } Heap;

typedef struct {
    Node *nodes;
    int64_t nnodes, cap; /* slots used in ``nodes`` (0 is the root) */
    int32_t *free_list;
    int64_t nfree, free_cap;
    int32_t *tab; /* child table: node index or -1, keyed by (parent, k1, k2) */
    int64_t tab_cap, tab_used;
    int64_t clock, seq, n_full, locked, n_swa, swa_locked; /* radix.RadixCache: nodes, locked, swa_nodes, swa_locked */
    Heap leaf, swa;
    int64_t window, page;
} Tree;

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static uint64_t key_hash(int64_t parent, int64_t k1, int64_t k2) {
    return mix64((uint64_t)parent * 0x9e3779b97f4a7c15ULL ^ mix64((uint64_t)k1 ^ mix64((uint64_t)k2 + 0x632be59bd9b4e019ULL)));
}

static int tab_grow(Tree *T) {
    int64_t cap = T->tab_cap ? T->tab_cap * 2 : 1024;
    int32_t *tab = (int32_t *)malloc((size_t)cap * sizeof(int32_t));
    if (!tab) return -1;
    for (int64_t i = 0; i < cap; i++) tab[i] = -1;
    for (int64_t i = 0; i < T->tab_cap; i++) {
        int32_t x = T->tab[i];
        if (x < 0) continue;
        Node *nd = &T->nodes[x];
        uint64_t h = key_hash(nd->parent, nd->k1, nd->k2) & (uint64_t)(cap - 1);
        while (tab[h] >= 0) h = (h + 1) & (uint64_t)(cap - 1);
        tab[h] = x;
    }
    free(T->tab);
    T->tab = tab;
    T->tab_cap = cap;
    return 0;
}

static int32_t tab_find(const Tree *T, int32_t parent, int64_t k1, int64_t k2) {
    uint64_t mask = (uint64_t)(T->tab_cap - 1);
    uint64_t h = key_hash(parent, k1, k2) & mask;
    for (;;) {
        int32_t x = T->tab[h];
        if (x < 0) return -1;
        const Node *nd = &T->nodes[x];
        if (nd->parent == parent && nd->k1 == k1 && nd->k2 == k2) return x;
        h = (h + 1) & mask;
    }
}

static int tab_insert(Tree *T, int32_t x) {
    if ((T->tab_used + 1) * 2 > T->tab_cap && tab_grow(T) < 0) return -1;
    uint64_t mask = (uint64_t)(T->tab_cap - 1);
    Node *nd = &T->nodes[x];
    uint64_t h = key_hash(nd->parent, nd->k1, nd->k2) & mask;
    while (T->tab[h] >= 0) h = (h + 1) & mask;
    T->tab[h] = x;
    T->tab_used++;
    return 0;
}

static void tab_remove(Tree *T, int32_t x) { /* linear probing, backward-shift deletion */
    uint64_t mask = (uint64_t)(T->tab_cap - 1);
    Node *nd = &T->nodes[x];
    uint64_t i = key_hash(nd->parent, nd->k1, nd->k2) & mask;
    while (T->tab[i] != x) i = (i + 1) & mask;
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        int32_t y = T->tab[j];
        if (y < 0) break;
        Node *ny = &T->nodes[y];
        uint64_t k = key_hash(ny->parent, ny->k1, ny->k2) & mask;
        if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) continue;
        T->tab[i] = y;
        i = j;
    }
    T->tab[i] = -1;
    T->tab_used--;
}

static int ent_less(HeapEnt x, HeapEnt y) { return x.stamp < y.stamp || (x.stamp == y.stamp && x.seq < y.seq); }

static void sift_down(Heap *h, int64_t k) {
    HeapEnt e = h->a[k];
    int64_t n = h->n;
    for (;;) {
        int64_t c = 2 * k + 1;
        if (c >= n) break;
        if (c + 1 < n && ent_less(h->a[c + 1], h->a[c])) c++;
        if (!ent_less(h->a[c], e)) break;
        h->a[k] = h->a[c];
        k = c;
    }
    h->a[k] = e;
}

static int heap_push(Heap *h, HeapEnt e) {
    if (h->n == h->cap) {
        int64_t cap = h->cap ? 2 * h->cap : 1024;
        HeapEnt *a = (HeapEnt *)realloc(h->a, (size_t)cap * sizeof(HeapEnt));
        if (!a) return -1;
        h->a = a;
        h->cap = cap;
    }
    int64_t k = h->n++;
    while (k > 0) {
        int64_t p = (k - 1) / 2;
        if (!ent_less(e, h->a[p])) break;
        h->a[k] = h->a[p];
        k = p;
    }
    h->a[k] = e;
    return 0;
}

static HeapEnt heap_pop(Heap *h) {
    HeapEnt top = h->a[0];
    h->a[0] = h->a[--h->n];
    if (h->n) sift_down(h, 0);
    return top;
}

static int leaf_valid(const Tree *T, HeapEnt e) {
    const Node *nd = &T->nodes[e.node];
    return nd->alive && !nd->nchild && !nd->lock && nd->last_access == e.stamp;
}

static int swa_valid(const Tree *T, HeapEnt e) {
    const Node *nd = &T->nodes[e.node];
    return nd->alive && nd->swa_live && !nd->swa_lock && nd->last_access == e.stamp;
}

/* Drop the entries that cannot pop as valid now; one that becomes valid later is offered again
 * (unlock_path, _remove_leaf, _touch), so the sequence of effective pops is the Python heap's. */
static void heap_compact(Tree *T, Heap *h, int (*valid)(const Tree *, HeapEnt)) {
    int64_t m = 0;
    for (int64_t i = 0; i < h->n; i++)
        if (valid(T, h->a[i])) h->a[m++] = h->a[i];
    h->n = m;
    for (int64_t k = m / 2 - 1; k >= 0; k--) sift_down(h, k);
}

static void maybe_compact(Tree *T, Heap *h, int (*valid)(const Tree *, HeapEnt)) {
    if (h->n <= h->limit) return;
    heap_compact(T, h, valid);
    h->limit = 2 * h->n > 4 * (T->n_full + 1024) ? 2 * h->n : 4 * (T->n_full + 1024);
}

static int offer(Tree *T, int32_t x) { /* radix._offer */
    Node *nd = &T->nodes[x];
    T->seq++;
    HeapEnt e = {nd->last_access, T->seq, x};
    if (!nd->nchild && nd->lock == 0) {
        if (heap_push(&T->leaf, e) < 0) return -1;
        maybe_compact(T, &T->leaf, leaf_valid);
    }
    if (nd->swa_live && nd->swa_lock == 0) {
        if (heap_push(&T->swa, e) < 0) return -1;
        maybe_compact(T, &T->swa, swa_valid);
    }
    return 0;
}

static int touch(Tree *T, int32_t x) { /* radix._touch */
    T->clock++;
    T->nodes[x].last_access = T->clock;
    return offer(T, x);
}

static int32_t node_new(Tree *T) {
    int32_t x;
    if (T->nfree) {
        x = T->free_list[--T->nfree];
    } else {
        if (T->nnodes == T->cap) {
            int64_t cap = T->cap ? 2 * T->cap : 1024;
            if (cap > INT32_MAX) return -1;
            Node *a = (Node *)realloc(T->nodes, (size_t)cap * sizeof(Node));
            if (!a) return -1;
            T->nodes = a;
            T->cap = cap;
        }
        x = (int32_t)T->nnodes++;
    }
    memset(&T->nodes[x], 0, sizeof(Node));
    return x;
}

static int tree_init(Tree *T, int64_t window, int64_t page) {
    memset(T, 0, sizeof *T);
    T->window = window;
    T->page = page;
    if (node_new(T) != 0) return -1; /* the root */
    T->nodes[0].parent = -1;
    T->nodes[0].swa_live = 1;
    T->nodes[0].alive = 1;
    T->leaf.limit = T->swa.limit = 4096;
    return tab_grow(T);
}

static void tree_free(Tree *T) {
    free(T->nodes);
    free(T->free_list);
    free(T->tab);
    free(T->leaf.a);
    free(T->swa.a);
}

static int lock_path(Tree *T, int32_t x) { /* radix.lock_path */
    for (int32_t n = x; n != 0; n = T->nodes[n].parent) {
        if (T->nodes[n].lock == 0) T->locked++;
        T->nodes[n].lock++;
    }
    int64_t covered = 0;
    for (int32_t n = x; n != 0 && covered < T->window; n = T->nodes[n].parent) {
        Node *nd = &T->nodes[n];
        if (nd->swa_lock == 0 && nd->swa_live) T->swa_locked++;
        nd->swa_lock++;
        covered += T->page;
    }
    return 0;
}

static int unlock_path(Tree *T, int32_t x) { /* radix.unlock_path */
    for (int32_t n = x; n != 0; n = T->nodes[n].parent) {
        Node *nd = &T->nodes[n];
        nd->lock--;
        if (nd->lock == 0) {
            T->locked--;
            if (offer(T, n) < 0) return -1;
        }
    }
    int64_t covered = 0;
    for (int32_t n = x; n != 0 && covered < T->window; n = T->nodes[n].parent) {
        Node *nd = &T->nodes[n];
        nd->swa_lock--;
        if (nd->swa_lock == 0 && nd->swa_live) {
            T->swa_locked--;
            if (offer(T, n) < 0) return -1;
        }
        covered += T->page;
    }
    return 0;
}

static int remove_leaf(Tree *T, int32_t x) { /* radix._remove_leaf: returns the SWA pages freed (0/1), -1 no memory */
    Node *nd = &T->nodes[x];
    int32_t parent = nd->parent;
    tab_remove(T, x);
    T->nodes[parent].nchild--;
    nd->alive = 0;
    T->n_full--;
    int swa = 0;
    if (nd->swa_live) {
        T->n_swa--;
        if (nd->swa_lock) T->swa_locked--;
        swa = 1;
    }
    if (T->nfree == T->free_cap) {
        int64_t cap = T->free_cap ? 2 * T->free_cap : 1024;
        int32_t *a = (int32_t *)realloc(T->free_list, (size_t)cap * sizeof(int32_t));
        if (!a) return -1;
        T->free_list = a;
        T->free_cap = cap;
    }
    T->free_list[T->nfree++] = x;
    Node *p = &T->nodes[parent];
    if (parent != 0 && !p->nchild && p->lock == 0 && offer(T, parent) < 0) return -1;
    return swa;
}

static int evict_full(Tree *T, int64_t pages) { /* radix.evict_full */
    int64_t full = 0;
    Heap *h = &T->leaf;
    while (full < pages && h->n) {
        HeapEnt e = heap_pop(h);
        if (!leaf_valid(T, e)) continue;
        if (remove_leaf(T, e.node) < 0) return -1;
        full++;
    }
    return 0;
}

static int evict_swa(Tree *T, int64_t pages) { /* radix.evict_swa */
    int64_t swa = 0;
    Heap *h = &T->swa;
    while (swa < pages && h->n) {
        HeapEnt e = heap_pop(h);
        if (!swa_valid(T, e)) continue;
        Node *nd = &T->nodes[e.node];
        if (!nd->nchild && nd->lock == 0) {
            int got = remove_leaf(T, e.node);
            if (got < 0) return -1;
            swa += got;
        } else {
            nd->swa_live = 0;
            T->n_swa--;
            swa++;
        }
    }
    return 0;
}

/* -- requests and the scheduler (scheduler.py, runtime.py) ----------------------------------- */

typedef struct {
    int64_t prompt, max_new, out, prefix_len, kv_len, own_full, own_swa, swa_from, done_before;
    int64_t swa_mark_for, swa_mark, decode_due, keys_off;
    int32_t node, nkeys;
    int8_t decode_idx; /* only ">= 1" is read: saturates at 1 */
} Req;

typedef struct {
    /* settings */
    int64_t F, S, P, W, mrr, chunk, max_prefill, max_req_len, max_input, capacity;
    int radix, compensated;
    double ratio_min, ratio_decay;
    /* state */
    Req *req;
    CsaBatch batch; /* the step being scheduled (steptime.StepBatch) */
    const int32_t *kid; /* interned page key ids, per request from req.keys_off */
    Tree T;
    double ratio;
    int64_t req_full, req_swa;
    int32_t *waiting; /* a ring of capacity n: a request waits at most once at a time */
    int64_t w_head, w_len, n;
    int32_t *running;
    int64_t n_running;
    int32_t chunked;
    /* one step */
    int32_t *b_req;
    int64_t *b_n;
    int8_t *b_cont;
    int64_t nb;
    int64_t *sort_buf; /* retraction order */
    int32_t *tmp;
    /* outputs */
    int64_t *admitted_ns, *preempt;
    int8_t *refused; /* 1 refused at arrival, 2 stranded */
    int32_t *aborted, *stranded; /* in the order the Python model lists them */
    int64_t n_aborted, n_stranded;
    int64_t recomputed, hit, query;
} Sched;

static inline int64_t full_available(const Sched *s) { return (s->F - s->req_full - s->T.n_full) * s->P; }
static inline int64_t swa_available(const Sched *s) { return (s->S - s->req_swa - s->T.n_swa) * s->P; }
static inline int64_t full_evictable(const Sched *s) { return (s->T.n_full - s->T.locked) * s->P; }
static inline int64_t swa_evictable(const Sched *s) { return (s->T.n_swa - s->T.swa_locked) * s->P; }
static inline int64_t floordiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t ceil_paged(int64_t tokens, int64_t page) { return -floordiv(-tokens, page) * page; }
static inline int64_t ceil_div(int64_t a, int64_t b) { return -floordiv(-a, b); }
static inline int64_t round_up(int64_t n, int64_t m) { return ceil_div(n, m) * m; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static inline int64_t key1(const Sched *s, int32_t r, int64_t i) {
    return i < s->req[r].nkeys ? (int64_t)s->kid[s->req[r].keys_off + i] : -1 - (int64_t)r;
}
static inline int64_t key2(const Sched *s, int32_t r, int64_t i) { return i < s->req[r].nkeys ? 0 : i; }

/* radix.match: the deepest valid match of the request's first ``limit`` page keys */
static int match(Sched *s, int32_t r, int64_t limit, int32_t *best_out, int64_t *depth_out) {
    Tree *T = &s->T;
    int32_t node = 0, best = 0;
    int64_t depth = 0, live = LIVE_INF;
    for (int64_t i = 0; i < limit; i++) {
        int32_t child = tab_find(T, node, key1(s, r, i), key2(s, r, i));
        if (child < 0) break;
        node = child;
        if (touch(T, node) < 0) return -1;
        if (T->nodes[node].swa_live) {
            if (live != LIVE_INF) live += T->page;
        } else {
            live = 0;
        }
        if (live >= T->window) {
            best = node;
            depth = i + 1;
        }
    }
    *best_out = best;
    *depth_out = depth;
    return 0;
}

/* radix.insert: the request's first ``pages`` keys; returns the last node (-1 no memory) */
static int32_t insert(Sched *s, int32_t r, int64_t pages, int64_t shared, int64_t swa_live_from) {
    Tree *T = &s->T;
    int32_t node = 0;
    for (int64_t i = 0; i < pages; i++) {
        int64_t k1 = key1(s, r, i), k2 = key2(s, r, i);
        int32_t child = tab_find(T, node, k1, k2);
        int own = i >= shared, live = i >= swa_live_from;
        if (child < 0) {
            child = node_new(T);
            if (child < 0) return -1;
            Node *nd = &T->nodes[child];
            nd->k1 = k1;
            nd->k2 = k2;
            nd->parent = node;
            nd->swa_live = (int8_t)live;
            nd->alive = 1;
            if (tab_insert(T, child) < 0) return -1;
            T->nodes[node].nchild++;
            T->n_full++;
            if (live) T->n_swa++;
        } else if (own) {
            Node *nd = &T->nodes[child];
            if (live && !nd->swa_live) {
                nd->swa_live = 1;
                T->n_swa++;
                if (nd->swa_lock) T->swa_locked++;
            }
        }
        node = child;
        if (touch(T, node) < 0) return -1;
    }
    return node;
}

/* window.evicted_after */
static int64_t evicted_after(const Sched *s, int64_t evicted, int64_t pre_len, int64_t interval) {
    if (pre_len - s->W < evicted + interval) return evicted;
    int64_t threshold = s->radix ? pre_len - round_up(max64(s->W, s->P), s->P) : pre_len - s->W;
    int64_t nw = max64(evicted, threshold);
    nw = floordiv(nw, s->P) * s->P;
    return nw > evicted ? nw : evicted;
}

/* window.next_change */
static int64_t next_change(const Sched *s, int64_t evicted) {
    int64_t above = (floordiv(evicted, s->P) + 1) * s->P;
    if (s->radix) return max64(above + round_up(max64(s->W, s->P), s->P), evicted + s->W + 1);
    return above + s->W;
}

/* scheduler._alloc (the shortfall is not observed) */
static int alloc_pages(Sched *s, int64_t full, int64_t swa) {
    int64_t short_full = full - floordiv(full_available(s), s->P);
    int64_t short_swa = swa - floordiv(swa_available(s), s->P);
    if (s->radix && (short_full > 0 || short_swa > 0)) {
        if (short_full > 0 && evict_full(&s->T, short_full) < 0) return -1;
        short_swa = swa - floordiv(swa_available(s), s->P);
        if (short_swa > 0 && evict_swa(&s->T, short_swa) < 0) return -1;
    }
    s->req_full += full;
    s->req_swa += swa;
    return 0;
}

/* scheduler._evict_window */
static void evict_window(Sched *s, Req *q, int64_t pre_len, int64_t interval) {
    int64_t nw = evicted_after(s, q->swa_from, pre_len, interval);
    if (nw > q->swa_from) {
        int64_t freed = min64(floordiv(nw - q->swa_from, s->P), q->own_swa);
        q->own_swa -= freed;
        s->req_swa -= freed;
        q->swa_from = nw;
    }
}

/* scheduler._checkpoint */
static int checkpoint(Sched *s, int32_t r, int64_t upto) {
    Req *q = &s->req[r];
    int64_t P = s->P;
    int64_t pages = floordiv(upto, P), shared = floordiv(q->prefix_len, P);
    if (pages <= shared) return 0;
    int32_t node = insert(s, r, pages, shared, floordiv(q->swa_from, P));
    if (node < 0) return -1;
    int64_t moved_full = pages - shared;
    int64_t moved_swa = max64(0, pages - max64(shared, floordiv(q->swa_from, P)));
    q->own_full -= moved_full;
    s->req_full -= moved_full;
    q->own_swa -= moved_swa;
    s->req_swa -= moved_swa;
    lock_path(&s->T, node);
    if (q->node >= 0 && unlock_path(&s->T, q->node) < 0) return -1;
    q->node = node;
    q->prefix_len = pages * P;
    q->swa_from = max64(q->swa_from, q->prefix_len);
    return 0;
}

static int checkpoint_unfinished(Sched *s, int32_t r) { /* scheduler._checkpoint_unfinished */
    Req *q = &s->req[r];
    evict_window(s, q, q->kv_len - 1, 1);
    return checkpoint(s, r, q->kv_len);
}

static int release(Sched *s, int32_t r, int ins) { /* scheduler._release */
    Req *q = &s->req[r];
    if (ins && s->radix && checkpoint(s, r, q->kv_len) < 0) return -1;
    s->req_full -= q->own_full;
    s->req_swa -= q->own_swa;
    if (q->node >= 0) {
        if (unlock_path(&s->T, q->node) < 0) return -1;
        q->node = -1;
    }
    q->own_full = q->own_swa = 0;
    return 0;
}

/* -- PrefillAdder (adder.py) ------------------------------------------------------------------ */

typedef struct {
    double total_off; /* a float in the Python model */
    int64_t current_off, swa_off, rem_input, rem_chunk; /* ints there (only ints are added) */
} Adder;

static inline double rem_total(const Sched *s, const Adder *a) {
    return (double)(full_available(s) + full_evictable(s)) - a->total_off;
}
static inline int64_t rem_current(const Sched *s, const Adder *a) {
    return full_available(s) + full_evictable(s) - a->current_off;
}
static inline int64_t rem_swa(const Sched *s, const Adder *a) {
    return swa_available(s) + swa_evictable(s) - a->swa_off;
}

static int64_t swa_tokens(const Sched *s, int64_t extend, int64_t max_new, int has_limit, int64_t limit) {
    int64_t allocated = has_limit ? min64(extend, limit) : extend; /* adder.estimate_swa_kv_tokens */
    int64_t tail = max64(allocated - s->W, 0);
    return tail + min64(extend + max_new, s->W) + s->P;
}

static int budget_state(const Sched *s, const Adder *a) {
    if (!(rem_total(s, a) > 0 && rem_current(s, a) > 0 && rem_swa(s, a) > 0)) return NO_TOKEN;
    if (a->rem_input <= 0 || a->rem_chunk <= 0) return OTHER;
    return CONTINUE;
}

static void reserve(const Sched *s, Adder *a, int64_t extend, int64_t max_new, int64_t chunk_limit) {
    int64_t ext = ceil_paged(extend, s->P);
    int64_t immediate = ext + s->P;
    a->total_off += (double)(immediate + max_new);
    a->current_off += immediate;
    a->swa_off += swa_tokens(s, ceil_paged(ext, s->P), max_new, 1, chunk_limit);
    a->rem_input -= ext;
    a->rem_chunk -= ext;
}

static void adder_init(Sched *s, Adder *a) {
    a->rem_input = s->max_prefill;
    a->rem_chunk = s->chunk;
    a->current_off = a->swa_off = 0;
    /* adder.running_offset: sum([...]) in the running batch's order */
    double f = 0.0, c = 0.0;
    for (int64_t i = 0; i < s->n_running; i++) {
        const Req *q = &s->req[s->running[i]];
        int64_t rem = q->max_new - q->out;
        double x = (double)(rem < CLIP_MAX_NEW ? rem : CLIP_MAX_NEW) * s->ratio;
        if (s->compensated) { /* CPython 3.12+ sum(): Neumaier */
            double t = f + x;
            if (fabs(f) >= fabs(x)) c += (f - t) + x;
            else c += (x - t) + f;
            f = t;
        } else {
            f += x;
        }
    }
    if (s->compensated && c != 0.0 && isfinite(c)) f += c;
    a->total_off = f;
}

/* adder.add_chunked: tokens of the continuing chunk, or -1 (no room) */
static int64_t add_chunked(const Sched *s, Adder *a, int64_t prefix_len, int64_t fill_len, int64_t max_new) {
    int64_t available = min64(a->rem_chunk, (int64_t)rem_total(s, a));
    available = min64(available, rem_swa(s, a) - s->P);
    if (available <= 0) return -1;
    int64_t extend = fill_len - prefix_len;
    int truncated = extend > available;
    int64_t new_len = min64(extend, available);
    reserve(s, a, new_len, truncated ? 0 : min64(max_new, CLIP_MAX_NEW), a->rem_chunk);
    return new_len;
}

/* adder.select: 0 with (*extend, *max_new_res, *chunked) set, else NO_TOKEN / OTHER */
static int select_adm(const Sched *s, Adder *a, int64_t prefix_len, int64_t fill_len, int64_t max_new, int64_t decoded,
                      int64_t *extend_out, int64_t *reserved_out, int *chunked_out) {
    int64_t remaining_new = min64(max64(max_new - decoded, 0), CLIP_MAX_NEW);
    int64_t extend = fill_len - prefix_len;
    int64_t total = extend + remaining_new + s->P;
    int64_t input_tokens = ceil_paged(extend, s->P);
    int64_t chunk_limit = a->rem_chunk;
    if ((double)total >= rem_total(s, a)) return NO_TOKEN;
    int64_t needed = swa_tokens(s, ceil_paged(extend, s->P), remaining_new, 1, chunk_limit);
    int64_t rswa = rem_swa(s, a);
    if (!(needed < rswa)) {
        if (needed < s->S * s->P) return NO_TOKEN;
        int64_t headroom = swa_tokens(s, 0, remaining_new, 0, 0);
        int64_t x = rswa - headroom;
        int64_t cap = x < 0 ? 0 : x / s->P * s->P;
        if (cap <= 0) return NO_TOKEN;
        chunk_limit = min64(chunk_limit, cap);
    }
    int64_t reserved = min64(max_new, CLIP_MAX_NEW);
    if (input_tokens > chunk_limit) {
        extend = floordiv(chunk_limit, s->P) * s->P;
        int64_t end = floordiv(prefix_len + extend, s->P) * s->P;
        extend = end - prefix_len;
        if (extend <= 0) return OTHER;
        *extend_out = extend;
        *reserved_out = 0;
        *chunked_out = 1;
        return 0;
    }
    *extend_out = extend;
    *reserved_out = reserved;
    *chunked_out = 0;
    return 0;
}

/* -- one step --------------------------------------------------------------------------------- */

/* scheduler._prefill: 1 a batch was built (in b_*), 0 none, -1 no memory */
static int prefill(Sched *s, int64_t t, int64_t *prefill_tokens) {
    if (!s->w_len && s->chunked < 0) return 0;
    Adder a;
    adder_init(s, &a);
    s->nb = 0;
    if (s->chunked >= 0) {
        Req *q = &s->req[s->chunked];
        int64_t n = add_chunked(s, &a, q->kv_len, q->prompt + q->out, q->max_new);
        if (n >= 0) {
            s->b_req[0] = s->chunked;
            s->b_n[0] = n;
            s->b_cont[0] = q->kv_len + n < q->prompt + q->out;
            s->nb = 1;
        }
    }
    int64_t holds_row = s->chunked >= 0 ? 1 : 0, taken = 0;
    for (int64_t w = 0; w < s->w_len; w++) {
        int32_t r = s->waiting[(s->w_head + w) % s->n];
        Req *q = &s->req[r];
        if (budget_state(s, &a) == OTHER) break;
        int64_t running_bs = s->n_running;
        int64_t held = (s->nb && s->b_req[0] == s->chunked) ? 1 : 0;
        int64_t allocatable = min64(s->mrr - running_bs, s->mrr - running_bs - holds_row + held);
        if (s->nb >= allocatable) break;
        int64_t fill = q->prompt + q->out;
        int64_t limit = floordiv(fill - 1, s->P);
        int32_t node = 0;
        int64_t pages = 0;
        if (s->radix && match(s, r, limit, &node, &pages) < 0) return -1;
        if (pages) lock_path(&s->T, node);
        int64_t extend, reserved;
        int is_chunked;
        int res = select_adm(s, &a, pages * s->P, fill, q->max_new, q->out, &extend, &reserved, &is_chunked);
        if (res) {
            if (pages && unlock_path(&s->T, node) < 0) return -1;
            break;
        }
        q->node = pages ? node : -1;
        q->prefix_len = q->kv_len = q->swa_from = pages * s->P;
        reserve(s, &a, extend, reserved, a.rem_chunk);
        res = budget_state(s, &a);
        s->b_req[s->nb] = r;
        s->b_n[s->nb] = extend;
        s->b_cont[s->nb] = (int8_t)is_chunked;
        s->nb++;
        taken++;
        s->hit += pages * s->P;
        s->query += fill;
        if (s->admitted_ns[r] == -1) s->admitted_ns[r] = t;
        if (res != CONTINUE) break;
    }
    if (!s->nb) return 0;
    s->w_head = (s->w_head + taken) % s->n;
    s->w_len -= taken;
    for (int64_t k = 0; k < s->nb; k++) {
        Req *q = &s->req[s->b_req[k]];
        int64_t n = s->b_n[k];
        if (!s->radix) evict_window(s, q, q->kv_len, 1);
        int64_t end = q->kv_len + n;
        int64_t pages = ceil_div(end, s->P) - ceil_div(q->kv_len, s->P);
        if (alloc_pages(s, pages, pages) < 0) return -1;
        q->own_full += pages;
        q->own_swa += pages;
        if (q->done_before > q->kv_len) s->recomputed += min64(end, q->done_before) - q->kv_len;
        csa_batch_prefill(&s->batch, q->kv_len, n);
        q->kv_len = end;
        *prefill_tokens += n;
    }
    return 1;
}

/* scheduler._fits (check_decode_mem) over requests of which ``boundary`` sit at a page boundary */
static int fits(Sched *s, int64_t boundary) {
    int64_t need = boundary * s->P;
    if (s->radix) {
        int64_t short_full = max64(0, need - full_available(s));
        if (short_full && evict_full(&s->T, ceil_div(short_full, s->P)) < 0) return -1;
        int64_t short_swa = max64(0, need - swa_available(s));
        if (short_swa && evict_swa(&s->T, ceil_div(short_swa, s->P)) < 0) return -1;
    }
    return min64(full_available(s), swa_available(s)) >= need;
}

static void set_mark(Sched *s, Req *q) {
    q->swa_mark_for = q->swa_from;
    q->swa_mark = max64(q->swa_from + s->W + EVICTION_INTERVAL, next_change(s, q->swa_from));
}

static int decode_events(Sched *s, Req *q, int64_t kv) { /* scheduler._decode_events */
    if (q->swa_mark_for != q->swa_from) set_mark(s, q);
    if (kv >= q->swa_mark && q->decode_idx >= 1) {
        evict_window(s, q, kv, 1);
        if (q->swa_mark_for != q->swa_from) set_mark(s, q);
    }
    if (floordiv(kv, s->P) * s->P == kv) {
        if (alloc_pages(s, 1, 1) < 0) return -1;
        q->own_full += 1;
        q->own_swa += 1;
    }
    q->decode_idx = 1;
    q->decode_due = min64((floordiv(kv, s->P) + 1) * s->P, q->swa_mark);
    return 0;
}

static int cmp_order(const void *x, const void *y) { /* retract.retraction_order: (decoded, -prompt) descending, stable */
    const int64_t *a = (const int64_t *)x, *b = (const int64_t *)y;
    if (a[0] != b[0]) return a[0] > b[0] ? -1 : 1;
    if (a[1] != b[1]) return a[1] < b[1] ? -1 : 1;
    return a[2] < b[2] ? -1 : (a[2] > b[2]);
}

/* scheduler._decode: the running batch after any retraction decodes one token each */
static int decode(Sched *s) {
    int64_t m = s->n_running, boundary = 0;
    for (int64_t i = 0; i < m; i++) {
        const Req *q = &s->req[s->running[i]];
        if (floordiv(q->kv_len, s->P) * s->P == q->kv_len) boundary++;
    }
    int ok = fits(s, boundary);
    if (ok < 0) return -1;
    if (!ok) {
        int64_t *o = s->sort_buf;
        for (int64_t i = 0; i < m; i++) {
            const Req *q = &s->req[s->running[i]];
            o[3 * i] = q->out;
            o[3 * i + 1] = q->prompt;
            o[3 * i + 2] = i;
        }
        qsort(o, (size_t)m, 3 * sizeof(int64_t), cmp_order);
        int64_t kept = m, gone = 0; /* order[0..kept) kept; retracted in s->tmp[0..gone) */
        int first = 1;
        for (;;) {
            if (!first) {
                int f = fits(s, boundary);
                if (f < 0) return -1;
                if (f) break;
            }
            if (kept == 1) break;
            first = 0;
            int32_t r = s->running[o[3 * (kept - 1) + 2]];
            kept--;
            const Req *q = &s->req[r];
            if (floordiv(q->kv_len, s->P) * s->P == q->kv_len) boundary--;
            if (release(s, r, 0) < 0) return -1;
            s->tmp[gone++] = r;
        }
        if (kept <= 1) {
            int f = fits(s, boundary);
            if (f < 0) return -1;
            if (!f) {
                int32_t r = s->running[o[3 * (kept - 1) + 2]];
                kept--;
                if (release(s, r, 0) < 0) return -1;
                s->aborted[s->n_aborted++] = r;
            }
        }
        for (int64_t g = 0; g < gone; g++) {
            int32_t r = s->tmp[g];
            Req *q = &s->req[r];
            s->preempt[r]++;
            q->done_before = max64(q->done_before, q->kv_len);
            q->prefix_len = q->kv_len = q->swa_from = q->decode_due = 0;
            q->decode_idx = 0;
            s->waiting[(s->w_head + s->w_len) % s->n] = r;
            s->w_len++;
        }
        int64_t decoded = 0, total_max_new = 0;
        for (int64_t k = 0; k < kept; k++) s->tmp[k] = s->running[o[3 * k + 2]];
        for (int64_t k = 0; k < kept; k++) {
            s->running[k] = s->tmp[k];
            decoded += s->req[s->tmp[k]].out;
            total_max_new += s->req[s->tmp[k]].max_new;
        }
        s->n_running = kept;
        double x = (double)(decoded + RETRACT_DECODE_STEPS * kept) / (double)(total_max_new + 1);
        s->ratio = x < 1.0 ? x : 1.0; /* min(1.0, x) */
    } else {
        double d = s->ratio - s->ratio_decay; /* max(current - decay, min) */
        s->ratio = s->ratio_min > d ? s->ratio_min : d;
    }
    for (int64_t i = 0; i < s->n_running; i++) {
        Req *q = &s->req[s->running[i]];
        int64_t kv = q->kv_len;
        if (kv >= q->decode_due && decode_events(s, q, kv) < 0) return -1;
        q->kv_len = kv + 1;
    }
    return 0;
}

/* -- the replay loop (loop.replay, depth 1) -------------------------------------------------- */

typedef struct {
    PyObject *obj;
    int64_t len, cap; /* int64 items */
} Col;

typedef struct {
    CsaClient client; /* the arrivals: the trace's, or a closed loop's (replay/loop.h) */
    CsaClock clock;   /* the step time and the int64 clock (replay/loop.h) */
    int64_t *first_ns, *finished_ns;
    int64_t err_t; /* the step start whose end would pass the clock */
    int64_t finished; /* requests finished so far (progress) */
} Clock;

static void add_request(Sched *s, int32_t r) { /* runtime.add */
    Req *q = &s->req[r];
    int64_t prompt = q->prompt, P = s->P;
    int64_t max_new = min64(q->max_new, s->max_req_len - prompt - 1);
    max_new = min64(max_new, s->capacity - ceil_div(prompt, P) * P - P - 1);
    q->max_new = max64(0, max_new);
    s->waiting[(s->w_head + s->w_len) % s->n] = r;
    s->w_len++;
}

/* the series: end_ns, used (full, swa), running, waiting, tokens, prefill */
static int run(Sched *s, Clock *k, StepSeries *ser) {
    int64_t n = s->n, nxt = 0, refused = 0;
    int64_t t = n ? k->client.arrival[0] : 0;
    for (int64_t turn = 1;; turn++) {
        if ((turn & (CSA_TICK_TURNS - 1)) == 0 && csa_tick(k->finished + refused + s->n_aborted, n) < 0) return -2;
        while (nxt < csa_client_sendable(&k->client) && k->client.arrival[nxt] <= t) {
            if (s->req[nxt].prompt >= s->max_input || s->req[nxt].prompt < 1) { /* runtime.refuse */
                s->refused[nxt] = 1, refused++;
                csa_client_release(&k->client, 1, t);
            }
            else add_request(s, (int32_t)nxt);
            nxt++;
        }
        int64_t prefill_tokens = 0, tokens = 0;
        memset(&s->batch, 0, sizeof s->batch);
        int kind = prefill(s, t, &prefill_tokens); /* scheduler.schedule */
        if (kind < 0) return -1;
        if (kind) {
            for (int64_t b = 0; b < s->nb; b++) tokens += s->b_n[b];
        } else if (s->n_running) {
            if (decode(s) < 0) return -1;
            kind = s->n_running ? 2 : 0;
            tokens = s->n_running;
            for (int64_t i = 0; i < s->n_running; i++) { /* runtime.schedule's decode batch */
                Req *q = &s->req[s->running[i]];
                csa_batch_decode(&s->batch, q->prompt + q->out, 1);
            }
        }
        if (kind) {
            int64_t end = csa_step_end(&k->clock, t, prefill_tokens, &s->batch);
            if (end < 0) { k->err_t = t; return -3; }
            if (kind == 1) { /* scheduler.complete, a prefill batch */
                int32_t new_chunked = -1;
                for (int64_t b = 0; b < s->nb; b++) {
                    int32_t r = s->b_req[b];
                    Req *q = &s->req[r];
                    if (s->b_cont[b]) {
                        if (s->radix && checkpoint_unfinished(s, r) < 0) return -1;
                        new_chunked = r;
                        continue;
                    }
                    q->out += 1;
                    if (q->out == 1 && k->first_ns[r] == -1) k->first_ns[r] = end;
                    q->decode_idx = 0;
                    q->decode_due = 0;
                    if (q->out >= q->max_new) {
                        if (release(s, r, 1) < 0) return -1;
                        k->finished_ns[r] = end, k->finished++;
                        csa_client_release(&k->client, 1, end);
                    } else {
                        if (s->radix && checkpoint_unfinished(s, r) < 0) return -1;
                        s->running[s->n_running++] = r;
                    }
                }
                s->chunked = new_chunked;
            } else { /* a decode step */
                int any = 0;
                for (int64_t i = 0; i < s->n_running; i++) {
                    Req *q = &s->req[s->running[i]];
                    q->out += 1;
                    if (q->out >= q->max_new) any = 1;
                }
                if (any) {
                    int64_t w = 0;
                    for (int64_t i = 0; i < s->n_running; i++) {
                        int32_t r = s->running[i];
                        if (s->req[r].out >= s->req[r].max_new) {
                            if (release(s, r, 1) < 0) return -1;
                            k->finished_ns[r] = end, k->finished++;
                            csa_client_release(&k->client, 1, end);
                        }
                    }
                    for (int64_t i = 0; i < s->n_running; i++) {
                        int32_t r = s->running[i];
                        if (s->req[r].out < s->req[r].max_new) s->running[w++] = r;
                    }
                    s->n_running = w;
                }
            }
            t = end;
            int64_t used[2] = {s->req_full + s->T.locked, s->req_swa + s->T.swa_locked};
            if (ss_add(ser, t, used, s->n_running + (s->chunked >= 0 ? 1 : 0), s->w_len, tokens, prefill_tokens) < 0)
                return -1;
            continue;
        }
        if (nxt < csa_client_sendable(&k->client)) {
            t = max64(t, k->client.arrival[nxt]);
            continue;
        }
        if (s->n_running + (s->chunked >= 0 ? 1 : 0) == 0 && s->w_len == 0 && nxt == n) break;
        if (!s->n_running && s->chunked < 0) /* scheduler.stranded */
            for (int64_t w = 0; w < s->w_len; w++) {
                int32_t r = s->waiting[(s->w_head + w) % s->n];
                s->refused[r] = 2;
                s->stranded[s->n_stranded++] = r;
            }
        for (int64_t r = nxt; r < n; r++) { /* a closed loop whose requests in flight stranded: never sent */
            s->refused[r] = 2;
            s->stranded[s->n_stranded++] = (int32_t)r;
        }
        break;
    }
    return 0;
}

/* -- page keys (runtime.page_keys), interned ---------------------------------------------------- */

typedef struct { int64_t start, count, offset; } KeyRef; /* ids[start:start+count], the page's offset in the first */

static uint64_t ref_hash(const int64_t *ids, KeyRef k) {
    uint64_t h = mix64((uint64_t)k.offset ^ ((uint64_t)k.count << 32));
    for (int64_t i = 0; i < k.count; i++) h = mix64(h ^ (uint64_t)ids[k.start + i]);
    return h;
}

static int ref_eq(const int64_t *ids, KeyRef a, KeyRef b) {
    return a.count == b.count && a.offset == b.offset &&
           memcmp(ids + a.start, ids + b.start, (size_t)a.count * sizeof(int64_t)) == 0;
}

/* kid[keys_off[r] + j]: the id of request r's page j, equal ids for equal keys */
static int intern_keys(Sched *s, const int64_t *ids, const int64_t *offs, int64_t n_ids, int64_t B, int32_t **kid_out) {
    int64_t total = 0;
    for (int64_t r = 0; r < s->n; r++) {
        int64_t len = offs[r + 1] - offs[r];
        int64_t covered = min64(s->req[r].prompt, len * B);
        int64_t np = len > 0 ? floordiv(covered, s->P) : 0;
        s->req[r].keys_off = total;
        s->req[r].nkeys = (int32_t)np;
        total += np;
    }
    int32_t *kid = (int32_t *)malloc((size_t)(total ? total : 1) * sizeof(int32_t));
    int64_t cap = 1024;
    while (cap < 2 * total) cap *= 2;
    KeyRef *tab = (KeyRef *)malloc((size_t)cap * sizeof(KeyRef));
    int32_t *tab_id = (int32_t *)malloc((size_t)cap * sizeof(int32_t));
    if (!kid || !tab || !tab_id) { free(kid); free(tab); free(tab_id); return -1; }
    for (int64_t i = 0; i < cap; i++) tab_id[i] = -1;
    int64_t next_id = 0;
    (void)n_ids;
    for (int64_t r = 0; r < s->n; r++) {
        int64_t base = offs[r];
        for (int64_t j = 0; j < s->req[r].nkeys; j++) {
            int64_t lo = j * s->P, hi = (j + 1) * s->P;
            int64_t first = lo / B, last = (hi - 1) / B;
            KeyRef k = {base + first, last - first + 1, lo - first * B};
            uint64_t h = ref_hash(ids, k) & (uint64_t)(cap - 1);
            while (tab_id[h] >= 0 && !ref_eq(ids, tab[h], k)) h = (h + 1) & (uint64_t)(cap - 1);
            if (tab_id[h] < 0) {
                tab[h] = k;
                tab_id[h] = (int32_t)next_id++;
            }
            kid[s->req[r].keys_off + j] = tab_id[h];
        }
    }
    free(tab);
    free(tab_id);
    *kid_out = kid;
    return 0;
}

/* -- the module ------------------------------------------------------------------------------- */

static PyObject *int_list(const int32_t *a, int64_t n) {
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (int64_t i = 0; l && i < n; i++) {
        PyObject *v = PyLong_FromLong(a[i]);
        if (!v) { Py_DECREF(l); return NULL; }
        PyList_SET_ITEM(l, (Py_ssize_t)i, v);
    }
    return l;
}

static PyObject *replay(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    long long F, S, P, W, mrr, chunk, max_prefill, max_req_len, max_input, capacity, B, decode_ns, max_clock, cap;
    int radix, compensated;
    double ratio_init, ratio_min, ratio_decay, prefill_tok_s;
    Py_ssize_t n, n_ids;
    PyObject *o_arr, *o_prompt, *o_out, *o_ids, *o_offs, *o_adm, *o_first, *o_fin, *o_pre, *o_ref, *o_model, *o_sent;
    Py_ssize_t closed;
    static char *kwlist[] = {"full_pages", "swa_pages", "page", "window", "max_running_requests",
                             "chunked_prefill_size", "max_prefill_tokens", "max_req_len", "max_input", "capacity",
                             "radix_cache", "compensated_sum", "ratio_init", "ratio_min", "ratio_decay", "n", "arrival",
                             "prompt", "output", "n_ids", "block_ids", "block_offsets", "id_block_tokens", "decode_ns",
                             "max_clock_ns", "prefill_tok_s", "admitted", "first_token", "finished", "preemptions",
                             "refused", "series_cap", "step_model", "max_concurrency", "sent", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "LLLLLLLLLLppdddnOOOnOOLLLdOOOOOLOnO", kwlist, &F, &S, &P, &W, &mrr,
                                     &chunk, &max_prefill, &max_req_len, &max_input, &capacity, &radix, &compensated,
                                     &ratio_init, &ratio_min, &ratio_decay, &n, &o_arr, &o_prompt, &o_out, &n_ids, &o_ids,
                                     &o_offs, &B, &decode_ns, &max_clock, &prefill_tok_s, &o_adm, &o_first, &o_fin,
                                     &o_pre, &o_ref, &cap, &o_model, &closed, &o_sent))
        return NULL;
    if (n < 0 || n > 0x3FFFFFFF || P < 1 || W < 0 || B < 1 || F < 0 || S < 0 || F > BOUND || S > BOUND || P > BOUND ||
        W > BOUND || B > BOUND || chunk > BOUND || max_prefill > BOUND || llabs(mrr) > BOUND ||
        llabs(max_req_len) > BOUND || llabs(max_input) > BOUND || llabs(chunk) > BOUND ||
        llabs(max_prefill) > BOUND || capacity < 0 || capacity > BOUND || decode_ns < 1 || max_clock < 0 ||
        !(prefill_tok_s > 0) || n_ids < 0 || cap < 2 || cap % 2 || cap > (1 << 24)) {
        PyErr_SetString(PyExc_ValueError, "settings out of the compiled loop's range");
        return NULL;
    }
    PyObject *objs[10] = {o_arr, o_prompt, o_out, o_adm, o_first, o_fin, o_pre, o_ref, o_ids, o_offs};
    const Py_ssize_t sizes[10] = {8, 8, 8, 8, 8, 8, 8, 1, 8, 8};
    const Py_ssize_t counts[10] = {n, n, n, n, n, n, n, n, n_ids, n + 1};
    const int writable[10] = {0, 0, 0, 1, 1, 1, 1, 1, 0, 0};
    static const char *names[10] = {"arrival", "prompt", "output", "admitted", "first_token", "finished",
                                    "preemptions", "refused", "block_ids", "block_offsets"};
    int nbuf = o_ids == Py_None ? 8 : 10;
    Py_buffer b[10];
    int got = 0;
    for (; got < nbuf; got++)
        if (csa_buffer(objs[got], &b[got], writable[got], sizes[got], counts[got], names[got]) < 0) goto fail_buf;
    const int64_t *arrival = (const int64_t *)b[0].buf, *prompt = (const int64_t *)b[1].buf;
    const int64_t *output = (const int64_t *)b[2].buf;
    for (Py_ssize_t i = 0; i < n; i++)
        if (prompt[i] < 0 || prompt[i] > BOUND || output[i] < 0 || output[i] > BOUND || arrival[i] < 0 ||
            (i && arrival[i] < arrival[i - 1])) {
            PyErr_SetString(PyExc_ValueError, "trace out of the compiled loop's range");
            goto fail_buf;
        }
    if (nbuf == 10) {
        const int64_t *offs = (const int64_t *)b[9].buf;
        for (Py_ssize_t i = 0; i < n; i++)
            if (offs[i] < 0 || offs[i + 1] < offs[i] || offs[i + 1] > n_ids) {
                PyErr_SetString(PyExc_ValueError, "block_offsets out of range");
                goto fail_buf;
            }
    }
    Sched s;
    memset(&s, 0, sizeof s);
    Clock k;
    memset(&k, 0, sizeof k);
    if (csa_parse_model(o_model, &k.clock.model) < 0) goto fail_buf;
    s.F = F; s.S = S; s.P = P; s.W = W; s.mrr = mrr; s.chunk = chunk; s.max_prefill = max_prefill;
    s.max_req_len = max_req_len; s.max_input = max_input; s.capacity = capacity;
    s.radix = radix; s.compensated = compensated;
    s.ratio = ratio_init; s.ratio_min = ratio_min; s.ratio_decay = ratio_decay;
    s.n = n;
    s.chunked = -1;
    s.admitted_ns = (int64_t *)b[3].buf;
    s.preempt = (int64_t *)b[6].buf;
    s.refused = (int8_t *)b[7].buf;
    size_t nn = (size_t)(n ? n : 1);
    s.req = (Req *)calloc(nn, sizeof(Req));
    s.waiting = (int32_t *)malloc(nn * sizeof(int32_t));
    s.running = (int32_t *)malloc(nn * sizeof(int32_t));
    s.b_req = (int32_t *)malloc((nn + 1) * sizeof(int32_t));
    s.b_n = (int64_t *)malloc((nn + 1) * sizeof(int64_t));
    s.b_cont = (int8_t *)malloc(nn + 1);
    s.sort_buf = (int64_t *)malloc(3 * nn * sizeof(int64_t));
    s.tmp = (int32_t *)malloc(nn * sizeof(int32_t));
    s.aborted = (int32_t *)malloc(nn * sizeof(int32_t));
    s.stranded = (int32_t *)malloc(nn * sizeof(int32_t));
    int32_t *kid = NULL;
    Col cols[7]; /* the series' bytearrays (ss_write's order), meta last */
    memset(cols, 0, sizeof cols);
    StepSeries ser;
    memset(&ser, 0, sizeof ser);
    int rc = -1;
    if (!s.req || !s.waiting || !s.running || !s.b_req || !s.b_n || !s.b_cont || !s.sort_buf || !s.tmp ||
        !s.aborted || !s.stranded || tree_init(&s.T, W, P) < 0 || ss_init(&ser, 2, cap) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        Req *q = &s.req[i];
        q->prompt = prompt[i];
        q->max_new = output[i];
        q->node = -1;
        q->swa_mark_for = -1;
    }
    if (radix && nbuf == 10 && intern_keys(&s, (const int64_t *)b[8].buf, (const int64_t *)b[9].buf, n_ids, B, &kid) < 0)
        goto done;
    s.kid = kid;
    for (int c = 0; c < 7; c++) {
        cols[c].obj = PyByteArray_FromStringAndSize(NULL, 0);
        if (!cols[c].obj) { rc = -2; goto done; }
    }
    k.first_ns = (int64_t *)b[4].buf;
    k.finished_ns = (int64_t *)b[5].buf;
    k.clock.decode_ns = decode_ns;
    k.clock.max_clock = max_clock;
    k.clock.prefill_tok_s = prefill_tok_s;
    if (csa_client_open(&k.client, arrival, n, closed, o_sent) < 0) {
        rc = -4;
        goto done;
    }
    rc = run(&s, &k, &ser);
    csa_client_close(&k.client);
    if (rc == 0 && ss_write(&ser, cols[0].obj, cols[1].obj, cols[2].obj, cols[3].obj, cols[4].obj, cols[5].obj,
                            cols[6].obj) < 0)
        rc = -2;
done:;
    PyObject *result = NULL;
    if (rc == 0 || rc == -3) {
        PyObject *ab = int_list(s.aborted, s.n_aborted), *st = int_list(s.stranded, s.n_stranded);
        if (ab && st) {
            if (rc == 0)
                result = Py_BuildValue("iLLLLNNOOOOOOO", 0, 0LL, (long long)s.recomputed, (long long)s.hit,
                                       (long long)s.query, ab, st, cols[0].obj, cols[1].obj, cols[2].obj,
                                       cols[3].obj, cols[4].obj, cols[5].obj, cols[6].obj);
            else
                result = Py_BuildValue("iLNN", -3, (long long)k.err_t, ab, st);
        } else {
            Py_XDECREF(ab);
            Py_XDECREF(st);
        }
    } else if (rc == -1) {
        PyErr_NoMemory();
    }
    for (int c = 0; c < 7; c++) Py_XDECREF(cols[c].obj);
    ss_free(&ser);
    tree_free(&s.T);
    free(kid);
    free(s.req); free(s.waiting); free(s.running); free(s.b_req); free(s.b_n); free(s.b_cont);
    free(s.sort_buf); free(s.tmp); free(s.aborted); free(s.stranded);
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    return result;
fail_buf:
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    return NULL;
}

static PyMethodDef methods[] = {
    CSA_SET_PROGRESS_METHOD("replay"),
    {"replay", (PyCFunction)(void (*)(void))replay, METH_VARARGS | METH_KEYWORDS,
     "replay(*, full_pages, swa_pages, page, window, max_running_requests, chunked_prefill_size, max_prefill_tokens,"
     " max_req_len, max_input, capacity, radix_cache, compensated_sum, ratio_init, ratio_min, ratio_decay, n, arrival,"
     " prompt, output, n_ids, block_ids|None, block_offsets|None, id_block_tokens, decode_ns, max_clock_ns,"
     " prefill_tok_s, admitted, first_token, finished, preemptions, refused, series_cap, step_model|None,"
     " max_concurrency (0: open loop), sent|None (a closed loop's arrivals, written)), every argument by name ->"
     " (0, 0, recomputed, hit, query, aborted, stranded, end_ns, used, running, waiting, tokens, prefill, meta)"
     " or (-3, t, aborted, stranded)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "csglang",
                                    "SGLang 0.5.23's scheduler replayed over a trace, compiled (the Python model's twin).",
                                    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_csglang(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && (PyModule_AddIntConstant(m, "ABI", CSGLANG_ABI) < 0 || PyModule_AddIntConstant(m, "BOUND", BOUND) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
