/* mpi_tables.c: the per-thread counter tables the wrappers charge.
 * Part of libtinyprof_mpi: included by tinyprof_mpi.c, whose includes,
 * ops and globals it uses; not compiled on its own. */

/* --------------------------------------------------- per-thread tables */

/* One counter row: key (a, b), values v. Empty while v[0] == 0 (calls and
 * messages are >= 1 once a row exists). Ops: a = node<<32 | comm, b = op<<8 |
 * bucket, v = calls, bytes, time. Peers: same a, b = peer, v = messages, bytes. */
typedef struct {
    uint64_t a, b;
    int64_t v[3];
} tp_row;

/* Open addressing, linear probing, grown by doubling at 3/4 load. */
typedef struct {
    tp_row *rows;
    size_t cap, n;
} tp_table;

static atomic_flag g_warned_oom = ATOMIC_FLAG_INIT;

static tp_row *tp_slot(tp_row *rows, size_t cap, uint64_t a, uint64_t b) {
    size_t i = tp_mix(a * 31 + b) & (cap - 1);
    while (rows[i].v[0] != 0 && (rows[i].a != a || rows[i].b != b)) i = (i + 1) & (cap - 1);
    return &rows[i];
}

static int tp_grow(tp_table *t) {
    size_t cap = t->cap ? 2 * t->cap : 64;
    tp_row *rows = calloc(cap, sizeof *rows);
    if (!rows) {
        tp_warn_once(&g_warned_oom, "out of memory, some MPI calls are not counted");
        return -1;
    }
    for (size_t i = 0; i < t->cap; i++)
        if (t->rows[i].v[0] != 0) *tp_slot(rows, cap, t->rows[i].a, t->rows[i].b) = t->rows[i];
    free(t->rows);
    t->rows = rows;
    t->cap = cap;
    return 0;
}

static void tp_add(tp_table *t, uint64_t a, uint64_t b, int64_t v0, int64_t v1, int64_t v2) {
    if (4 * (t->n + 1) > 3 * t->cap && tp_grow(t) != 0) return;
    tp_row *r = tp_slot(t->rows, t->cap, a, b);
    if (r->v[0] == 0) {
        r->a = a;
        r->b = b;
        t->n++;
    }
    r->v[0] += v0;
    r->v[1] += v1;
    r->v[2] += v2;
}

/* A thread's tables. `busy` is taken by the owner per update and by a
 * collector while copying; the owner almost never finds it taken. Never
 * freed: a thread that exits keeps its counts. `calls` and `eps` hold its
 * trace (TP_TR_FIELDS and TP_EP_FIELDS values per record; times in ticks). */
struct tp_thread {
    atomic_flag busy;
    tp_table ops, peers, ucx;
    tp_vec calls, eps;
    struct tp_thread *next;
    uint64_t self;              /* pthread_self(): what Python calls the thread's id */
    atomic_int op;              /* tls.op, published for tinyprof_mpi_in_call */
};
static _Atomic(struct tp_thread *) g_threads;
static pthread_mutex_t g_threads_mu = PTHREAD_MUTEX_INITIALIZER;

static void tp_lock(struct tp_thread *t) {
    while (atomic_flag_test_and_set_explicit(&t->busy, memory_order_acquire)) sched_yield();
}
static void tp_unlock(struct tp_thread *t) { atomic_flag_clear_explicit(&t->busy, memory_order_release); }

static struct tp_thread *tp_register(void) {
    struct tp_thread *t = calloc(1, sizeof *t);
    if (!t) {
        tp_warn_once(&g_warned_oom, "out of memory, some MPI calls are not counted");
        return NULL;
    }
    atomic_flag_clear(&t->busy);
    t->self = (uint64_t)pthread_self();
    pthread_mutex_lock(&g_threads_mu);
    t->next = atomic_load(&g_threads);
    atomic_store_explicit(&g_threads, t, memory_order_release);
    pthread_mutex_unlock(&g_threads_mu);
    return tls.thread = t;
}
