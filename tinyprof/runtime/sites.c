/* sites.c: the Python call sites of MPI calls, read without the GIL.
 * Part of the tinyprof.runtime._frames extension: included by _frames.c,
 * with cpython_frames.h before it; not compiled on its own. */

#define MAX_DEPTH 8
#define SITE_BASE (1 << 30)     /* site ids: far above the core's node ids */
#define SITE_CAP 8192           /* slots, a power of two; at most 3/4 used */
#define CODE_CAP 4096
#define NAME_CAP 512

typedef int32_t (*source_fn)(void);

typedef struct {
    _Atomic uint64_t key;       /* hash | 1, published last; 0: empty */
    int32_t parent, n, id;
    const void *code[MAX_DEPTH];
    int32_t lasti[MAX_DEPTH];
    char *name[MAX_DEPTH];      /* innermost first */
} Site;

typedef struct {
    _Atomic uintptr_t code;     /* published last; 0: empty */
    int skip;                   /* 0: the program's; 1: mpi4py's, tinyprof's or frozen (runpy) */
} CodeFlag;

static source_fn core_source;
static _Atomic int32_t default_parent; /* for threads with no open event (python -m tinyprof's region) */
static int depth = 1;
static Site *sites;
static Site **by_id;            /* site id - SITE_BASE -> its slot */
static int nsites;
static atomic_int full;         /* a site found no room: charged to its region */
static CodeFlag *codes;
#define MAX_RULES 8
static char *prefix[MAX_RULES]; /* path prefixes, UTF-8: the first that a code's file starts with */
static int skips[MAX_RULES];    /* tells whether its frames are skipped (1) or the program's (0) */
static int nrules;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* A str as UTF-8 into out[cap], without the GIL: reads the string's own
 * characters (code objects' names are always ready strings). */
static size_t
utf8(PyObject *s, char *out, size_t cap)
{
    size_t k = 0;
    if (s != NULL && PyUnicode_Check(s) && PyUnicode_IS_READY(s)) {
        int kind = PyUnicode_KIND(s);
        const void *data = PyUnicode_DATA(s);
        for (Py_ssize_t i = 0; i < PyUnicode_GET_LENGTH(s); i++) {
            Py_UCS4 c = PyUnicode_READ(kind, data, i);
            unsigned char b[4];
            size_t len = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
            if (len == 1) {
                b[0] = (unsigned char)c;
            } else {
                for (size_t j = len - 1; j > 0; j--, c >>= 6)
                    b[j] = (unsigned char)(0x80 | (c & 0x3f));
                b[0] = (unsigned char)((len == 2 ? 0xc0 : len == 3 ? 0xe0 : 0xf0) | c);
            }
            if (k + len >= cap)
                break;
            memcpy(out + k, b, len);
            k += len;
        }
    }
    if (cap)
        out[k] = '\0';
    return k;
}

/* Whether frames of `co` are skipped (1) or the program's (0). */
static int
code_skip(PyCodeObject *co)
{
    uintptr_t key = (uintptr_t)co;
    size_t i = (size_t)(mix(0, key) & (CODE_CAP - 1));
    for (size_t probe = 0; probe < CODE_CAP; probe++, i = (i + 1) & (CODE_CAP - 1)) {
        uintptr_t c = atomic_load_explicit(&codes[i].code, memory_order_acquire);
        if (c == key)
            return codes[i].skip;
        if (c == 0)
            break;
    }
    char path[NAME_CAP];
    utf8(co->co_filename, path, sizeof path);
    int skip = strncmp(path, "<frozen ", 8) == 0;
    pthread_mutex_lock(&lock);              /* the rules change only under it */
    for (int j = 0; j < nrules && !skip; j++)
        if (strncmp(path, prefix[j], strlen(prefix[j])) == 0) {
            skip = skips[j];
            break;
        }
    i = (size_t)(mix(0, key) & (CODE_CAP - 1));
    for (size_t probe = 0; probe < CODE_CAP * 3 / 4; probe++, i = (i + 1) & (CODE_CAP - 1)) {
        uintptr_t c = atomic_load_explicit(&codes[i].code, memory_order_relaxed);
        if (c == key)
            break;
        if (c == 0) {
            codes[i].skip = skip;
            atomic_store_explicit(&codes[i].code, key, memory_order_release);
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return skip;
}

/* `function (file:line)`: the code's qualified name, its file's base name,
 * the line of instruction `lasti`. */
static char *
frame_name(PyCodeObject *co, int lasti)
{
    char fn[NAME_CAP / 2], path[NAME_CAP], out[NAME_CAP * 2];
    utf8(co->co_qualname, fn, sizeof fn);
    utf8(co->co_filename, path, sizeof path);
    const char *base = strrchr(path, '/');
    int line = PyCode_Addr2Line(co, lasti * (int)sizeof(_Py_CODEUNIT));
    snprintf(out, sizeof out, "%s (%s:%d)", fn, base ? base + 1 : path, line);
    return strdup(out);
}

static int
same(const Site *s, int32_t parent, int n, const void **code, const int32_t *lasti)
{
    if (s->parent != parent || s->n != n)
        return 0;
    for (int j = 0; j < n; j++)
        if (s->code[j] != code[j] || s->lasti[j] != lasti[j])
            return 0;
    return 1;
}

/* The site's id, added under the lock if new; `parent` if the table is full. */
static int32_t
site_add(uint64_t key, int32_t parent, int n, const void **code, const int32_t *lasti)
{
    int32_t id = parent;
    pthread_mutex_lock(&lock);
    size_t i = (size_t)(key & (SITE_CAP - 1));
    for (;; i = (i + 1) & (SITE_CAP - 1)) {
        Site *s = &sites[i];
        uint64_t k = atomic_load_explicit(&s->key, memory_order_relaxed);
        if (k == key && same(s, parent, n, code, lasti)) {
            id = s->id;
            break;
        }
        if (k != 0)
            continue;
        if (nsites >= SITE_CAP * 3 / 4) {
            atomic_store(&full, 1);
            break;
        }
        s->parent = parent;
        s->n = n;
        for (int j = 0; j < n; j++) {
            s->code[j] = code[j];
            s->lasti[j] = lasti[j];
            s->name[j] = frame_name((PyCodeObject *)code[j], lasti[j]);
        }
        s->id = id = SITE_BASE + nsites;
        by_id[nsites++] = s;
        atomic_store_explicit(&s->key, key, memory_order_release);
        break;
    }
    pthread_mutex_unlock(&lock);
    return id;
}

/* libtinyprof_mpi's source function while sites are on. */
static int32_t
site_source(void)
{
    int32_t parent = core_source ? core_source() : 0;
    if (parent == 0)
        parent = atomic_load_explicit(&default_parent, memory_order_relaxed);
    PyThreadState *ts = PyGILState_GetThisThreadState();
    if (ts == NULL)
        return parent;
    const void *code[MAX_DEPTH];
    int32_t lasti[MAX_DEPTH];
    int n = 0;
    uint64_t key = mix(0, (uint32_t)parent);
    for (_PyInterpreterFrame *f = top_frame(ts); f != NULL && n < depth; f = f->previous) {
        PyCodeObject *c = frame_code(f);
        if (c == NULL || code_skip(c))
            continue;
        code[n] = c;
        lasti[n] = _PyInterpreterFrame_LASTI(f);
        key = mix(mix(key, (uintptr_t)code[n]), (uint32_t)lasti[n]);
        n++;
    }
    if (n == 0)
        return parent;
    key |= 1;
    size_t i = (size_t)(key & (SITE_CAP - 1));
    for (size_t probe = 0; probe < SITE_CAP; probe++, i = (i + 1) & (SITE_CAP - 1)) {
        const Site *s = &sites[i];
        uint64_t k = atomic_load_explicit(&s->key, memory_order_acquire);
        if (k == key && same(s, parent, n, code, lasti))
            return s->id;
        if (k == 0)
            break;
    }
    return site_add(key, parent, n, code, lasti);
}

static void
clear(void)
{
    for (int j = 0; j < nsites; j++)
        for (int d = 0; d < by_id[j]->n; d++)
            free(by_id[j]->name[d]);
    memset(sites, 0, sizeof(Site) * SITE_CAP);
    memset(codes, 0, sizeof(CodeFlag) * CODE_CAP);
    nsites = 0;
    atomic_store(&full, 0);
}

/* sites_start(core source address, depth, ((path prefix, skipped?), ...)) -> address of site_source */
static PyObject *
sites_start(PyObject *m, PyObject *args)
{
    (void)m;
    unsigned long long source;
    int k;
    PyObject *rules;
    if (!PyArg_ParseTuple(args, "KiO!", &source, &k, &PyTuple_Type, &rules))
        return NULL;
    if (k < 1 || k > MAX_DEPTH)
        return PyErr_Format(PyExc_ValueError, "site depth must be in [1, %d]", MAX_DEPTH);
    if (PyTuple_GET_SIZE(rules) > MAX_RULES)
        return PyErr_Format(PyExc_ValueError, "at most %d path rules", MAX_RULES);
    pthread_mutex_lock(&lock);
    if (sites == NULL) {
        sites = calloc(SITE_CAP, sizeof(Site));
        by_id = calloc(SITE_CAP, sizeof(Site *));
        codes = calloc(CODE_CAP, sizeof(CodeFlag));
    }
    int ok = sites && by_id && codes;
    if (ok) {
        clear();
        for (int j = 0; j < nrules; j++)
            free(prefix[j]);
        nrules = 0;
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(rules); j++) {
            const char *p = NULL;
            int skip = 0;
            if (!PyArg_ParseTuple(PyTuple_GET_ITEM(rules, j), "sp", &p, &skip))
                break;
            skips[nrules] = skip;
            prefix[nrules++] = strdup(p);
        }
        core_source = (source_fn)(uintptr_t)source;
        depth = k;
        atomic_store(&default_parent, 0);
    }
    pthread_mutex_unlock(&lock);
    if (!ok || PyErr_Occurred())
        return ok ? NULL : PyErr_NoMemory();
    return PyLong_FromVoidPtr((void *)site_source);
}

static PyObject *
sites_below(PyObject *m, PyObject *arg)
{
    (void)m;
    long node = PyLong_AsLong(arg);
    if (node == -1 && PyErr_Occurred())
        return NULL;
    atomic_store(&default_parent, (int32_t)node);
    Py_RETURN_NONE;
}

/* [(site id, parent node id, (name of each frame, outermost first))], and
 * whether some site found no room. */
static PyObject *
sites_read(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    pthread_mutex_lock(&lock);
    for (int j = 0; j < nsites; j++) {
        const Site *s = by_id[j];
        PyObject *names = PyTuple_New(s->n);
        for (int d = 0; names != NULL && d < s->n; d++) {
            PyObject *name = PyUnicode_DecodeUTF8(s->name[d], (Py_ssize_t)strlen(s->name[d]), "replace");
            if (name == NULL)
                Py_CLEAR(names);
            else
                PyTuple_SET_ITEM(names, s->n - 1 - d, name);
        }
        PyObject *row = names ? Py_BuildValue("(iiN)", s->id, s->parent, names) : NULL;
        if (row == NULL || PyList_Append(out, row) < 0) {
            Py_XDECREF(row);
            Py_CLEAR(out);
            break;
        }
        Py_DECREF(row);
    }
    pthread_mutex_unlock(&lock);
    if (out == NULL)
        return NULL;
    return Py_BuildValue("(Ni)", out, atomic_load(&full));
}
