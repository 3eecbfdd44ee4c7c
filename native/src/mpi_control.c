/* mpi_control.c: the library's interface (tinyprof/tinyprof_mpi.h):
 * switches, collection of the tables and trace, communicator queries, and
 * what tinyprof_ucx.c reads of the MPI state (tinyprof_internal.h).
 * Part of libtinyprof_mpi: included by tinyprof_mpi.c, whose includes,
 * ops and globals it uses; not compiled on its own. */

/* ------------------------------------------------------------ control */

int tinyprof_mpi_abi(void) { return TINYPROF_MPI_ABI; }

static void tp_whole_stand_down(void);

void tinyprof_mpi_set_source(tinyprof_mpi_source_fn fn) {
    if (atomic_load(&g_whole) && fn != g_whole_source) tp_whole_stand_down();
    atomic_store(&g_source, fn);
}

/* For libtinyprof_whole's call sites at depth 1 (no unwinding): where the
 * wrapped call being recorded returns to, NULL outside TP_WRAP's calls. */
void *tinyprof_mpi_caller(void);
void *tinyprof_mpi_caller(void) { return tls.caller; }

void tinyprof_mpi_enable(int on) { atomic_store(&g_on, on != 0); }

int tinyprof_mpi_pause(int on) {
    if (on) return ++tls.pause;
    return tls.pause > 0 ? --tls.pause : 0;
}

void tinyprof_mpi_reset(void) {
    for (struct tp_thread *t = atomic_load_explicit(&g_threads, memory_order_acquire); t; t = t->next) {
        tp_lock(t);
        tp_table *tables[] = {&t->ops, &t->peers, &t->ucx};
        for (int i = 0; i < 3; i++) {
            if (tables[i]->rows) memset(tables[i]->rows, 0, tables[i]->cap * sizeof(tp_row));
            tables[i]->n = 0;
        }
        t->calls.n = t->eps.n = 0;
        tp_unlock(t);
    }
    atomic_store(&g_trace_kept, 0);
    atomic_store(&g_trace_dropped, 0);
}

void tinyprof_mpi_trace(size_t limit) { atomic_store(&g_trace_limit, limit); }

int64_t *tinyprof_mpi_trace_calls(size_t *ncalls, int64_t **endpoints, size_t *nep, int64_t *dropped) {
    tp_vec calls = {0}, eps = {0};
    double ns_per_tick = tp_ns_per_tick();
    int ok = 1;
    for (struct tp_thread *t = atomic_load_explicit(&g_threads, memory_order_acquire); t; t = t->next) {
        tp_lock(t);
        size_t base = calls.n / TP_TR_FIELDS;
        if (tp_reserve(&calls, t->calls.n) != 0 || tp_reserve(&eps, t->eps.n) != 0) {
            ok = 0;
        } else {
            memcpy(calls.v + calls.n, t->calls.v, t->calls.n * sizeof(int64_t));
            memcpy(eps.v + eps.n, t->eps.v, t->eps.n * sizeof(int64_t));
            for (size_t i = eps.n; i < eps.n + t->eps.n; i += TP_EP_FIELDS) eps.v[i + TP_EP_CALL] += (int64_t)base;
            calls.n += t->calls.n;
            eps.n += t->eps.n;
        }
        tp_unlock(t);
    }
    for (size_t i = 0; i < calls.n; i += TP_TR_FIELDS) {       /* ticks -> CLOCK_MONOTONIC ns */
        int64_t *r = calls.v + i;
        r[TP_TR_START] = g_ns0 + (int64_t)((double)(r[TP_TR_START] - g_tsc0) * ns_per_tick + 0.5);
        r[TP_TR_DUR] = (int64_t)((double)r[TP_TR_DUR] * ns_per_tick + 0.5);
    }
    *dropped = (int64_t)atomic_load(&g_trace_dropped);
    if (!ok || !calls.n) {
        free(calls.v);
        free(eps.v);
        *ncalls = *nep = 0;
        *endpoints = NULL;
        return NULL;
    }
    *ncalls = calls.n / TP_TR_FIELDS;
    *nep = eps.n / TP_EP_FIELDS;
    *endpoints = eps.v;
    return calls.v;
}

/* Every thread's table `which` (offset of a tp_table in tp_thread) summed,
 * as records of `fields` int64: ops and peers: node, comm, the key's second
 * part (ops: op and bucket; peers: peer), then the values (ops: 3; peers:
 * 2); ucx: node, MPI op, UCP op, endpoint, size, calls, bytes, and 0 for
 * the protocol and transport (tinyprof_ucx.c classifies). */
