/* _frames.c: what tinyprof reads of Python's frames that Python cannot give it.
 *
 * MPI call sites (sites.c; runtime/sampler.py, docs/mpi.md#call-sites): `site_source`
 * stands in for the C core's source function of libtinyprof_mpi. The library
 * calls it once per recorded MPI call, from the calling thread, after the
 * call and without the GIL (mpi4py releases it around MPI). It reads the
 * thread's own frame stack, which nobody else changes while the thread is in
 * C, skips the frames of mpi4py and tinyprof, and returns the id of the site
 * (the current node, then the K innermost user frames' code and instruction),
 * found in a table read without a lock; a new site takes a mutex and names
 * its frames then, as `function (file:line)`. Nothing here allocates a
 * Python object or takes the GIL on that path. CPython 3.11 to 3.13's frame
 * layouts are known (sites_supported(); cpython_frames.h hides their
 * differences); not PyPy's, nor the free-threaded build's.
 *
 * Sampled stacks (sampler.c): `Samples` counts every thread's stack and
 * innermost open event, per sample, in C; `contexts()` gives the threads'
 * contexts alone, for the sampler's pure-Python path on other Pythons.
 *
 * One compilation unit in parts: sites.c and sampler.c are included below.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <structmember.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpython_frames.h"

#ifdef SITES
/* Hashes a site's key (sites.c) and a sampled stack's (sampler.c). */
static inline uint64_t
mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

#include "sites.c"
#include "sampler.c"
#endif  /* SITES */

static PyObject *
sites_supported(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
#ifdef SITES
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

/* {thread id: its current contextvars.Context, or None}: holding the GIL,
 * as sys._current_frames (no thread state goes away while it is held). */
static PyObject *
contexts(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get()); ts != NULL;
         ts = PyThreadState_Next(ts)) {
        PyObject *key = PyLong_FromUnsignedLong(ts->thread_id);
        if (key == NULL || PyDict_SetItem(out, key, ts->context ? ts->context : Py_None) < 0) {
            Py_XDECREF(key);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(key);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"sites_supported", sites_supported, METH_NOARGS, "Whether this Python's frames can be read for sites."},
#ifdef SITES
    {"sites_start", sites_start, METH_VARARGS,
     "(core source address, depth, ((path prefix, skipped?), ...)): a fresh site table; "
     "the address of the source function that reads sites."},
    {"sites_below", sites_below, METH_O,
     "The node id the sites of threads with no open event go below (0: the root)."},
    {"sites_read", sites_read, METH_NOARGS,
     "([(site id, parent node id, frame names outermost first)], table full?)."},
#endif
    {"contexts", contexts, METH_NOARGS, "{thread id: the thread's current context, or None}."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "tinyprof.runtime._frames",
    "Python call sites of MPI calls, read without the GIL, and sampled stacks.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__frames(void)
{
    PyObject *m = PyModule_Create(&module);
#ifdef SITES
    str_parent = PyUnicode_InternFromString("parent");
    str_id = PyUnicode_InternFromString("id");
    if (m == NULL || str_parent == NULL || str_id == NULL || PyType_Ready(&SamplesType) < 0
        || PyModule_AddObjectRef(m, "Samples", (PyObject *)&SamplesType) < 0) {
        Py_XDECREF(m);
        return NULL;
    }
#endif
    return m;
}
