/* The vLLM 0.33.0 runtime replay (loop.replay over scheduler.VllmRuntime), compiled.
 *
 * A port of the Python twin, which stays the reference (tests/simulate/test_vllm_compiled.py
 * checks the two equal under Hypothesis): planner/replay/loop.py (clock, arrivals, pipeline
 * depth, step time, stranded requests; the pieces every compiled loop shares are planner/replay/loop.h), planner/engines/vllm/scheduler.py (the scheduler and the
 * fabricated model output), kv_cache_manager.py (block pool, free queue, per-group managers) and
 * prefix_caching.py (token identity, the hybrid lookup, cache_blocks). Every function names its twin.
 *
 * The Python runtime's fast paths (per-group thresholds) are not ported: this loop takes the
 * step-by-step path every time (KvCacheManager(fast=False)), which tests/simulate/test_vllm_fast.py
 * proves equal to them, keeping only cache_blocks' "aligned count unchanged" return.
 *
 * Memory: per request a fixed record (O(requests)); block tables only while a request holds blocks
 * (a slot, recycled at free); the free queue, the reference counts and the cached-block map sized
 * by the pool (O(blocks)); the step series bounded (planner/replay/stepseries.h: at most `cap` buckets of
 * steps, O(cap x groups) however many steps run), written at the end to bytearrays read as int64 arrays.
 * Token counts are int32 in the records: the caller passes max_model_len below 2^30 (so every count
 * a request forms stays below 2^31) and computes in int64.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../replay/loop.h"
#include "../../replay/stepseries.h"

typedef int64_t i64;

/* The loop's integer range, in one place: run() refuses settings outside it, and the Python caller
 * (compiled.py `refusal`) reads the same figures from this module (INT32_COUNT, ...) to decide when
 * to take the Python twin instead. */
#define INT32_COUNT (1LL << 30) /* requests, blocks, max_model_len: token counts per request stay int32 */
#define MTP_MAX (1LL << 20)     /* draft, lookahead and hash-lookahead tokens */
#define BUDGET_MAX 9000000000LL /* max_num_batched_tokens: prefill tokens x 1e9 (the step time) stays in int64 */
#define GROUPS_MAX 64           /* KV cache groups */
#define BLOCK_MAX (1LL << 20)   /* a group's block size */
#define WINDOW_MAX (1LL << 31)  /* a group's window and extra retained tokens */

#define NUL 0 /* block 0: the null block */
#define ANON (-1) /* a held block that is never hashed: no name (see ANONYMOUS) */
enum { WAITING = 0, RUNNING = 1, PREEMPTED = 2, FINISHED = 3 };

