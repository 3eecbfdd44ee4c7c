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

/* ---- Node ------------------------------------------------------------------ */

struct Node {
    PyObject_HEAD
    PyObject *name;         /* str */
    PyObject *parent;       /* Node, NULL for the root */
    PyObject *children;     /* dict name -> Node */
    PyObject *consistent;   /* dict key -> float: consistent metrics, or NULL */
    PyObject *metrics;      /* dict key -> bytearray of doubles aligned with times, or NULL */
    int64_t last_exec;
    int32_t id;             /* for the MPI interposer: the root's is 0, others from 1 */
    Py_ssize_t depth;       /* the root's is 0: the out-of-order exit walks no further */
    int loop;
    char common;
    Buf times;              /* one value per occurrence (loop 2: per execution) */
    Buf execs;              /* (execution, first index) pairs, on change only */
    PyObject *base, *vars;  /* fast path: context maps of the last entry, before and in */
};

static PyTypeObject NodeType;

static inline int32_t
parent_id(Node *node)
{
    return node->parent != NULL ? ((Node *)node->parent)->id : 0;
}

static Node *
node_create(PyObject *name, PyObject *parent, int loop, int common)
{
    Node *n = PyObject_GC_New(Node, &NodeType);
    if (n == NULL)
        return NULL;
    n->children = PyDict_New();
    if (n->children == NULL) {
        n->name = n->parent = n->consistent = n->metrics = n->base = n->vars = NULL;
        n->times.data = n->execs.data = NULL;
        Py_DECREF(n);
        return NULL;
    }
    Py_INCREF(name);
    n->name = name;
    Py_XINCREF(parent);
    n->parent = parent;
    n->consistent = n->metrics = n->base = n->vars = NULL;
    n->last_exec = -1;
    n->depth = parent != NULL ? ((Node *)parent)->depth + 1 : 0;
    n->id = parent == NULL ? 0 : next_id < INT32_MAX ? next_id++ : INT32_MAX;
    n->loop = loop;
    n->common = (char)common;
    n->times = (Buf){NULL, 0, 0};
    n->execs = (Buf){NULL, 0, 0};
    PyObject_GC_Track(n);
    return n;
}

/* A root: the nameless node every callpath starts from. */
static Node *
root_create(void)
{
    PyObject *empty = PyUnicode_FromString("");
    if (empty == NULL)
        return NULL;
    Node *root = node_create(empty, NULL, 0, 1);
    Py_DECREF(empty);
    return root;
}

static PyObject *
node_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"name", "parent", "loop", "common", NULL};
    PyObject *name, *parent;
    int loop = 0, common = 1;
    (void)type;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "UO|ip:Node", kwlist, &name, &parent,
                                     &loop, &common))
        return NULL;
    if (parent != Py_None && !PyObject_TypeCheck(parent, &NodeType)) {
        PyErr_SetString(PyExc_TypeError, "Node parent must be a Node or None");
        return NULL;
    }
    return (PyObject *)node_create(name, parent == Py_None ? NULL : parent, loop, common);
}

static int
node_traverse(Node *n, visitproc visit, void *arg)
{
    Py_VISIT(n->parent);
    Py_VISIT(n->children);
    Py_VISIT(n->consistent);
    Py_VISIT(n->metrics);
    Py_VISIT(n->base);
    Py_VISIT(n->vars);
    return 0;
}

static int
node_clear(Node *n)
{
    Py_CLEAR(n->parent);
    Py_CLEAR(n->children);
    Py_CLEAR(n->consistent);
    Py_CLEAR(n->metrics);
    Py_CLEAR(n->base);
    Py_CLEAR(n->vars);
    return 0;
}

static void
node_dealloc(Node *n)
{
    PyObject_GC_UnTrack(n);
    Py_TRASHCAN_BEGIN(n, node_dealloc)   /* deep recursive callpaths */
    node_clear(n);
    Py_CLEAR(n->name);
    PyMem_Free(n->times.data);
    PyMem_Free(n->execs.data);
    PyObject_GC_Del(n);
    Py_TRASHCAN_END
}

static PyObject *
node_get_count(Node *n, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(n->times.len);
}

static PyObject *
node_data(Node *n, PyObject *unused)
{
    (void)unused;
    PyObject *times = buf_bytes(&n->times);
    if (times == NULL)
        return NULL;
    PyObject *execs = buf_bytes(&n->execs);
    if (execs == NULL) {
        Py_DECREF(times);
        return NULL;
    }
    PyObject *r = PyTuple_Pack(2, times, execs);
    Py_DECREF(times);
    Py_DECREF(execs);
    return r;
}

static PyObject *
node_repr(Node *n)
{
    return PyUnicode_FromFormat("<tinyprof Node %R count=%zd>", n->name, n->times.len);
}

static PyMemberDef node_members[] = {
    {"name", T_OBJECT, offsetof(Node, name), READONLY, NULL},
    {"parent", T_OBJECT, offsetof(Node, parent), READONLY, "parent Node, None for the root"},
    {"children", T_OBJECT, offsetof(Node, children), READONLY, "dict name -> Node"},
    {"loop", T_INT, offsetof(Node, loop), READONLY, NULL},
    {"common", T_BOOL, offsetof(Node, common), READONLY, NULL},
    {"last_exec", T_LONGLONG, offsetof(Node, last_exec), READONLY, NULL},
    {"depth", T_PYSSIZET, offsetof(Node, depth), READONLY, "number of ancestors"},
    {"id", T_INT, offsetof(Node, id), READONLY, "0 for the root, unique in the process otherwise"},
    {"consistent", T_OBJECT, offsetof(Node, consistent), 0, "consistent metrics, or None"},
    {"metrics", T_OBJECT, offsetof(Node, metrics), 0, "inconsistent metric columns, or None"},
    {NULL}
};

