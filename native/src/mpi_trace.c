/* mpi_trace.c: charging a call (tp_end), trace mode's records and
 * endpoints, and the byte and peer helpers the wrappers read.
 * Part of libtinyprof_mpi: included by tinyprof_mpi.c, whose includes,
 * ops and globals it uses; not compiled on its own. */

/* ---------------------------------------------------------- recording */

typedef struct {
    int32_t comm;   /* record index; -1: none */
    int64_t t0;
} tp_call;

/* ------------------------------------------------------------ tracing */

static atomic_size_t g_trace_limit;     /* calls kept at most, process-wide; 0: off */
static atomic_size_t g_trace_kept;
static atomic_llong g_trace_dropped;

static inline int tp_tracing(void) {
    return __builtin_expect(atomic_load_explicit(&g_trace_limit, memory_order_relaxed) != 0, 0);
}

/* Room for `more` values; 0, or -1 when out of memory (warned once). */
static int tp_reserve(tp_vec *v, size_t more) {
    if (v->n + more <= v->cap) return 0;
    size_t cap = v->cap ? 2 * v->cap : 256;
    while (cap < v->n + more) cap *= 2;
    int64_t *p = realloc(v->v, cap * sizeof(int64_t));
    if (!p) {
        tp_warn_once(&g_warned_oom, "out of memory, some MPI calls are not traced");
        return -1;
    }
    v->v = p;
    v->cap = cap;
    return 0;
}

/* The current call sent (TP_EP_SEND) or completed (TP_EP_RECV) a message on
 * communicator record `comm` (messages on an untracked one are not traced). */
static void tp_stage(int kind, int32_t comm, int32_t peer, int64_t tag, int64_t bytes) {
    if (peer < 0 || comm < 0 || tp_reserve(&tls.stage, TP_EP_FIELDS - 1) != 0) return;
    int64_t *e = tls.stage.v + tls.stage.n - TP_EP_KIND;
    e[TP_EP_KIND] = kind;
    e[TP_EP_PEER] = peer;
    e[TP_EP_TAG] = tag;
    e[TP_EP_BYTES] = bytes;
    e[TP_EP_COMM] = comm;
    tls.stage.n += TP_EP_FIELDS - 1;
}

static tp_req *tp_req_slot(uint64_t key, int insert) {
    tp_req *tomb = NULL;
    for (size_t i = tp_mix(key) & (tls.reqs_cap - 1);; i = (i + 1) & (tls.reqs_cap - 1)) {
        tp_req *r = &tls.reqs[i];
        if (r->state == 0) return insert && tomb ? tomb : (insert ? r : NULL);
        if (r->state == 2) {
            if (!tomb) tomb = r;
        } else if (r->key == key) {
            return r;
        }
    }
}

/* Remember a receive request (Irecv, Imrecv) on communicator record `comm`. */
static void tp_req_put(MPI_Request req, int32_t comm) {
    if (4 * (tls.reqs_used + 1) > 3 * tls.reqs_cap) {        /* rehash, dropping deleted slots */
        size_t cap = tls.reqs_cap ? tls.reqs_cap : 64, live = 0;
        for (size_t i = 0; i < tls.reqs_cap; i++) live += tls.reqs[i].state == 1;
        while (4 * (live + 1) > 2 * cap) cap *= 2;
        tp_req *old = tls.reqs, *fresh = calloc(cap, sizeof *fresh);
        if (!fresh) {
            tp_warn_once(&g_warned_oom, "out of memory, some MPI calls are not traced");
            return;
        }
        size_t old_cap = tls.reqs_cap;
        tls.reqs = fresh;
        tls.reqs_cap = cap;
        tls.reqs_used = 0;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].state == 1) {
                *tp_req_slot(old[i].key, 1) = old[i];
                tls.reqs_used++;
            }
        free(old);
    }
    tp_req *r = tp_req_slot(TP_BITS(req), 1);
    if (r->state == 0) tls.reqs_used++;
    *r = (tp_req){TP_BITS(req), comm, 1};
}

#define TP_NOREQ INT32_MIN
/* The communicator of a remembered receive request, or TP_NOREQ. */
static int32_t tp_req_find(uint64_t key) {
    tp_req *r = tls.reqs_cap ? tp_req_slot(key, 0) : NULL;
    return r ? r->comm : TP_NOREQ;
}

static void tp_req_drop(uint64_t key) {
    tp_req *r = tls.reqs_cap ? tp_req_slot(key, 0) : NULL;
    if (r) r->state = 2;
}

/* A completed receive: its message, from the status. */
static int64_t tp_status_bytes(const MPI_Status *st, MPI_Datatype t);
static int32_t tp_peer(int32_t idx, int dest);
static void tp_stage_status(int32_t comm, const MPI_Status *st) {
    if (st->MPI_SOURCE >= 0)
        tp_stage(TP_EP_RECV, comm, tp_peer(comm, st->MPI_SOURCE), st->MPI_TAG,
                 tp_status_bytes(st, MPI_BYTE));
}

