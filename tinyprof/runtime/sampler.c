/* sampler.c: sampled stacks, counted in C.
 * Part of the tinyprof.runtime._frames extension: included by _frames.c,
 * with cpython_frames.h before it; not compiled on its own. */

/* ---- sampled stacks -------------------------------------------------------
 *
 * A Samples object counts one process's sampled stacks: `run` sleeps and
 * takes a sample, HZ times a second, in the sampler thread; `take` reads,
 * holding the GIL, every thread's frames and innermost open event and adds
 * the time since the previous sample to the count of (execution, parent
 * node id, thread, the MPI call it is inside, code objects): C arrays of
 * pointers in an open-addressing table, no Python object made (a new key
 * keeps references to its code objects, so that their addresses stay
 * theirs). `drain` hands the counts over and starts afresh; the names are
 * made from them then, in Python (Sampler), not per sample. Python
 * code runs only before the table is touched (the thread names, and finding
 * the core's ContextVar), so a drain from another thread never sees it half
 * changed.
 *
 * Thread names come from threading, which registers a thread only once it
 * runs (Thread._bootstrap_inner), or never (_thread.start_new_thread). A
 * thread state the names do not know (a miss: the names are refreshed, in
 * the sampler's own turn) is counted under a stand-in: the threading.Thread
 * its outermost frame runs (self of Thread._bootstrap, before threading
 * registers it), named by the drain; else its id as a str, named by a
 * later refresh that finds it named while it lives (the next sample's,
 * every 100th, each drain's). So all of a thread's samples are named
 * alike, and only a thread that ends unnamed keeps its id. A thread is its
 * id and its thread state's unique id: a reused id is a new thread (a
 * miss), not the old one. Thread states with no frame are not sampled: a
 * new thread's state is made by the thread that starts it, with the
 * starter's id, before the new thread runs. */

typedef struct {
    unsigned long ident;
    uint64_t uid;               /* its thread state's id once seen (0: not yet) */
    PyObject *name;             /* owned; NULL: tinyprof's thread, never sampled */
    int standin;                /* name is a stand-in (a Thread, or its id) until threading names it */
} Thread;

typedef struct {
    uint64_t hash;
    int64_t execution, ns;
    int32_t parent;
    int op, n;                  /* op: the MPI call the thread was inside (the library's code), or -1 */
    PyObject *thread;           /* owned name; NULL: the main thread */
    PyObject **codes;           /* owned, innermost first */
} Entry;

typedef int (*in_call_fn)(uint64_t);

typedef struct {
    PyObject_HEAD
    in_call_fn in_call;         /* libtinyprof_mpi's tinyprof_mpi_in_call, or NULL: no MPI capture */
    PyObject *executions;       /* () -> executions started (the core's) */
    PyObject *names;            /* () -> {thread id: name, None for tinyprof's} */
    PyObject *node_type;        /* the core's Node */
    PyObject *thread_type;      /* threading.Thread */
    PyObject *var;              /* the ContextVar holding a thread's node, once seen */
    unsigned long main;
    _Atomic(PyThreadState *) main_ts;  /* once seen; only compared, without the GIL */
    PyInterpreterState *interp;
    atomic_int want;            /* a sample asked of the main thread's pending call */
    atomic_int queued;          /* that pending call is queued */
    atomic_int names_due;       /* the thread names need Python code: the sampler's own turn */
    int retry;                  /* the last refresh made an id stand-in: refresh at the next sample too */
    PyObject **renamed;         /* owned pairs (stand-in, its name since), until the next drain */
    Py_ssize_t nrenamed, renamed_cap;
    atomic_int failed;          /* the pending call's sample failed: its exception below */
    int call_ref;               /* the queued call holds a reference (run() has returned) */
    PyObject *error[3];
    int dflt;                   /* parent of threads with no open event (0: the main thread's outermost) */
    long long taken, by_main, main_ns;
    int64_t last;
    atomic_int stopped;
    Thread *threads;
    Py_ssize_t nthreads;
    Entry *entries;
    size_t n, cap;
    uint32_t *slots;            /* entry index + 1, 0: empty; a power of two, at most 3/4 used */
    size_t nslots;
    PyObject **scratch;         /* one stack's code objects */
    size_t scap;
} Samples;

