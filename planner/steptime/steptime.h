/* steptime.py's batch model in C, for the compiled replays (cvllm.c, csglang.c): the same
 * StepBatch accumulation and the same float64 evaluation order as ``linear_seconds`` and
 * ``batch_ns``, so a compiled loop and its Python twin agree to the nanosecond. Built with
 * -ffp-contract=off (setup.py): a fused multiply-add would round differently from Python. */
#ifndef CSA_STEPTIME_H
#define CSA_STEPTIME_H
#include <math.h>
#include <stdint.h>

#define CSA_LINEAR_TERMS 8

typedef struct { int on; double c[CSA_LINEAR_TERMS]; } CsaStepModel; /* on = 0: the fixed constants */
typedef struct { int64_t prefill, decode_reqs, decode_tokens, decode_ctx; double prefill_pos; } CsaBatch;

static inline void csa_batch_prefill(CsaBatch *b, int64_t before, int64_t n) { /* StepBatch.add_prefill */
    b->prefill += n;
    b->prefill_pos += (double)(n * before + n * (n + 1) / 2);
}
static inline void csa_batch_decode(CsaBatch *b, int64_t context, int64_t n) { /* StepBatch.add_decode */
    b->decode_reqs += 1;
    b->decode_tokens += n;
    b->decode_ctx += context;
}
/* batch_ns for the linear form: INT64_MAX when the step is unrepresentable (the caller's clock check fails) */
static inline int64_t csa_linear_ns(const CsaStepModel *m, const CsaBatch *b) {
    const double *c = m->c;
    double t = (double)(b->prefill + b->decode_tokens);
    double s = c[0] + c[1] * t + c[2] * (double)b->prefill + c[3] * b->prefill_pos + c[4] * (double)b->decode_reqs
               + c[5] * (double)b->decode_ctx + c[6] * (1.0 - exp(c[7] * t));
    if (!(s == s && s < 9.2e9)) return INT64_MAX;
    double x = ceil(s * 1e9);
    return x < 1.0 ? 1 : (int64_t)x;
}
/* Parse the Python side's model argument: None (fixed) or a tuple of CSA_LINEAR_TERMS floats. */
static inline int csa_parse_model(PyObject *o, CsaStepModel *m) {
    m->on = 0;
    if (o == Py_None) return 0;
    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != CSA_LINEAR_TERMS) {
        PyErr_SetString(PyExc_ValueError, "step model: None or a tuple of 8 floats");
        return -1;
    }
    for (int i = 0; i < CSA_LINEAR_TERMS; i++) {
        m->c[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(o, i));
        if (m->c[i] == -1.0 && PyErr_Occurred()) return -1;
        if (!isfinite(m->c[i])) { PyErr_SetString(PyExc_ValueError, "step model: a coefficient is not finite"); return -1; }
    }
    m->on = 1;
    return 0;
}
#endif