/* Completion calls (Wait*, Test*): before the call, which requests are
 * traced receives (their handles vanish in the call); statuses substituted
 * when the caller ignores them; after it, one endpoint per completed one. */
typedef struct {
    int n, any;
    uint64_t *key;
    int32_t *comm;
    MPI_Status *mine;            /* statuses allocated here, or NULL */
    uint64_t key_buf[16];
    int32_t comm_buf[16];
    MPI_Status st_buf[16];
} tp_done;

static MPI_Status *tp_done_pre(tp_done *d, int n, const MPI_Request *reqs, MPI_Status *st, int array) {
    d->n = d->any = 0;
    d->mine = NULL;
    if (!tp_tracing() || n <= 0) return st;
    d->key = n <= 16 ? d->key_buf : malloc(sizeof(uint64_t) * (size_t)n);
    d->comm = n <= 16 ? d->comm_buf : malloc(sizeof(int32_t) * (size_t)n);
    if (!d->key || !d->comm) return st;
    d->n = n;
    for (int i = 0; i < n; i++) {
        d->key[i] = TP_BITS(reqs[i]);
        d->comm[i] = tp_req_find(d->key[i]);
        d->any |= d->comm[i] != TP_NOREQ;
    }
    if (!d->any || (array ? st != MPI_STATUSES_IGNORE : st != MPI_STATUS_IGNORE)) return st;
    int m = array ? n : 1;
    MPI_Status *local = m <= 16 ? d->st_buf : (d->mine = malloc(sizeof(MPI_Status) * (size_t)m));
    if (!local) d->any = 0;
    return local ? local : st;
}

/* Request `i` completed with status `st`. */
static void tp_done_one(tp_done *d, int i, const MPI_Status *st) {
    if (!d->any || i < 0 || i >= d->n || d->comm[i] == TP_NOREQ) return;
    tp_req_drop(d->key[i]);
    tp_stage_status(d->comm[i], st);
}

static void tp_done_free(tp_done *d) {
    if (d->n > 16) {
        free(d->key);
        free(d->comm);
    }
    free(d->mine);
}

/* Append the call to the thread's trace (under its lock), with what was staged. */
static void tp_trace_add(struct tp_thread *t, const tp_call *c, int op, int64_t t1, int64_t bytes,
                         int32_t node) {
    size_t nep = tls.stage.n / (TP_EP_FIELDS - 1);
    if (atomic_fetch_add_explicit(&g_trace_kept, 1, memory_order_relaxed) >=
            atomic_load_explicit(&g_trace_limit, memory_order_relaxed) ||
        tp_reserve(&t->calls, TP_TR_FIELDS) != 0 || tp_reserve(&t->eps, nep * TP_EP_FIELDS) != 0) {
        atomic_fetch_add_explicit(&g_trace_dropped, 1, memory_order_relaxed);
        return;
    }
    if (!tls.tid) tls.tid = (int32_t)syscall(SYS_gettid);
    int64_t *r = t->calls.v + t->calls.n, call = (int64_t)(t->calls.n / TP_TR_FIELDS);
    r[TP_TR_TID] = tls.tid;
    r[TP_TR_NODE] = node;
    r[TP_TR_START] = c->t0;
    r[TP_TR_DUR] = t1 > c->t0 ? t1 - c->t0 : 0;
    r[TP_TR_OP] = op;
    r[TP_TR_COMM] = c->comm;
    r[TP_TR_BYTES] = bytes;
    r[TP_TR_ROOT] = (int64_t)tls.root1 - 1;
    t->calls.n += TP_TR_FIELDS;
    for (size_t i = 0; i < nep; i++) {
        int64_t *e = t->eps.v + t->eps.n;
        e[TP_EP_CALL] = call;
        memcpy(&e[TP_EP_KIND], tls.stage.v + (TP_EP_FIELDS - 1) * i, (TP_EP_FIELDS - 1) * sizeof(int64_t));
        t->eps.n += TP_EP_FIELDS;
    }
}

/* Statements run after a successful call, in trace mode only. */
#define TP_TRACE(...)                                   \
    if (rc_ == MPI_SUCCESS && tp_tracing()) {           \
        __VA_ARGS__;                                    \
    }

static inline int tp_active(void) {
    return atomic_load_explicit(&g_on, memory_order_relaxed) && tls.pause == 0;
}

static inline int tp_bucket(int64_t b) { return b <= 0 ? 0 : 64 - __builtin_clzll((uint64_t)b); }