static PyObject *str_parent, *str_id;

static int64_t
monotonic_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);     /* time.perf_counter_ns's clock */
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void
threads_clear(Thread *t, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        Py_XDECREF(t[i].name);
    PyMem_Free(t);
}

static void
entries_clear(Entry *e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        Py_XDECREF(e[i].thread);
        for (int j = 0; j < e[i].n; j++)
            Py_DECREF(e[i].codes[j]);
        PyMem_Free(e[i].codes);
    }
    PyMem_Free(e);
}

static int
has_frame(PyThreadState *ts)
{
    return top_frame(ts) != NULL;
}

static void
renamed_clear(PyObject **renamed, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        Py_DECREF(renamed[i]);
    PyMem_Free(renamed);
}

/* The table's entry of a thread state (an entry made from names() adopts
 * the first state seen with its id), or NULL. */
static Thread *
thread_find(Samples *self, PyThreadState *ts)
{
    for (Py_ssize_t i = 0; i < self->nthreads; i++) {
        Thread *t = &self->threads[i];
        if (t->ident == ts->thread_id && (t->uid == ts->id || t->uid == 0)) {
            t->uid = ts->id;
            return t;
        }
    }
    return NULL;
}

/* Remembers that `standin`'s samples are `name`'s (references taken). */
static int
renamed_add(Samples *self, PyObject *standin, PyObject *name)
{
    if (self->nrenamed + 2 > self->renamed_cap) {
        Py_ssize_t cap = self->renamed_cap ? self->renamed_cap * 2 : 8;
        PyObject **r = PyMem_Realloc(self->renamed, (size_t)cap * sizeof(PyObject *));
        if (r == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->renamed = r;
        self->renamed_cap = cap;
    }
    self->renamed[self->nrenamed++] = Py_NewRef(standin);
    self->renamed[self->nrenamed++] = Py_NewRef(name);
    return 0;
}

/* The threading.Thread a thread state's outermost frame is a method of
 * (its first local), as Thread._bootstrap is, or NULL. Runs no Python code. */
static PyObject *
started(Samples *self, PyThreadState *ts)
{
    _PyInterpreterFrame *f = NULL;
    for (_PyInterpreterFrame *g = top_frame(ts); g != NULL; g = g->previous)
        if (frame_code(g) != NULL)
            f = g;
    if (f == NULL || frame_code(f)->co_argcount < 1 || f->localsplus[0] == NULL
        || self->thread_type == NULL || !PyObject_TypeCheck(f->localsplus[0], (PyTypeObject *)self->thread_type))
        return NULL;
    return f->localsplus[0];
}

/* Thread names afresh from names() (Python code), for every thread state
 * with a frame: threading's name; else the name or stand-in the table had
 * for that state (a thread not registered yet, or ending); else a new
 * stand-in. A stand-in of a state now named by threading takes its name. */
static int
threads_refresh(Samples *self)
{
    PyObject *d = PyObject_CallNoArgs(self->names);
    if (d == NULL)
        return -1;
    if (!PyDict_Check(d)) {
        Py_DECREF(d);
        PyErr_SetString(PyExc_TypeError, "names() must return a dict");
        return -1;
    }
    /* no Python code from here: the table and the thread states stay as read */
    Py_ssize_t nts = 0;
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(self->interp); ts != NULL; ts = PyThreadState_Next(ts))
        nts++;
    Thread *t = PyMem_Calloc((size_t)(PyDict_GET_SIZE(d) + nts) + 1, sizeof(Thread));
    if (t == NULL) {
        Py_DECREF(d);
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t pos = 0, n = 0;
    PyObject *k, *v;
    while (PyDict_Next(d, &pos, &k, &v)) {
        t[n].ident = PyLong_AsUnsignedLong(k);
        if (t[n].ident == (unsigned long)-1 && PyErr_Occurred()) {
            threads_clear(t, n);
            Py_DECREF(d);
            return -1;
        }
        t[n].name = v == Py_None ? NULL : Py_NewRef(v);
        n++;
    }
    Py_DECREF(d);
    Py_ssize_t named = n;
    int made = 0;
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(self->interp); ts != NULL; ts = PyThreadState_Next(ts)) {
        if (!has_frame(ts))
            continue;
        Thread *old = thread_find(self, ts), *now = NULL;
        for (Py_ssize_t i = 0; i < named && now == NULL; i++)
            if (t[i].ident == ts->thread_id && t[i].uid == 0)
                now = &t[i];
        if (now != NULL) {
            now->uid = ts->id;
            if (old != NULL && old->standin && now->name != NULL && renamed_add(self, old->name, now->name) < 0) {
                threads_clear(t, n);
                return -1;
            }
            continue;
        }
        t[n].ident = ts->thread_id;
        t[n].uid = ts->id;
        if (old != NULL) {
            t[n].standin = old->standin;
            t[n++].name = Py_XNewRef(old->name);
            continue;
        }
        PyObject *thread = started(self, ts);
        /* else a str: no tracked object, so no collection and no Python code */
        t[n].name = thread ? Py_NewRef(thread) : PyUnicode_FromFormat("%lu", ts->thread_id);
        if (t[n].name == NULL) {
            threads_clear(t, n);
            return -1;
        }
        made |= thread == NULL;     /* a Thread names itself: no retry */
        t[n++].standin = 1;
    }
    threads_clear(self->threads, self->nthreads);
    self->threads = t;
    self->nthreads = n;
    self->retry = made;
    return 0;
}