static i64 cdiv(i64 a, i64 b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
static i64 mn(i64 a, i64 b) { return a < b ? a : b; }
static i64 mx(i64 a, i64 b) { return a > b ? a : b; }
static i64 floordiv(i64 a, i64 b) { i64 q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static i64 pymod(i64 a, i64 b) { return a - floordiv(a, b) * b; }

/* ---- growable int32 vector ---------------------------------------------------------------- */
typedef struct { int32_t *a; i64 n, cap; } Vec;

static int vec_reserve(Vec *v, i64 need) {
    if (need <= v->cap) return 0;
    i64 cap = v->cap ? v->cap : 16;
    while (cap < need) cap *= 2;
    int32_t *a = (int32_t *)realloc(v->a, (size_t)cap * sizeof(int32_t));
    if (!a) return -1;
    v->a = a;
    v->cap = cap;
    return 0;
}
static int vec_push(Vec *v, int32_t x) {
    if (v->n == v->cap && vec_reserve(v, v->n + 1) < 0) return -1;
    v->a[v->n++] = x;
    return 0;
}

/* ---- per request (scheduler.Req) ------------------------------------------------------- */
typedef struct {
    int32_t num_prompt, max_tokens, num_output, num_computed, num_in_flight, placeholders;
    int32_t spec, stale, ever_computed, spb, cache_n, slot;
    int32_t wprev, wnext; /* the waiting queue (a linked list over requests) */
    int32_t credit; /* draft_acceptance: accepted drafts owed, in thousandths */
    int8_t status, prefill_chunk;
    /* the Python runtime's thresholds (KvCacheManager._thresholds): allocate_slots without new hits
     * changes nothing while need_slot <= next_slot and processed < next_free; -1: no tables */
    i64 next_slot, next_free;
} Req;

/* ---- one group's block table of one request (GroupManager.tables / nulls / num_cached) ------ */
typedef struct {
    int32_t *b; /* real blocks: logical index j at b[j - base], for lead <= j < len */
    i64 len, lead, base, cap;
    i64 num_cached;
    int has_cached; /* rid in num_cached */
} Table;

typedef struct { i64 bs, window, extra, cap, need; } Spec; /* window/cap -1: none; need = cdiv(window - 1, bs) */

/* the cached-block map (BlockPool.cached): key -> blocks in insertion order, intrusive per block */
typedef struct { i64 chain, tokens; int32_t gid, head, tail, used; } Entry;

/* a hit list: `lead` nulls, then m real blocks (prefix_caching hit lists are always of this shape) */
typedef struct { i64 lead, m; Vec v; int some; } Hit;

typedef struct { Vec rid, n, spec; Vec samples; i64 end, prefill, total; CsaBatch batch; } StepBuf;

typedef struct {
    /* settings */
    i64 n, G, num_blocks, mml, budget, max_seqs, num_spec, lookahead, pl, align, hb, chunk;
    i64 hl; /* PrefixCache.lookahead: num_hash_lookahead_tokens (MTP with caching) */
    int async_on, caching;
    i64 *milli, nmilli; /* draft_acceptance.milli_table (NULL: every draft accepted) */
    Spec *spec;
    const i64 *lk; const i64 *lk_start; i64 nbuckets;
    /* trace */
    const i64 *arrival, *prompt, *output, *offs;
    i64 *chains; /* chain id per trace id, parallel to block_ids */
    /* requests */
    Req *R;
    i64 whead, wtail, wlen;
    Vec run;
    /* tables: slot s, group g -> T[s * G + g] */
    Table *T;
    i64 nslots;
    Vec free_slots;
    /* pool */
    int32_t *ref, *qprev, *qnext, *kprev, *knext;
    i64 qhead, qtail, nfree;
    i64 *acount;     /* unhashed runs' counts (node - num_blocks) */
    Vec anon_free;   /* free run nodes */
    Vec ids;         /* free labels */
    i64 *in_use;
    i64 *bchain, *btokens;
    int32_t *bgid;
    int8_t *bhash;
    Entry *map;
    i64 mapmask;
    /* scratch */
    Hit *hits;
    i64 *lengths; /* computed_blocks' per-group hit tokens */
    Vec preempted;
    int err; /* 1: out of memory, 2: an invariant of the Python twin broke */
} K;

#define OOM(k) do { (k)->err = 1; return -1; } while (0)

/* ---- the free queue (kv_cache_utils.py FreeKVCacheBlockQueue; BlockPool.queue order) --------
 * With prefix caching the queue is a linked list of segments: a cached (hashed) block, named by its
 * label (node = label), or a run of unhashed blocks (node >= num_blocks, its count in acount): see
 * ANONYMOUS below for why an unhashed free block needs no name. */
static void seg_unlink(K *k, i64 x) {
    int32_t p = k->qprev[x], nx = k->qnext[x];
    if (p >= 0) k->qnext[p] = nx; else k->qhead = nx;
    if (nx >= 0) k->qprev[nx] = p; else k->qtail = p;
}
static void seg_back(K *k, i64 x) {
    k->qprev[x] = (int32_t)k->qtail;
    k->qnext[x] = -1;
    if (k->qtail >= 0) k->qnext[k->qtail] = (int32_t)x; else k->qhead = x;
    k->qtail = x;
}
static void seg_front(K *k, i64 x) {
    k->qnext[x] = (int32_t)k->qhead;
    k->qprev[x] = -1;
    if (k->qhead >= 0) k->qprev[k->qhead] = (int32_t)x; else k->qtail = x;
    k->qhead = x;
}
/* prepend_n of `cnt` unhashed blocks (merged into a leading run) */
static void anon_front(K *k, i64 cnt) {
    if (cnt <= 0) return;
    k->nfree += cnt;
    if (k->qhead >= k->num_blocks) { k->acount[k->qhead - k->num_blocks] += cnt; return; }
    i64 x = k->anon_free.a[--k->anon_free.n];
    k->acount[x - k->num_blocks] = cnt;
    seg_front(k, x);
}

/* ---- the cached-block map ----------------------------------------------------------------- */
static uint64_t mix64(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}
static uint64_t key_hash(i64 chain, i64 tokens, i64 gid) {
    return mix64((uint64_t)chain * 0x9E3779B97F4A7C15ULL ^ mix64((uint64_t)tokens + ((uint64_t)gid << 56)));
}
static i64 map_find(K *k, i64 chain, i64 tokens, i64 gid) {
    i64 s = (i64)(key_hash(chain, tokens, gid) & (uint64_t)k->mapmask);
    for (;;) {
        Entry *e = &k->map[s];
        if (!e->used) return -1;
        if (e->chain == chain && e->tokens == tokens && e->gid == gid) return s;
        s = (s + 1) & k->mapmask;
    }
}
static void map_delete(K *k, i64 s) { /* linear probing, backward-shift deletion */
    i64 m = k->mapmask;
    k->map[s].used = 0;
    i64 j = s;
    for (;;) {
        j = (j + 1) & m;
        Entry *e = &k->map[j];
        if (!e->used) return;
        i64 h = (i64)(key_hash(e->chain, e->tokens, e->gid) & (uint64_t)m);
        /* move e to s if its home h is not in (s, j] cyclically */
        int in = (s <= j) ? (s < h && h <= j) : (s < h || h <= j);
        if (!in) {
            k->map[s] = *e;
            e->used = 0;
            s = j;
        }
    }
}

/* get_one_block: the first block cached under the key, or -1 */
static i64 get_one(K *k, i64 chain, i64 tokens, i64 gid) {
    i64 s = map_find(k, chain, tokens, gid);
    return s < 0 ? -1 : k->map[s].head;
}

/* _evict / _remove_cached_block_hashes */
static void evict(K *k, int32_t b) {
    i64 s = map_find(k, k->bchain[b], k->btokens[b], k->bgid[b]);
    if (s >= 0) {
        Entry *e = &k->map[s];
        int32_t p = k->kprev[b], nx = k->knext[b];
        if (p >= 0) k->knext[p] = nx; else e->head = nx;
        if (nx >= 0) k->kprev[nx] = p; else e->tail = p;
        if (e->head < 0) map_delete(k, s);
    }
    k->bhash[b] = 0;
}

/* BlockPool.insert: a block with no hash yet under `key` (appended to the key's blocks) */
static int insert(K *k, i64 chain, i64 tokens, i64 gid, int32_t b) {
    if (k->bhash[b]) {
        if (k->bchain[b] == chain && k->btokens[b] == tokens && k->bgid[b] == gid) return 0;
        k->err = 2; /* the twin would re-key a cached block; it never does */
        return -1;
    }
    k->bhash[b] = 1;
    k->bchain[b] = chain;
    k->btokens[b] = tokens;
    k->bgid[b] = (int32_t)gid;
    i64 s = (i64)(key_hash(chain, tokens, gid) & (uint64_t)k->mapmask);
    for (;;) {
        Entry *e = &k->map[s];
        if (!e->used) {
            e->used = 1; e->chain = chain; e->tokens = tokens; e->gid = (int32_t)gid;
            e->head = e->tail = b;
            k->kprev[b] = k->knext[b] = -1;
            return 0;
        }
        if (e->chain == chain && e->tokens == tokens && e->gid == gid) {
            k->kprev[b] = e->tail;
            k->knext[b] = -1;
            k->knext[e->tail] = b;
            e->tail = b;
            return 0;
        }
        s = (s + 1) & k->mapmask;
    }
}

/* ---- the block pool (BlockPool) -----------------------------------------------------------
 * ANONYMOUS: without prefix caching no block is ever hashed or shared (touch and insert are caching
 * paths), so which block a table holds is never observable: every reference count is 1 while held,
 * every observable is a count (free blocks, blocks in use per group, table lengths and null heads).
 * Those paths then keep the counts only. With caching on, only a cached block is observable (by its
 * key, through hits and eviction); an unhashed block is interchangeable with any other unhashed one.
 * So a block gets a name (a label, standing for vLLM's block id) only while it holds a hash or sits at
 * a table position cache_blocks may hash (named_positions); every other held block is ANON, and the
 * free queue holds cached blocks by name and unhashed ones as counted runs. The states are vLLM's up
 * to the renaming of blocks: the same counts, the same hits, the same evictions. */
/* Does table position j of request r in group g ever get a cached hash (cache_blocks)? Full attention:
 * every block; a sliding window: only the cdiv(window - 1, block) blocks below each reachable boundary
 * (prompt - 1 and the shared-prefix boundary, both fixed while the request holds blocks: spb is set by
 * the lookup that admitted it). Any other block is never hashed: it needs no name. */
typedef struct { i64 a1, e1, a2, e2; int all; } Named;
static Named named_positions(K *k, i64 r, i64 g) {
    Named nm = {0, 0, 0, 0, 0};
    const Spec *s = &k->spec[g];
    if (s->window < 0) { nm.all = 1; return nm; }
    Req *q = &k->R[r];
    nm.e1 = floordiv(floordiv((i64)q->num_prompt - 1, k->align) * k->align, s->bs);
    nm.a1 = nm.e1 - s->need;
    if (q->spb) {
        nm.e2 = floordiv(floordiv((i64)q->spb, k->align) * k->align, s->bs);
        nm.a2 = nm.e2 - s->need;
    }
    return nm;
}
static int is_named(const Named *nm, i64 j) {
    return nm->all || (j >= nm->a1 && j < nm->e1) || (j >= nm->a2 && j < nm->e2);
}

/* get_new_blocks: the free queue's first n (a cached one's hash evicted) into table positions j0 ..;
 * a position that is never hashed holds ANON, a block without a name */
static void get_new_blocks(K *k, i64 n, i64 gid, i64 r, i64 j0, int32_t *out) {
    k->in_use[gid] += n;
    k->nfree -= n;
    Named nm = named_positions(k, r, gid);
    i64 i = 0;
    while (i < n) {
        i64 h = k->qhead;
        if (h >= k->num_blocks) {
            i64 *cnt = &k->acount[h - k->num_blocks];
            i64 m = mn(n - i, *cnt);
            for (i64 x = 0; x < m; x++) {
                if (is_named(&nm, j0 + i + x)) {
                    int32_t b = k->ids.a[--k->ids.n];
                    k->ref[b] = 1;
                    out[i + x] = b;
                } else
                    out[i + x] = ANON;
            }
            *cnt -= m;
            if (*cnt == 0) {
                seg_unlink(k, h);
                k->anon_free.a[k->anon_free.n++] = (int32_t)h;
            }
            i += m;
        } else {
            int32_t b = (int32_t)h;
            seg_unlink(k, b);
            evict(k, b);
            if (is_named(&nm, j0 + i)) {
                k->ref[b] = 1;
                out[i] = b;
            } else {
                k->ids.a[k->ids.n++] = b;
                out[i] = ANON;
            }
            i++;
        }
    }
}

static void touch(K *k, int32_t b, i64 gid) {
    if (b == NUL) return;
    if (k->ref[b] == 0) { /* a cached free block: out of the queue's middle */
        seg_unlink(k, b);
        k->nfree--;
        k->in_use[gid] += 1;
    }
    k->ref[b] += 1;
}

/* free_blocks over `blocks` in order (first to be evicted first): unhashed to the front (prepend_n:
 * a run without names), hashed to the back in order */
static int free_blocks(K *k, const int32_t *blocks, i64 cnt, i64 step, i64 gid) {
    i64 anon = 0;
    for (i64 i = 0; i < cnt; i++) {
        int32_t b = blocks[i * step];
        if (b == NUL) continue;
        if (b == ANON) { anon++; k->in_use[gid] -= 1; continue; }
        k->ref[b] -= 1;
        if (k->ref[b] == 0) {
            k->in_use[gid] -= 1;
            if (k->bhash[b]) { seg_back(k, b); k->nfree++; }
            else { k->ids.a[k->ids.n++] = b; anon++; }
        }
    }
    anon_front(k, anon);
    return 0;
}

/* ---- tables --------------------------------------------------------------------------------- */
static Table *tab(K *k, i64 r, i64 g) {
    i64 s = k->R[r].slot;
    return s < 0 ? NULL : &k->T[s * k->G + g];
}
static int32_t tab_at(const Table *t, i64 j) { return (j < t->lead || j >= t->len) ? NUL : t->b[j - t->base]; }

static int ensure_slot(K *k, i64 r) {
    if (k->R[r].slot >= 0) return 0;
    i64 s;
    if (k->free_slots.n) s = k->free_slots.a[--k->free_slots.n];
    else {
        s = k->nslots;
        Table *T = (Table *)realloc(k->T, (size_t)((s + 1) * k->G) * sizeof(Table));
        if (!T) OOM(k);
        k->T = T;
        k->nslots++;
        memset(&k->T[s * k->G], 0, (size_t)k->G * sizeof(Table));
    }
    for (i64 g = 0; g < k->G; g++) {
        Table *t = &k->T[s * k->G + g];
        t->len = t->lead = t->base = 0;
        t->num_cached = 0;
        t->has_cached = 0;
    }
    k->R[r].slot = (int32_t)s;
    return 0;
}

/* room for logical indexes up to `len` (exclusive); compacts the freed head first */
static int tab_room(K *k, Table *t, i64 len) {
    if (len - t->base <= t->cap) return 0;
    if (t->lead > t->base) {
        i64 live = t->len - t->lead;
        if (live > 0) memmove(t->b, t->b + (t->lead - t->base), (size_t)live * sizeof(int32_t));
        t->base = t->lead;
        if (len - t->base <= t->cap) return 0;
    }
    i64 cap = t->cap ? t->cap : 8;
    while (cap < len - t->base) cap *= 2;
    int32_t *b = (int32_t *)realloc(t->b, (size_t)cap * sizeof(int32_t));
    if (!b) OOM(k);
    t->b = b;
    t->cap = cap;
    return 0;
}

/* ---- GroupManager ------------------------------------------------------------------------- */
static i64 skipped_tokens(const Spec *s, i64 computed) {
    if (s->window < 0) return 0;
    return mx(0, computed - s->window + 1 - s->extra);
}

/* num_blocks_to_allocate (new_computed: h, or NULL for none) */
static i64 blocks_to_allocate(K *k, i64 r, i64 g, i64 num_tokens, const Hit *h, i64 total_computed, int cap) {
    const Spec *s = &k->spec[g];
    i64 required = cdiv(num_tokens, s->bs);
    if (cap && s->cap >= 0) required = mn(required, s->cap);
    Table *t = tab(k, r, g);
    i64 n_req = t ? t->len : 0;
    if (t && t->has_cached) return mx(required - n_req, 0);
    i64 skipped_blocks = floordiv(skipped_tokens(s, total_computed), s->bs);
    i64 L = h ? h->lead + h->m : 0;
    i64 nw = mx(required - mx(skipped_blocks, L + n_req), 0);
    i64 skip_new = mx(0, skipped_blocks - n_req);
    i64 evictable = 0;
    if (h)
        for (i64 q = 0; q < h->m; q++)
            if (h->lead + q >= skip_new) {
                int32_t b = h->v.a[q];
                if (b != NUL && k->ref[b] == 0) evictable++;
            }
    return nw + evictable;
}

/* add_local_computed_blocks */
static int add_computed(K *k, i64 r, i64 g, const Hit *h, i64 total_computed) {
    const Spec *s = &k->spec[g];
    i64 skipped = floordiv(skipped_tokens(s, total_computed), s->bs);
    i64 L = h->lead + h->m;
    if (ensure_slot(k, r) < 0) return -1;
    Table *t = tab(k, r, g);
    i64 len = skipped > L ? skipped : L;
    i64 lead = mn(mx(skipped, h->lead), len);
    if (t->len > 0) { k->err = 2; return -1; } /* the twin would drop a live table */
    t->len = t->lead = t->base = lead;
    if (tab_room(k, t, len) < 0) return -1;
    t->len = len;
    for (i64 q = 0; q < h->m; q++) {
        i64 j = h->lead + q;
        if (j < skipped) continue;
        int32_t b = h->v.a[q];
        if (k->caching) touch(k, b, g);
        t->b[j - t->base] = b;
    }
    /* nulls = leading nulls of the table: a real block of a hit is never NULL */
    t->num_cached = len;
    t->has_cached = 1;
    return 0;
}

/* allocate_new_blocks */
static int allocate_new(K *k, i64 r, i64 g, i64 num_tokens) {
    if (ensure_slot(k, r) < 0) return -1;
    Table *t = tab(k, r, g);
    i64 add = cdiv(num_tokens, k->spec[g].bs) - t->len;
    if (add > 0 && !k->caching) { /* see ANONYMOUS */
        k->in_use[g] += add;
        k->nfree -= add;
        t->len += add;
        return 0;
    }
    if (add > 0) {
        if (tab_room(k, t, t->len + add) < 0) return -1;
        get_new_blocks(k, add, g, r, t->len, t->b + (t->len - t->base));
        t->len += add;
    }
    return 0;
}

/* remove_skipped_blocks: freed from the window's edge backwards */
static int remove_skipped(K *k, i64 r, i64 g, i64 processed) {
    const Spec *s = &k->spec[g];
    if (s->window < 0) return 0;
    i64 skipped = processed - s->window + 1 - s->extra;
    if (skipped <= 0) return 0;
    Table *t = tab(k, r, g);
    if (!t) return 0;
    i64 last = mn(floordiv(skipped, s->bs), t->len);
    i64 lead = t->lead;
    if (last <= lead) return 0;
    t->lead = last;
    if (!k->caching) { /* see ANONYMOUS */
        k->in_use[g] -= last - lead;
        k->nfree += last - lead;
        return 0;
    }
    /* table[lead:last] reversed: from last - 1 down to lead */
    if (free_blocks(k, t->b + (last - 1 - t->base), last - lead, -1, g) < 0) return -1;
    if (t->lead == t->len) t->base = t->lead = t->len; /* nothing live: restart the storage */
    return 0;
}

/* GroupManager.free: the table without its null head, in reverse */
static int group_free(K *k, i64 r, i64 g) {
    Table *t = tab(k, r, g);
    if (!t) return 0;
    i64 cnt = t->len - t->lead;
    int rc = 0;
    if (cnt > 0 && !k->caching) { /* see ANONYMOUS */
        k->in_use[g] -= cnt;
        k->nfree += cnt;
    } else if (cnt > 0) rc = free_blocks(k, t->b + (t->len - 1 - t->base), cnt, -1, g);
    t->len = t->lead = t->base = 0;
    t->has_cached = 0;
    t->num_cached = 0;
    return rc;
}

/* KvCacheManager.free */
static int kv_free(K *k, i64 r) {
    for (i64 g = 0; g < k->G; g++)
        if (group_free(k, r, g) < 0) return -1;
    Req *q = &k->R[r];
    if (q->slot >= 0) {
        if (vec_push(&k->free_slots, q->slot) < 0) OOM(k);
        q->slot = -1;
    }
    q->cache_n = -1;
    q->next_slot = -1;
    return 0;
}

/* ---- prefix identity and caching (prefix_caching.PrefixCache) ------------------------------- */
/* PrefixCache.key: the chained hash of the block ending at `tokens` covers tokens + lookahead tokens */
static void key_of(K *k, i64 r, i64 tokens, i64 *chain) {
    i64 lo = k->offs[r], cnt = k->offs[r + 1] - lo;
    i64 shared = mn(k->R[r].num_prompt, cnt * k->chunk);
    i64 covered = tokens + k->hl;
    if (covered <= shared) *chain = k->chains[lo + floordiv(covered - 1, k->chunk)];
    else *chain = -1 - r;
}

/* PrefixCache.hashed_tokens: full hash blocks whose lookahead tokens exist too */
static i64 hashed_tokens(K *k, i64 r) {
    i64 n = (i64)k->R[r].num_prompt + k->R[r].num_output - k->hl;
    return n > 0 ? floordiv(n, k->hb) * k->hb : 0;
}

static int cache_blocks(K *k, i64 r, i64 tokens) {
    Req *q = &k->R[r];
    i64 n = tokens - pymod(tokens, k->align);
    if (n == q->cache_n) return 0;
    i64 hashed = hashed_tokens(k, r);
    q->cache_n = (int32_t)(n <= hashed ? n : -1); /* hashes lagging n: look again once they grow */
    for (i64 g = 0; g < k->G; g++) {
        const Spec *s = &k->spec[g];
        i64 b = s->bs;
        Table *t = tab(k, r, g);
        i64 cached = (t && t->has_cached) ? t->num_cached : 0;
        i64 full = floordiv(mn(n, hashed), b);
        if (cached >= full) continue;
        if (!t) { k->err = 2; return -1; }
        i64 lo = cached, hi = full;
        if (hi > t->len) { k->err = 2; return -1; } /* the twin's table[j] would raise */
        if (s->window < 0) {
            for (i64 j = lo; j < hi; j++) {
                int32_t blk = tab_at(t, j);
                if (blk == NUL) continue;
                if (blk == ANON) { k->err = 2; return -1; } /* named_positions missed a hashed block */
                i64 chain;
                key_of(k, r, (j + 1) * b, &chain);
                if (insert(k, chain, (j + 1) * b, g, blk) < 0) return -1;
            }
        } else {
            i64 bounds[2] = {(i64)q->num_prompt - 1, q->spb};
            int nb = q->spb ? 2 : 1;
            i64 a0 = 0, e0 = 0;
            for (int bi = 0; bi < nb; bi++) {
                i64 end = floordiv(floordiv(bounds[bi], k->align) * k->align, b);
                i64 a = mx(lo, end - s->need), e = mn(hi, end);
                for (i64 j = a; j < e; j++) {
                    if (bi == 1 && j >= a0 && j < e0) continue; /* already in the first range */
                    int32_t blk = tab_at(t, j);
                    if (blk == NUL) continue;
                    if (blk == ANON) { k->err = 2; return -1; }
                    i64 chain;
                    key_of(k, r, (j + 1) * b, &chain);
                    if (insert(k, chain, (j + 1) * b, g, blk) < 0) return -1;
                }
                a0 = a; e0 = e;
            }
        }
        t->num_cached = full;
        t->has_cached = 1;
    }
    return 0;
}

/* _full_hit over the bucket's groups gids (k->lk[lo..hi)): hits into k->hits[gid]; returns tokens */
static i64 full_hit(K *k, i64 r, i64 lo, i64 hi, i64 max_length) {
    i64 b = k->spec[k->lk[lo]].bs;
    i64 hashed_blocks = floordiv(hashed_tokens(k, r), b);
    for (i64 x = lo; x < hi; x++) { Hit *h = &k->hits[k->lk[x]]; h->lead = h->m = 0; h->v.n = 0; h->some = 1; }
    i64 lim = mn(floordiv(max_length, b), hashed_blocks);
    i64 count = 0;
    for (i64 j = 0; j < lim; j++) {
        i64 chain;
        key_of(k, r, (j + 1) * b, &chain);
        int all = 1;
        for (i64 x = lo; x < hi; x++) {
            i64 blk = get_one(k, chain, (j + 1) * b, k->lk[x]);
            if (blk < 0) { all = 0; break; }
            Hit *h = &k->hits[k->lk[x]];
            if (vec_reserve(&h->v, count + 1) < 0) OOM(k);
            h->v.a[count] = (int32_t)blk;
        }
        if (!all) break;
        count++;
    }
    i64 hit = count * b;
    hit -= pymod(hit, k->align);
    i64 nb = cdiv(hit, b);
    for (i64 x = lo; x < hi; x++) { Hit *h = &k->hits[k->lk[x]]; h->m = mn(count, nb); }
    return hit;
}

/* _window_hit */
static i64 window_hit(K *k, i64 r, i64 lo, i64 hi, i64 max_length) {
    const Spec *s = &k->spec[k->lk[lo]];
    i64 b = s->bs, need = s->need, A = k->align;
    i64 max_blocks = floordiv(max_length, b);
    for (i64 x = lo; x < hi; x++) { Hit *h = &k->hits[k->lk[x]]; h->lead = h->m = 0; h->v.n = 0; h->some = 1; }
    if (need * b <= A && A % b == 0) {
        for (i64 e = floordiv(max_blocks * b, A) * A; e > 0; e -= A) {
            i64 end = e / b;
            int ok = 1;
            for (i64 i = end - need; i < end && ok; i++) {
                i64 chain;
                key_of(k, r, (i + 1) * b, &chain);
                for (i64 x = lo; x < hi; x++) {
                    i64 blk = get_one(k, chain, (i + 1) * b, k->lk[x]);
                    if (blk < 0) { ok = 0; break; }
                    Hit *h = &k->hits[k->lk[x]];
                    if (vec_reserve(&h->v, i - (end - need) + 1) < 0) OOM(k);
                    h->v.a[i - (end - need)] = (int32_t)blk;
                }
            }
            if (ok) {
                for (i64 x = lo; x < hi; x++) { Hit *h = &k->hits[k->lk[x]]; h->lead = end - need; h->m = need; }
                return e;
            }
        }
        return 0;
    }
    /* the general search: the current run's blocks kept in reverse (highest index first) */
    i64 run = 0;
    int found = 0;
    i64 i_found = 0;
    for (i64 i = max_blocks - 1; i >= 0; i--) {
        i64 chain;
        key_of(k, r, (i + 1) * b, &chain);
        int all = 1;
        for (i64 x = lo; x < hi; x++)
            if (get_one(k, chain, (i + 1) * b, k->lk[x]) < 0) { all = 0; break; }
        if (all) {
            if (run == 0 && b != A && pymod((i + 1) * b, A)) continue;
            for (i64 x = lo; x < hi; x++) {
                Hit *h = &k->hits[k->lk[x]];
                if (vec_reserve(&h->v, run + 1) < 0) OOM(k);
                h->v.a[run] = (int32_t)get_one(k, chain, (i + 1) * b, k->lk[x]);
            }
            run += 1;
            if (run >= need) { found = 1; i_found = i; break; }
        } else
            run = 0;
    }
    i64 lead, m;
    if (found) { lead = i_found; m = run; }
    else {
        lead = 0;
        m = run;
        while (b != A && pymod(m * b, A)) m--;
    }
    /* the run is stored highest index first: blocks lead + run - 1 .. lead; keep the lowest m */
    for (i64 x = lo; x < hi; x++) {
        Hit *h = &k->hits[k->lk[x]];
        for (i64 p = 0, q = run - 1; p < q; p++, q--) { int32_t tmp = h->v.a[p]; h->v.a[p] = h->v.a[q]; h->v.a[q] = tmp; }
        h->lead = lead;
        h->m = m;
    }
    return (lead + m) * b;
}

/* get_computed_blocks: per-group hits in k->hits; returns the hit tokens; *any: some list non-empty */
static i64 computed_blocks(K *k, i64 r, int *any) {
    Req *q = &k->R[r];
    i64 ntok = (i64)q->num_prompt + q->num_output;
    i64 max_hit = ntok - 1;
    i64 hashed = hashed_tokens(k, r);
    for (i64 g = 0; g < k->G; g++) { k->hits[g].some = 0; k->hits[g].lead = k->hits[g].m = 0; }
    i64 *lengths = k->lengths;
    for (i64 g = 0; g < k->G; g++) lengths[g] = 0;
    i64 hit = max_hit, longest = 0;
    for (;;) {
        i64 curr = hit;
        for (i64 bk = 0; bk < k->nbuckets; bk++) {
            i64 lo = k->lk_start[bk], hi = k->lk_start[bk + 1];
            i64 g0 = k->lk[lo];
            const Spec *s = &k->spec[g0];
            if (s->window < 0 && k->hits[g0].some) { curr = mn(curr, lengths[g0]); continue; }
            i64 nw = s->window < 0 ? full_hit(k, r, lo, hi, curr) : window_hit(k, r, lo, hi, mn(curr, hashed));
            if (k->err) return 0;
            curr = nw;
            for (i64 x = lo; x < hi; x++) lengths[k->lk[x]] = nw;
            longest = mx(longest, curr);
        }
        if (curr >= hit) break;
        hit = curr;
    }
    for (i64 g = 0; g < k->G; g++)
        if (k->spec[g].window < 0 && k->hits[g].some) {
            i64 kk = cdiv(hit, k->spec[g].bs);
            Hit *h = &k->hits[g];
            if (h->lead + h->m > kk) h->m = mx(0, kk - h->lead);
        }
    q->spb = (int32_t)(longest > hit ? longest : 0);
    *any = 0;
    for (i64 g = 0; g < k->G; g++)
        if (k->hits[g].lead + k->hits[g].m > 0) *any = 1;
    return hit;
}

/* ---- KvCacheManager.allocate_slots ---------------------------------------------------------- */
/* KvCacheManager._thresholds, from the tables: per group the slots its table covers (len x block) and the
 * processed count at which its window's next block falls off ((lead + 1) x block + window - 1 + extra);
 * below both, remove_skipped frees nothing and num_blocks_to_allocate is 0 in every group */
static void thresholds(K *k, i64 r) {
    Req *q = &k->R[r];
    if (q->slot < 0) { q->next_slot = -1; return; }
    i64 ns = INT64_MAX, nf = INT64_MAX;
    for (i64 g = 0; g < k->G; g++) {
        const Spec *s = &k->spec[g];
        const Table *t = &k->T[q->slot * k->G + g];
        ns = mn(ns, t->len * s->bs);
        if (s->window >= 0) nf = mn(nf, (t->lead + 1) * s->bs + s->window - 1 + s->extra);
    }
    q->next_slot = ns;
    q->next_free = nf;
}

static int allocate_full(K *k, i64 r, i64 num_new, i64 num_new_computed, int with_hits, int full_must_fit);

/* returns 1 allocated, 0 not, -1 error; hits: k->hits when `with_hits`, else none */
static int allocate_slots(K *k, i64 r, i64 num_new, i64 num_new_computed, int with_hits, int full_must_fit) {
    Req *q = &k->R[r];
    if (!with_hits && !full_must_fit && q->next_slot >= 0) {
        i64 total = mn((i64)q->num_computed + num_new_computed, k->mml);
        i64 need_slot = mn(total + num_new + k->lookahead, k->mml);
        i64 processed = mx(0, total - q->num_in_flight);
        if (need_slot <= q->next_slot && processed < q->next_free) { /* nothing to free or allocate */
            if (k->caching && cache_blocks(k, r, mn(total + num_new, (i64)q->num_prompt + q->num_output)) < 0)
                return -1;
            return 1;
        }
    }
    int rc = allocate_full(k, r, num_new, num_new_computed, with_hits, full_must_fit);
    thresholds(k, r);
    return rc;
}

static int allocate_full(K *k, i64 r, i64 num_new, i64 num_new_computed, int with_hits, int full_must_fit) {
    Req *q = &k->R[r];
    i64 local = (i64)q->num_computed + num_new_computed;
    i64 total = mn(local, k->mml);
    i64 G = k->G;
    if (full_must_fit) {
        i64 full = mn((i64)q->num_prompt + q->num_output, k->mml);
        i64 need = 0;
        for (i64 g = 0; g < G; g++) need += blocks_to_allocate(k, r, g, full, with_hits ? &k->hits[g] : NULL, total, 1);
        if (need > k->nfree) return 0;
    }
    i64 main_ = total + num_new;
    i64 need_slot = mn(main_ + k->lookahead, k->mml);
    i64 processed = mx(0, total - q->num_in_flight);
    for (i64 g = 0; g < G; g++)
        if (remove_skipped(k, r, g, processed) < 0) return -1;
    i64 need = 0;
    for (i64 g = 0; g < G; g++) need += blocks_to_allocate(k, r, g, need_slot, with_hits ? &k->hits[g] : NULL, local, 0);
    if (need > k->nfree) return 0;
    if (with_hits) {
        Table *t0 = tab(k, r, 0);
        if (!(t0 && t0->has_cached))
            for (i64 g = 0; g < G; g++)
                if (add_computed(k, r, g, &k->hits[g], local) < 0) return -1;
    }
    for (i64 g = 0; g < G; g++)
        if (allocate_new(k, r, g, need_slot) < 0) return -1;
    if (k->caching && cache_blocks(k, r, mn(total + num_new, (i64)q->num_prompt + q->num_output)) < 0) return -1;
    return 1;
}

/* ---- the waiting queue -------------------------------------------------------------------- */
static void w_remove(K *k, i64 r) {
    Req *q = &k->R[r];
    if (q->wprev >= 0) k->R[q->wprev].wnext = q->wnext; else k->whead = q->wnext;
    if (q->wnext >= 0) k->R[q->wnext].wprev = q->wprev; else k->wtail = q->wprev;
    q->wprev = q->wnext = -1;
    k->wlen--;
}
static void w_append(K *k, i64 r) {
    Req *q = &k->R[r];
    q->wprev = (int32_t)k->wtail;
    q->wnext = -1;
    if (k->wtail >= 0) k->R[k->wtail].wnext = (int32_t)r; else k->whead = r;
    k->wtail = r;
    k->wlen++;
}
static void w_prepend(K *k, i64 r) {
    Req *q = &k->R[r];
    q->wnext = (int32_t)k->whead;
    q->wprev = -1;
    if (k->whead >= 0) k->R[k->whead].wprev = (int32_t)r; else k->wtail = r;
    k->whead = r;
    k->wlen++;
}

/* _preempt_request */
static int preempt(K *k, i64 r) {
    if (kv_free(k, r) < 0) return -1;
    Req *q = &k->R[r];
    if (q->num_computed > q->ever_computed) q->ever_computed = q->num_computed;
    q->status = PREEMPTED;
    q->num_computed = 0;
    q->spec = 0;
    q->stale = q->num_in_flight;
    q->placeholders = 0;
    w_prepend(k, r);
    return 0;
}

typedef struct { Vec admitted; i64 recomputed, hit, query; } Sched;

/* VllmRuntime.schedule into st (rows), sc (admitted, counts); k->preempted: the preempted */
static int schedule(K *k, StepBuf *st, Sched *sc) {
    i64 token_budget = k->budget, mml = k->mml;
    Vec *running = &k->run;
    int prefill_scheduled = 0;
    st->rid.n = st->n.n = st->spec.n = st->samples.n = 0;
    sc->admitted.n = 0;
    sc->recomputed = sc->hit = sc->query = 0;
    k->preempted.n = 0;
    i64 i = 0;
    while (i < running->n && token_budget > 0) {
        i64 r = running->a[i];
        Req *q = &k->R[r];
        i64 nc = q->num_computed, ph = q->placeholders;
        if (ph > 0 && nc + 2 - ph >= (i64)q->num_prompt + q->max_tokens) { i++; continue; }
        i64 ntok = (i64)q->num_prompt + q->num_output;
        i64 n = ntok + q->spec + ph - nc;
        if (n > token_budget) n = token_budget;
        if (n > mml - nc - 1) n = mml - nc - 1;
        if (k->pl) {
            i64 remaining = ntok - nc - n;
            if (0 < remaining && remaining < k->pl) n -= k->pl - remaining;
        }
        if (n <= 0) { i++; continue; }
        int ok = allocate_slots(k, r, n, 0, 0, 0);
        if (ok < 0) return -1;
        while (!ok) {
            i64 victim = running->a[--running->n];
            if (preempt(k, victim) < 0) return -1;
            if (vec_push(&k->preempted, (int32_t)victim) < 0) OOM(k);
            if (victim == r) break;
            ok = allocate_slots(k, r, n, 0, 0, 0);
            if (ok < 0) return -1;
        }
        if (!ok) break;
        if (vec_push(&st->rid, (int32_t)r) < 0 || vec_push(&st->n, (int32_t)n) < 0) OOM(k);
        prefill_scheduled = prefill_scheduled || q->prefill_chunk;
        token_budget -= n;
        i++;
        if (q->spec) {
            i64 spec_scheduled = n + nc - ntok - ph;
            q->spec = 0;
            if (vec_push(&st->spec, (int32_t)(spec_scheduled > 0 ? spec_scheduled : 0)) < 0) OOM(k);
        } else if (vec_push(&st->spec, 0) < 0) OOM(k);
    }
    int any_running = st->rid.n > 0;
    if (k->preempted.n == 0) {
        /* skipped requests: unlinked from the queue as they are met, put back at its front after */
        i64 sk_tail = -1;
        while (token_budget > 0 && k->whead >= 0) {
            if (running->n >= k->max_seqs) break;
            i64 r = k->whead;
            Req *q = &k->R[r];
            if (q->stale) {
                w_remove(k, r);
                if (sk_tail >= 0) k->R[sk_tail].wnext = (int32_t)r;
                q->wprev = (int32_t)sk_tail;
                sk_tail = r;
                continue;
            }
            i64 hit = 0;
            int with_hits = 0;
            if (q->num_computed == 0 && k->caching) {
                int any;
                hit = computed_blocks(k, r, &any);
                if (k->err) return -1;
                with_hits = any;
            }
            i64 ntok = (i64)q->num_prompt + q->num_output;
            i64 n = ntok - hit;
            int pad = 0;
            if (k->num_spec && n == 1 && !prefill_scheduled && (any_running || hit > 0)) {
                i64 padded = 1 + k->num_spec;
                if (hit + padded + 1 <= mml) {
                    if (padded > token_budget) break;
                    n = padded;
                    pad = 1;
                }
            }
            n = mn(n, token_budget);
            {   /* _reserve_prefill_lookahead */
                i64 remaining = ntok - hit - n;
                if (0 < remaining && remaining < k->pl) n -= k->pl - remaining;
                n = mx(n, 0);
            }
            if (n == 0) {
                w_remove(k, r);
                if (sk_tail >= 0) k->R[sk_tail].wnext = (int32_t)r;
                q->wprev = (int32_t)sk_tail;
                sk_tail = r;
                continue;
            }
            int ok = allocate_slots(k, r, n, hit, with_hits, 1);
            if (ok < 0) return -1;
            if (!ok) break;
            w_remove(k, r);
            if (vec_push(running, (int32_t)r) < 0 || vec_push(&sc->admitted, (int32_t)r) < 0) OOM(k);
            if (k->caching) { sc->hit += hit; sc->query += ntok; }
            q->status = RUNNING;
            q->num_computed = (int32_t)hit;
            if (vec_push(&st->rid, (int32_t)r) < 0 || vec_push(&st->n, (int32_t)n) < 0 ||
                vec_push(&st->spec, (int32_t)(pad ? k->num_spec : 0)) < 0) OOM(k);
            token_budget -= n;
        }
        /* extendleft(reversed(skipped)): the skipped ones back at the front, in their order */
        for (i64 r = sk_tail; r >= 0;) {
            i64 p = k->R[r].wprev;
            w_prepend(k, r);
            r = p;
        }
    }
    /* _update_after_schedule + AsyncScheduler._update_after_schedule */
    i64 prefill = 0, recomputed = 0, total = 0;
    memset(&st->batch, 0, sizeof st->batch);
    if (vec_reserve(&st->samples, st->rid.n) < 0) OOM(k);
    for (i64 x = 0; x < st->rid.n; x++) {
        i64 r = st->rid.a[x], n = st->n.a[x], spec = st->spec.a[x];
        Req *q = &k->R[r];
        i64 before = q->num_computed;
        i64 nc = before + n;
        q->num_computed = (int32_t)nc;
        q->num_in_flight += (int32_t)n;
        i64 ntok = (i64)q->num_prompt + q->num_output;
        int samples = nc >= ntok + q->placeholders;
        q->prefill_chunk = (int8_t)!samples;
        if (k->async_on && samples) {
            q->placeholders += (int32_t)(1 + spec);
            q->spec = (int32_t)k->num_spec;
        }
        if (before < ntok - 1) { prefill += n; csa_batch_prefill(&st->batch, before, n); }
        else csa_batch_decode(&st->batch, before, n);
        if (q->ever_computed > before) recomputed += mn(q->ever_computed, nc) - before;
        st->samples.a[x] = samples;
        total += n;
    }
    st->samples.n = st->rid.n;
    st->prefill = prefill;
    st->total = total;
    sc->recomputed = recomputed;
    return 0;
}

/* VllmRuntime.complete; writes first-token / finished times at `end` */
static int complete(K *k, StepBuf *st, i64 end, i64 *first_token, i64 *finished, i64 *done) {
    int sync_drafts = k->num_spec && !k->async_on;
    for (i64 x = 0; x < st->rid.n; x++) {
        i64 r = st->rid.a[x], n = st->n.a[x], spec = st->spec.a[x];
        int samples = st->samples.a[x];
        Req *q = &k->R[r];
        q->num_in_flight -= (int32_t)n;
        int stale = q->stale > 0;
        if (stale) q->stale -= (int32_t)n;
        if (!samples || q->status == FINISHED) continue;
        if (spec > 0 && k->milli) { /* draft_acceptance.accept; rejected drafts roll back (:2345-2366) */
            i64 credit = (i64)q->credit + k->milli[spec < k->nmilli ? spec : k->nmilli - 1];
            i64 taken = credit / 1000;
            if (taken > spec) taken = spec;
            q->credit = (int32_t)(credit - taken * 1000);
            if (!stale && spec > taken) {
                if (q->num_computed > 0) q->num_computed -= (int32_t)(spec - taken);
                if (q->placeholders > 0) q->placeholders -= (int32_t)(spec - taken);
            }
            spec = taken;
        }
        i64 tokens = 1 + spec;
        int stopped = 0;
        int had_placeholders = q->placeholders > 0;
        int running_before = q->status == RUNNING;
        if (q->num_output == 0 && first_token[r] < 0) first_token[r] = end;
        for (i64 kk = 1; kk <= tokens; kk++) {
            q->num_output += 1;
            if ((i64)q->num_prompt + q->num_output >= k->mml || q->num_output >= q->max_tokens) {
                stopped = 1;
                if (!stale) q->num_computed -= (int32_t)(tokens - kk);
                break;
            }
        }
        if (!stale && had_placeholders) q->placeholders -= (int32_t)tokens;
        if (k->caching && !stale && running_before && (had_placeholders || k->num_spec)) {
            i64 processed = (i64)q->num_computed - q->num_in_flight;
            if (cache_blocks(k, r, processed) < 0) return -1;
        }
        if (stopped) {
            if (q->status == RUNNING) {
                Vec *run = &k->run;
                i64 y = 0;
                while (y < run->n && run->a[y] != r) y++;
                if (y < run->n) {
                    memmove(run->a + y, run->a + y + 1, (size_t)(run->n - y - 1) * sizeof(int32_t));
                    run->n--;
                }
            } else if (q->status == PREEMPTED || q->status == WAITING) {
                if (q->wprev >= 0 || k->whead == r) w_remove(k, r);
            }
            q->status = FINISHED;
            if (kv_free(k, r) < 0) return -1;
            finished[r] = end;
            (*done)++;
        }
    }
    if (sync_drafts)
        for (i64 x = 0; x < st->rid.n; x++) {
            Req *q = &k->R[st->rid.a[x]];
            if (q->status != FINISHED) q->spec = q->prefill_chunk ? 0 : (int32_t)k->num_spec;
        }
    return 0;
}

/* ---- the series (bytearrays the caller reads as int64 arrays) ------------------------------ */
typedef struct { PyObject *ba; i64 n, cap; } Col;

static int col_push(Col *c, i64 x) {
    if (c->n == c->cap) {
        i64 cap = c->cap ? 2 * c->cap : 4096;
        if (PyByteArray_Resize(c->ba, (Py_ssize_t)(cap * 8)) < 0) return -1;
        c->cap = cap;
    }
    ((i64 *)PyByteArray_AS_STRING(c->ba))[c->n++] = x;
    return 0;
}
static int col_close(Col *c) { return PyByteArray_Resize(c->ba, (Py_ssize_t)(c->n * 8)); }

/* the chain ids of every trace id (PrefixCache.identity): (parent chain, id) interned exactly */
static int build_chains(K *k, const i64 *ids, i64 nids) {
    k->chains = (i64 *)malloc((size_t)(nids ? nids : 1) * sizeof(i64));
    if (!k->chains) OOM(k);
    i64 cap = 16;
    while (cap < 2 * nids) cap *= 2;
    i64 *tp = (i64 *)malloc((size_t)cap * sizeof(i64)), *tid = (i64 *)malloc((size_t)cap * sizeof(i64));
    i64 *tc = (i64 *)malloc((size_t)cap * sizeof(i64));
    if (!tp || !tid || !tc) { free(tp); free(tid); free(tc); OOM(k); }
    for (i64 s = 0; s < cap; s++) tc[s] = -1;
    i64 next = 0, m = cap - 1;
    for (i64 r = 0; r < k->n; r++) {
        i64 parent = -1;
        for (i64 x = k->offs[r]; x < k->offs[r + 1]; x++) {
            i64 id = ids[x];
            i64 s = (i64)(mix64((uint64_t)parent * 0x9E3779B97F4A7C15ULL ^ mix64((uint64_t)id)) & (uint64_t)m);
            while (tc[s] >= 0 && !(tp[s] == parent && tid[s] == id)) s = (s + 1) & m;
            if (tc[s] < 0) { tp[s] = parent; tid[s] = id; tc[s] = next++; }
            k->chains[x] = tc[s];
            parent = tc[s];
        }
    }
    free(tp); free(tid); free(tc);
    return 0;
}

/* ---- loop.replay ---------------------------------------------------------------------------- */
typedef struct {
    CsaClient client; /* the arrivals: the trace's, or a closed loop's (replay/loop.h) */
    CsaClock clock;   /* the step time and the int64 clock (replay/loop.h) */
    i64 *admitted, *first_token, *finished, *preemptions;
    int8_t *refused;
    StepSeries ser; /* end_ns, running, waiting, tokens, prefill_tokens, used (buckets x groups) */
    Col stranded;
    i64 recomputed, hit, query;
    i64 clock_at; /* the step start whose end would pass the clock */
} Out;

static int replay(K *k, Out *o) {
    i64 n = k->n;
    StepBuf bufs[3];
    memset(bufs, 0, sizeof bufs);
    i64 fl_start = 0, fl_count = 0; /* in-flight steps: ring over bufs */
    Sched sc;
    memset(&sc, 0, sizeof sc);
    i64 t = n ? o->client.arrival[0] : 0, nxt = 0, done = 0, depth = k->async_on ? 2 : 1;
    int rc = 0;
    for (i64 turn = 1;; turn++) {
        if ((turn & (CSA_TICK_TURNS - 1)) == 0 && csa_tick(done, n) < 0) { rc = -3; break; }
        while (nxt < csa_client_sendable(&o->client) && o->client.arrival[nxt] <= t) {
            if (k->prompt[nxt] >= k->mml || k->prompt[nxt] < 1) { /* refuse() */
                o->refused[nxt] = 1; done++; csa_client_release(&o->client, 1, t);
            }
            else {
                Req *q = &k->R[nxt];
                q->num_prompt = (int32_t)k->prompt[nxt];
                q->max_tokens = (int32_t)mn(k->output[nxt], k->mml - k->prompt[nxt]);
                w_append(k, nxt);
            }
            nxt++;
        }
        StepBuf *st = &bufs[(fl_start + fl_count) % 3];
        if (schedule(k, st, &sc) < 0) { rc = -1; break; }
        for (i64 x = 0; x < sc.admitted.n; x++) {
            i64 r = sc.admitted.a[x];
            if (o->admitted[r] < 0) o->admitted[r] = t;
        }
        for (i64 x = 0; x < k->preempted.n; x++) o->preemptions[k->preempted.a[x]] += 1;
        o->recomputed += sc.recomputed;
        o->hit += sc.hit;
        o->query += sc.query;
        if (st->rid.n) {
            i64 end = csa_step_end(&o->clock, t, st->prefill, &st->batch);
            if (end < 0) { o->clock_at = t; rc = 1; break; }
            st->end = end;
            fl_count++;
            while (fl_count >= depth) {
                StepBuf *s = &bufs[fl_start];
                fl_start = (fl_start + 1) % 3;
                fl_count--;
                i64 before = done;
                if (complete(k, s, s->end, o->first_token, o->finished, &done) < 0) { rc = -1; break; }
                csa_client_release(&o->client, done - before, s->end);
                if (s == st) break;
            }
            if (rc) break;
            t = end;
            if (ss_add(&o->ser, t, k->in_use, k->run.n, k->wlen, st->total, st->prefill) < 0) { rc = -1; break; }
            continue;
        }
        if (fl_count) {
            StepBuf *s = &bufs[fl_start];
            fl_start = (fl_start + 1) % 3;
            fl_count--;
            i64 before = done;
            if (complete(k, s, s->end, o->first_token, o->finished, &done) < 0) { rc = -1; break; }
            csa_client_release(&o->client, done - before, s->end);
            t = mx(t, s->end);
            continue;
        }
        if (nxt < csa_client_sendable(&o->client)) { t = mx(t, o->client.arrival[nxt]); continue; }
        if (k->run.n == 0 && k->wlen == 0 && nxt == n) break;
        for (i64 r = k->whead; r >= 0; r = k->R[r].wnext) {
            o->refused[r] = 2;
            if (col_push(&o->stranded, r) < 0) { rc = -2; break; }
        }
        for (i64 x = 0; x < k->run.n && !rc; x++) {
            o->refused[k->run.a[x]] = 2;
            if (col_push(&o->stranded, k->run.a[x]) < 0) rc = -2;
        }
        for (i64 r = nxt; r < n && !rc; r++) { /* a closed loop whose requests in flight stranded: never sent */
            o->refused[r] = 2;
            if (col_push(&o->stranded, r) < 0) rc = -2;
        }
        break;
    }
    for (int b = 0; b < 3; b++) { free(bufs[b].rid.a); free(bufs[b].n.a); free(bufs[b].spec.a); free(bufs[b].samples.a); }
    free(sc.admitted.a);
    return rc;
}

/* ---- the Python entry ------------------------------------------------------------------------ */
static void k_free(K *k) {
    free(k->milli);
    free(k->chains);
    free(k->R);
    free(k->run.a);
    if (k->T)
        for (i64 x = 0; x < k->nslots * k->G; x++) free(k->T[x].b);
    free(k->T);
    free(k->free_slots.a);
    free(k->ref); free(k->qprev); free(k->qnext); free(k->kprev); free(k->knext);
    free(k->acount); free(k->anon_free.a); free(k->ids.a);
    free(k->in_use); free(k->bchain); free(k->btokens); free(k->bgid); free(k->bhash);
    free(k->map);
    if (k->hits)
        for (i64 g = 0; g < k->G; g++) free(k->hits[g].v.a);
    free(k->hits);
    free(k->lengths);
    free(k->preempted.a);
    free(k->spec);
}

/* The calling convention's version: bump it whenever run()'s arguments or outputs change.
 * planner/engines/vllm/compiled.py (CVLLM_ABI) accepts only the same number. */
#define CVLLM_ABI 8

static PyObject *run(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    PyObject *o_arr, *o_prompt, *o_out, *o_ids, *o_offs, *o_specs, *o_lk, *o_lks;
    PyObject *o_adm, *o_first, *o_fin, *o_pre, *o_ref, *o_cols, *o_used, *o_stranded, *o_model, *o_sent, *o_milli;
    Py_ssize_t closed;
    long long chunk, num_blocks, mml, budget, max_seqs, num_spec, lookahead, pl, align, hb, hl, decode_ns, max_clock;
    long long series_cap;
    int async_on, caching;
    double prefill_tok_s;
    static char *kwlist[] = {"arrival", "prompt", "output", "block_ids", "block_offsets", "id_block_tokens", "specs",
                             "lookup", "lookup_start", "num_blocks", "max_model_len", "max_num_batched_tokens",
                             "max_num_seqs", "num_spec", "lookahead", "prefill_lookahead", "align", "hash_block",
                             "hash_lookahead", "decode_ns", "max_clock_ns", "async_scheduling", "caching", "series_cap",
                             "prefill_tok_s", "admitted", "first_token", "finished", "preemptions", "refused", "series",
                             "used", "stranded", "step_model", "max_concurrency", "sent", "acceptance_milli", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOLOOOLLLLLLLLLLLLppLdOOOOOOOOOnOO", kwlist, &o_arr, &o_prompt,
                                     &o_out, &o_ids, &o_offs, &chunk, &o_specs, &o_lk, &o_lks, &num_blocks, &mml, &budget,
                                     &max_seqs, &num_spec, &lookahead, &pl, &align, &hb, &hl, &decode_ns, &max_clock,
                                     &async_on, &caching, &series_cap, &prefill_tok_s, &o_adm, &o_first, &o_fin, &o_pre,
                                     &o_ref, &o_cols, &o_used, &o_stranded, &o_model, &closed, &o_sent, &o_milli))
        return NULL;
    Py_ssize_t n = PyObject_Length(o_arr);
    Py_ssize_t G = PyObject_Length(o_lk);
    Py_ssize_t nb1 = PyObject_Length(o_lks);
    if (n < 0 || G < 0 || nb1 < 0) return NULL;
    /* the caller's bounds (compiled.fits): every count a request forms stays in int32 */
    if (n >= INT32_COUNT || G < 1 || G > GROUPS_MAX || nb1 < 2 || num_blocks < 2 || num_blocks >= INT32_COUNT ||
        mml < 1 || mml > INT32_COUNT || num_spec < 0 || num_spec > MTP_MAX || lookahead < 0 ||
        lookahead > MTP_MAX || pl < 0 || pl > MTP_MAX || budget < 0 || budget > BUDGET_MAX ||
        max_seqs < 0 || align < 1 || hb < 1 || hl < 0 || hl > MTP_MAX || chunk < 1 || decode_ns < 1 || !(prefill_tok_s > 0) ||
        series_cap < 2 || series_cap % 2 || series_cap > (1 << 24) ||
        !PyList_Check(o_cols) || PyList_GET_SIZE(o_cols) != 6 || !PyByteArray_Check(o_used) ||
        !PyByteArray_Check(o_stranded)) {
        PyErr_SetString(PyExc_ValueError, "cvllm.run: settings out of range");
        return NULL;
    }
    for (int c = 0; c < 6; c++)
        if (!PyByteArray_Check(PyList_GET_ITEM(o_cols, c))) {
            PyErr_SetString(PyExc_ValueError, "cvllm.run: series columns must be bytearrays");
            return NULL;
        }
    int has_ids = o_ids != Py_None;
    Py_ssize_t nids = has_ids ? PyObject_Length(o_ids) : 0;
    if (nids < 0) return NULL;
    enum { NBUF = 13 };
    Py_buffer b[NBUF];
    PyObject *objs[NBUF] = {o_arr, o_prompt, o_out, o_specs, o_lk, o_lks, o_adm, o_first, o_fin, o_pre, o_ref,
                            has_ids ? o_ids : NULL, has_ids ? o_offs : NULL};
    const Py_ssize_t sizes[NBUF] = {8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 1, 8, 8};
    const Py_ssize_t counts[NBUF] = {n, n, n, 4 * G, G, nb1, n, n, n, n, n, nids, n + 1};
    const int writable[NBUF] = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0};
    static const char *names[NBUF] = {"arrival", "prompt", "output", "specs", "lookup", "lookup_start", "admitted",
                                      "first_token", "finished", "preemptions", "refused", "block_ids",
                                      "block_offsets"};
    int got = 0, nbufs = has_ids ? NBUF : NBUF - 2;
    for (; got < nbufs; got++)
        if (csa_buffer(objs[got], &b[got], writable[got], sizes[got], counts[got], names[got]) < 0) goto fail;
    K k;
    memset(&k, 0, sizeof k);
    k.n = n; k.G = G; k.num_blocks = num_blocks; k.mml = mml; k.budget = budget; k.max_seqs = max_seqs;
    k.num_spec = num_spec; k.lookahead = lookahead; k.pl = pl; k.align = align; k.hb = hb; k.hl = hl; k.chunk = chunk;
    k.async_on = async_on; k.caching = caching;
    k.arrival = (const i64 *)b[0].buf; k.prompt = (const i64 *)b[1].buf; k.output = (const i64 *)b[2].buf;
    k.lk = (const i64 *)b[4].buf; k.lk_start = (const i64 *)b[5].buf; k.nbuckets = nb1 - 1;
    const i64 *sp = (const i64 *)b[3].buf;
    Out o;
    memset(&o, 0, sizeof o);
    o.admitted = (i64 *)b[6].buf; o.first_token = (i64 *)b[7].buf; o.finished = (i64 *)b[8].buf;
    o.preemptions = (i64 *)b[9].buf; o.refused = (int8_t *)b[10].buf;
    o.clock.decode_ns = decode_ns; o.clock.max_clock = max_clock; o.clock.prefill_tok_s = prefill_tok_s;
    if (csa_parse_model(o_model, &o.clock.model) < 0) goto fail;
    o.stranded.ba = o_stranded;
    int bad = 0;
    if (k.lk_start[0] != 0 || k.lk_start[nb1 - 1] != G) bad = 1;
    for (Py_ssize_t x = 0; x + 1 < nb1 && !bad; x++) if (k.lk_start[x + 1] <= k.lk_start[x]) bad = 1;
    for (Py_ssize_t x = 0; x < G && !bad; x++) if (k.lk[x] < 0 || k.lk[x] >= G) bad = 1;
    k.spec = (Spec *)calloc((size_t)G, sizeof(Spec));
    if (!k.spec) { PyErr_NoMemory(); goto fail; }
    for (Py_ssize_t g = 0; g < G && !bad; g++) {
        Spec *s = &k.spec[g];
        s->bs = sp[4 * g]; s->window = sp[4 * g + 1]; s->extra = sp[4 * g + 2]; s->cap = sp[4 * g + 3];
        if (s->bs < 1 || s->bs > BLOCK_MAX || s->window < -1 || s->window > WINDOW_MAX || s->extra < 0 ||
            s->extra > (1LL << 31) || s->cap < -1) bad = 1;
        else s->need = s->window >= 1 ? cdiv(s->window - 1, s->bs) : 0;
    }
    for (Py_ssize_t r = 0; r < n && !bad; r++)
        if (k.prompt[r] < 0 || k.output[r] < 1 || (r && k.arrival[r] < k.arrival[r - 1]) || k.arrival[r] < 0) bad = 1;
    if (has_ids && !bad) {
        k.offs = (const i64 *)b[12].buf;
        if (k.offs[0] != 0 || k.offs[n] != nids) bad = 1;
        for (Py_ssize_t r = 0; r < n && !bad; r++) if (k.offs[r + 1] < k.offs[r]) bad = 1;
    }
    if (bad) { PyErr_SetString(PyExc_ValueError, "cvllm.run: inconsistent arrays"); k_free(&k); goto fail; }
    k.R = (Req *)malloc((size_t)(n ? n : 1) * sizeof(Req));
    i64 nbk = num_blocks;
    k.ref = (int32_t *)calloc((size_t)nbk, sizeof(int32_t));
    k.qprev = (int32_t *)malloc((size_t)(2 * nbk + 2) * sizeof(int32_t));
    k.qnext = (int32_t *)malloc((size_t)(2 * nbk + 2) * sizeof(int32_t));
    k.acount = (i64 *)calloc((size_t)nbk + 2, sizeof(i64));
    if (vec_reserve(&k.anon_free, nbk + 2) < 0 || vec_reserve(&k.ids, nbk) < 0) k.acount = (free(k.acount), NULL);
    k.kprev = (int32_t *)malloc((size_t)nbk * sizeof(int32_t));
    k.knext = (int32_t *)malloc((size_t)nbk * sizeof(int32_t));
    k.bchain = (i64 *)calloc((size_t)nbk, sizeof(i64));
    k.btokens = (i64 *)calloc((size_t)nbk, sizeof(i64));
    k.bgid = (int32_t *)calloc((size_t)nbk, sizeof(int32_t));
    k.bhash = (int8_t *)calloc((size_t)nbk, sizeof(int8_t));
    k.in_use = (i64 *)calloc((size_t)G, sizeof(i64));
    k.hits = (Hit *)calloc((size_t)G, sizeof(Hit));
    k.lengths = (i64 *)calloc((size_t)G, sizeof(i64));
    if (caching) {
        i64 cap = 16;
        while (cap < 2 * nbk) cap *= 2;
        k.map = (Entry *)calloc((size_t)cap, sizeof(Entry));
        k.mapmask = cap - 1;
    }
    if (!k.R || !k.ref || !k.qprev || !k.qnext || !k.kprev || !k.knext || !k.bchain || !k.btokens || !k.bgid ||
        !k.bhash || !k.acount || !k.in_use || !k.hits || !k.lengths || (caching && !k.map)) {
        k_free(&k);
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t r = 0; r < n; r++) {
        Req *q = &k.R[r];
        memset(q, 0, sizeof *q);
        q->slot = q->wprev = q->wnext = -1;
        q->cache_n = -1;
        q->next_slot = -1;
        q->prefill_chunk = 1;
        q->status = WAITING;
        o.admitted[r] = o.first_token[r] = o.finished[r] = -1;
        o.preemptions[r] = 0;
        o.refused[r] = 0;
    }
    k.whead = k.wtail = -1;
    k.qhead = k.qtail = -1;
    /* block 0 is the null block; every other block free and unhashed: one run (see ANONYMOUS) */
    for (i64 x = nbk + 1; x >= nbk; x--) k.anon_free.a[k.anon_free.n++] = (int32_t)x;
    for (i64 x = nbk - 1; x >= 1; x--) k.ids.a[k.ids.n++] = (int32_t)x;
    anon_front(&k, nbk - 1);
    i64 *own_offs = NULL;
    if (has_ids) {
        if (build_chains(&k, (const i64 *)b[11].buf, nids) < 0) { k_free(&k); PyErr_NoMemory(); goto fail; }
    } else {
        own_offs = (i64 *)calloc((size_t)n + 1, sizeof(i64)); /* no ids: every request shares nothing */
        k.chains = (i64 *)malloc(sizeof(i64));
        if (!own_offs || !k.chains) { free(own_offs); k_free(&k); PyErr_NoMemory(); goto fail; }
        k.offs = own_offs;
    }
    if (o_milli != Py_None) { /* a tuple of non-negative ints, milli[0..num_spec] */
        Py_ssize_t m = PyTuple_Check(o_milli) ? PyTuple_GET_SIZE(o_milli) : -1;
        if (m < 2 || m > (1 << 20) + 1) {
            PyErr_SetString(PyExc_ValueError, "cvllm.run: the acceptance table is a tuple of 2 or more ints");
            { k_free(&k); free(own_offs); goto fail; }
        }
        k.milli = (i64 *)malloc((size_t)m * sizeof(i64));
        if (!k.milli) { k_free(&k); free(own_offs); PyErr_NoMemory(); goto fail; }
        k.nmilli = m;
        for (Py_ssize_t x = 0; x < m; x++) {
            long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(o_milli, x));
            if ((v == -1 && PyErr_Occurred()) || v < 0 || v > 1000LL * x) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "cvllm.run: acceptance table out of range");
                k_free(&k); free(own_offs); goto fail;
            }
            k.milli[x] = v;
        }
    }
    if (csa_client_open(&o.client, k.arrival, n, closed, o_sent) < 0) { k_free(&k); free(own_offs); goto fail; }
    if (ss_init(&o.ser, G, series_cap) < 0) {
        csa_client_close(&o.client); free(own_offs); k_free(&k); PyErr_NoMemory(); goto fail;
    }
    int rc = replay(&k, &o);
    csa_client_close(&o.client);
    int err = k.err;
    free(own_offs);
    k_free(&k);
    if (rc == 0 || rc == 1) {
        PyObject *c[6];
        for (int x = 0; x < 6; x++) c[x] = PyList_GET_ITEM(o_cols, x);
        if (ss_write(&o.ser, c[0], o_used, c[1], c[2], c[3], c[4], c[5]) < 0 || col_close(&o.stranded) < 0) rc = -2;
    }
    ss_free(&o.ser);
    for (int x = 0; x < got; x++) PyBuffer_Release(&b[x]);
    if (rc == -2 || rc == -3) return NULL; /* a bytearray resize failed, or a signal / the callback raised */
    if (rc == -1) {
        if (err == 2) PyErr_SetString(PyExc_RuntimeError, "cvllm.run: an invariant of the Python twin broke");
        else PyErr_NoMemory();
        return NULL;
    }
    return Py_BuildValue("iLLLL", rc, (long long)o.recomputed, (long long)o.hit, (long long)o.query,
                         (long long)o.clock_at);