static PyGetSetDef node_getset[] = {
    {"count", (getter)node_get_count, NULL, "Number of stored time values.", NULL},
    {NULL}
};

static PyMethodDef node_methods[] = {
    {"data", (PyCFunction)node_data, METH_NOARGS,
     "``(times, execs)`` as bytes of native int64, for the flush."},
    {NULL}
};

static PyTypeObject NodeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tinyprof.annotate._core.Node",
    .tp_doc = "One callpath of the event map: its values and its children.",
    .tp_basicsize = sizeof(Node),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = node_new,
    .tp_dealloc = (destructor)node_dealloc,
    .tp_traverse = (traverseproc)node_traverse,
    .tp_clear = (inquiry)node_clear,
    .tp_repr = (reprfunc)node_repr,
    .tp_members = node_members,
    .tp_getset = node_getset,
    .tp_methods = node_methods,
};

/* ---- the current node: a ContextVar ----------------------------------------
 * current_set() makes a node current and returns a token, current_restore()
 * gives the parent back. With the public API that is PyContextVar_Set/Reset:
 * 85-130 ns a pair, as each builds a new immutable HAMT (the context's map of
 * variables) and Set a Token too.
 *
 * Fast path (CPython 3.9-3.13 with the GIL; layouts checked at import): each
 * node keeps the map it was last entered from (base) and the map CPython
 * built from it (base + {var: node}). When the context's map is that same
 * base object again, as on every iteration of a loop, entering swaps the
 * context's map pointer to the kept one and exiting swaps base back: no
 * allocation. The maps are CPython's own immutable objects, so copies of
 * the context (asyncio tasks) see exactly what they would with Set/Reset.
 * Anything else (first entry, another variable changed) uses the public API.
 * The token is always the previous map, so both paths pair with each other.
 * Cost: a node's two maps keep other ContextVars' values of its last entry
 * alive until it is entered from another state, or reset(). */

#if PY_VERSION_HEX >= 0x03090000 && PY_VERSION_HEX < 0x030E0000 && \
    !defined(Py_GIL_DISABLED) && !defined(PYPY_VERSION)
#define FAST_CONTEXT 1

typedef struct {            /* CPython's PyContext, Include/internal/pycore_context.h */
    PyObject_HEAD
    PyObject *ctx_prev;
    PyObject *ctx_vars;     /* HAMT */
    PyObject *ctx_weakreflist;
    int ctx_entered;
} Ctx;

typedef struct {            /* CPython's PyContextVar, same header */
    PyObject_HEAD
    PyObject *var_name;
    PyObject *var_default;
    PyObject *var_cached;
    uint64_t var_cached_tsid;
    uint64_t var_cached_tsver;
    Py_hash_t var_hash;
} CtxVar;

static int fast_context;        /* the import-time check passed */

/* Keep PyContextVar_Get's cache as a set of `value` would (NULL: forget). */
static inline void
cache_value(PyThreadState *ts, PyObject *value)
{
    CtxVar *v = (CtxVar *)current_var;
    v->var_cached = value;      /* borrowed, as in CPython: the map holds it */
    v->var_cached_tsid = ts->id;
    v->var_cached_tsver = ts->context_ver;
}

static PyObject *
fast_set(Node *node)
{
    PyThreadState *ts = PyThreadState_Get();
    Ctx *ctx = (Ctx *)ts->context;
    if (ctx != NULL && ctx->ctx_vars == node->base && node->base != NULL) {
        PyObject *base = ctx->ctx_vars;     /* the context's reference moves to the token */
        Py_INCREF(node->vars);
        ctx->ctx_vars = node->vars;
        cache_value(ts, (PyObject *)node);
        return base;
    }
    if (ctx == NULL) {          /* a thread's first use: have CPython create its context */
        PyObject *copy = PyContext_CopyCurrent();
        if (copy == NULL)
            return NULL;
        Py_DECREF(copy);
        ctx = (Ctx *)ts->context;
    }
    PyObject *base = ctx->ctx_vars;
    Py_INCREF(base);
    PyObject *token = PyContextVar_Set(current_var, (PyObject *)node);
    if (token == NULL) {
        Py_DECREF(base);
        return NULL;
    }
    Py_DECREF(token);
    /* both maps change before the old ones are released: freeing them can
     * run Python code (a value's __del__) and so let another thread in, which
     * must not find a base paired with the wrong map */
    PyObject *old_base = node->base, *old_vars = node->vars;
    Py_INCREF(base);
    node->base = base;
    Py_INCREF(ctx->ctx_vars);
    node->vars = ctx->ctx_vars;
    Py_XDECREF(old_base);
    Py_XDECREF(old_vars);
    return base;
}

static int
fast_restore(Node *node, PyObject *base)
{
    PyThreadState *ts = PyThreadState_Get();
    Ctx *ctx = (Ctx *)ts->context;
    Node *parent = (Node *)node->parent;
    /* base == node->base: the token is the map node->vars was made from, so
     * swapping back changes this variable only (not so for a token of an
     * earlier, abandoned entry of the node) */
    if (ctx != NULL && ctx->ctx_vars == node->vars && node->vars != NULL && base == node->base) {
        PyObject *mine = ctx->ctx_vars;
        Py_INCREF(base);
        ctx->ctx_vars = base;
        cache_value(ts, base == parent->vars ? (PyObject *)parent : NULL);
        Py_DECREF(mine);
        return 0;
    }
    /* another variable changed meanwhile: set the parent, as Reset would */
    PyObject *token = PyContextVar_Set(current_var, (PyObject *)parent);
    Py_XDECREF(token);
    return token != NULL ? 0 : -1;
}

