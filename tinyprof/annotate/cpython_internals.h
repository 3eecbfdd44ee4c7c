/* cpython_internals.h: what the C core reads of CPython's private structs.
 *
 * The fast ContextVar path (context.c) reads and swaps a context's map of
 * variables and keeps a variable's cache as PyContextVar_Set would. Those
 * fields are in CPython's private PyContext and PyContextVar
 * (Include/internal/pycore_context.h), the same from 3.9 to 3.13 with the
 * GIL. The copies below type them as the core uses them (the map as a
 * PyObject); each field read is checked against CPython's own header at
 * compile time, so a changed layout fails the build instead of crashing.
 * What no header states (Set builds a new map, the cache's keys) is
 * checked at import on a scratch context (fast_context_works). Other
 * Pythons take the public API. Nothing else of the core is private. */
#ifndef TINYPROF_CPYTHON_INTERNALS_H
#define TINYPROF_CPYTHON_INTERNALS_H

#if PY_VERSION_HEX >= 0x03090000 && PY_VERSION_HEX < 0x030E0000 && \
    !defined(Py_GIL_DISABLED) && !defined(PYPY_VERSION)
#define FAST_CONTEXT 1

#include <stddef.h>
#define Py_BUILD_CORE 1
#include <internal/pycore_context.h>
#undef Py_BUILD_CORE

typedef struct {            /* CPython's PyContext */
    PyObject_HEAD
    PyObject *ctx_prev;
    PyObject *ctx_vars;     /* HAMT */
    PyObject *ctx_weakreflist;
    int ctx_entered;
} Ctx;

typedef struct {            /* CPython's PyContextVar */
    PyObject_HEAD
    PyObject *var_name;
    PyObject *var_default;
    PyObject *var_cached;
    uint64_t var_cached_tsid;
    uint64_t var_cached_tsver;
    Py_hash_t var_hash;
} CtxVar;

#define SAME_FIELD(copy, real, field)                                                    \
    _Static_assert(offsetof(copy, field) == offsetof(real, field) &&                     \
                   sizeof(((copy *)0)->field) == sizeof(((real *)0)->field),            \
                   #copy "." #field " is not where CPython's " #real " has it")
SAME_FIELD(Ctx, PyContext, ctx_vars);
SAME_FIELD(CtxVar, PyContextVar, var_cached);
SAME_FIELD(CtxVar, PyContextVar, var_cached_tsid);
SAME_FIELD(CtxVar, PyContextVar, var_cached_tsver);
#undef SAME_FIELD
#endif

#endif  /* TINYPROF_CPYTHON_INTERNALS_H */
