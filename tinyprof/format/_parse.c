/* tinyprof.format._parse: the event lines of a format-version-2 or 3 file, parsed in C.
 *
 * The reader (tinyprof/format/reader.py) parses the header, name table and sections
 * in Python and hands the event lines to parse_events(), which checks them
 * against docs/format.md's grammar and returns every value in flat typed
 * buffers, with no Python object per value. It releases the GIL while it
 * scans, so several files parse on several cores.
 *
 * mpi_rows() does the same for the bulk of an ``mpi`` section (below).
 *
 * It only says whether the lines are valid: on any violation it returns None
 * and the pure-Python reference parser (tinyprof/format/pyparser.py) reparses the
 * file to raise the FormatError with its message, file and line. The two are
 * tested against each other (tests/format/test_reader_parity.py, test_mpi_parity.py), so they accept
 * exactly the same files and read the same values.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A growable byte buffer, malloc'd: it is filled without the GIL. */
typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static int reserve(Buf *b, size_t extra)
{
    if (b->len + extra <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

/* Callers reserve first: one reservation covers a whole line's values. */
#define PUT(b, type, v) do { type v_ = (v); memcpy((b)->p + (b)->len, &v_, sizeof v_); \
                             (b)->len += sizeof v_; } while (0)

enum { OUT_PARENTS, OUT_IDS, OUT_LOOPS, OUT_CONS, OUT_GIVEN, OUT_TIMES, OUT_VSTART,
       OUT_SLOTS, OUT_COUNTS, OUT_SSTART, OUT_PENDING, NOUT };

typedef struct {
    const char *data;
    Buf out[NOUT];
    Buf *metrics;           /* one float64 column per inconsistent metric */
    Py_ssize_t ninc, ncons;
    locale_t c_locale;
} Parser;

/* A natural (0 or [1-9][0-9]*) in [low, bound), or -1. 19 digits never overflow a uint64. */
static int64_t natural(const char *s, const char *e, uint64_t low, uint64_t bound)
{
    if (s == e || e - s > 19 || (*s == '0' && e - s > 1))
        return -1;
    uint64_t v = 0;
    for (; s < e; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    return v >= low && v < bound ? (int64_t)v : -1;
}

/* A metric value token (not empty). Integers of at most 15 digits, nan and
 * +-inf are canonical as they are; any other token is read with strtod and
 * queued (OUT_PENDING) to be checked against its canonical spelling once
 * the GIL is back (check_pending). */
static int parse_value(Parser *p, const char *s, const char *e, double *out)
{
    Py_ssize_t n = e - s;
    const char *d = s + (*s == '-');
    Py_ssize_t digits = e - d;
    if (digits >= 1 && digits <= 15 && (*d != '0' || digits == 1)) {
        int64_t v = 0;
        const char *q = d;
        for (; q < e && *q >= '0' && *q <= '9'; q++)
            v = v * 10 + (*q - '0');
        if (q == e) {
            *out = *s == '-' ? -(double)v : (double)v;
            return 0;
        }
    }
    if (n == 3 && !memcmp(s, "nan", 3)) { *out = NAN; return 0; }
    if (n == 3 && !memcmp(s, "inf", 3)) { *out = INFINITY; return 0; }
    if (n == 4 && !memcmp(s, "-inf", 4)) { *out = -INFINITY; return 0; }
    char buf[40];
    if (n >= (Py_ssize_t)sizeof buf)        /* longer than any canonical value */
        return -1;
    memcpy(buf, s, (size_t)n);
    buf[n] = 0;
    char *end;
    *out = strtod_l(buf, &end, p->c_locale);
    if (end != buf + n)
        return -1;
    Buf *pending = &p->out[OUT_PENDING];
    if (reserve(pending, 16))
        return -1;
    PUT(pending, int64_t, s - p->data);
    PUT(pending, int64_t, n);
    return 0;
}

/* Are the queued tokens canonical (as tinyprof.format.encoding.format_value writes
 * them)? Called with the GIL: PyOS_double_to_string allocates. */
static int check_pending(Parser *p)
{
    const int64_t *q = (const int64_t *)p->out[OUT_PENDING].p;
    size_t n = p->out[OUT_PENDING].len / 16;
    for (size_t i = 0; i < n; i++) {
        const char *s = p->data + q[2 * i];
        size_t len = (size_t)q[2 * i + 1];
        char buf[40];
        memcpy(buf, s, len);
        buf[len] = 0;
        double v = strtod_l(buf, NULL, p->c_locale);
        char want[48];
        if (isnan(v) || isinf(v))
            return 0;                   /* those spellings are the fast ones */
        if (v == floor(v) && fabs(v) < 1e16) {
            if (v == 0 && signbit(v))
                strcpy(want, "-0");
            else
                snprintf(want, sizeof want, "%lld", (long long)v);
        } else {
            char *r = PyOS_double_to_string(v, 'r', 0, 0, NULL);
            if (!r)
                return -1;
            /* Python's repr writes "1e+16", "1.5e-07"; ours "1e16", "1.5e-7". */
            char *x = strchr(r, 'e');
            if (x) {
                char *digits = x + 1 + (x[1] == '+' || x[1] == '-');
                while (*digits == '0' && digits[1])
                    digits++;
                snprintf(want, sizeof want, "%.*s%s%s", (int)(x - r + 1), r,
                         x[1] == '-' ? "-" : "", digits);
            } else {
                snprintf(want, sizeof want, "%s", r);
            }
            PyMem_Free(r);
        }
        if (strlen(want) != len || memcmp(want, s, len))
            return 0;
    }
    return 1;
}

/* (parent, id) pairs seen: open addressing, parent -2 marks a free slot. */
typedef struct {
    int64_t *slots;
    size_t mask;
} PairSet;

static int pairset_add(PairSet *set, int64_t parent, int64_t id)   /* 1 if new */
{
    uint64_t h = ((uint64_t)parent * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)id * 0xC2B2AE3D27D4EB4Full);
    for (size_t i = (size_t)(h ^ (h >> 29)) & set->mask;; i = (i + 1) & set->mask) {
        int64_t *slot = set->slots + 2 * i;
        if (slot[0] == -2) {
            slot[0] = parent;
            slot[1] = id;
            return 1;
        }
        if (slot[0] == parent && slot[1] == id)
            return 0;
    }
}

/* Ends an occurrence's token: the next occurrence, execution, execution gap
 * (version 3) or rank field. */
#define OCC_END(c) ((c) == '+' || (c) == ';' || (c) == '|' || (c) == '*')

/* One occurrence from q: a time in its one spelling (0 | -?[1-9][0-9]*, in
 * int64), then up to ninc metric values after commas, no trailing empty one.
 * One pass: returns where it stopped (at '+', ';', '|', '*' or e), NULL if invalid. */
static const char *parse_occurrence(Parser *p, const char *q, const char *e)
{
    int neg = q < e && *q == '-';
    const char *d = q + neg;
    uint64_t v = 0;             /* wraps past 19 digits, which are refused anyway */
    for (q = d; q < e && (unsigned)(*q - '0') <= 9; q++)
        v = v * 10 + (unsigned)(*q - '0');
    Py_ssize_t n = q - d;
    if (n == 0 || n > 19 || (*d == '0' && (n > 1 || neg)) || v > (uint64_t)INT64_MAX + (uint64_t)neg)
        return NULL;
    PUT(&p->out[OUT_TIMES], int64_t, neg ? (int64_t)(0 - v) : (int64_t)v);
    Py_ssize_t k = 0;
    if (q < e && *q == ',') {
        do {
            const char *t = ++q;
            while (q < e && *q != ',' && !OCC_END(*q))
                q++;
            if (k >= p->ninc)
                return NULL;
            double x = NAN;
            if (q > t && parse_value(p, t, q, &x))
                return NULL;
            PUT(&p->metrics[k], double, x);
            k++;
        } while (q < e && *q == ',');
        if (q[-1] == ',')
            return NULL;                /* trailing empty value */
    }
    for (; k < p->ninc; k++)
        PUT(&p->metrics[k], double, NAN);
    return q < e && !OCC_END(*q) ? NULL : q;
}

/* One rank's field from q: executions split by ';' , occurrences by '+'.
 * Versions 1 and 2 (`gaps` 0) allow empty executions but a trailing one;
 * version 3 writes none but a first one, and a gap of k >= 2 executions as
 * '*k;'. Returns where it stopped (at '|' or e), NULL if invalid. Slots
 * count from `base`, the rank's first execution. */
static const char *parse_field(Parser *p, const char *q, const char *e, int64_t nexec, int loop,
                               int64_t base, int gaps)
{
    if (q == e || *q == '|')
        return q;
    for (int64_t x = 0, step = 1;; x += step, step = 1) {
        if (x >= nexec)
            return NULL;
        if (q < e && !OCC_END(*q)) {
            int64_t count = 0;
            for (;;) {
                if (!(q = parse_occurrence(p, q, e)))
                    return NULL;
                count++;
                if (q == e || *q != '+')
                    break;
                q++;
            }
            if (loop == 2 && count > 1)
                return NULL;
            PUT(&p->out[OUT_SLOTS], int64_t, base + x);
            PUT(&p->out[OUT_COUNTS], int64_t, count);
        } else if (gaps && x > 0) {
            return NULL;                /* an empty execution but the first */
        }
        if (gaps && q < e && *q == '*') {
            const char *k = ++q;
            while (q < e && (unsigned)(*q - '0') <= 9)
                q++;
            if (q == e || *q != ';' || (step = natural(k, q, 0, (uint64_t)nexec)) < 2)
                return NULL;            /* a gap is followed by an execution */
        }
        if (q == e || *q == '|')
            return q;
        if (*q != ';')
            return NULL;
        if (++q == e || *q == '|')
            return NULL;                /* trailing empty execution */
    }
}

/* One event line [s, e) (without its newline), line `i` of the file's events. */
static int parse_line(Parser *p, const char *s, const char *e, int64_t i, int64_t nnames,
                      const int64_t *executions, Py_ssize_t nranks, PairSet *seen, int gaps)
{
    /* The values of a line number at most (its length + 1) / 2: reserve once. */
    size_t most = (size_t)(e - s) / 2 + 1;
    if (reserve(&p->out[OUT_TIMES], 8 * most) || reserve(&p->out[OUT_SLOTS], 8 * most) ||
        reserve(&p->out[OUT_COUNTS], 8 * most))
        return -1;
    for (Py_ssize_t k = 0; k < p->ninc; k++)
        if (reserve(&p->metrics[k], 8 * most))
            return -1;
    if (reserve(&p->out[OUT_CONS], 8 * (size_t)p->ncons) || reserve(&p->out[OUT_GIVEN], (size_t)p->ncons))
        return -1;

    /* path: id or parent:id */
    const char *bar = memchr(s, '|', (size_t)(e - s));
    if (!bar)
        return -1;
    const char *colon = NULL;
    for (const char *q = bar; q > s; q--)
        if (q[-1] == ':') { colon = q - 1; break; }
    int64_t parent = -1, id;
    if (colon && (parent = natural(s, colon, 0, (uint64_t)i)) < 0)
        return -1;
    if ((id = natural(colon ? colon + 1 : s, bar, 0, (uint64_t)nnames)) < 0)
        return -1;
    if (!pairset_add(seen, parent, id))
        return -1;
    PUT(&p->out[OUT_PARENTS], int64_t, parent);
    PUT(&p->out[OUT_IDS], int64_t, id);

    /* loop */
    s = bar + 1;
    if (e - s < 2 || s[0] < '0' || s[0] > '2' || s[1] != '|')
        return -1;
    int loop = s[0] - '0';
    PUT(&p->out[OUT_LOOPS], int8_t, (int8_t)loop);

    /* consistent metrics */
    s += 2;
    bar = memchr(s, '|', (size_t)(e - s));
    if (!bar && nranks > 0)
        return -1;
    const char *cons_end = bar ? bar : e;
    Py_ssize_t k = 0;
    if (cons_end > s) {
        if (cons_end[-1] == ',')
            return -1;
        for (const char *v = s; v <= cons_end; k++) {
            const char *ve = memchr(v, ',', (size_t)(cons_end - v));
            if (!ve)
                ve = cons_end;
            if (k >= p->ncons)
                return -1;
            double x = NAN;
            if (ve > v && parse_value(p, v, ve, &x))
                return -1;
            PUT(&p->out[OUT_CONS], double, x);
            PUT(&p->out[OUT_GIVEN], uint8_t, ve > v);
            v = ve + 1;
        }
    }
    for (; k < p->ncons; k++) {
        PUT(&p->out[OUT_CONS], double, NAN);
        PUT(&p->out[OUT_GIVEN], uint8_t, 0);
    }

    /* one field per rank */
    int64_t base = 0;
    for (Py_ssize_t r = 0; r < nranks; r++) {
        const char *q = parse_field(p, cons_end + 1, e, executions[r], loop, base, gaps);
        if (!q || (r + 1 < nranks) != (q < e))
            return -1;
        cons_end = q;
        base += executions[r];
    }
    if (nranks == 0 && bar)
        return -1;
    return 0;
}

/* A Buf handed to Python without a copy: numpy.frombuffer views its memory,
 * freed with the last view. Copying into a bytearray touched every value's
 * page twice and cost as much as the parsing. */
typedef struct {
    PyObject_HEAD
    char *p;
    Py_ssize_t len;
} Block;

static char empty_block[8];

static void block_dealloc(PyObject *self)
{
    free(((Block *)self)->p);
    PyObject_Free(self);
}

static int block_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    Block *b = (Block *)self;
    return PyBuffer_FillInfo(view, self, b->p ? b->p : empty_block, b->len, 0, flags);
}

