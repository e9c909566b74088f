/* The parts of loop.replay every compiled engine loop shares, written once (issue 41, "the C loop once").
 *
 * An engine's compiled replay (planner/engines/vllm/cvllm.c, planner/engines/sglang/csglang.c) keeps
 * only its engine: its scheduler, its pools and its fabricated model output. What is the loop's and
 * not the engine's lives here, each piece naming its Python twin in planner/replay/loop.py:
 *
 * - the client (CsaClient): the open loop sends every request at its traced arrival; a closed loop
 *   (--max-concurrency N) keeps N in flight and sends the next one when one ends (loop.replay's
 *   `sent` / `release`), writing the arrivals it made into the caller's array;
 * - the clock (CsaClock): a step's end from its batch (steptime.batch_ns: the fixed constants or the
 *   linear form of steptime.h), or -1 when it would pass the int64 clock (planner/clock.py);
 * - Ctrl-C and progress: every CSA_TICK_TURNS turns a loop runs pending signal handlers and calls the
 *   callback set_progress gave (planner/extensions.py `reporting`);
 * - (from planner/native.h) the buffer reader every entry point uses for its arrays.
 *
 * Static functions in a header: each extension is one translation unit that includes it once.
 */
#ifndef CSA_PLAN_LOOP_H
#define CSA_PLAN_LOOP_H

#include <Python.h>
#include <math.h>
#include <stdint.h>

#include "../native.h"
#include "../steptime/steptime.h"

/* ---- Ctrl-C and progress (the loop holds the GIL) ---------------------------------------------- */
#define CSA_TICK_TURNS 4096
static PyObject *csa_progress_cb = NULL;

/* pending signal handlers (SIGINT raises KeyboardInterrupt), then the progress callback with
 * (requests done, requests); -1 when either raised: the loop ends with that exception */
static int csa_tick(int64_t done, int64_t n) {
    if (PyErr_CheckSignals() < 0) return -1;
    if (csa_progress_cb == NULL) return 0;
    PyObject *r = PyObject_CallFunction(csa_progress_cb, "LL", (long long)done, (long long)n);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* the module's set_progress(callable | None) */
static PyObject *csa_set_progress(PyObject *self, PyObject *cb) {
    (void)self;
    if (cb != Py_None && !PyCallable_Check(cb)) {
        PyErr_SetString(PyExc_TypeError, "set_progress: a callable or None");
        return NULL;
    }
    Py_XSETREF(csa_progress_cb, cb == Py_None ? NULL : Py_NewRef(cb));
    Py_RETURN_NONE;
}

#define CSA_SET_PROGRESS_METHOD(loop)                                                                       \
    {"set_progress", csa_set_progress, METH_O,                                                              \
     "set_progress(callable | None): " loop "() calls it with (requests done, requests) every few thousand turns"}

/* ---- the client: when each request is sent (loop.replay's `sent` and `release`) --------------- */
typedef struct {
    const int64_t *arrival; /* the traced arrivals, or `sent` under a closed loop */
    int64_t *sent;          /* a closed loop's arrivals, written as requests end (-1: not sent) */
    int64_t closed, nsent, n;
    Py_buffer view;
    int has_view;
} CsaClient;

/* The open loop over `arrival`, or (closed > 0) a closed loop of `closed` requests in flight writing its
 * arrivals into `o_sent` (n int64): the first min(closed, n) are sent at the first arrival. -1: a bad
 * argument (the exception set). Release the client with csa_client_close. */
static int csa_client_open(CsaClient *c, const int64_t *arrival, int64_t n, Py_ssize_t closed, PyObject *o_sent) {
    c->arrival = arrival, c->sent = NULL, c->closed = 0, c->nsent = n, c->n = n, c->has_view = 0;
    if (closed < 0 || (closed > 0 && o_sent == Py_None)) {
        PyErr_SetString(PyExc_ValueError, "a closed loop needs its arrivals array (sent)");
        return -1;
    }
    if (closed == 0) return 0;
    if (csa_buffer(o_sent, &c->view, 1, 8, n, "sent") < 0) return -1;
    c->has_view = 1;
    c->closed = closed;
    c->sent = (int64_t *)c->view.buf;
    c->nsent = closed < n ? closed : n;
    for (int64_t r = 0; r < n; r++) c->sent[r] = r < c->nsent ? (n ? arrival[0] : 0) : -1;
    c->arrival = c->sent;
    return 0;
}

static void csa_client_close(CsaClient *c) {
    if (c->has_view) PyBuffer_Release(&c->view);
    c->has_view = 0;
}

/* requests whose arrival is set: all of them under the open loop, those sent so far under a closed one */
static inline int64_t csa_client_sendable(const CsaClient *c) { return c->closed ? c->nsent : c->n; }

/* k requests ended at `at`: a closed loop sends as many more (loop.replay's release) */
static inline void csa_client_release(CsaClient *c, int64_t k, int64_t at) {
    if (!c->closed) return;
    while (k-- > 0 && c->nsent < c->n) c->sent[c->nsent++] = at;
}

/* ---- the clock: steptime.batch_ns ---------------------------------------------------------------- */
typedef struct {
    int64_t decode_ns, max_clock;
    double prefill_tok_s;
    CsaStepModel model; /* steptime.StepTime.linear (on = 0: the fixed constants) */
} CsaClock;

/* The end of a step that starts at t and holds `batch` (`prefill` of its tokens prefill), or -1 when it
 * would end past max_clock. Fixed constants: max(decode_ns, ceil(prefill x 1e9 / prefill_tok_s)), the
 * product exact in float64 as Python's int / float is (steptime.step_ns). */
static inline int64_t csa_step_end(const CsaClock *c, int64_t t, int64_t prefill, const CsaBatch *batch) {
    int64_t dt = c->decode_ns;
    if (c->model.on) {
        dt = csa_linear_ns(&c->model, batch);
        if (dt == INT64_MAX) return -1;
    } else if (prefill > 0) {
        double v = ceil((double)prefill * 1e9 / c->prefill_tok_s);
        if (!(v < 9.2233720368547758e18)) return -1; /* 2^63: past any int64 clock */
        if ((int64_t)v > dt) dt = (int64_t)v;
    }
    if (dt > c->max_clock - t) return -1;
    return t + dt;
}

#endif