static int64_t *tp_collect(size_t which, int fields, size_t *n) {
    int ucx = which == offsetof(struct tp_thread, ucx);
    tp_table sum = {0};
    *n = 0;
    for (struct tp_thread *t = atomic_load_explicit(&g_threads, memory_order_acquire); t; t = t->next) {
        const tp_table *tab = (const tp_table *)((const char *)t + which);
        tp_lock(t);
        for (size_t i = 0; i < tab->cap; i++) {
            const tp_row *r = &tab->rows[i];
            if (r->v[0] != 0 && !(ucx && tp_ucx_own(r->b >> (TP_UCX_SIZE_BITS + TP_UCX_EPOCH_BITS),
                                                   (uint32_t)(r->b >> TP_UCX_SIZE_BITS) &
                                                       ((1u << TP_UCX_EPOCH_BITS) - 1))))
                tp_add(&sum, r->a, ucx ? r->b & (((uint64_t)1 << TP_UCX_SIZE_BITS) - 1) : r->b, r->v[0],
                       r->v[1], r->v[2]);
        }
        tp_unlock(t);
    }
    int64_t *out = sum.n ? malloc(sum.n * (size_t)fields * sizeof(int64_t)) : NULL;
    double ns_per_tick = tp_ns_per_tick();
    if (out) {
        int64_t *o = out;
        for (size_t i = 0; i < sum.cap; i++) {
            const tp_row *r = &sum.rows[i];
            if (r->v[0] == 0) continue;
            *o++ = (int32_t)(r->a >> 32);
            if (ucx) {
                *o++ = (int64_t)(r->a >> 24 & 0xff) - 1;
                *o++ = (int64_t)(r->a >> 16 & 0xff);
                *o++ = (int64_t)(r->a & 0xffff);
                *o++ = (int64_t)r->b;
                *o++ = r->v[0];
                *o++ = r->v[1];
                *o++ = 0;
                *o++ = 0;
                continue;
            }
            *o++ = (int32_t)(uint32_t)r->a;
            if (fields == TP_OP_FIELDS) {
                *o++ = (int64_t)(r->b >> 8);
                *o++ = (int64_t)(r->b & 0xff);
            } else {
                *o++ = (int64_t)r->b;
            }
            *o++ = r->v[0];
            *o++ = r->v[1];
            if (fields == TP_OP_FIELDS) *o++ = (int64_t)((double)r->v[2] * ns_per_tick + 0.5);
        }
        *n = sum.n;
    }
    free(sum.rows);
    return out;
}

int64_t *tinyprof_mpi_ops(size_t *n) {
    return tp_collect(offsetof(struct tp_thread, ops), TP_OP_FIELDS, n);
}

int64_t *tinyprof_mpi_peers(size_t *n) {
    return tp_collect(offsetof(struct tp_thread, peers), TP_PEER_FIELDS, n);
}

int64_t *tp_ucx_counts(size_t *n) {
    return tp_collect(offsetof(struct tp_thread, ucx), TP_UCX_FIELDS, n);
}

void tinyprof_mpi_free(void *records) { free(records); }

int tp_ucx_context(int32_t *node, int *op, uint32_t *epoch) {
    if (tls.skip) {
        *epoch = tls.own_epoch;
        return -1;
    }
    if (!tp_active()) return 0;
    *epoch = atomic_load_explicit(&g_epoch, memory_order_relaxed);
    *node = tp_node();
    *op = tls.op;
    return 1;
}

void tp_ucx_add(int32_t node, uint32_t key, uint64_t family, uint32_t epoch, uint64_t size, int64_t bytes) {
    struct tp_thread *t = tls.thread ? tls.thread : tp_register();
    if (!t) return;
    tp_lock(t);
    const uint64_t most = ((uint64_t)1 << TP_UCX_SIZE_BITS) - 1, latest = (1u << TP_UCX_EPOCH_BITS) - 1;
    uint64_t sized = (family << TP_UCX_EPOCH_BITS | (epoch < latest ? epoch : latest)) << TP_UCX_SIZE_BITS |
                     (size < most ? size : most);
    tp_add(&t->ucx, (uint64_t)(uint32_t)node << 32 | key, sized, 1, bytes, 0);
    tp_unlock(t);
}

int tinyprof_mpi_comm_count(void) {
    tp_ready();
    return atomic_load_explicit(&g_ncomms, memory_order_acquire);
}

static tp_comm *tp_rec_checked(int i) {
    tp_ready();
    return i >= 0 && i < atomic_load_explicit(&g_ncomms, memory_order_acquire) ? tp_rec(i) : NULL;
}

int tinyprof_mpi_comm_info(int i, char *name, size_t cap, int64_t info[TP_COMM_FIELDS]) {
    tp_comm *r = tp_rec_checked(i);
    if (!r) return -1;
    int flags = atomic_load(&r->flags);
    if (name && cap) snprintf(name, cap, "%s", r->name);
    info[TP_COMM_SIZE] = r->size;
    info[TP_COMM_MEMBERS] = flags & TP_COMM_SELFLIKE ? 0 : r->nmembers;
    info[TP_COMM_CREATED] = r->created;
    info[TP_COMM_FLAGS] = flags & ~TP_COMM_LEARNT;
    return 0;
}

int tinyprof_mpi_comm_members(int i, int32_t *out, size_t cap) {
    tp_comm *r = tp_rec_checked(i);
    if (!r) return -1;
    int n = atomic_load(&r->flags) & TP_COMM_SELFLIKE ? 0 : r->nmembers;
    memcpy(out, r->members, sizeof(int32_t) * ((size_t)n < cap ? (size_t)n : cap));
    return n;
}

const char *tinyprof_mpi_op_name(int op) { return op >= 0 && op < TP_NOPS ? tp_op_names[op] : NULL; }