/* The ContextVar whose values are the core's nodes, from the first context
 * that holds one. Runs Python code (iterates contexts). */
static void
find_var(Samples *self)
{
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
         ts != NULL && self->var == NULL; ts = PyThreadState_Next(ts)) {
        if (ts->context == NULL)
            continue;
        PyObject *ctx = Py_NewRef(ts->context), *it = PyObject_GetIter(ctx), *key;
        while (it != NULL && self->var == NULL && (key = PyIter_Next(it)) != NULL) {
            PyObject *value = PyObject_GetItem(ctx, key);
            if (value != NULL && Py_TYPE(value) == (PyTypeObject *)self->node_type)
                self->var = Py_NewRef(key);
            Py_XDECREF(value);
            Py_DECREF(key);
        }
        Py_XDECREF(it);
        Py_DECREF(ctx);
        PyErr_Clear();
    }
}

/* The node a context holds as its thread's innermost open event (a new
 * reference), or NULL: none, or the root. */
static PyObject *
context_node(Samples *self, PyObject *ctx)
{
    if (ctx == NULL || self->var == NULL || PySequence_Contains(ctx, self->var) != 1)
        return NULL;
    PyObject *node = PyObject_GetItem(ctx, self->var);
    if (node == NULL || Py_TYPE(node) != (PyTypeObject *)self->node_type) {
        PyErr_Clear();
        Py_XDECREF(node);
        return NULL;
    }
    PyObject *parent = PyObject_GetAttr(node, str_parent);
    int root = parent == NULL || parent == Py_None;
    PyErr_Clear();
    Py_XDECREF(parent);
    if (root)
        Py_CLEAR(node);
    return node;
}

static int32_t
node_id(PyObject *node)
{
    PyObject *id = PyObject_GetAttr(node, str_id);
    long v = id ? PyLong_AsLong(id) : 0;
    Py_XDECREF(id);
    PyErr_Clear();              /* unreadable: counted under the root */
    return (int32_t)v;
}

/* The id of the outermost open event above `node` (stolen; NULL: 0). */
static int32_t
outermost(PyObject *node)
{
    while (node != NULL) {
        PyObject *parent = PyObject_GetAttr(node, str_parent);
        PyObject *grand = parent && parent != Py_None ? PyObject_GetAttr(parent, str_parent) : NULL;
        int top = grand == NULL || grand == Py_None;
        PyErr_Clear();
        Py_XDECREF(grand);
        if (top) {
            Py_XDECREF(parent);
            break;
        }
        Py_SETREF(node, parent);
    }
    int32_t id = node ? node_id(node) : 0;
    Py_XDECREF(node);
    return id;
}