/* Check the layout assumptions on a scratch context before trusting them. */
static int
fast_context_works(void)
{
    PyObject *ctx = PyContext_New();
    if (ctx == NULL || PyContext_Enter(ctx) < 0) {
        Py_XDECREF(ctx);
        PyErr_Clear();
        return 0;
    }
    PyThreadState *ts = PyThreadState_Get();
    CtxVar *v = (CtxVar *)current_var;
    PyObject *empty = ((Ctx *)ctx)->ctx_vars;
    int ok = ts->context == ctx && empty != NULL && PyObject_Size(empty) == 0;
    PyObject *token = ok ? PyContextVar_Set(current_var, Py_None) : NULL;
    ok = token != NULL;
    if (ok) {
        PyObject *vars = ((Ctx *)ctx)->ctx_vars;
        ok = vars != empty && Py_TYPE(vars) == Py_TYPE(empty) && PyObject_Size(vars) == 1 &&
             v->var_cached == Py_None && v->var_cached_tsid == ts->id &&
             v->var_cached_tsver == ts->context_ver;
        ok = PyContextVar_Reset(current_var, token) == 0 && ok &&
             PyObject_Size(((Ctx *)ctx)->ctx_vars) == 0;
        Py_DECREF(token);
    }
    PyErr_Clear();
    if (PyContext_Exit(ctx) < 0)
        PyErr_Clear();
    Py_DECREF(ctx);
    return ok;
}
#endif  /* FAST_CONTEXT */

/* Make node current. */
static PyObject *
context_set(Node *node)
{
#ifdef FAST_CONTEXT
    if (fast_context)
        return fast_set(node);
#endif
    return PyContextVar_Set(current_var, (PyObject *)node);
}

static int
context_restore(Node *node, PyObject *token)
{
#ifdef FAST_CONTEXT
    if (fast_context)
        return fast_restore(node, token);
#endif
    if (PyContextVar_Reset(current_var, token) == 0)
        return 0;
    /* the token is another context's (the event was entered there) */
    PyErr_Clear();
    token = PyContextVar_Set(current_var, node->parent);
    Py_XDECREF(token);
    return token != NULL ? 0 : -1;
}

/* Make node current; the thread-local follows once the context has. */
static PyObject *
current_set(Node *node)
{
    PyObject *token = context_set(node);
    if (token != NULL)
        tls_node = node->id;
    return token;
}

/* Make node's parent current again, with current_set's token. */
static int
current_restore(Node *node, PyObject *token)
{
    int rc = context_restore(node, token);
    if (rc == 0)
        tls_node = parent_id(node);
    return rc;
}

/* ---- the shared enter / exit steps ----------------------------------------- */

static int
enter_root(PyObject *name)
{
    if (first_root == NULL) {
        Py_INCREF(name);
        first_root = name;
        exec_no = 0;
        return 0;
    }
    int eq = PyUnicode_Compare(name, first_root);   /* str vs str: runs no Python code */
    if (eq == -1 && PyErr_Occurred())
        return -1;
    if (eq == 0)
        exec_no++;
    return 0;
}

/* The innermost open node of this context (new reference). A context at a
 * root from before reset() (or unset) is at the current root. */
static Node *
current_node(void)
{
    PyObject *cur;
    if (PyContextVar_Get(current_var, NULL, &cur) < 0)
        return NULL;
    if (cur == NULL || (((Node *)cur)->parent == NULL && cur != (PyObject *)root_node)) {
        Py_XDECREF(cur);
        Py_INCREF(root_node);
        return root_node;
    }
    return (Node *)cur;
}

/* Find or create the child `name` of the current node and make it current.
 * Returns the node (new reference) and the ContextVar token in *token. */
static Node *
open_node(PyObject *name, int loop, int common, PyObject **token)
{
    Node *parent = current_node();
    if (parent == NULL)
        return NULL;
    PyObject *node = PyDict_GetItemWithError(parent->children, name);
    if (node == NULL) {
        if (PyErr_Occurred())
            goto fail;
        Node *fresh = node_create(name, (PyObject *)parent, loop, common);
        if (fresh == NULL)
            goto fail;
        /* setdefault: a node another thread created meanwhile is kept */
        node = PyDict_SetDefault(parent->children, name, (PyObject *)fresh);
        Py_DECREF(fresh);
        if (node == NULL)
            goto fail;
    }
    Py_INCREF(node);
    if (parent == root_node && enter_root(name) < 0)
        goto fail_node;
    *token = current_set((Node *)node);
    if (*token == NULL)
        goto fail_node;
    Py_DECREF(parent);
    return (Node *)node;
fail_node:
    Py_DECREF(node);
fail:
    Py_DECREF(parent);
    return NULL;
}

/* `node` exits but is not the innermost open node `cur` (borrowed, NULL:
 * the root). If it is an ancestor of cur (the inner ones were left open, as
 * by a suspended generator), its parent becomes current; otherwise (it was
 * abandoned before, or opened in another context) nothing changes. */
static int
close_out_of_order(Node *node, Node *cur)
{
    while (cur != NULL && cur->depth > node->depth)
        cur = (Node *)cur->parent;
    if (cur != node)
        return 0;
    PyObject *token = PyContextVar_Set(current_var, node->parent);
    Py_XDECREF(token);
    if (token == NULL)
        return -1;
    tls_node = parent_id(node);
    return 0;
}

/* `node` exits: make its parent current if it is the innermost open node,
 * else see close_out_of_order(). Fails only when out of memory. */
static int
close_node(Node *node, PyObject *token)
{
    PyObject *cur;
    if (PyContextVar_Get(current_var, NULL, &cur) < 0)
        return -1;
    Py_XDECREF(cur);    /* kept alive by the context: only compared and walked */
    if (cur == (PyObject *)node)
        return current_restore(node, token);
    return close_out_of_order(node, (Node *)cur);
}

