/* node.c: the event map's Node, one per callpath.
 * Part of the tinyprof.annotate._core extension: included by _core.c, which
 * holds the module state this file uses; not compiled on its own. */

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