static int
slots_grow(Samples *self)
{
    size_t nslots = self->nslots ? self->nslots * 2 : 256;
    uint32_t *slots = PyMem_Calloc(nslots, sizeof(uint32_t));
    if (slots == NULL)
        return -1;
    for (size_t j = 0; j < self->n; j++) {
        size_t i = (size_t)self->entries[j].hash & (nslots - 1);
        while (slots[i])
            i = (i + 1) & (nslots - 1);
        slots[i] = (uint32_t)(j + 1);
    }
    PyMem_Free(self->slots);
    self->slots = slots;
    self->nslots = nslots;
    return 0;
}

/* Adds `ns` to the count of a stack, a new entry if it was not seen. */
static int
count(Samples *self, uint64_t hash, int64_t execution, int32_t parent, PyObject *thread, int op,
      int n, int64_t ns)
{
    if ((self->n + 1) * 4 > self->nslots * 3 && slots_grow(self) < 0)
        return -1;
    size_t mask = self->nslots - 1, i = (size_t)hash & mask;
    for (; self->slots[i]; i = (i + 1) & mask) {
        Entry *e = &self->entries[self->slots[i] - 1];
        if (e->hash == hash && e->execution == execution && e->parent == parent && e->thread == thread
            && e->op == op && e->n == n
            && memcmp(e->codes, self->scratch, (size_t)n * sizeof(PyObject *)) == 0) {
            e->ns += ns;
            return 0;
        }
    }
    if (self->n == self->cap) {
        size_t cap = self->cap ? self->cap * 2 : 64;
        Entry *entries = PyMem_Realloc(self->entries, cap * sizeof(Entry));
        if (entries == NULL)
            return -1;
        self->entries = entries;
        self->cap = cap;
    }
    PyObject **codes = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(PyObject *));
    if (codes == NULL)
        return -1;
    for (int j = 0; j < n; j++)
        codes[j] = Py_NewRef(self->scratch[j]);
    self->entries[self->n] = (Entry){hash, execution, ns, parent, op, n, Py_XNewRef(thread), codes};
    self->slots[i] = (uint32_t)++self->n;
    return 0;
}

/* One sample of every thread but tinyprof's; whether a thread is inside an
 * MPI call, and which, is libtinyprof_mpi's word (in_call), never a name's.
 * `own`: in the sampler's thread, which may run the thread names' Python
 * code; else (the main
 * thread's pending call, which may have interrupted threading's own code
 * holding its lock) a sample that needs them is left to the sampler's next
 * turn (0, names_due set), its time carried over to that sample. 1: taken. */
