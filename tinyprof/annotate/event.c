/* event.c: Event, and its __enter__ and __exit__ descriptors.
 * Part of the tinyprof.annotate._core extension: included by _core.c, which
 * holds the module state this file uses; not compiled on its own. */

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
