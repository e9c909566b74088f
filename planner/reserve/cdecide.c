/* The admission decision loop of csa_plan.planner.reserve.fast.decide, compiled.
 *
 * A line-for-line port of the Python loop: the same event order (releases before
 * admissions at one instant, queued requests tried after the releases and before the
 * instant's arrivals), the same routing (round-robin pointer, or the least-loaded replica,
 * first on ties), the same running-request cap per replica (an engine's), the same
 * all-or-nothing admission across pipeline stages. Byte totals are
 * int64: the caller only calls it when every total it can form stays below 2^63, so the
 * integer semantics are the Python loop's exactly. Times are int64 nanoseconds: a release
 * time (admission + hold) is the one sum whose range the caller cannot bound cheaply (a
 * queued request is admitted at an earlier release, so release times add up along a queue),
 * so it is added with an overflow check; the first request whose release would pass 2^63 - 1
 * stops the loop and is returned (the Python loop stops at the same request). Built as an optional extension; without
 * it the Python loop runs. As it runs it writes the event timeline the observables are
 * read from: every admission and release in event order, one int32 each (request i's
 * admission is i, its release ~i), so nothing has to be sorted afterwards and the timeline
 * costs 8 bytes per admitted request; times, tiers and instant ends are read back from the
 * request arrays a slice at a time.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../native.h"

typedef struct { int64_t t; int64_t i; int64_t r; int64_t tier; } Ev; /* a release: time, request, replica, tier */

typedef struct {
    Ev *a;
    Py_ssize_t n, cap;
} Heap;

static int ev_less(Ev x, Ev y) { return x.t < y.t || (x.t == y.t && x.i < y.i); }

static int heap_push(Heap *h, Ev e) {
    if (h->n == h->cap) {
        Py_ssize_t cap = h->cap ? 2 * h->cap : 1024;
        Ev *a = (Ev *)realloc(h->a, (size_t)cap * sizeof(Ev));
        if (!a) return -1;
        h->a = a;
        h->cap = cap;
    }
    Py_ssize_t k = h->n++;
    while (k > 0) {
        Py_ssize_t p = (k - 1) / 2;
        if (!ev_less(e, h->a[p])) break;
        h->a[k] = h->a[p];
        k = p;
    }
    h->a[k] = e;
    return 0;
}

static Ev heap_pop(Heap *h) {
    Ev top = h->a[0];
    Ev last = h->a[--h->n];
    Py_ssize_t k = 0, n = h->n;
    for (;;) {
        Py_ssize_t c = 2 * k + 1;
        if (c >= n) break;
        if (c + 1 < n && ev_less(h->a[c + 1], h->a[c])) c++;
        if (!ev_less(h->a[c], last)) break;
        h->a[k] = h->a[c];
        k = c;
    }
    if (n) h->a[k] = last;
    return top;
}

typedef struct {
    const int64_t *arr, *hold, *need; /* need[tier * pp + stage] */
    const void *tier; /* int8, int16, int32 or int64 (tier_size bytes) */
    int tier_size;
    const int8_t *up;
    int8_t *out;
    void *rep; /* int16 or int32 (rep_size bytes) */
    int rep_size;
    int64_t *adm;
    int64_t *res; /* res[replica * pp + stage] */
    int32_t *events; /* the event timeline, in event order: i for an admission, ~i for a release */
    Py_ssize_t nev;
    int64_t last_time; /* the time of the last event */
    int64_t limit;
    int64_t max_running; /* running requests per replica at most (the engine's cap); 0: none */
    int64_t *running;    /* running[replica] */
    int8_t oom, capped, reason; /* why the last try_admit failed */
    Py_ssize_t overflow; /* the request whose release time would pass int64 (-1: none) */
    Py_ssize_t dp, pp;
    int round_robin;
    Py_ssize_t pointer;
    Heap heap;
} Loop;

static void emit(Loop *L, int32_t code, int64_t t) {
    L->events[L->nev++] = code;
    L->last_time = t;
}

static int64_t tier_of(const Loop *L, Py_ssize_t i) {
    switch (L->tier_size) {
    case 1: return ((const int8_t *)L->tier)[i];
    case 2: return ((const int16_t *)L->tier)[i];
    case 4: return ((const int32_t *)L->tier)[i];
    default: return ((const int64_t *)L->tier)[i];
    }
}

static void set_replica(Loop *L, Py_ssize_t i, Py_ssize_t r) {
    if (L->rep_size == 2) ((int16_t *)L->rep)[i] = (int16_t)r;
    else ((int32_t *)L->rep)[i] = (int32_t)r;
}

