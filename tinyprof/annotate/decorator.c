/* decorator.c: the wrapper that @Event(...) returns.
 * Part of the tinyprof.annotate._core extension: included by _core.c, which
 * holds the module state this file uses; not compiled on its own. */

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
        /* The name quoted as errors.excerpt does: a 10 MB name makes no 10 MB message. */
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