/* Undo open_node() after a failure (the clock's), keeping that exception. */
static void
undo_open(Node *node, PyObject *token)
{
    PyObject *exc = err_fetch();
    if (current_restore(node, token) < 0)
        PyErr_Clear();
    err_restore(exc);
}

/* A metric value as a double: a float, or an int an exact int a double holds (checked when the Event is made). */
static inline double
value_double(PyObject *value)
{
    return PyFloat_CheckExact(value) ? PyFloat_AS_DOUBLE(value) : PyLong_AsDouble(value);
}

static int record_metrics(Node *node, PyObject *values);

/* Store one occurrence, then its metric values (if any). */
static int
record(Node *node, int64_t start, int64_t end, PyObject *values)
{
    if (trace_limit && trace_push(node->id, start, end) < 0)
        return -1;
    int64_t elapsed = end - start;
    Buf *times = &node->times;
    if (node->last_exec != exec_no || times->len == 0) {
        if (times->len == times->cap && buf_grow(times) < 0)
            return -1;
        if (buf_push(&node->execs, exec_no) < 0 || buf_push(&node->execs, times->len) < 0) {
            node->execs.len &= ~(Py_ssize_t)1;   /* keep whole pairs */
            return -1;
        }
        node->last_exec = exec_no;
        times->data[times->len++] = elapsed;
    }
    else if (node->loop == 2)
        times->data[times->len - 1] += elapsed;
    else if (buf_push(times, elapsed) < 0)
        return -1;
    return values != NULL ? record_metrics(node, values) : 0;
}

/* Store the metric values (floats) of the occurrence just recorded on `node`,
 * as tinyprof/annotate/pyevent.py's _record_metrics does: a consistent value once per
 * callpath; an inconsistent one at the occurrence's index of its column (NaN
 * where an occurrence gave none; NaN given is "none", so it never wipes a
 * loop-2 sum, which adds up per execution). Columns are bytearrays: they
 * grow in place, without a method call. */
static int
record_metrics(Node *node, PyObject *values)
{
    Py_ssize_t index = node->times.len - 1;
    PyObject *keys = PyTuple_GET_ITEM(values, 0);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys); i++) {
        PyObject *key = PyTuple_GET_ITEM(keys, i), *value = PyTuple_GET_ITEM(values, i + 1);
        PyObject *consistent = metric_keys != NULL ? PyDict_GetItemWithError(metric_keys, key) : NULL;
        if (consistent == NULL) {
            if (PyErr_Occurred())
                return -1;
            if (metric_warn != NULL) {
                PyObject *args[2] = {(PyObject *)node, key};
                PyObject *r = PyObject_Vectorcall(metric_warn, args, 2, NULL);
                if (r == NULL)
                    return -1;
                Py_DECREF(r);
            }
            continue;
        }
        double v = value_double(value);
        if (consistent == Py_True) {
            if (node->consistent == NULL && (node->consistent = PyDict_New()) == NULL)
                return -1;
            int has = PyDict_Contains(node->consistent, key);
            PyObject *f = has == 0 ? PyFloat_FromDouble(v) : NULL;
            int failed = has < 0 || (has == 0 && (f == NULL ||
                                                  PyDict_SetItem(node->consistent, key, f) < 0));
            Py_XDECREF(f);
            if (failed)
                return -1;
            continue;
        }
        if (v != v)
            continue;
        if (node->metrics == NULL && (node->metrics = PyDict_New()) == NULL)
            return -1;
        PyObject *column = PyDict_GetItemWithError(node->metrics, key);
        if (column == NULL) {
            if (PyErr_Occurred() || (column = PyByteArray_FromStringAndSize(NULL, 0)) == NULL)
                return -1;
            int failed = PyDict_SetItem(node->metrics, key, column);
            Py_DECREF(column);      /* the dict holds it */
            if (failed < 0)
                return -1;
        }
        Py_ssize_t n = PyByteArray_GET_SIZE(column) / (Py_ssize_t)sizeof(double);
        if (n <= index) {
            if (PyByteArray_Resize(column, (index + 1) * (Py_ssize_t)sizeof(double)) < 0)
                return -1;
            double *d = (double *)PyByteArray_AS_STRING(column);
            for (Py_ssize_t i = n; i < index; i++)
                d[i] = Py_NAN;
            d[index] = v;
        }
        else {
            double *d = (double *)PyByteArray_AS_STRING(column);
            if (node->loop == 2 && d[index] == d[index])
                d[index] += v;
            else
                d[index] = v;
        }
    }
    return 0;
}

/* ---- Event ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *name;     /* str */
    PyObject *values;   /* metric_values(): (keys, value, ...), or NULL */
    Node *node;         /* while open */
    PyObject *token;    /* while open */
    int64_t start;
    int loop;
    char common;
    char exited;        /* exited at least once: tells "exited twice" from "never entered" */
} Event;

static PyTypeObject EventType;

/* A function of tinyprof.annotate.args (new reference), imported on first need. */
static PyObject *
args_fn(const char *attr)
{
    PyObject *mod = PyImport_ImportModule("tinyprof.annotate.args");
    if (mod == NULL)
        return NULL;
    PyObject *fn = PyObject_GetAttrString(mod, attr);
    Py_DECREF(mod);
    return fn;
}

