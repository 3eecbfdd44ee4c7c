/* context.c: the current node, a ContextVar, and its fast path.
 * Part of the tinyprof.annotate._core extension: included by _core.c, which
 * holds the module state this file uses; not compiled on its own. */

/* ---- the current node: a ContextVar ----------------------------------------
 * current_set() makes a node current and returns a token, current_restore()
 * gives the parent back. With the public API that is PyContextVar_Set/Reset:
 * 85-130 ns a pair, as each builds a new immutable HAMT (the context's map of
 * variables) and Set a Token too.
 *
 * Fast path (CPython 3.9-3.13 with the GIL; CPython's private structs from
 * cpython_internals.h, their semantics checked at import): each
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

#include "cpython_internals.h"

#ifdef FAST_CONTEXT
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