static int
take(Samples *self, int own)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    int refresh = self->taken % 100 == 0 || self->retry;    /* renamed threads; stand-ins named */
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts != NULL && !refresh;
         ts = PyThreadState_Next(ts))
        refresh = has_frame(ts) && thread_find(self, ts) == NULL;
    if (refresh && !own) {
        atomic_store(&self->names_due, 1);
        return 0;
    }
    /* Python code first: the table is not touched yet */
    PyObject *r = PyObject_CallNoArgs(self->executions);
    long long execution = r ? PyLong_AsLongLong(r) - 1 : -2;
    Py_XDECREF(r);
    if (execution == -2 && PyErr_Occurred())
        return -1;
    if (execution < 0)
        execution = 0;
    if (refresh && threads_refresh(self) < 0)
        return -1;
    atomic_store(&self->names_due, 0);
    if (self->var == NULL)
        find_var(self);

    int64_t now = monotonic_ns(), weight = now - self->last;
    self->last = now;
    int32_t dflt = -1;          /* threads with no open event: computed when first needed */
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts != NULL; ts = PyThreadState_Next(ts)) {
        if (!has_frame(ts))
            continue;
        if (ts->thread_id == self->main)
            self->main_ts = ts;
        Thread *t = thread_find(self, ts);
        if (t == NULL)              /* started since the refresh (find_var ran Python code) */
            atomic_store(&self->names_due, 1);
        if (t == NULL || t->name == NULL)
            continue;
        int n = 0;
        for (_PyInterpreterFrame *f = top_frame(ts); f != NULL; f = f->previous) {
            PyCodeObject *c = frame_code(f);
            if (c == NULL)
                continue;
            if ((size_t)n == self->scap) {
                size_t scap = self->scap ? self->scap * 2 : 64;
                PyObject **scratch = PyMem_Realloc(self->scratch, scap * sizeof(PyObject *));
                if (scratch == NULL) {
                    PyErr_NoMemory();
                    return -1;
                }
                self->scratch = scratch;
                self->scap = scap;
            }
            self->scratch[n++] = (PyObject *)c;
        }
        if (n == 0)
            continue;
        PyObject *node = context_node(self, ts->context);
        int32_t parent;
        if (node != NULL) {
            parent = node_id(node);
            Py_DECREF(node);
        } else {
            if (dflt < 0) {
                /* below the main thread's events while one is open, never after they closed */
                PyObject *top = NULL;
                for (PyThreadState *m = PyInterpreterState_ThreadHead(interp); m != NULL; m = PyThreadState_Next(m))
                    if (m->thread_id == self->main) {
                        top = context_node(self, m->context);
                        break;
                    }
                dflt = top == NULL ? 0 : self->dflt;
                if (dflt == 0)
                    dflt = outermost(top);
                else
                    Py_DECREF(top);
            }
            parent = dflt;
        }
        PyObject *thread = ts->thread_id == self->main ? NULL : t->name;
        int op = self->in_call ? self->in_call((uint64_t)ts->thread_id) : -1;
        uint64_t hash = mix(mix(mix(mix((uint64_t)execution, (uint32_t)parent), (uintptr_t)thread),
                                (uint32_t)op), (uint32_t)n);
        for (int j = 0; j < n; j++)
            hash = mix(hash, (uintptr_t)self->scratch[j]);
        if (count(self, hash, execution, parent, thread, op, n, weight) < 0) {
            PyErr_NoMemory();
            return -1;
        }
    }
    self->taken++;
    return 1;
}

static PyObject *
samples_take(Samples *self, PyObject *unused)
{
    (void)unused;
    if (take(self, 1) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* The main thread's pending call: the sample asked, taken by the thread
 * that runs Python, between two of its instructions. Never fails into the
 * program: a failure is kept for the sampler thread to report. */
static int
pending_sample(void *arg)
{
    Samples *self = arg;
    atomic_store(&self->queued, 0);
    if (atomic_exchange(&self->want, 0) && !self->stopped && !atomic_load(&self->failed)) {
        int64_t start = monotonic_ns();
        int r = take(self, 0);
        self->main_ns += monotonic_ns() - start;
        if (r < 0) {
            PyErr_Fetch(&self->error[0], &self->error[1], &self->error[2]);
            atomic_store(&self->failed, 1);
        }
        self->by_main += r > 0;
    }
    if (self->call_ref) {
        self->call_ref = 0;
        Py_DECREF(self);
    }
    return 0;
}

/* run(interval ns, limit): sleep, take a sample, until stop() (False) or
 * the table holds `limit` stacks or more (True: drain it, run again); in the sampler
 * thread. While the main thread runs Python (it holds the GIL), the sample
 * is asked of it as a pending call, which it runs at its next instruction:
 * taking the GIL from it instead would make it hand the GIL over, wait
 * until this thread is scheduled and wait again for it back, which on a
 * loaded machine costs it far more than the sample. Else (the main thread
 * waits in MPI, sleeps or has ended; or the call is refused) this thread
 * takes the GIL and the sample. */
static PyObject *
samples_run(Samples *self, PyObject *args)
{
    long long interval;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "Ln", &interval, &limit))
        return NULL;
    if (interval <= 0 || limit <= 0)
        return PyErr_Format(PyExc_ValueError, "the interval and the limit must be > 0");
    int ok = 1, full = 0;
    PyThreadState *me = PyEval_SaveThread();
    while (!self->stopped && !atomic_load(&self->failed)) {
        struct timespec t = {(time_t)(interval / 1000000000), (long)(interval % 1000000000)};
        while (nanosleep(&t, &t) != 0 && errno == EINTR)
            ;
        if (self->stopped)
            break;
        PyThreadState *main = self->main_ts;
        if (main != NULL && !atomic_load(&self->names_due) && holds_gil(self->interp, main)) {
            atomic_store(&self->want, 1);
            if (atomic_exchange(&self->queued, 1) || Py_AddPendingCall(pending_sample, self) == 0) {
                wake(self->interp, main);
                continue;
            }
            atomic_store(&self->queued, 0);
        }
        atomic_store(&self->want, 0);
        PyEval_RestoreThread(me);
        ok = take(self, 1) >= 0;
        full = self->n >= (size_t)limit;    /* read here, holding the GIL: at least each 100th sample */
        me = PyEval_SaveThread();
        if (!ok || full)
            break;
    }
    PyEval_RestoreThread(me);
    if (atomic_load(&self->queued) && !self->call_ref) {
        Py_INCREF(self);        /* the queued call's, dropped when it runs */
        self->call_ref = 1;
    }
    if (ok && atomic_load(&self->failed) && self->error[0] != NULL) {
        PyErr_Restore(self->error[0], self->error[1], self->error[2]);
        self->error[0] = self->error[1] = self->error[2] = NULL;
    }
    if (PyErr_Occurred())
        return NULL;
    return PyBool_FromLong(full);
}