/* The slot of a keyword among name, is_common and loop, or -1 (a metric). */
static int
keyword_slot(PyObject *key)
{
    static const char *const names[3] = {"name", "is_common", "loop"};
    static PyObject *interned[3];
    if (interned[0] == NULL)
        for (int i = 0; i < 3; i++)
            if ((interned[i] = PyUnicode_InternFromString(names[i])) == NULL) {
                PyErr_Clear();
                interned[0] = NULL;
                break;
            }
    for (int i = 0; i < 3; i++)
        if (key == interned[i])
            return i;
    /* Keywords at a call site are interned: another interned string is not
     * one of these (metric keys take this exit); others are compared. */
    for (int i = 0; i < 3 && !PyUnicode_CHECK_INTERNED(key); i++)
        if (PyUnicode_CompareWithASCIIString(key, names[i]) == 0)
            return i;
    return -1;
}

/* An Event's metric values: the tuple (keys, value, ...), keys a tuple of str
 * (a call site's own keyword tuple when it holds only metrics), each value an
 * exact float or an exact int a double holds (made a double when stored).
 * NULL without an error when a value is anything else: tinyprof.annotate.args then
 * decides, as it does for the pure-Python twin. No dict per Event. */
static PyObject *
metric_values(PyObject *kwnames, PyObject *const *values, Py_ssize_t nmetric)
{
    Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
    PyObject *out = PyTuple_New(nmetric + 1);
    PyObject *keys = out == NULL ? NULL : nmetric == nkw ? Py_NewRef(kwnames) : PyTuple_New(nmetric);
    if (keys == NULL) {
        Py_XDECREF(out);
        return NULL;
    }
    PyTuple_SET_ITEM(out, 0, keys);
    Py_ssize_t j = 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k), *value = values[k];
        if (nmetric != nkw && keyword_slot(key) >= 0)
            continue;
        if (!PyFloat_CheckExact(value) &&
            (!PyLong_CheckExact(value) || (PyLong_AsDouble(value) == -1.0 && PyErr_Occurred()))) {
            PyErr_Clear();
            Py_DECREF(out);
            return NULL;
        }
        if (nmetric != nkw)
            PyTuple_SET_ITEM(keys, j, Py_NewRef(key));
        PyTuple_SET_ITEM(out, ++j, Py_NewRef(value));
    }
    return out;
}

/* The same tuple from tinyprof.annotate.args's dict of floats. */
static PyObject *
metric_values_of(PyObject *dict)
{
    Py_ssize_t n = PyDict_GET_SIZE(dict), pos = 0, j = 0;
    PyObject *out = PyTuple_New(n + 1), *keys = PyTuple_New(n), *key, *value;
    if (out == NULL || keys == NULL) {
        Py_XDECREF(out);
        Py_XDECREF(keys);
        return NULL;
    }
    PyTuple_SET_ITEM(out, 0, keys);
    while (PyDict_Next(dict, &pos, &key, &value) && j < n) {
        PyTuple_SET_ITEM(keys, j, Py_NewRef(key));
        PyTuple_SET_ITEM(out, ++j, Py_NewRef(value));
    }
    return out;
}

/* The arguments the fast path takes as they are: loop absent or an exact
 * int 0, 1 or 2, is_common absent or a bool. */
static int
event_args_trivial(PyObject *name, PyObject *is_common, PyObject *loop,
                   int *common_out, int *loop_out)
{
    if (!PyUnicode_CheckExact(name) || (is_common != NULL && !PyBool_Check(is_common)))
        return 0;
    *loop_out = 0;
    if (loop != NULL) {
        int overflow;
        long v = PyLong_CheckExact(loop) ? PyLong_AsLongAndOverflow(loop, &overflow) : -1;
        if (v < 0 || v > 2)
            return 0;
        *loop_out = (int)v;
    }
    *common_out = is_common != Py_False;
    return 1;
}

/* Everything else: tinyprof.annotate.args.event_args, which _pyevent.Event uses too,
 * normalises or raises. kwargs (the metric values) is NULL or a dict. */
static int
event_args(PyObject **name, PyObject *is_common, PyObject *loop, PyObject *kwargs,
           int *common_out, int *loop_out, PyObject **values_out)
{
    static PyObject *fn;
    if (fn == NULL && (fn = args_fn("event_args")) == NULL)
        return -1;
    PyObject *zero = PyLong_FromLong(0);
    if (zero == NULL)
        return -1;
    PyObject *args[4] = {*name, is_common != NULL ? is_common : Py_True,
                         loop != NULL ? loop : zero, kwargs != NULL ? kwargs : Py_None};
    PyObject *r = PyObject_Vectorcall(fn, args, 4, NULL);
    Py_DECREF(zero);
    if (r == NULL)
        return -1;
    int ok = PyTuple_CheckExact(r) && PyTuple_GET_SIZE(r) == 4;
    if (ok) {
        *name = PyTuple_GET_ITEM(r, 0);
        *common_out = PyObject_IsTrue(PyTuple_GET_ITEM(r, 1));
        *loop_out = (int)PyLong_AsLong(PyTuple_GET_ITEM(r, 2));
        *values_out = PyTuple_GET_ITEM(r, 3);
        ok = !PyErr_Occurred() && PyUnicode_Check(*name) && *loop_out >= 0 && *loop_out <= 2 &&
             (*values_out == Py_None || PyDict_Check(*values_out));
    }
    if (!ok) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_SystemError, "tinyprof.annotate.args.event_args gave a bad result");
        Py_DECREF(r);
        return -1;
    }
    Py_INCREF(*name);   /* the caller owns name and values */
    *values_out = *values_out == Py_None ? NULL : metric_values_of(*values_out);
    int failed = *values_out == NULL && PyErr_Occurred();
    if (failed)
        Py_DECREF(*name);
    Py_DECREF(r);
    return failed ? -1 : 0;
}

/* Warn once per kind (tinyprof.annotate.args.warn_misuse) that `name` was misused. */
static int
warn_misuse(const char *kind, PyObject *name)
{
    static PyObject *fn;
    if (fn == NULL && (fn = args_fn("warn_misuse")) == NULL)
        return -1;
    PyObject *r = PyObject_CallFunction(fn, "sOi", kind, name, 1);
    Py_XDECREF(r);
    return r != NULL ? 0 : -1;
}

