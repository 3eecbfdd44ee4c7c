/* tinyprof.annotate._core: the C annotation hot path.
 *
 * Same interface and semantics as tinyprof/annotate/pyevent.py (the reference): Event,
 * Node, root(), current(), executions(), reset(), set_clock(),
 * set_metric_keys(). The call tree is the event map: one Node per callpath,
 * children in a dict (first-entry order), times in a growable int64 buffer.
 * The open-event stack is a contextvars.ContextVar holding the current Node
 * (unset means the root), so threads and asyncio tasks each have their own.
 * Exits out of order never raise (docs/events.md); argument checks beyond
 * the trivial ones and misuse warnings are tinyprof.annotate.args's, shared with
 * the pure-Python twin.
 *
 * Thread safety rests on the GIL: no Python code runs while the tree or the
 * execution counter is being updated. The clock callback (tests only) and the
 * warning about an undeclared metric key may run Python code, so they run
 * before or after the updates.
 *
 * One compilation unit in parts, included below in dependency order: this
 * file (buffers, module state, free lists, module functions), node.c (Node),
 * context.c (the current node; CPython's private structs in
 * cpython_internals.h), steps.c (enter and exit), event.c (Event) and
 * decorator.c (@Event). One unit keeps every function static, so the
 * compiler inlines the hot path across the parts as it did in one file.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

/* ---- growable int64 buffer ------------------------------------------------ */

typedef struct {
    int64_t *data;
    Py_ssize_t len, cap;
} Buf;

static int
buf_grow(Buf *b)
{
    /* 1.25x growth: amortised O(1) appends, little slack in an always-on run */
    Py_ssize_t cap = b->cap + b->cap / 4 + 16;
    if (cap > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(int64_t)) {
        PyErr_NoMemory();
        return -1;
    }
    int64_t *data = PyMem_Realloc(b->data, (size_t)cap * sizeof(int64_t));
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int
buf_push(Buf *b, int64_t v)
{
    if (b->len == b->cap && buf_grow(b) < 0)
        return -1;
    b->data[b->len++] = v;
    return 0;
}

static PyObject *
buf_bytes(const Buf *b)
{
    return PyBytes_FromStringAndSize((const char *)b->data, b->len * (Py_ssize_t)sizeof(int64_t));
}

/* ---- module state ---------------------------------------------------------- */

typedef struct Node Node;

static PyObject *current_var;   /* ContextVar: the innermost open Node; unset: the root */
static Node *root_node;
static PyObject *first_root;    /* name of the first root event entered, or NULL */
static int64_t exec_no = -1;    /* current execution */
static PyObject *clock_fn;      /* NULL: CLOCK_MONOTONIC */
static PyObject *metric_keys;   /* declared key -> consistent? (bool); NULL: none */
static PyObject *metric_warn;   /* warn(node, key) about an undeclared key, or NULL */
static int32_t next_id = 1;     /* of the next non-root node */

/* The id of this thread's current node, mirrored from the ContextVar at each
 * change, so that the MPI interposer can read it without the GIL (docs/mpi.md):
 * one TLS store per enter or exit. An asyncio task switch does not change it:
 * until the next enter or exit, MPI calls are charged to the last node made
 * current on this thread. */
static _Thread_local int32_t tls_node;

/* Trace mode (docs/trace.md): (node id, OS thread id, start, duration) per
 * occurrence, appended at exit; at most trace_limit occurrences, the rest
 * only counted. Off (trace_limit 0): one predictable branch per exit. */
static Buf trace_buf;
static int64_t trace_limit, trace_dropped;
static _Thread_local int32_t tls_tid;   /* gettid(), cached: 0 until first needed */

static int
trace_push(int32_t id, int64_t start, int64_t end)
{
    if (trace_buf.len >= 4 * trace_limit) {
        trace_dropped++;
        return 0;
    }
    if (tls_tid == 0)
        tls_tid = (int32_t)syscall(SYS_gettid);
    if (trace_buf.cap - trace_buf.len < 4 && buf_grow(&trace_buf) < 0)
        return -1;
    int64_t *row = trace_buf.data + trace_buf.len;
    row[0] = id;
    row[1] = tls_tid;
    row[2] = start;
    row[3] = end - start;
    trace_buf.len += 4;
    return 0;
}

static int32_t
current_id(void)
{
    return tls_node;
}

static int
read_clock(int64_t *out)
{
    if (clock_fn == NULL) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);   /* time.perf_counter_ns's clock */
        *out = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
        return 0;
    }
    PyObject *fn = clock_fn;
    Py_INCREF(fn);              /* the callback may call set_clock() */
    PyObject *r = PyObject_CallNoArgs(fn);
    Py_DECREF(fn);
    if (r == NULL)
        return -1;
    long long v = PyLong_AsLongLong(r);
    Py_DECREF(r);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