fail:
    for (int x = 0; x < got; x++) PyBuffer_Release(&b[x]);
    return NULL;
}

static PyMethodDef methods[] = {
    CSA_SET_PROGRESS_METHOD("run"),
    {"run", (PyCFunction)(void (*)(void))run, METH_VARARGS | METH_KEYWORDS,
     "run(*, arrival, prompt, output, block_ids|None, block_offsets|None, id_block_tokens, specs, lookup, lookup_start,"
     " num_blocks, max_model_len, max_num_batched_tokens, max_num_seqs, num_spec, lookahead, prefill_lookahead,"
     " align, hash_block, hash_lookahead, decode_ns, max_clock_ns, async_scheduling, caching, series_cap, prefill_tok_s,"
     " admitted, first_token, finished, preemptions, refused, series=[end_ns, running, waiting, tokens, prefill_tokens,"
     " meta], used, stranded, step_model|None, max_concurrency (0: open loop), sent|None (a closed loop's arrivals,"
     " written), acceptance_milli|None), every argument by name"
     " -> (0 done | 1 clock overflow, recomputed tokens, prefix-hit tokens, prefix-query tokens, step start)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "cvllm",
                                    "The compiled vLLM 0.33.0 runtime replay of csa_plan.planner.engines.", -1,
                                    methods};

PyMODINIT_FUNC PyInit_cvllm(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "ABI", CVLLM_ABI) < 0 || PyModule_AddIntConstant(m, "INT32_COUNT", INT32_COUNT) < 0 ||
        PyModule_AddIntConstant(m, "MTP_MAX", MTP_MAX) < 0 || PyModule_AddIntConstant(m, "BUDGET_MAX", BUDGET_MAX) < 0 ||
        PyModule_AddIntConstant(m, "GROUPS_MAX", GROUPS_MAX) < 0 || PyModule_AddIntConstant(m, "BLOCK_MAX", BLOCK_MAX) < 0 ||
        PyModule_AddIntConstant(m, "WINDOW_MAX", WINDOW_MAX) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