static FreeList event_free;

static Event *
event_alloc(PyObject *name, int loop, int common, PyObject *values)
{
    Event *e = (Event *)free_pop(&event_free, &EventType, sizeof(Event));
    if (e == NULL) {
        Py_XDECREF(values);
        return NULL;
    }
    Py_INCREF(name);
    e->name = name;
    e->values = values;     /* stolen */
    e->node = NULL;
    e->token = NULL;
    e->exited = 0;
    e->start = 0;
    e->loop = loop;
    e->common = (char)common;
    return e;
}

/* Event(name, is_common=True, loop=0, **values) without a tuple or dict for
 * the common calls such as Event("x") or Event("x", loop=1). */
static PyObject *
event_vectorcall_new(PyObject *type, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    (void)type;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs == 1 && kwnames == NULL && PyUnicode_CheckExact(args[0]))
        return (PyObject *)event_alloc(args[0], 0, 1, NULL);
    if (nargs > 3) {
        PyErr_Format(PyExc_TypeError,
                     "tinyprof.Event takes at most 3 positional arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *pos[3] = {NULL, NULL, NULL};   /* name, is_common, loop */
    static const char *const names[3] = {"name", "is_common", "loop"};
    for (Py_ssize_t i = 0; i < nargs; i++)
        pos[i] = args[i];
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0, nmetric = 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        int slot = keyword_slot(PyTuple_GET_ITEM(kwnames, k));
        if (slot < 0)
            nmetric++;
        else if (pos[slot] != NULL) {
            PyErr_Format(PyExc_TypeError,
                         "tinyprof.Event got multiple values for argument '%s'", names[slot]);
            return NULL;
        }
        else
            pos[slot] = args[nargs + k];
    }
    if (pos[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "tinyprof.Event missing required argument 'name'");
        return NULL;
    }
    int common, loop;
    if (event_args_trivial(pos[0], pos[1], pos[2], &common, &loop)) {
        PyObject *values = nmetric ? metric_values(kwnames, args + nargs, nmetric) : NULL;
        if (values != NULL || nmetric == 0)
            return (PyObject *)event_alloc(pos[0], loop, common, values);
        if (PyErr_Occurred())
            return NULL;
    }
    PyObject *kwargs = NULL;            /* the rest: tinyprof.annotate.args, with the metrics as a dict */
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        if (keyword_slot(key) < 0 &&
            ((kwargs == NULL && (kwargs = PyDict_New()) == NULL) ||
             PyDict_SetItem(kwargs, key, args[nargs + k]) < 0)) {
            Py_XDECREF(kwargs);
            return NULL;
        }
    }
    PyObject *name = pos[0], *values;
    int failed = event_args(&name, pos[1], pos[2], kwargs, &common, &loop, &values);
    Py_XDECREF(kwargs);
    if (failed < 0)
        return NULL;
    PyObject *e = (PyObject *)event_alloc(name, loop, common, values);
    Py_DECREF(name);
    return e;
}

/* tp_new, for the callers that bypass vectorcall, such as Event.__new__(Event, ...). */
static PyObject *
event_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *kwnames = NULL;
    Py_ssize_t nargs = PyTuple_GET_SIZE(args), nkw = kwds != NULL ? PyDict_GET_SIZE(kwds) : 0;
    PyObject **stack = PyMem_Malloc((size_t)(nargs + nkw + 1) * sizeof(PyObject *));
    if (stack == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < nargs; i++)
        stack[i] = PyTuple_GET_ITEM(args, i);
    if (nkw > 0) {
        kwnames = PyTuple_New(nkw);
        if (kwnames == NULL) {
            PyMem_Free(stack);
            return NULL;
        }
        Py_ssize_t pos = 0, k = 0;
        PyObject *key, *value;
        while (PyDict_Next(kwds, &pos, &key, &value)) {
            Py_INCREF(key);
            PyTuple_SET_ITEM(kwnames, k, key);
            stack[nargs + k++] = value;
        }
    }
    PyObject *r = event_vectorcall_new((PyObject *)type, stack, (size_t)nargs, kwnames);
    Py_XDECREF(kwnames);
    PyMem_Free(stack);
    return r;
}

static void
event_dealloc(Event *e)
{
    Py_DECREF(e->name);
    Py_XDECREF(e->values);
    Py_XDECREF(e->node);
    Py_XDECREF(e->token);
    free_push(&event_free, (PyObject *)e);
}

static PyObject *
event_enter(Event *e, PyObject *unused)
{
    (void)unused;
    if (e->token != NULL) {     /* still open: ignored */
        if (warn_misuse("enter", e->name) < 0)
            return NULL;
        return Py_NewRef(e);
    }
    PyObject *token;
    Node *node = open_node(e->name, e->loop, e->common, &token);
    if (node == NULL)
        return NULL;
    if (read_clock(&e->start) < 0) {   /* not entered after all */
        undo_open(node, token);
        Py_DECREF(token);
        Py_DECREF(node);
        return NULL;
    }
    e->node = node;
    e->token = token;
    Py_INCREF(e);
    return (PyObject *)e;
}