/* The pending exception as one object (fetch) and back (restore, stealing it):
 * PyErr_GetRaisedException where it exists (3.12+). NULL when none is set. */
static PyObject *
err_fetch(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (type == NULL)
        return NULL;
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL) {
        PyException_SetTraceback(value, tb);
        Py_DECREF(tb);
    }
    Py_DECREF(type);
    return value;
#endif
}

static void
err_restore(PyObject *exc)
{
    if (exc == NULL)
        return;
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    Py_INCREF(Py_TYPE(exc));
    PyErr_Restore((PyObject *)Py_TYPE(exc), exc, PyException_GetTraceback(exc));
#endif
}

/* ---- free lists of the per-use objects ------------------------------------ */
/* Events and bound __enter__/__exit__ objects live for one with statement;
 * recycling them saves an allocator round trip each. The next link is kept
 * in ob_type, as CPython's own free lists do. */

#define FREE_MAX 32

typedef struct {
    PyObject *head;
    int count;
} FreeList;

static inline PyObject *
free_pop(FreeList *fl, PyTypeObject *type, size_t size)
{
    PyObject *op = fl->head;
    if (op != NULL) {
        fl->head = (PyObject *)Py_TYPE(op);
        fl->count--;
    }
    else if ((op = PyObject_Malloc(size)) == NULL)
        return PyErr_NoMemory();
    return PyObject_Init(op, type);
}

static inline void
free_push(FreeList *fl, PyObject *op)
{
    if (fl->count >= FREE_MAX) {
        PyObject_Free(op);
        return;
    }
    Py_SET_TYPE(op, (PyTypeObject *)fl->head);
    fl->head = op;
    fl->count++;
}

/* ---- the parts, in dependency order (one unit: the hot path's calls stay
 * static and inlined across them) --------------------------------------- */

#include "node.c"
#include "context.c"
#include "steps.c"
#include "event.c"
#include "decorator.c"

/* ---- module functions ------------------------------------------------------- */

static PyObject *
mod_root(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    Py_INCREF(root_node);
    return (PyObject *)root_node;
}

static PyObject *
mod_current(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return (PyObject *)current_node();
}

static PyObject *
mod_executions(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyLong_FromLongLong(exec_no + 1);
}

static PyObject *
mod_reset(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    Node *fresh = root_create();
    if (fresh == NULL)
        return NULL;
    PyObject *token = PyContextVar_Set(current_var, (PyObject *)fresh);
    if (token == NULL) {
        Py_DECREF(fresh);
        return NULL;
    }
    Py_DECREF(token);
    tls_node = 0;
    Py_XSETREF(root_node, fresh);
    Py_CLEAR(first_root);
    exec_no = -1;
    trace_buf.len = 0;
    trace_dropped = 0;
    Py_RETURN_NONE;
}

static PyObject *
mod_trace(PyObject *m, PyObject *arg)
{
    (void)m;
    long long limit = PyLong_AsLongLong(arg);
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    if (limit < 0 || limit > PY_SSIZE_T_MAX / 4 / (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "tinyprof: the trace limit must be >= 0 and addressable");
        return NULL;
    }
    trace_limit = limit;
    Py_RETURN_NONE;
}

static PyObject *
mod_trace_records(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    PyObject *data = buf_bytes(&trace_buf);
    if (data == NULL)
        return NULL;
    return Py_BuildValue("(NL)", data, (long long)trace_dropped);
}

static PyObject *
mod_set_clock(PyObject *m, PyObject *clock)
{
    (void)m;
    if (clock != Py_None && !PyCallable_Check(clock)) {
        PyErr_Format(PyExc_TypeError, "tinyprof: the clock must be callable or None, not %s",
                     Py_TYPE(clock)->tp_name);
        return NULL;
    }
    if (clock == Py_None)
        Py_CLEAR(clock_fn);
    else {
        Py_INCREF(clock);
        Py_XSETREF(clock_fn, clock);
    }
    Py_RETURN_NONE;
}