static PyBufferProcs block_buffer = {block_getbuffer, NULL};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tinyprof.format._parse.Block",
    .tp_basicsize = sizeof(Block),
    .tp_dealloc = block_dealloc,
    .tp_as_buffer = &block_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Parsed values in memory owned by the parser; read with numpy.frombuffer.",
};

/* Moves the Buf's memory into a new Block (giving back what was reserved
 * beyond its length), or NULL with the Buf untouched. */
static PyObject *as_block(Buf *b)
{
    Block *o = PyObject_New(Block, &BlockType);
    if (!o)
        return NULL;
    char *p = b->len ? realloc(b->p, b->len) : NULL;
    if (b->len && !p)
        p = b->p;
    if (!b->len)
        free(b->p);
    o->p = p;
    o->len = (Py_ssize_t)b->len;
    b->p = NULL;
    b->len = b->cap = 0;
    return (PyObject *)o;
}

PyDoc_STRVAR(parse_events_doc,
"parse_events(data, pos, stop, nevents, nnames, executions, ncons, ninc, gaps)\n--\n\n"
"Parse the ``nevents`` event lines of a version-2 (``gaps`` false) or version-3\n"
"file starting at byte ``pos``\n"
"(before ``stop``). ``executions``: int64 bytes, the executions of each rank of\n"
"the file. Returns None if any line breaks the grammar, else a tuple of the\n"
"position after the lines and Blocks of native values (see tinyprof/format/_parse.pyi).");

