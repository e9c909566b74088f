/* The bounded step series both compiled replays record (cvllm.c, csglang.c): the twin of
 * planner/replay/result.py's StepSeries, rule for rule (tests/simulate/test_step_series.py).
 *
 * A replay records one entry per executed step, but keeps at most `cap` buckets of `width`
 * consecutive steps (width 1 until cap steps, then doubled, pairs merged, as often as needed), so
 * its memory is O(cap x pools) whatever the number of steps. A bucket keeps its last step's end,
 * the units in use per pool at its peak step (the first with the largest total), the largest
 * running and waiting counts, and its tokens and prefill tokens summed. Exact over every step,
 * whatever the width: the step count, the per-pool peaks and the sums behind the means (doubles,
 * added in step order, as the Python twin adds them).
 */
#ifndef CSA_PLAN_STEPSERIES_H
#define CSA_PLAN_STEPSERIES_H

#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t cap, G, width, nb, fill, steps, room; /* room: buckets allocated (grows to cap) */
    int64_t *end, *run, *wait, *tok, *pre, *total, *used, *pool_peak; /* used: room x G */
    double used_sum, run_sum, wait_sum;
} StepSeries;

static void ss_free(StepSeries *s) {
    free(s->end); free(s->run); free(s->wait); free(s->tok); free(s->pre); free(s->total); free(s->used);
    free(s->pool_peak);
    memset(s, 0, sizeof *s);
}

static int ss_init(StepSeries *s, int64_t G, int64_t cap) {
    memset(s, 0, sizeof *s);
    s->G = G;
    s->cap = cap;
    s->width = 1;
    s->pool_peak = (int64_t *)calloc((size_t)(G ? G : 1), sizeof(int64_t));
    return s->pool_peak ? 0 : -1;
}

static int ss_grow(StepSeries *s) {
    int64_t room = s->room ? 2 * s->room : 1024;
    if (room > s->cap) room = s->cap;
    int64_t **cols[6] = {&s->end, &s->run, &s->wait, &s->tok, &s->pre, &s->total};
    for (int c = 0; c < 6; c++) {
        int64_t *a = (int64_t *)realloc(*cols[c], (size_t)room * sizeof(int64_t));
        if (!a) return -1;
        *cols[c] = a;
    }
    int64_t *u = (int64_t *)realloc(s->used, (size_t)(room * (s->G ? s->G : 1)) * sizeof(int64_t));
    if (!u) return -1;
    s->used = u;
    s->room = room;
    return 0;
}

/* bucket i takes bucket j (the later one) into it: StepSeries._merge */
static void ss_merge(StepSeries *s, int64_t i, int64_t j) {
    s->end[i] = s->end[j];
    if (s->total[j] > s->total[i]) {
        s->total[i] = s->total[j];
        memmove(s->used + i * s->G, s->used + j * s->G, (size_t)s->G * sizeof(int64_t));
    }
    if (s->run[j] > s->run[i]) s->run[i] = s->run[j];
    if (s->wait[j] > s->wait[i]) s->wait[i] = s->wait[j];
    s->tok[i] += s->tok[j];
    s->pre[i] += s->pre[j];
}

/* StepSeries.add: one executed step */
static int ss_add(StepSeries *s, int64_t end, const int64_t *used, int64_t run, int64_t wait, int64_t tok,
                  int64_t pre) {
    int64_t total = 0;
    for (int64_t g = 0; g < s->G; g++) {
        total += used[g];
        if (used[g] > s->pool_peak[g]) s->pool_peak[g] = used[g];
    }
    s->steps++;
    s->used_sum += (double)total;
    s->run_sum += (double)run;
    s->wait_sum += (double)wait;
    int64_t b = s->nb - 1;
    if (s->nb == 0 || s->fill == s->width) { /* a new bucket */
        if (s->nb == s->cap) { /* every bucket full: pairs merged, the width doubled */
            for (int64_t i = 0; i < s->cap / 2; i++) {
                int64_t a = 2 * i;
                if (a != i) {
                    s->end[i] = s->end[a]; s->run[i] = s->run[a]; s->wait[i] = s->wait[a];
                    s->tok[i] = s->tok[a]; s->pre[i] = s->pre[a]; s->total[i] = s->total[a];
                    memmove(s->used + i * s->G, s->used + a * s->G, (size_t)s->G * sizeof(int64_t));
                }
                ss_merge(s, i, a + 1);
            }
            s->nb = s->cap / 2;
            s->width *= 2;
        }
        b = s->nb;
        if (b == s->room && ss_grow(s) < 0) return -1;
        s->nb++;
        s->fill = 0;
        s->tok[b] = s->pre[b] = 0;
        s->total[b] = -1; /* below any total: the first step is the bucket's peak */
        s->run[b] = s->wait[b] = INT64_MIN;
    }
    s->fill++;
    s->end[b] = end;
    if (total > s->total[b]) {
        s->total[b] = total;
        memcpy(s->used + b * s->G, used, (size_t)s->G * sizeof(int64_t));
    }
    if (run > s->run[b]) s->run[b] = run;
    if (wait > s->wait[b]) s->wait[b] = wait;
    s->tok[b] += tok;
    s->pre[b] += pre;
    return 0;
}

static int ss_fill_bytes(PyObject *ba, const int64_t *src, int64_t n) {
    if (!PyByteArray_Check(ba) || PyByteArray_Resize(ba, (Py_ssize_t)(n * 8)) < 0) return -1;
    if (n) memcpy(PyByteArray_AS_STRING(ba), src, (size_t)n * 8);
    return 0;
}

/* the buckets into bytearrays (int64; used interleaved by pool) and `meta`: width, steps, the per-pool
 * peaks (int64), then the three sums (double): FrozenSeries.from_buffers reads them */
static int ss_write(const StepSeries *s, PyObject *end, PyObject *used, PyObject *run, PyObject *wait, PyObject *tok,
                    PyObject *pre, PyObject *meta) {
    if (ss_fill_bytes(end, s->end, s->nb) < 0 || ss_fill_bytes(used, s->used, s->nb * s->G) < 0 ||
        ss_fill_bytes(run, s->run, s->nb) < 0 || ss_fill_bytes(wait, s->wait, s->nb) < 0 ||
        ss_fill_bytes(tok, s->tok, s->nb) < 0 || ss_fill_bytes(pre, s->pre, s->nb) < 0)
        return -1;
    Py_ssize_t n = (Py_ssize_t)((2 + s->G) * 8 + 3 * sizeof(double));
    if (!PyByteArray_Check(meta) || PyByteArray_Resize(meta, n) < 0) return -1;
    char *m = PyByteArray_AS_STRING(meta);
    int64_t head[2] = {s->width, s->steps};
    double sums[3] = {s->used_sum, s->run_sum, s->wait_sum};
    memcpy(m, head, sizeof head);
    if (s->G) memcpy(m + 16, s->pool_peak, (size_t)s->G * 8);
    memcpy(m + 16 + s->G * 8, sums, sizeof sums);
    return 0;
}

#endif