/* Charge one call to the calling thread's tables; peer >= 0: a message too. */
static void tp_end(const tp_call *c, int op, int64_t t1, int64_t bytes, int32_t peer) {
    struct tp_thread *t = tls.thread ? tls.thread : tp_register();
    if (!t) return;
    int32_t node = tp_node();
    uint64_t a = (uint64_t)(uint32_t)node << 32 | (uint32_t)c->comm;
    tp_lock(t);
    /* a thread moved across cores may see a slightly earlier t1: never negative */
    tp_add(&t->ops, a, (uint64_t)op << 8 | (uint64_t)tp_bucket(bytes), 1, bytes,
           t1 > c->t0 ? t1 - c->t0 : 0);
    if (peer >= 0) tp_add(&t->peers, a, (uint64_t)peer, 1, bytes, 0);
    if (tp_tracing()) tp_trace_add(t, c, op, t1, bytes, node);
    tp_unlock(t);
    tls.stage.n = 0;
    tls.root1 = 0;
}

/* World rank of rank `dest` of record `idx`; -1 for MPI_PROC_NULL, an
 * intercommunicator or an unknown rank: no matrix entry. */
static inline int32_t tp_peer(int32_t idx, int dest) {
    if (idx < 0) return -1;
    tp_comm *r = tp_rec(idx);
    return !r->inter && dest >= 0 && dest < r->nmembers ? r->members[dest] : -1;
}

static int64_t tp_tsize(MPI_Datatype t) {
    MPI_Count s = 0;
    if (t == MPI_DATATYPE_NULL || TP_Type_size(t, &s) != MPI_SUCCESS) return 0;
    return (int64_t)s;
}

/* count x size of type; the type is not looked at when count is 0 (it may be null). */
static inline int64_t tp_nb(int64_t count, MPI_Datatype t) { return count > 0 ? count * tp_tsize(t) : 0; }

static int64_t tp_status_bytes(const MPI_Status *st, MPI_Datatype t) {
    tp_count n = 0;
    if (TP_Get_count(st, t, &n) != MPI_SUCCESS || n == MPI_UNDEFINED) return 0;
    return tp_nb(n, t);
}

static int tp_rank(MPI_Comm c) {
    int r = -1;
    PMPI_Comm_rank(c, &r);
    return r;
}

/* This rank is the root of a rooted collective. */
static int tp_is_root(int32_t idx, MPI_Comm c, int root) {
    return root == MPI_ROOT || (idx >= 0 && !tp_rec(idx)->inter && root == tp_rank(c));
}

/* Entries of a per-peer count array: the remote group size on an intercommunicator. */
static int tp_npeers(int32_t idx, MPI_Comm c) {
    int n = 0;
    if (idx >= 0 && !tp_rec(idx)->inter) return tp_rec(idx)->size;
    PMPI_Comm_remote_size(c, &n);
    return n;
}

/* Sums of count arrays (int classic, MPI_Count large-count). */
#define TP_SUMS(SFX, CT)                                                              \
    static int64_t tp_sum##SFX(const CT *c, int n) {                                  \
        int64_t s = 0;                                                                \
        for (int i = 0; i < n; i++) s += c[i];                                        \
        return s;                                                                     \
    }                                                                                 \
    static int64_t tp_wsum##SFX(const CT *c, const MPI_Datatype *t, int n) {          \
        int64_t s = 0;                                                                \
        for (int i = 0; i < n; i++) s += tp_nb(c[i], t[i]);                           \
        return s;                                                                     \
    }
TP_SUMS(_i, int)
TP_MPI4(TP_SUMS(_c, MPI_Count))
#define tp_sum(c, n) _Generic((c), const int *: tp_sum_i TP_MPI4(, const MPI_Count *: tp_sum_c))(c, n)
#define tp_wsum(c, t, n) _Generic((c), const int *: tp_wsum_i TP_MPI4(, const MPI_Count *: tp_wsum_c))(c, t, n)

/* Mprobe'd message -> communicator, for the Mrecv that consumes it (an
 * MPI_Message names no communicator). Per thread, the last 8. MPI reuses
 * message handles: the newest entry wins, and an Mrecv consumes its entry. */
static void tp_msg_put(MPI_Message m, int32_t comm) {
    if (m == MPI_MESSAGE_NULL || m == MPI_MESSAGE_NO_PROC) return;
    unsigned i = tls.msg_next++ % 8;
    tls.msg[i] = TP_BITS(m);
    tls.msg_comm[i] = comm;
    tls.msg_live |= 1u << i;
}
static int32_t tp_msg_comm(MPI_Message m) {
    for (unsigned k = 1; k <= 8; k++) {
        unsigned i = (tls.msg_next - k) % 8;
        if (tls.msg_live & (1u << i) && tls.msg[i] == TP_BITS(m)) {
            tls.msg_live &= ~(1u << i);
            return tls.msg_comm[i];
        }
    }
    return -1;
}
