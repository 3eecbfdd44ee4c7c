/* cpython_frames.h: what _frames reads of CPython's private state, and where
 * CPython 3.11, 3.12 and 3.13 differ: a thread's innermost frame, a frame's
 * code, who holds the GIL, and asking the main thread to run its pending
 * calls. SITES is defined where these are known (not PyPy's, nor the
 * free-threaded build's); sites.c and sampler.c hold no version test of
 * their own. `make test-pythons` runs their tests under each version. */
#ifndef TINYPROF_CPYTHON_FRAMES_H
#define TINYPROF_CPYTHON_FRAMES_H

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000 && !defined(PYPY_VERSION) \
    && !defined(Py_GIL_DISABLED)
#define SITES 1
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef _PyGC_FINALIZED          /* Python.h's, redefined by the internal headers */
#include <internal/pycore_interp.h>
#include <internal/pycore_runtime.h>
#if PY_VERSION_HEX >= 0x030D0000
#include <internal/pycore_ceval.h>
#endif
#undef Py_BUILD_CORE

/* A thread's innermost frame, or NULL. */
static inline _PyInterpreterFrame *
top_frame(PyThreadState *ts)
{
#if PY_VERSION_HEX >= 0x030D0000
    return ts->current_frame;
#else
    return ts->cframe != NULL ? ts->cframe->current_frame : NULL;
#endif
}

/* The code a frame runs, or NULL for a frame the program is not in: one
 * not started yet, or (3.12+) the interpreter's own entry frame. Reads
 * only the frame and its code: safe without the GIL on the frame's thread. */
static inline PyCodeObject *
frame_code(_PyInterpreterFrame *f)
{
#if PY_VERSION_HEX >= 0x030C0000
    if (f->owner == FRAME_OWNED_BY_CSTACK)
        return NULL;
#endif
#if PY_VERSION_HEX >= 0x030D0000
    if (!PyCode_Check(f->f_executable))
        return NULL;
    PyCodeObject *code = (PyCodeObject *)f->f_executable;
#else
    PyCodeObject *code = f->f_code;
#endif
    return _PyFrame_IsIncomplete(f) ? NULL : code;
}

/* Whether `main` holds interp's GIL, read without it (a hint: a stale answer
 * costs one sample taken the slower way). */
static int
holds_gil(PyInterpreterState *interp, PyThreadState *main)
{
#if PY_VERSION_HEX >= 0x030D0000
    struct _gil_runtime_state *gil = interp->ceval.gil;
    return _Py_atomic_load_int_relaxed(&gil->locked)
        && (PyThreadState *)_Py_atomic_load_ptr_relaxed(&gil->last_holder) == main;
#else
#if PY_VERSION_HEX >= 0x030C0000
    struct _gil_runtime_state *gil = interp->ceval.gil;
#else
    (void)interp;               /* one GIL per runtime */
    struct _gil_runtime_state *gil = &_PyRuntime.ceval.gil;
#endif
    return _Py_atomic_load(&gil->locked) && (PyThreadState *)_Py_atomic_load(&gil->last_holder) == main;
#endif
}

/* Makes the main thread's eval loop look at its pending calls: 3.11 and
 * 3.12 do so only when the main thread adds the call itself. */
static void
wake(PyInterpreterState *interp, PyThreadState *main)
{
#if PY_VERSION_HEX >= 0x030D0000
    (void)interp;
    _Py_set_eval_breaker_bit(main, _PY_CALLS_TO_DO_BIT);
#else
    (void)main;
    _Py_atomic_store_relaxed(&interp->ceval.eval_breaker, 1);
#endif
}
#endif  /* SITES */

#endif  /* TINYPROF_CPYTHON_FRAMES_H */