static PyObject *parse_events(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer data, execs;
    Py_ssize_t pos, stop, nevents, nnames, ncons, ninc;
    int gaps;
    if (!PyArg_ParseTuple(args, "y*nnnny*nnp", &data, &pos, &stop, &nevents, &nnames, &execs,
                          &ncons, &ninc, &gaps))
        return NULL;
    PyObject *result = NULL;
    Parser p = {.data = data.buf, .ninc = ninc, .ncons = ncons};
    PairSet seen = {NULL, 0};
    p.metrics = calloc((size_t)(ninc > 0 ? ninc : 1), sizeof(Buf));
    p.c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    size_t cap = 16;
    while (cap < 2 * (size_t)nevents)
        cap *= 2;
    seen.slots = malloc(cap * 16);
    seen.mask = cap - 1;
    if (!p.metrics || !p.c_locale || !seen.slots || pos < 0 || stop > data.len || pos > stop ||
        execs.len % 8) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < cap; i++)
        seen.slots[2 * i] = -2;
    const int64_t *executions = execs.buf;
    Py_ssize_t nranks = execs.len / 8;
    int ok = 1;
    const char *s = (const char *)data.buf + pos, *end = (const char *)data.buf + stop;
    Py_BEGIN_ALLOW_THREADS
    if (reserve(&p.out[OUT_VSTART], 8 * ((size_t)nevents + 1)) ||
        reserve(&p.out[OUT_SSTART], 8 * ((size_t)nevents + 1)) ||
        reserve(&p.out[OUT_PARENTS], 8 * (size_t)nevents) ||
        reserve(&p.out[OUT_IDS], 8 * (size_t)nevents) || reserve(&p.out[OUT_LOOPS], (size_t)nevents))
        ok = 0;
    for (Py_ssize_t i = 0; ok && i < nevents; i++) {
        const char *nl = s < end ? memchr(s, '\n', (size_t)(end - s)) : NULL;
        PUT(&p.out[OUT_VSTART], int64_t, (int64_t)(p.out[OUT_TIMES].len / 8));
        PUT(&p.out[OUT_SSTART], int64_t, (int64_t)(p.out[OUT_SLOTS].len / 8));
        if (!nl || parse_line(&p, s, nl, i, nnames, executions, nranks, &seen, gaps)) {
            ok = 0;
            break;
        }
        s = nl + 1;
    }
    if (ok) {
        PUT(&p.out[OUT_VSTART], int64_t, (int64_t)(p.out[OUT_TIMES].len / 8));
        PUT(&p.out[OUT_SSTART], int64_t, (int64_t)(p.out[OUT_SLOTS].len / 8));
    }
    Py_END_ALLOW_THREADS
    if (ok) {
        int canonical = check_pending(&p);
        if (canonical < 0)
            goto done;
        ok = canonical;
    }
    if (!ok) {
        Py_INCREF(Py_None);
        result = Py_None;
        goto done;
    }
    PyObject *metrics = PyList_New(ninc);
    if (!metrics)
        goto done;
    for (Py_ssize_t k = 0; k < ninc; k++) {
        PyObject *col = as_block(&p.metrics[k]);
        if (!col) {
            Py_DECREF(metrics);
            goto done;
        }
        PyList_SET_ITEM(metrics, k, col);
    }
    result = Py_BuildValue("nNNNNNNNNNNN", (Py_ssize_t)(s - (const char *)data.buf),
                           as_block(&p.out[OUT_PARENTS]), as_block(&p.out[OUT_IDS]),
                           as_block(&p.out[OUT_LOOPS]), as_block(&p.out[OUT_CONS]),
                           as_block(&p.out[OUT_GIVEN]), as_block(&p.out[OUT_TIMES]),
                           as_block(&p.out[OUT_VSTART]), as_block(&p.out[OUT_SLOTS]),
                           as_block(&p.out[OUT_COUNTS]), as_block(&p.out[OUT_SSTART]),
                           metrics);