static PyObject *
event_exit(Event *e, PyObject *const *args, Py_ssize_t nargs)
{
    (void)args;
    (void)nargs;
    int64_t end;
    if (read_clock(&end) < 0)
        return NULL;
    if (e->token == NULL) {     /* not open: ignored */
        if (warn_misuse(e->exited ? "exit_twice" : "exit", e->name) < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    if (close_node(e->node, e->token) < 0)
        return NULL;
    Node *node = e->node;       /* closed now: the hook may enter e again */
    PyObject *token = e->token;
    e->node = NULL;
    e->token = NULL;
    e->exited = 1;
    int rc = record(node, e->start, end, e->values);
    Py_DECREF(token);
    Py_DECREF(node);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *wrapper_create(Event *e, PyObject *func);

static PyObject *
event_call(Event *e, PyObject *args, PyObject *kwds)
{
    PyObject *func;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "tinyprof.Event() as a decorator takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "Event", 1, 1, &func))
        return NULL;
    return wrapper_create(e, func);
}

static PyObject *
event_get_values(Event *e, void *closure)
{
    (void)closure;
    if (e->values == NULL)
        Py_RETURN_NONE;
    PyObject *out = PyDict_New(), *keys = PyTuple_GET_ITEM(e->values, 0);
    for (Py_ssize_t i = 0; out != NULL && i < PyTuple_GET_SIZE(keys); i++) {
        PyObject *f = PyFloat_FromDouble(value_double(PyTuple_GET_ITEM(e->values, i + 1)));
        if (f == NULL || PyDict_SetItem(out, PyTuple_GET_ITEM(keys, i), f) < 0)
            Py_CLEAR(out);
        Py_XDECREF(f);
    }
    return out;        /* a dict of floats, made on demand */
}

static PyObject *
event_get_is_common(Event *e, void *closure)
{
    (void)closure;
    return PyBool_FromLong(e->common);
}

static PyMemberDef event_members[] = {
    {"name", T_OBJECT, offsetof(Event, name), READONLY, NULL},
    {"loop", T_INT, offsetof(Event, loop), READONLY, NULL},
    {NULL}
};

static PyGetSetDef event_getset[] = {
    {"is_common", (getter)event_get_is_common, NULL, NULL, NULL},
    {"values", (getter)event_get_values, NULL, "metric values as floats, or None", NULL},
    {NULL}
};

static PyTypeObject EventType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tinyprof.annotate._core.Event",
    .tp_doc = "Event(name, is_common=True, loop=0, **values)\n--\n\n"
              "A profiled region: ``with Event(\"solve\"):`` or ``@Event(\"solve\")``.",
    .tp_basicsize = sizeof(Event),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = event_new,
    .tp_vectorcall = event_vectorcall_new,
    .tp_dealloc = (destructor)event_dealloc,
    .tp_call = (ternaryfunc)event_call,
    .tp_members = event_members,
    .tp_getset = event_getset,
};

/* ---- __enter__ and __exit__ ------------------------------------------------------
 * A with statement looks both up on every use, and a builtin method would
 * allocate and GC-track a bound-method object each time. These descriptors
 * hand out bound objects from a free list instead. The unbound descriptor
 * (self NULL, in Event's dict) takes the Event as its first argument, as
 * contextlib.ExitStack calls it. */

typedef struct {
    PyObject_HEAD
    PyObject *self;         /* the Event, NULL in the unbound descriptor */
    vectorcallfunc vectorcall;
    int is_exit;
} Method;

static PyTypeObject MethodType;
static FreeList method_free;

static PyObject *
method_call(Method *m, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *self = m->self;
    const char *name = m->is_exit ? "__exit__" : "__enter__";
    if (self == NULL) {
        if (nargs < 1 || Py_TYPE(args[0]) != &EventType) {
            PyErr_Format(PyExc_TypeError, "Event.%s needs a tinyprof Event argument", name);
            return NULL;
        }
        self = *args++;
        nargs--;
    }
    if ((kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0) || (!m->is_exit && nargs != 0)) {
        PyErr_Format(PyExc_TypeError, "Event.%s got unexpected arguments", name);
        return NULL;
    }
    return m->is_exit ? event_exit((Event *)self, args, nargs) : event_enter((Event *)self, NULL);
}

static PyObject *
method_get(Method *m, PyObject *obj, PyObject *type)
{
    (void)type;
    if (obj == NULL || m->self != NULL) {
        Py_INCREF(m);
        return (PyObject *)m;
    }
    Method *b = (Method *)free_pop(&method_free, &MethodType, sizeof(Method));
    if (b == NULL)
        return NULL;
    Py_INCREF(obj);
    b->self = obj;
    b->vectorcall = (vectorcallfunc)method_call;
    b->is_exit = m->is_exit;
    return (PyObject *)b;
}

static void
method_dealloc(Method *m)
{
    Py_CLEAR(m->self);
    free_push(&method_free, (PyObject *)m);
}

static PyObject *
method_repr(Method *m)
{
    const char *name = m->is_exit ? "__exit__" : "__enter__";
    if (m->self == NULL)
        return PyUnicode_FromFormat("<method '%s' of 'tinyprof.annotate._core.Event' objects>", name);
    return PyUnicode_FromFormat("<bound method Event.%s of %R>", name, m->self);
}

static PyTypeObject MethodType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tinyprof.annotate._core.EventMethod",
    .tp_basicsize = sizeof(Method),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(Method, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = (descrgetfunc)method_get,
    .tp_dealloc = (destructor)method_dealloc,
    .tp_repr = (reprfunc)method_repr,
};

static int
add_method(const char *name, int is_exit)
{
    Method *m = PyObject_New(Method, &MethodType);
    if (m == NULL)
        return -1;
    m->self = NULL;
    m->vectorcall = (vectorcallfunc)method_call;
    m->is_exit = is_exit;
    int rc = PyDict_SetItemString(EventType.tp_dict, name, (PyObject *)m);
    Py_DECREF(m);
    return rc;
}

/* ---- the decorator's wrapper -------------------------------------------------- */

/* What @Event(...) returns: calls func inside a fresh occurrence of the event,
 * exactly like ``with Event(...): return func(...)``, without an Event object. */
typedef struct {
    PyObject_HEAD
    PyObject *func;
    PyObject *name;
    PyObject *values;
    PyObject *dict;     /* __name__, __qualname__, __doc__, __wrapped__, ... */
    vectorcallfunc vectorcall;
    int loop;
    char common;
} Wrapper;

static PyTypeObject WrapperType;

static PyObject *
wrapper_vectorcall(Wrapper *w, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *token;
    int64_t start, end;
    Node *node = open_node(w->name, w->loop, w->common, &token);
    if (node == NULL)
        return NULL;
    PyObject *result = NULL;
    if (read_clock(&start) < 0)
        undo_open(node, token);
    else {
        result = PyObject_Vectorcall(w->func, args, nargsf, kwnames);
        /* as in a with statement: the body's exception propagates after the
         * exit steps, or becomes the __context__ of an error they raise */
        PyObject *body_exc = result == NULL ? err_fetch() : NULL;
        if (read_clock(&end) < 0 || close_node(node, token) < 0 ||
            record(node, start, end, w->values) < 0) {
            Py_CLEAR(result);
            PyObject *exc = err_fetch();
            PyException_SetContext(exc, body_exc);
            err_restore(exc);
        }
        else
            err_restore(body_exc);
    }
    Py_DECREF(token);
    Py_DECREF(node);
    return result;
}

static PyObject *
wrapper_create(Event *e, PyObject *func)
{
    if (!PyCallable_Check(func)) {
        /* The name quoted as args.quoted does: a 10 MB name makes no 10 MB message. */
        Py_ssize_t n = PyUnicode_GET_LENGTH(e->name);
        PyObject *cut = PyUnicode_Substring(e->name, 0, n < 80 ? n : 80);
        if (cut == NULL)
            return NULL;
        if (n <= 80)
            PyErr_Format(PyExc_TypeError, "tinyprof.Event %R: can only decorate a callable, not %s",
                         cut, Py_TYPE(func)->tp_name);
        else
            PyErr_Format(PyExc_TypeError, "tinyprof.Event %R... (%zd characters): can only "
                         "decorate a callable, not %s", cut, n, Py_TYPE(func)->tp_name);
        Py_DECREF(cut);
        return NULL;
    }
#if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000
    /* 3.12 counts every call from C into Python against a C recursion limit
     * (1,500 in 3.12.1) that sys.setrecursionlimit does not raise: a function
     * recursing through this C wrapper would stop 748 levels deep, where a
     * Python wrapper's calls stay inside the interpreter. So on 3.12 the
     * wrapper is pyevent's, around this core's Event (docs/events.md#depth). */
    PyObject *values = event_get_values(e, NULL);
    if (values == NULL)
        return NULL;
    if (values == Py_None) {
        Py_DECREF(values);
        values = PyDict_New();
    }
    PyObject *pyevent = values ? PyImport_ImportModule("tinyprof.annotate.pyevent") : NULL;
    PyObject *out = pyevent ? PyObject_CallMethod(pyevent, "decorate", "OOOiOO", (PyObject *)&EventType,
                                                  e->name, e->common ? Py_True : Py_False, e->loop,
                                                  values, func) : NULL;
    Py_XDECREF(pyevent);
    Py_XDECREF(values);
    return out;
#endif
    Wrapper *w = PyObject_GC_New(Wrapper, &WrapperType);
    if (w == NULL)
        return NULL;
    Py_INCREF(func);
    w->func = func;
    Py_INCREF(e->name);
    w->name = e->name;
    Py_XINCREF(e->values);
    w->values = e->values;
    w->dict = NULL;
    w->vectorcall = (vectorcallfunc)wrapper_vectorcall;
    w->loop = e->loop;
    w->common = e->common;
    PyObject_GC_Track(w);
    PyObject *functools = PyImport_ImportModule("functools");
    if (functools == NULL)
        goto fail;
    PyObject *r = PyObject_CallMethod(functools, "update_wrapper", "OO", (PyObject *)w, func);
    Py_DECREF(functools);
    if (r == NULL)
        goto fail;
    Py_DECREF(r);
    return (PyObject *)w;
fail:
    Py_DECREF(w);
    return NULL;
}

static int
wrapper_traverse(Wrapper *w, visitproc visit, void *arg)
{
    Py_VISIT(w->func);
    Py_VISIT(w->dict);
    return 0;
}

static int
wrapper_clear(Wrapper *w)
{
    Py_CLEAR(w->func);
    Py_CLEAR(w->dict);
    return 0;
}

static void
wrapper_dealloc(Wrapper *w)
{
    PyObject_GC_UnTrack(w);
    wrapper_clear(w);
    Py_CLEAR(w->name);
    Py_CLEAR(w->values);
    PyObject_GC_Del(w);
}

/* Bind like a function, so decorated methods get their self. */
static PyObject *
wrapper_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    (void)type;
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

static PyObject *
wrapper_repr(Wrapper *w)
{
    return PyUnicode_FromFormat("<tinyprof.Event %R wrapping %R>", w->name, w->func);
}

static PyGetSetDef wrapper_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL}
};

static PyTypeObject WrapperType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tinyprof.annotate._core.EventWrapper",
    .tp_doc = "A function decorated with a tinyprof.Event.",
    .tp_basicsize = sizeof(Wrapper),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(Wrapper, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dictoffset = offsetof(Wrapper, dict),
    .tp_dealloc = (destructor)wrapper_dealloc,
    .tp_traverse = (traverseproc)wrapper_traverse,
    .tp_clear = (inquiry)wrapper_clear,
    .tp_descr_get = wrapper_descr_get,
    .tp_repr = (reprfunc)wrapper_repr,
    .tp_getset = wrapper_getset,
};

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