static Py_ssize_t route(Loop *L) {
    if (L->round_robin || L->dp == 1) return L->pointer;
    Py_ssize_t best = 0;
    int64_t best_load = 0;
    for (Py_ssize_t r = 0; r < L->dp; r++) {
        int64_t load = 0;
        for (Py_ssize_t s = 0; s < L->pp; s++) load += L->res[r * L->pp + s];
        if (r == 0 || load < best_load) { best = r; best_load = load; }
    }
    return best;
}

/* 1 admitted, 0 did not fit, -1 out of memory (of this process), -3 its release time passes int64 */
static int try_admit(Loop *L, Py_ssize_t i, int64_t t) {
    int64_t release;
    if (__builtin_add_overflow(t, L->hold[i], &release)) {
        L->overflow = i;
        if (L->adm) L->adm[i] = t; /* the admission time the message names */
        return -3;
    }
    Py_ssize_t r = route(L);
    if (L->max_running && L->running[r] >= L->max_running) {
        L->reason = L->capped;
        return 0;
    }
    L->reason = L->oom;
    int64_t *mine = L->res + r * L->pp;
    int64_t tier = tier_of(L, i);
    const int64_t *needs = L->need + tier * L->pp;
    for (Py_ssize_t s = 0; s < L->pp; s++)
        if (mine[s] + needs[s] > L->limit) return 0;
    for (Py_ssize_t s = 0; s < L->pp; s++) mine[s] += needs[s];
    L->running[r]++;
    set_replica(L, i, r);
    if (L->adm) L->adm[i] = t; /* NULL under the refuse policy: admitted on arrival */
    Ev e = {release, (int64_t)i, (int64_t)r, tier};
    if (heap_push(&L->heap, e) < 0) return -1;
    emit(L, (int32_t)i, t);
    L->pointer = (r + 1) % L->dp;
    return 1;
}

static int release_until(Loop *L, int64_t t, int inclusive) {
    int released = 0;
    while (L->heap.n && (inclusive ? L->heap.a[0].t <= t : L->heap.a[0].t == t)) {
        Ev e = heap_pop(&L->heap);
        emit(L, ~(int32_t)e.i, e.t);
        L->running[e.r]--;
        int64_t *mine = L->res + e.r * L->pp; /* from the entry: no random access to the request arrays */
        const int64_t *needs = L->need + e.tier * L->pp;
        for (Py_ssize_t s = 0; s < L->pp; s++) mine[s] -= needs[s];
        released = 1;
    }
    return released;
}

static int run(Loop *L, Py_ssize_t n, int queue_policy) {
    if (!queue_policy) {
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t t = L->arr[i];
            if (L->heap.n && L->heap.a[0].t <= t) release_until(L, t, 1);
            if (L->up[i]) {
                int got = try_admit(L, i, t);
                if (got < 0) return got;
                if (!got) L->out[i] = L->reason;
            }
        }
        while (L->heap.n) { /* the releases still pending, in order */
            Ev e = heap_pop(&L->heap);
            emit(L, ~(int32_t)e.i, e.t);
        }
        return 0;
    }
    int64_t *queue = (int64_t *)malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!queue) return -1;
    Py_ssize_t head = 0, tail = 0, i = 0;
    while (i < n || L->heap.n) {
        int64_t t = i < n ? L->arr[i] : L->heap.a[0].t;
        if (L->heap.n && L->heap.a[0].t < t) t = L->heap.a[0].t;
        if (release_until(L, t, 0) && head < tail) {
            while (head < tail) {
                int got = try_admit(L, (Py_ssize_t)queue[head], t);
                if (got < 0) { free(queue); return got; }
                if (!got) break;
                head++;
            }
        }
        while (i < n && L->arr[i] == t) {
            if (L->up[i]) {
                int got = head < tail ? 0 : try_admit(L, i, t);
                if (got < 0) { free(queue); return got; }
                if (!got) queue[tail++] = (int64_t)i;
            }
            i++;
        }
    }
    free(queue);
    return head < tail ? -2 : 0;
}