static PyObject *
samples_stop(Samples *self, PyObject *unused)
{
    (void)unused;
    atomic_store(&self->stopped, 1);
    Py_RETURN_NONE;
}

/* What a stand-in's samples are named: its thread's name if a refresh found it, else its id. */
static PyObject *
renamed_find(PyObject **renamed, Py_ssize_t n, PyObject *thread)
{
    for (Py_ssize_t i = 0; i < n; i += 2)
        if (renamed[i] == thread)
            return renamed[i + 1];
    return NULL;
}

/* A drained sample's thread name (a new reference): the refreshes before
 * the drain's (drained with it) may have named its stand-in, or one since
 * (the list's allocation may collect, and so let the sampler thread run);
 * a Thread stand-in is named by its name now. Runs Python code. */
static PyObject *
named(Samples *self, PyObject **renamed, Py_ssize_t n, PyObject *thread)
{
    PyObject *name = renamed_find(renamed, n, thread);
    if (name == NULL)
        name = renamed_find(self->renamed, self->nrenamed, thread);
    if (name != NULL)
        return Py_NewRef(name);
    if (PyUnicode_Check(thread))
        return Py_NewRef(thread);
    name = PyObject_GetAttrString(thread, "name");
    if (name == NULL || !PyUnicode_Check(name)) {      /* unreadable: as str() shows it */
        PyErr_Clear();
        Py_XDECREF(name);
        name = PyObject_Str(thread);
    }
    return name;
}

/* [(execution, parent node id, thread name or None (main), the op code of
 * the MPI call it was inside or -1, code objects innermost first, ns)]
 * since the last drain; the table starts afresh. The names are refreshed
 * first while a thread is known by its id only. */
static PyObject *
samples_drain(Samples *self, PyObject *unused)
{
    (void)unused;
    for (Py_ssize_t i = 0; i < self->nthreads; i++)
        if (self->threads[i].standin) {
            if (threads_refresh(self) < 0)
                return NULL;
            break;
        }
    Entry *e = self->entries;
    size_t n = self->n;
    PyObject **renamed = self->renamed;
    Py_ssize_t nrenamed = self->nrenamed;
    self->renamed = NULL;
    self->nrenamed = self->renamed_cap = 0;
    PyMem_Free(self->slots);
    self->entries = NULL;
    self->slots = NULL;
    self->n = self->cap = self->nslots = 0;
    /* making the list may collect, and so run the sampler: it counts afresh */
    PyObject *out = PyList_New((Py_ssize_t)n);
    size_t i = 0;
    for (; out != NULL && i < n; i++) {
        PyObject *codes = PyTuple_New(e[i].n);
        if (codes == NULL)
            break;
        for (int j = 0; j < e[i].n; j++)
            PyTuple_SET_ITEM(codes, j, e[i].codes[j]);  /* the entry's references */
        e[i].n = 0;
        PyObject *thread = e[i].thread ? named(self, renamed, nrenamed, e[i].thread) : Py_NewRef(Py_None);
        if (thread == NULL) {
            Py_DECREF(codes);
            break;
        }
        PyObject *row = Py_BuildValue("(LiNiNL)", (long long)e[i].execution, e[i].parent, thread,
                                      e[i].op, codes, (long long)e[i].ns);
        if (row == NULL)
            break;
        PyList_SET_ITEM(out, (Py_ssize_t)i, row);
    }
    entries_clear(e, n);
    renamed_clear(renamed, nrenamed);
    if (out != NULL && i < n)
        Py_CLEAR(out);
    return out;
}