done:
    for (int k = 0; k < NOUT; k++)
        free(p.out[k].p);
    for (Py_ssize_t k = 0; p.metrics && k < ninc; k++)
        free(p.metrics[k].p);
    free(p.metrics);
    free(seen.slots);
    if (p.c_locale)
        freelocale(p.c_locale);
    PyBuffer_Release(&data);
    PyBuffer_Release(&execs);
    return result;
}

/* ---- The ops and peers rows of an ``mpi`` section (tinyprof/format/mpi_section.py) ----
 *
 * The bulk of a section: a row per (rank, callpath line, communicator, op,
 * size bucket) and per (rank, line, communicator, peer). mpi_section.parse
 * reads the communicators in Python, hands these two blocks to mpi_rows(),
 * and reads the rest. Same contract as parse_events: None on any violation,
 * and the reference reparses to name it (tests/format/test_mpi_parity.py). */

#define ROW_NONE (-1)               /* an empty optional field (mpi_section.NONE) */
#define NATURAL_END ((uint64_t)1 << 63)   /* MAX_NATURAL + 1 */

/* An optional natural below `bound` into *out (ROW_NONE when empty); -1 if bad. */
static int optional_in(const char *s, const char *e, uint64_t bound, int64_t *out)
{
    *out = s == e ? ROW_NONE : natural(s, e, 0, bound);
    return s != e && *out < 0 ? -1 : 0;
}