static PyObject *decide(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_arr, *o_hold, *o_tier, *o_up, *o_need, *o_out, *o_rep, *o_adm, *o_ev;
    Py_ssize_t n, ntiers, dp, pp;
    long long limit, max_running;
    int round_robin, queue_policy, oom, capped;
    if (!PyArg_ParseTuple(args, "nOOOOnOnnLLppiiOOOO", &n, &o_arr, &o_hold, &o_tier, &o_up, &ntiers, &o_need,
                          &dp, &pp, &limit, &max_running, &round_robin, &queue_policy, &oom, &capped, &o_out, &o_rep,
                          &o_adm, &o_ev))
        return NULL;
    if (n < 0 || ntiers < 1 || dp < 1 || pp < 1) {
        PyErr_SetString(PyExc_ValueError, "bad sizes");
        return NULL;
    }
    if (dp > 65536 || pp > 65536 || ntiers > ((Py_ssize_t)1 << 30) / pp) { /* every size product below stays small */
        PyErr_SetString(PyExc_ValueError, "sizes out of range (dp, pp at most 65,536; ntiers x pp below 2^30)");
        return NULL;
    }
    if (n > (Py_ssize_t)0x3FFFFFFF) {
        PyErr_SetString(PyExc_ValueError, "too many requests for int32 event indexes");
        return NULL;
    }
    Py_buffer b[9];
    int got = 0;
    PyObject *objs[9] = {o_arr, o_hold, o_tier, o_up, o_need, o_out, o_rep, o_adm, o_ev};
    const Py_ssize_t sizes[9] = {8, 8, 0, 1, 8, 1, 0, 8, 4};
    const Py_ssize_t counts[9] = {n, n, n, n, ntiers * pp, n, n, queue_policy ? n : 0, 2 * n};
    const int writable[9] = {0, 0, 0, 0, 0, 1, 1, 1, 1};
    static const char *names[9] = {"arrival", "hold", "tier", "up", "need", "outcome", "replica", "admit", "events"};
    for (; got < 9; got++)
        if (csa_buffer(objs[got], &b[got], writable[got], sizes[got], counts[got], names[got]) < 0) goto fail;
    Loop L;
    memset(&L, 0, sizeof L);
    L.arr = (const int64_t *)b[0].buf;
    L.hold = (const int64_t *)b[1].buf;
    L.tier = b[2].buf;
    L.tier_size = (int)b[2].itemsize;
    L.up = (const int8_t *)b[3].buf;
    L.need = (const int64_t *)b[4].buf;
    L.out = (int8_t *)b[5].buf;
    L.rep = b[6].buf;
    L.rep_size = (int)b[6].itemsize;
    if (L.rep_size != 2 && L.rep_size != 4) {
        PyErr_SetString(PyExc_ValueError, "replica: expected int16 or int32");
        goto fail;
    }
    if (L.rep_size == 2 && dp > 32767) {
        PyErr_SetString(PyExc_ValueError, "replica: int16 holds at most 32,767 replicas");
        goto fail;
    }
    L.adm = queue_policy ? (int64_t *)b[7].buf : NULL;
    L.events = (int32_t *)b[8].buf;
    L.limit = (int64_t)limit;
    L.max_running = max_running > 0 ? (int64_t)max_running : 0;
    L.oom = (int8_t)oom;
    L.capped = (int8_t)capped;
    L.reason = (int8_t)oom;
    L.dp = dp;
    L.pp = pp;
    L.round_robin = round_robin;
    L.overflow = -1;
    for (Py_ssize_t i = 0; i < n; i++)
        if (L.up[i] && (tier_of(&L, i) < 0 || tier_of(&L, i) >= ntiers)) {
            PyErr_SetString(PyExc_ValueError, "tier out of range");
            goto fail;
        }
    L.res = (int64_t *)calloc((size_t)(dp * pp), sizeof(int64_t));
    L.running = (int64_t *)calloc((size_t)dp, sizeof(int64_t));
    if (!L.res || !L.running) { free(L.res); free(L.running); PyErr_NoMemory(); goto fail; }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = run(&L, n, queue_policy);
    Py_END_ALLOW_THREADS
    free(L.res);
    free(L.running);
    free(L.heap.a);
    if (rc == -1) { PyErr_NoMemory(); goto fail; }
    if (rc == -2) { PyErr_SetString(PyExc_RuntimeError, "simulation ended with requests still queued"); goto fail; }
    for (int k = 0; k < got; k++) PyBuffer_Release(&b[k]);
    /* rc -3: stopped at request L.overflow, whose release time would pass int64 (outputs partial) */
    return Py_BuildValue("nLn", L.nev, (long long)L.last_time, L.overflow);
fail:
    for (int k = 0; k < got; k++) PyBuffer_Release(&b[k]);
    return NULL;
}

/* The calling convention's version: bump it whenever decide()'s arguments or outputs change.
 * planner/reserve/fast.py (CDECIDE_ABI) accepts only the same number, so an extension built
 * from an older source (an editable install not rebuilt after a pull) is set aside, not called. */
#define CDECIDE_ABI 3

static PyMethodDef methods[] = {
    {"decide", decide, METH_VARARGS,
     "decide(n, arrival, hold, tier, up, ntiers, need, dp, pp, limit, max_running, round_robin, queue, oom, capped,"
     " outcome, replica, admit, events) -> (events written, time of the last event, request whose release time"
     " would pass int64 or -1)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "cdecide",
                                    "The compiled admission loop of csa_plan.planner.reserve.fast.", -1, methods};

PyMODINIT_FUNC PyInit_cdecide(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "ABI", CDECIDE_ABI) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