static PyObject *
mod_set_metric_keys(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    (void)m;
    if (nargs != 2 || !PyDict_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "tinyprof: set_metric_keys(keys: dict, warn: callable) expected");
        return NULL;
    }
    Py_XSETREF(metric_keys, Py_NewRef(args[0]));
    Py_XSETREF(metric_warn, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

/* ---- NullEvent: what Event is under TINYPROF=0 ------------------------------------
 * Constructing it returns one shared object whose methods do nothing, so a
 * switched-off annotation costs a call and a with statement, no allocation
 * of its own and no argument parsing. */

static PyObject *null_event;    /* the one instance */

static PyObject *
null_vectorcall_new(PyObject *type, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    (void)type; (void)args; (void)nargsf; (void)kwnames;
    return Py_NewRef(null_event);
}

static PyObject *
null_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    (void)type; (void)args; (void)kwds;
    return Py_NewRef(null_event);
}

static PyObject *
null_enter(PyObject *self, PyObject *unused)
{
    (void)unused;
    return Py_NewRef(self);
}

static PyObject *
null_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self; (void)args; (void)nargs;
    Py_RETURN_NONE;
}

static PyObject *
null_call(PyObject *self, PyObject *args, PyObject *kwds)
{
    /* As a decorator: the function, unchanged. */
    (void)self;
    PyObject *func;
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "tinyprof.Event decorator takes one function");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "Event", 1, 1, &func))
        return NULL;
    return Py_NewRef(func);
}

static PyMethodDef null_methods[] = {
    {"__enter__", null_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))null_exit, METH_FASTCALL, NULL},
    {NULL}
};

static PyTypeObject NullEventType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tinyprof.annotate._core.NullEvent",
    .tp_doc = "What Event is when TINYPROF=0: it records nothing.",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = null_new,
    .tp_vectorcall = null_vectorcall_new,
    .tp_call = null_call,
    .tp_methods = null_methods,
};

static PyObject *
mod_source_address(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyLong_FromVoidPtr((void *)current_id);
}

static PyMethodDef module_methods[] = {
    {"root", mod_root, METH_NOARGS, "The root Node of the event map."},
    {"current", mod_current, METH_NOARGS, "The innermost open Node in this context."},
    {"executions", mod_executions, METH_NOARGS, "Number of executions started."},
    {"reset", mod_reset, METH_NOARGS, "Forget every recorded value (tests, and a fresh profile)."},
    {"trace", mod_trace, METH_O,
     "Keep the start of up to `limit` occurrences (trace mode); 0 turns it off."},
    {"trace_records", mod_trace_records, METH_NOARGS,
     "(bytes of int64 (node id, OS tid, start, duration) per traced occurrence, dropped)."},
    {"set_clock", mod_set_clock, METH_O,
     "Replace the nanosecond clock (tests inject deterministic timings); None restores it."},
    {"set_metric_keys", (PyCFunction)(void (*)(void))mod_set_metric_keys, METH_FASTCALL,
     "set_metric_keys(keys, warn): the declared metric keys (a dict, read as it changes:\n"
     "key -> consistent?) and warn(node, key), called for a value of an undeclared key."},
    {"_source_address", mod_source_address, METH_NOARGS,
     "Address of `int32_t source(void)`: the id of the calling thread's current node."},
    {NULL}
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tinyprof.annotate._core",
    .m_doc = "The C annotation hot path (same interface as tinyprof.annotate.pyevent).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__core(void)
{
    if (PyType_Ready(&NodeType) < 0 || PyType_Ready(&EventType) < 0 ||
        PyType_Ready(&WrapperType) < 0 || PyType_Ready(&MethodType) < 0 ||
        PyType_Ready(&NullEventType) < 0 ||
        add_method("__enter__", 0) < 0 || add_method("__exit__", 1) < 0)
        return NULL;
    PyType_Modified(&EventType);
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    root_node = root_create();
    if (root_node == NULL)
        goto fail;
    current_var = PyContextVar_New("tinyprof_node", NULL);
    if (current_var == NULL)
        goto fail;
#ifdef FAST_CONTEXT
    fast_context = fast_context_works();
    int fast = fast_context;
#else
    int fast = 0;
#endif
    if (PyModule_AddObject(m, "_fast_context", PyBool_FromLong(fast)) < 0)
        goto fail;
    null_event = PyType_GenericAlloc(&NullEventType, 0);
    if (null_event == NULL)
        goto fail;
    Py_INCREF(&NodeType);
    Py_INCREF(&EventType);
    Py_INCREF(&NullEventType);
    if (PyModule_AddObject(m, "Node", (PyObject *)&NodeType) < 0 ||
        PyModule_AddObject(m, "Event", (PyObject *)&EventType) < 0 ||
        PyModule_AddObject(m, "NullEvent", (PyObject *)&NullEventType) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
