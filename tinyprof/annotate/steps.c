/* steps.c: the enter and exit steps that Event and the decorator share.
 * Part of the tinyprof.annotate._core extension: included by _core.c, which
 * holds the module state this file uses; not compiled on its own. */

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