static int
samples_init(Samples *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"executions", "names", "node_type", "main", "in_call", NULL};
    PyObject *executions, *names, *node_type;
    unsigned long main;
    unsigned long long in_call = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!k|K", kwlist, &executions, &names, &PyType_Type,
                                     &node_type, &main, &in_call))
        return -1;
    self->in_call = (in_call_fn)(uintptr_t)in_call;
    Py_XSETREF(self->executions, Py_NewRef(executions));
    Py_XSETREF(self->names, Py_NewRef(names));
    Py_XSETREF(self->node_type, Py_NewRef(node_type));
    PyObject *threading = PyImport_ImportModule("threading");
    Py_XSETREF(self->thread_type, threading ? PyObject_GetAttrString(threading, "Thread") : NULL);
    Py_XDECREF(threading);
    if (self->thread_type == NULL || !PyType_Check(self->thread_type)) {
        Py_CLEAR(self->thread_type);
        return -1;
    }
    self->main = main;
    self->interp = PyInterpreterState_Get();
    self->last = monotonic_ns();
    return 0;
}

static void
samples_dealloc(Samples *self)
{
    Py_XDECREF(self->executions);
    Py_XDECREF(self->names);
    Py_XDECREF(self->node_type);
    Py_XDECREF(self->thread_type);
    Py_XDECREF(self->var);
    for (int j = 0; j < 3; j++)
        Py_XDECREF(self->error[j]);
    threads_clear(self->threads, self->nthreads);
    entries_clear(self->entries, self->n);
    renamed_clear(self->renamed, self->nrenamed);
    PyMem_Free(self->slots);
    PyMem_Free(self->scratch);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef samples_methods[] = {
    {"take", (PyCFunction)samples_take, METH_NOARGS, "One sample of every thread but tinyprof's."},
    {"run", (PyCFunction)samples_run, METH_VARARGS,
     "run(interval ns, limit): sleep, take a sample, until stop() (False) or `limit` stacks are held (True)."},
    {"stop", (PyCFunction)samples_stop, METH_NOARGS, "run() returns after its current sleep."},
    {"drain", (PyCFunction)samples_drain, METH_NOARGS,
     "[(execution, parent node id, thread name or None, op code of the MPI call it was inside or -1, "
     "code objects innermost first, ns)] since the last drain."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef samples_members[] = {
    {"default", T_INT, offsetof(Samples, dflt), 0,
     "Parent node id of threads with no open event (0: the main thread's outermost open event)."},
    {"taken", T_LONGLONG, offsetof(Samples, taken), READONLY, "Samples taken."},
    {"by_main", T_LONGLONG, offsetof(Samples, by_main), READONLY,
     "Of which taken by the main thread's pending call, while it ran Python."},
    {"main_ns", T_LONGLONG, offsetof(Samples, main_ns), READONLY,
     "The main thread's time in those pending calls, in ns (what they cost the program)."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject SamplesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tinyprof.runtime._frames.Samples",
    .tp_basicsize = sizeof(Samples),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Samples(executions, names, node_type, main thread id, in_call=0): sampled stacks, counted; "
              "in_call: the address of libtinyprof_mpi's tinyprof_mpi_in_call, 0 without MPI capture.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)samples_init,
    .tp_dealloc = (destructor)samples_dealloc,
    .tp_methods = samples_methods,
    .tp_members = samples_members,
};