/* Splits [s, e) at '|' into exactly n fields (starts[i], ends[i]); -1 otherwise. */
static int split_row(const char *s, const char *e, int n, const char **starts, const char **ends)
{
    int k = 0;
    starts[0] = s;
    for (const char *q = s; q < e; q++)
        if (*q == '|') {
            if (++k == n)
                return -1;
            ends[k - 1] = q;
            starts[k] = q + 1;
        }
    ends[k] = e;
    return k == n - 1 ? 0 : -1;
}

/* The header line ``key <n>`` at *s: n, with *s moved past the line, or -1. */
static int64_t block_head(const char **s, const char *end, const char *key, int nfields)
{
    size_t klen = strlen(key);
    const char *nl = *s < end ? memchr(*s, '\n', (size_t)(end - *s)) : NULL;
    if (!nl || (size_t)(nl - *s) <= klen || memcmp(*s, key, klen) || (*s)[klen] != ' ')
        return -1;
    int64_t n = natural(*s + klen + 1, nl, 0, NATURAL_END);
    *s = nl + 1;
    /* a row takes >= nfields bytes: a count the payload cannot hold is refused */
    return n >= 0 && n <= (int64_t)((end - *s) / nfields) ? n : -1;
}

/* [A-Z][A-Za-z_]{0,63} (mpi_section._OP_RE) */
static int op_name(const char *s, const char *e)
{
    if (e - s < 1 || e - s > 64 || *s < 'A' || *s > 'Z')
        return 0;
    for (s++; s < e; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_'))
            return 0;
    return 1;
}

/* Orders op keys (rank, line, comm, op bytes, bucket); r points at a row of OP_WIDTH. */
enum { OP_RANK, OP_LINE, OP_COMM, OP_NAME, OP_NAME_LEN, OP_BUCKET, OP_CALLS, OP_BYTES, OP_TIME,
       OP_WIDTH };
enum { PEER_WIDTH = 6 };

static int op_after(const char *data, const int64_t *prev, const int64_t *r)
{
    for (int k = OP_RANK; k <= OP_COMM; k++)
        if (r[k] != prev[k])
            return r[k] > prev[k];
    size_t a = (size_t)prev[OP_NAME_LEN], b = (size_t)r[OP_NAME_LEN];
    int c = memcmp(data + r[OP_NAME], data + prev[OP_NAME], a < b ? a : b);
    if (c || a != b)
        return c ? c > 0 : b > a;
    return r[OP_BUCKET] > prev[OP_BUCKET];
}

typedef struct {
    uint64_t first_rank, rank_end, nlines, ncomms, nranks;
} RowBounds;

/* One ops row: rank, line, comm, op, bucket, calls, bytes, time (ns). */
static int op_row(const char *data, const char *s, const char *e, const RowBounds *b, int64_t *r)
{
    const char *f[8], *fe[8];
    if (split_row(s, e, 8, f, fe) ||
        (r[OP_RANK] = natural(f[0], fe[0], b->first_rank, b->rank_end)) < 0 ||
        optional_in(f[1], fe[1], b->nlines, &r[OP_LINE]) ||
        optional_in(f[2], fe[2], b->ncomms, &r[OP_COMM]) || !op_name(f[3], fe[3]))
        return -1;
    if (r[OP_COMM] != ROW_NONE && fe[3] - f[3] >= 4 &&
        (!memcmp(f[3], "Wait", 4) || !memcmp(f[3], "Test", 4)))
        return -1;                          /* completion calls name no communicator */
    r[OP_NAME] = f[3] - data;
    r[OP_NAME_LEN] = fe[3] - f[3];
    if ((r[OP_BUCKET] = natural(f[4], fe[4], 0, 65)) < 0 ||
        (r[OP_CALLS] = natural(f[5], fe[5], 1, NATURAL_END)) < 0 ||
        (r[OP_BYTES] = natural(f[6], fe[6], 0, NATURAL_END)) < 0 ||
        (r[OP_TIME] = natural(f[7], fe[7], 0, NATURAL_END)) < 0)
        return -1;
    /* the bytes fit the bucket: calls * 2**(k-1) <= bytes <= calls * (2**k - 1),
     * in divisions that cannot overflow (calls, bytes < 2**63) */
    int k = (int)r[OP_BUCKET];
    uint64_t calls = (uint64_t)r[OP_CALLS], nbytes = (uint64_t)r[OP_BYTES];
    if (k == 0)
        return nbytes == 0 ? 0 : -1;
    if (calls > nbytes >> (k - 1))
        return -1;
    uint64_t high = k >= 63 ? 0 : ((uint64_t)1 << k) - 1;      /* 0: any bytes < 2**63 fit */
    return !high || (nbytes + high - 1) / high <= calls ? 0 : -1;
}

/* One peers row: rank, line, comm, peer (world rank), messages, bytes. */
static int peer_row(const char *s, const char *e, const RowBounds *b, int64_t *r)
{
    const char *f[6], *fe[6];
    return split_row(s, e, 6, f, fe) ||
           (r[0] = natural(f[0], fe[0], b->first_rank, b->rank_end)) < 0 ||
           optional_in(f[1], fe[1], b->nlines, &r[1]) ||
           optional_in(f[2], fe[2], b->ncomms, &r[2]) ||
           (r[3] = natural(f[3], fe[3], 0, b->nranks)) < 0 ||
           (r[4] = natural(f[4], fe[4], 1, NATURAL_END)) < 0 ||
           (r[5] = natural(f[5], fe[5], 0, NATURAL_END)) < 0 ? -1 : 0;
}

static int peer_after(const int64_t *prev, const int64_t *r)
{
    for (int k = 0; k < 4; k++)
        if (r[k] != prev[k])
            return r[k] > prev[k];
    return 0;
}

/* Scans the ``ops`` then ``peers`` block at *s into ops and peers (int64 rows);
 * 0, with *s after them, or -1. Runs without the GIL. */
static int scan_rows(const char *data, const char **s, const char *end, const RowBounds *b,
                     Buf *ops, Buf *peers)
{
    int64_t n = block_head(s, end, "ops", 8);
    if (n < 0 || reserve(ops, (size_t)n * OP_WIDTH * 8))
        return -1;
    for (int64_t i = 0; i < n; i++) {
        const char *nl = memchr(*s, '\n', (size_t)(end - *s));
        int64_t *r = (int64_t *)(ops->p + ops->len);
        if (!nl || op_row(data, *s, nl, b, r) || (i && !op_after(data, r - OP_WIDTH, r)))
            return -1;
        ops->len += OP_WIDTH * 8;
        *s = nl + 1;
    }
    if ((n = block_head(s, end, "peers", 6)) < 0 || reserve(peers, (size_t)n * PEER_WIDTH * 8))
        return -1;
    for (int64_t i = 0; i < n; i++) {
        const char *nl = memchr(*s, '\n', (size_t)(end - *s));
        int64_t *r = (int64_t *)(peers->p + peers->len);
        if (!nl || peer_row(*s, nl, b, r) || (i && !peer_after(r - PEER_WIDTH, r)))
            return -1;
        peers->len += PEER_WIDTH * 8;
        *s = nl + 1;
    }
    return 0;
}

/* The scanned rows as a list of tuples, as mpi_section.parse builds them
 * (an op name becomes a str; consecutive rows' equal names share one). */
static PyObject *row_list(const char *data, const Buf *rows, int width, int name_at)
{
    Py_ssize_t n = (Py_ssize_t)(rows->len / (8 * (size_t)width));
    PyObject *list = PyList_New(n), *name = NULL;
    const int64_t *r = (const int64_t *)rows->p, *named = NULL;
    for (Py_ssize_t i = 0; list && i < n; i++, r += width) {
        PyObject *row = PyTuple_New(width - (name_at >= 0));
        if (!row)
            goto fail;
        PyList_SET_ITEM(list, i, row);
        for (int k = 0, out = 0; k < width; k++, out++) {
            PyObject *v;
            if (k == name_at) {
                if (!named || named[1] != r[k + 1] || memcmp(data + named[0], data + r[k], (size_t)r[k + 1])) {
                    Py_XDECREF(name);
                    if (!(name = PyUnicode_DecodeASCII(data + r[k], (Py_ssize_t)r[k + 1], NULL)))
                        goto fail;
                    named = r + k;
                }
                Py_INCREF(name);
                v = name;
                k++;
            } else if (!(v = PyLong_FromLongLong(r[k])))
                goto fail;
            PyTuple_SET_ITEM(row, out, v);
        }
    }
    Py_XDECREF(name);
    return list;
fail:
    Py_XDECREF(name);
    Py_XDECREF(list);
    return NULL;
}

PyDoc_STRVAR(mpi_rows_doc,
"mpi_rows(payload, pos, ncomms, nlines, first_rank, count, nranks)\n--\n\n"
"The ``ops`` and ``peers`` blocks of an ``mpi`` section payload from byte ``pos``:\n"
"None if any row breaks docs/format.md, else ``(end, ops, peers)``, the rows as\n"
"mpi_section.parse returns them (see tinyprof/format/_parse.pyi).");

static PyObject *mpi_rows(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer data;
    Py_ssize_t pos, ncomms, nlines, first_rank, count, nranks;
    if (!PyArg_ParseTuple(args, "y*nnnnnn", &data, &pos, &ncomms, &nlines, &first_rank, &count,
                          &nranks))
        return NULL;
    PyObject *result = NULL;
    Buf ops = {NULL, 0, 0}, peers = {NULL, 0, 0};
    if (pos < 0 || pos > data.len || ncomms < 0 || nlines < 0 || first_rank < 0 || count < 0 ||
        nranks < 0) {
        PyErr_SetString(PyExc_ValueError, "mpi_rows: bad arguments");
        goto done;
    }
    RowBounds b = {(uint64_t)first_rank, (uint64_t)first_rank + (uint64_t)count,
                   (uint64_t)nlines, (uint64_t)ncomms, (uint64_t)nranks};
    const char *start = data.buf, *s = start + pos, *end = start + data.len;
    int bad;
    Py_BEGIN_ALLOW_THREADS
    bad = scan_rows(start, &s, end, &b, &ops, &peers);
    Py_END_ALLOW_THREADS
    if (bad) {
        Py_INCREF(Py_None);
        result = Py_None;
        goto done;
    }
    PyObject *op_list = row_list(start, &ops, OP_WIDTH, OP_NAME);
    PyObject *peer_list = op_list ? row_list(start, &peers, PEER_WIDTH, -1) : NULL;
    if (peer_list)
        result = Py_BuildValue("nNN", (Py_ssize_t)(s - start), op_list, peer_list);
    else
        Py_XDECREF(op_list);
done:
    free(ops.p);
    free(peers.p);
    PyBuffer_Release(&data);
    return result;
}

static PyMethodDef methods[] = {
    {"parse_events", parse_events, METH_VARARGS, parse_events_doc},
    {"mpi_rows", mpi_rows, METH_VARARGS, mpi_rows_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "tinyprof.format._parse",
    "The event lines of a profile file, parsed in C (see tinyprof/format/reader.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__parse(void)
{
    if (PyType_Ready(&BlockType) < 0)
        return NULL;
    return PyModule_Create(&module);
}
