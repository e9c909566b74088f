/* What every compiled extension (planner/reserve/cdecide.c, planner/engines/vllm/cvllm.c,
 * planner/engines/sglang/csglang.c) does alike at its Python boundary, written once.
 *
 * Static functions in a header: each extension is one translation unit that includes it once.
 */
#ifndef CSA_PLAN_NATIVE_H
#define CSA_PLAN_NATIVE_H

#include <Python.h>

/* ---- a Python buffer as a C array of `count` items of `itemsize` bytes ------------------------
 * itemsize 0: any of 1, 2, 4 or 8 bytes (an integer array the caller reads through its size) */
static int csa_buffer(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize, Py_ssize_t count,
                      const char *name) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (!itemsize && (view->itemsize == 1 || view->itemsize == 2 || view->itemsize == 4 || view->itemsize == 8))
        itemsize = view->itemsize;
    if (view->itemsize != itemsize || view->len != itemsize * count) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd items of %zd bytes", name, count, itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

#endif
