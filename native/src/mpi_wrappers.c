/* mpi_wrappers.c: the MPI_X / MPI_X_c wrappers, instantiated from
 * TP_WRAP by family (X-macros), and persistent requests.
 * Part of libtinyprof_mpi: included by tinyprof_mpi.c, whose includes,
 * ops and globals it uses; not compiled on its own. */

/* ----------------------------------------------------------- wrappers */

#define TP_COMM_LEARNT 64   /* tp_ucx_learn was called for it */

/* Before each of tinyprof's own calls on private communicator record `idx`:
 * its epoch for the transport view, which learns its traffic at the first
 * (that call may leave work for the application's calls to progress). */
static void tp_own_call(int32_t idx) {
    tp_comm *r = tp_rec(idx);
    tls.own_epoch = r->epoch;
    if (atomic_fetch_or(&r->flags, TP_COMM_LEARNT) & TP_COMM_LEARNT) return;
    if (!r->inter) tp_ucx_learn(r->handle);
}

/* Around a wrapped PMPI call, for the transport view (tp_ucx_context): the
 * MPI op in progress (op1 = op code + 1 when counted; 0 leaves it) and, for
 * a call on private communicator record `idx` (priv), the skip count and
 * its epoch. Returns the op to restore with tp_leave. The op is published in
 * the thread's record too, for the sampler (tinyprof_mpi_in_call). Always
 * inlined, as they were before publishing made them grow: one TLS address
 * per wrapper (an out-of-line call costs another, ~10 ns a call). */
static inline __attribute__((always_inline)) int tp_enter(int op1, int32_t idx, int priv) {
    int saved = tls.op;
    if (op1) {
        tls.op = op1;
        if (tls.thread || tp_register()) atomic_store_explicit(&tls.thread->op, op1, memory_order_relaxed);
    }
    tls.skip += priv;
    if (priv) tp_own_call(idx);
    return saved;
}

static inline __attribute__((always_inline)) void tp_leave(int saved, int priv) {
    tls.skip -= priv;
    tls.op = saved;
    if (tls.thread) atomic_store_explicit(&tls.thread->op, saved, memory_order_relaxed);
}

/* A thread's counted call in progress, asked by the sampler from another
 * thread: the threads that made one are in g_threads (never freed); one that
 * ended, whose id a later thread took, left no call in progress. */
int tinyprof_mpi_in_call(uint64_t thread) {
    for (struct tp_thread *t = atomic_load_explicit(&g_threads, memory_order_acquire); t; t = t->next) {
        int op1 = t->self == thread ? atomic_load_explicit(&t->op, memory_order_relaxed) : 0;
        if (op1) return op1 - 1;
    }
    return -1;
}

/* tinyprof's own call (the thread paused, or on a private communicator when
 * PRIV): not counted, nor the UCP operations it makes; those on a private
 * communicator mark its traffic as tinyprof's (tinyprof_ucx.c). */
#define TP_SKIPPED(PRIV, CALL)                                                            \
    do {                                                                                  \
        int priv_ = (PRIV), saved_ = tp_enter(0, c_.comm, priv_);                         \
        int rc_ = CALL;                                                                   \
        tp_leave(saved_, priv_);                                                          \
        return rc_;                                                                       \
    } while (0)

/* The one wrapper: NAME's PMPI call, timed and charged to op OP on record
 * COMM when recording. PRE/POST: statements around the call (recording path
 * only); BYTES and PEER are read after it (only if it succeeded). */
#define TP_WRAP(NAME, OP, PARAMS, ARGS, COMM, PRE, BYTES, PEER, POST)                     \
    int MPI_##NAME PARAMS {                                                               \
        tp_call c_;                                                                       \
        if (!atomic_load_explicit(&g_on, memory_order_relaxed)) return PMPI_##NAME ARGS;  \
        c_.comm = (COMM);                                                                 \
        if (tls.pause || tp_private(c_.comm)) TP_SKIPPED(tp_private(c_.comm), PMPI_##NAME ARGS); \
        PRE;                                                                              \
        tls.caller = __builtin_return_address(0);                                         \
        int op_ = tp_enter((OP) + 1, c_.comm, 0);                                         \
        c_.t0 = tp_ticks();                                                               \
        int rc_ = PMPI_##NAME ARGS;                                                       \
        int64_t t1_ = tp_ticks();                                                         \
        tp_leave(op_, 0);                                                                 \
        POST;                                                                             \
        int ok_ = rc_ == MPI_SUCCESS;                                                     \
        tp_end(&c_, OP, t1_, ok_ ? (int64_t)(BYTES) : 0, ok_ ? (int32_t)(PEER) : -1);     \
        tls.caller = NULL;    /* never stale: a nested call's, or another wrapper's */     \
        return rc_;                                                                       \
    }

/* Trailing request parameter: BL blocking, NB nonblocking (pasted as R##_P, R##_A). */
#define BL_P
#define BL_A
#define BL_FORGET
#define NB_P , MPI_Request *request
#define NB_A , request
#define NB_FORGET tp_req_drop(TP_BITS(*request))   /* a handle MPI reused: no longer a receive */

/* Instantiate family FAM for the classic (int counts and displacements) and
 * the large-count `_c` entry point. */
#define TP_BOTH(FAM, ...) FAM(, int, int, __VA_ARGS__) TP_MPI4(FAM(_c, MPI_Count, MPI_Aint, __VA_ARGS__))
/* A collective and its nonblocking twin. */
#define TP_COLL(FAM, NAME, INAME, BYTES) TP_BOTH(FAM, NAME, BL, BYTES) TP_BOTH(FAM, INAME, NB, BYTES)

#define TP_LOCAL_STATUS                 \
    MPI_Status st_;                     \
    if (status == MPI_STATUS_IGNORE) status = &st_

/* -- point-to-point */
#define F_SEND(SFX, CT, DT, NAME, R)                                                                  \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                     \
            (const void *buf, CT count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm R##_P), \
            (buf, count, datatype, dest, tag, comm R##_A), tp_index(comm), , tp_nb(count, datatype),  \
            tp_peer(c_.comm, dest),                                                                   \
            TP_TRACE(tp_stage(TP_EP_SEND, c_.comm, tp_peer(c_.comm, dest), tag, tp_nb(count, datatype)); \
                     R##_FORGET))
TP_BOTH(F_SEND, Send, BL) TP_BOTH(F_SEND, Ssend, BL) TP_BOTH(F_SEND, Rsend, BL) TP_BOTH(F_SEND, Bsend, BL)
TP_BOTH(F_SEND, Isend, NB) TP_BOTH(F_SEND, Issend, NB) TP_BOTH(F_SEND, Irsend, NB) TP_BOTH(F_SEND, Ibsend, NB)

#define F_RECV(SFX, CT, DT, NAME)                                                                   \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                   \
            (void *buf, CT count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,        \
             MPI_Status *status),                                                                   \
            (buf, count, datatype, source, tag, comm, status), tp_index(comm), TP_LOCAL_STATUS,     \
            tp_status_bytes(status, datatype), -1, TP_TRACE(tp_stage_status(c_.comm, status)))
TP_BOTH(F_RECV, Recv)

#define F_IRECV(SFX, CT, DT, NAME)                                                                  \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                   \
            (void *buf, CT count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,        \
             MPI_Request *request),                                                                 \
            (buf, count, datatype, source, tag, comm, request), tp_index(comm), ,                   \
            tp_nb(count, datatype), -1, TP_TRACE(tp_req_put(*request, c_.comm)))
TP_BOTH(F_IRECV, Irecv)

#define F_SENDRECV(SFX, CT, DT, NAME)                                                               \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                   \
            (const void *sendbuf, CT sendcount, MPI_Datatype sendtype, int dest, int sendtag,       \
             void *recvbuf, CT recvcount, MPI_Datatype recvtype, int source, int recvtag,           \
             MPI_Comm comm, MPI_Status *status),                                                    \
            (sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source,     \
             recvtag, comm, status),                                                                \
            tp_index(comm), TP_LOCAL_STATUS, tp_nb(sendcount, sendtype), tp_peer(c_.comm, dest),    \
            TP_TRACE(tp_stage(TP_EP_SEND, c_.comm, tp_peer(c_.comm, dest), sendtag,                 \
                              tp_nb(sendcount, sendtype));                                            \
                     tp_stage_status(c_.comm, status)))
TP_BOTH(F_SENDRECV, Sendrecv)

#define F_SENDRECV_REPLACE(SFX, CT, DT, NAME)                                                       \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                   \
            (void *buf, CT count, MPI_Datatype datatype, int dest, int sendtag, int source,         \
             int recvtag, MPI_Comm comm, MPI_Status *status),                                       \
            (buf, count, datatype, dest, sendtag, source, recvtag, comm, status), tp_index(comm),   \
            TP_LOCAL_STATUS, tp_nb(count, datatype), tp_peer(c_.comm, dest),                        \
            TP_TRACE(tp_stage(TP_EP_SEND, c_.comm, tp_peer(c_.comm, dest), sendtag,                 \
                              tp_nb(count, datatype));                                                \
                     tp_stage_status(c_.comm, status)))
TP_BOTH(F_SENDRECV_REPLACE, Sendrecv_replace)

/* Probes have no `_c` form; Mprobe'd messages remember their communicator. */
TP_WRAP(Probe, OP_Probe, (int source, int tag, MPI_Comm comm, MPI_Status *status),
        (source, tag, comm, status), tp_index(comm), , 0, -1, )
TP_WRAP(Iprobe, OP_Iprobe, (int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status),
        (source, tag, comm, flag, status), tp_index(comm), , 0, -1, )
TP_WRAP(Mprobe, OP_Mprobe,
        (int source, int tag, MPI_Comm comm, MPI_Message *message, MPI_Status *status),
        (source, tag, comm, message, status), tp_index(comm), , 0, -1,
        if (rc_ == MPI_SUCCESS) tp_msg_put(*message, c_.comm))
TP_WRAP(Improbe, OP_Improbe,
        (int source, int tag, MPI_Comm comm, int *flag, MPI_Message *message, MPI_Status *status),
        (source, tag, comm, flag, message, status), tp_index(comm), , 0, -1,
        if (rc_ == MPI_SUCCESS && *flag) tp_msg_put(*message, c_.comm))

#define F_MRECV(SFX, CT, DT, NAME)                                                                  \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                   \
            (void *buf, CT count, MPI_Datatype datatype, MPI_Message *message, MPI_Status *status), \
            (buf, count, datatype, message, status), tp_msg_comm(*message), TP_LOCAL_STATUS,        \
            tp_status_bytes(status, datatype), -1, TP_TRACE(tp_stage_status(c_.comm, status)))
TP_BOTH(F_MRECV, Mrecv)

#define F_IMRECV(SFX, CT, DT, NAME)                                                                 \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                   \
            (void *buf, CT count, MPI_Datatype datatype, MPI_Message *message,                      \
             MPI_Request *request),                                                                 \
            (buf, count, datatype, message, request), tp_msg_comm(*message), ,                      \
            tp_nb(count, datatype), -1, TP_TRACE(tp_req_put(*request, c_.comm)))
TP_BOTH(F_IMRECV, Imrecv)

/* -- completion: no communicator, no bytes; in trace mode, the receives they complete */
#define F_DONE(NAME, PARAMS, ARGS, N, REQS, ST, ARRAY, POST)                                   \
    TP_WRAP(NAME, OP_##NAME, PARAMS, ARGS, -1, tp_done d_; ST = tp_done_pre(&d_, N, REQS, ST, ARRAY), \
            0, -1, POST; tp_done_free(&d_))
#define TP_DONE_EACH(N, INDEX, ST)                                                              \
    for (int k_ = 0; k_ < (N); k_++) tp_done_one(&d_, INDEX, &(ST)[k_])
F_DONE(Wait, (MPI_Request *request, MPI_Status *status), (request, status), 1, request, status, 0,
       TP_TRACE(tp_done_one(&d_, 0, status)))
F_DONE(Waitall, (int count, MPI_Request array_of_requests[], MPI_Status *array_of_statuses),
       (count, array_of_requests, array_of_statuses), count, array_of_requests, array_of_statuses, 1,
       TP_TRACE(TP_DONE_EACH(count, k_, array_of_statuses)))
F_DONE(Waitany, (int count, MPI_Request array_of_requests[], int *indx, MPI_Status *status),
       (count, array_of_requests, indx, status), count, array_of_requests, status, 0,
       TP_TRACE(tp_done_one(&d_, *indx, status)))
F_DONE(Waitsome,
       (int incount, MPI_Request array_of_requests[], int *outcount, int array_of_indices[],
        MPI_Status *array_of_statuses),
       (incount, array_of_requests, outcount, array_of_indices, array_of_statuses), incount,
       array_of_requests, array_of_statuses, 1,
       TP_TRACE(if (*outcount != MPI_UNDEFINED)
                    TP_DONE_EACH(*outcount, array_of_indices[k_], array_of_statuses)))
F_DONE(Test, (MPI_Request *request, int *flag, MPI_Status *status), (request, flag, status), 1,
       request, status, 0, TP_TRACE(if (*flag) tp_done_one(&d_, 0, status)))
F_DONE(Testall,
       (int count, MPI_Request array_of_requests[], int *flag, MPI_Status *array_of_statuses),
       (count, array_of_requests, flag, array_of_statuses), count, array_of_requests,
       array_of_statuses, 1, TP_TRACE(if (*flag) TP_DONE_EACH(count, k_, array_of_statuses)))
F_DONE(Testany,
       (int count, MPI_Request array_of_requests[], int *indx, int *flag, MPI_Status *status),
       (count, array_of_requests, indx, flag, status), count, array_of_requests, status, 0,
       TP_TRACE(if (*flag) tp_done_one(&d_, *indx, status)))
F_DONE(Testsome,
       (int incount, MPI_Request array_of_requests[], int *outcount, int array_of_indices[],
        MPI_Status *array_of_statuses),
       (incount, array_of_requests, outcount, array_of_indices, array_of_statuses), incount,
       array_of_requests, array_of_statuses, 1,
       TP_TRACE(if (*outcount != MPI_UNDEFINED)
                    TP_DONE_EACH(*outcount, array_of_indices[k_], array_of_statuses)))

/* -- collectives; BYTES per docs/mpi.md */
TP_WRAP(Barrier, OP_Barrier, (MPI_Comm comm), (comm), tp_index(comm), , 0, -1, )
TP_WRAP(Ibarrier, OP_Ibarrier, (MPI_Comm comm, MPI_Request *request), (comm, request),
        tp_index(comm), , 0, -1, )

#define F_BCAST(SFX, CT, DT, NAME, R, BYTES)                                                         \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                    \
            (void *buffer, CT count, MPI_Datatype datatype, int root, MPI_Comm comm R##_P),         \
            (buffer, count, datatype, root, comm R##_A), tp_index(comm), , BYTES, -1, TP_TRACE(tls.root1 = tp_peer(c_.comm, root) + 1))
TP_COLL(F_BCAST, Bcast, Ibcast, tp_nb(count, datatype))

#define F_REDUCE(SFX, CT, DT, NAME, R, BYTES)                                                        \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                    \
            (const void *sendbuf, void *recvbuf, CT count, MPI_Datatype datatype, MPI_Op op,         \
             int root, MPI_Comm comm R##_P),                                                         \
            (sendbuf, recvbuf, count, datatype, op, root, comm R##_A), tp_index(comm), , BYTES, -1, \
            TP_TRACE(tls.root1 = tp_peer(c_.comm, root) + 1))
TP_COLL(F_REDUCE, Reduce, Ireduce, tp_nb(count, datatype))

#define F_ALLREDUCE(SFX, CT, DT, NAME, R, BYTES)                                                     \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                    \
            (const void *sendbuf, void *recvbuf, CT count, MPI_Datatype datatype, MPI_Op op,         \
             MPI_Comm comm R##_P),                                                                   \
            (sendbuf, recvbuf, count, datatype, op, comm R##_A), tp_index(comm), , BYTES, -1, )
TP_COLL(F_ALLREDUCE, Allreduce, Iallreduce, tp_nb(count, datatype))
TP_COLL(F_ALLREDUCE, Scan, Iscan, tp_nb(count, datatype))
TP_COLL(F_ALLREDUCE, Exscan, Iexscan, tp_nb(count, datatype))

#define F_GATHER(SFX, CT, DT, NAME, R, BYTES)                                                        \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                    \
            (const void *sendbuf, CT sendcount, MPI_Datatype sendtype, void *recvbuf, CT recvcount,  \
             MPI_Datatype recvtype, int root, MPI_Comm comm R##_P),                                  \
            (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm R##_A),          \
            tp_index(comm), , BYTES, -1, TP_TRACE(tls.root1 = tp_peer(c_.comm, root) + 1))
#define IN_PLACE_OR(RECV, SEND) (sendbuf == MPI_IN_PLACE ? (RECV) : (SEND))
TP_COLL(F_GATHER, Gather, Igather,
        IN_PLACE_OR(tp_nb(recvcount, recvtype), tp_nb(sendcount, sendtype)))
TP_COLL(F_GATHER, Scatter, Iscatter,
        tp_is_root(c_.comm, comm, root) ? tp_nb(sendcount, sendtype) * tp_npeers(c_.comm, comm)
                                        : tp_nb(recvcount, recvtype))

#define F_ALLGATHER(SFX, CT, DT, NAME, R, BYTES)                                                     \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                    \
            (const void *sendbuf, CT sendcount, MPI_Datatype sendtype, void *recvbuf, CT recvcount,  \
             MPI_Datatype recvtype, MPI_Comm comm R##_P),                                            \
            (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm R##_A),                \
            tp_index(comm), , BYTES, -1, )
TP_COLL(F_ALLGATHER, Allgather, Iallgather,
        IN_PLACE_OR(tp_nb(recvcount, recvtype), tp_nb(sendcount, sendtype)))
TP_COLL(F_ALLGATHER, Alltoall, Ialltoall,
        IN_PLACE_OR(tp_nb(recvcount, recvtype), tp_nb(sendcount, sendtype)) * tp_npeers(c_.comm, comm))

#define F_GATHERV(SFX, CT, DT, NAME, R, BYTES)                                                       \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                    \
            (const void *sendbuf, CT sendcount, MPI_Datatype sendtype, void *recvbuf,                \
             const CT recvcounts[], const DT displs[], MPI_Datatype recvtype, int root,              \
             MPI_Comm comm R##_P),                                                                   \
            (sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm R##_A), \
            tp_index(comm), , BYTES, -1, TP_TRACE(tls.root1 = tp_peer(c_.comm, root) + 1))
TP_COLL(F_GATHERV, Gatherv, Igatherv,
        IN_PLACE_OR(tp_nb(recvcounts[tp_rank(comm)], recvtype), tp_nb(sendcount, sendtype)))

#define F_ALLGATHERV(SFX, CT, DT, NAME, R, BYTES)                                                    \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                    \
            (const void *sendbuf, CT sendcount, MPI_Datatype sendtype, void *recvbuf,                \
             const CT recvcounts[], const DT displs[], MPI_Datatype recvtype, MPI_Comm comm R##_P),  \
            (sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm R##_A),       \
            tp_index(comm), , BYTES, -1, )
TP_COLL(F_ALLGATHERV, Allgatherv, Iallgatherv,
        IN_PLACE_OR(tp_nb(recvcounts[tp_rank(comm)], recvtype), tp_nb(sendcount, sendtype)))

#define F_SCATTERV(SFX, CT, DT, NAME, R, BYTES)                                                      \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                    \
            (const void *sendbuf, const CT sendcounts[], const DT displs[], MPI_Datatype sendtype,   \
             void *recvbuf, CT recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm R##_P),     \
            (sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm R##_A), \
            tp_index(comm), , BYTES, -1, TP_TRACE(tls.root1 = tp_peer(c_.comm, root) + 1))
TP_COLL(F_SCATTERV, Scatterv, Iscatterv,
        tp_is_root(c_.comm, comm, root) ? tp_nb(tp_sum(sendcounts, tp_npeers(c_.comm, comm)), sendtype)
                                        : tp_nb(recvcount, recvtype))

#define F_ALLTOALLV(SFX, CT, DT, NAME, R, BYTES)                                                     \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                    \
            (const void *sendbuf, const CT sendcounts[], const DT sdispls[], MPI_Datatype sendtype,  \
             void *recvbuf, const CT recvcounts[], const DT rdispls[], MPI_Datatype recvtype,        \
             MPI_Comm comm R##_P),                                                                   \
            (sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,         \
             comm R##_A),                                                                            \
            tp_index(comm), , BYTES, -1, )
TP_COLL(F_ALLTOALLV, Alltoallv, Ialltoallv,
        IN_PLACE_OR(tp_nb(tp_sum(recvcounts, tp_npeers(c_.comm, comm)), recvtype),
                    tp_nb(tp_sum(sendcounts, tp_npeers(c_.comm, comm)), sendtype)))

#define F_ALLTOALLW(SFX, CT, DT, NAME, R, BYTES)                                                     \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                    \
            (const void *sendbuf, const CT sendcounts[], const DT sdispls[],                         \
             const MPI_Datatype sendtypes[], void *recvbuf, const CT recvcounts[],                   \
             const DT rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm R##_P),               \
            (sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes,       \
             comm R##_A),                                                                            \
            tp_index(comm), , BYTES, -1, )
TP_COLL(F_ALLTOALLW, Alltoallw, Ialltoallw,
        IN_PLACE_OR(tp_wsum(recvcounts, recvtypes, tp_npeers(c_.comm, comm)),
                    tp_wsum(sendcounts, sendtypes, tp_npeers(c_.comm, comm))))

#define F_REDUCE_SCATTER(SFX, CT, DT, NAME, R, BYTES)                                                \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                    \
            (const void *sendbuf, void *recvbuf, const CT recvcounts[], MPI_Datatype datatype,       \
             MPI_Op op, MPI_Comm comm R##_P),                                                        \
            (sendbuf, recvbuf, recvcounts, datatype, op, comm R##_A), tp_index(comm), , BYTES, -1, )
TP_COLL(F_REDUCE_SCATTER, Reduce_scatter, Ireduce_scatter,
        tp_nb(tp_sum(recvcounts, tp_rec(c_.comm)->size), datatype))

#define F_REDUCE_SCATTER_BLOCK(SFX, CT, DT, NAME, R, BYTES)                                          \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                    \
            (const void *sendbuf, void *recvbuf, CT recvcount, MPI_Datatype datatype, MPI_Op op,     \
             MPI_Comm comm R##_P),                                                                   \
            (sendbuf, recvbuf, recvcount, datatype, op, comm R##_A), tp_index(comm), , BYTES, -1, )
TP_COLL(F_REDUCE_SCATTER_BLOCK, Reduce_scatter_block, Ireduce_scatter_block,
        tp_nb(recvcount, datatype) * tp_rec(c_.comm)->size)

/* -- communicator creation: always named (recording or not); counted as an
 * op on the parent when recording. */
#define F_CREATE(NAME, KIND, PARAMS, ARGS, PARENT, OUT)                                          \
    int MPI_##NAME PARAMS {                                                                      \
        tp_call c_ = {tp_index(PARENT), 0};                                                      \
        int priv_ = tp_private(c_.comm), rec_ = tp_active() && !priv_;                            \
        if (rec_) c_.t0 = tp_ticks();                                                            \
        int op_ = tp_enter(rec_ ? OP_##NAME + 1 : 0, c_.comm, priv_);                            \
        if (priv_ || tls.pause) /* its traffic on the new context: from the new one's epoch */    \
            tls.own_epoch = atomic_load(&g_epoch) + 1;                                           \
        int rc_ = PMPI_##NAME ARGS;                                                              \
        tp_leave(op_, priv_);                                                                    \
        if (rec_) tp_end(&c_, OP_##NAME, tp_ticks(), 0, -1);                                     \
        if (rc_ == MPI_SUCCESS) tp_created(c_.comm, *(OUT), KIND);                               \
        return rc_;                                                                              \
    }
F_CREATE(Comm_dup, K_DUP, (MPI_Comm comm, MPI_Comm *newcomm), (comm, newcomm), comm, newcomm)
F_CREATE(Comm_dup_with_info, K_DUP, (MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm),
         (comm, info, newcomm), comm, newcomm)
F_CREATE(Comm_idup, K_DUP, (MPI_Comm comm, MPI_Comm *newcomm, MPI_Request *request),
         (comm, newcomm, request), comm, newcomm)
TP_MPI4(F_CREATE(Comm_idup_with_info, K_DUP,
                 (MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm, MPI_Request *request),
                 (comm, info, newcomm, request), comm, newcomm))
F_CREATE(Comm_split, K_SPLIT, (MPI_Comm comm, int color, int key, MPI_Comm *newcomm),
         (comm, color, key, newcomm), comm, newcomm)
F_CREATE(Comm_split_type, K_SPLIT,
         (MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm *newcomm),
         (comm, split_type, key, info, newcomm), comm, newcomm)
F_CREATE(Comm_create, K_CREATE, (MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm),
         (comm, group, newcomm), comm, newcomm)
F_CREATE(Comm_create_group, K_CREATE, (MPI_Comm comm, MPI_Group group, int tag, MPI_Comm *newcomm),
         (comm, group, tag, newcomm), comm, newcomm)
F_CREATE(Cart_create, K_CART,
         (MPI_Comm comm_old, int ndims, const int dims[], const int periods[], int reorder,
          MPI_Comm *comm_cart),
         (comm_old, ndims, dims, periods, reorder, comm_cart), comm_old, comm_cart)
F_CREATE(Cart_sub, K_SUB, (MPI_Comm comm, const int remain_dims[], MPI_Comm *newcomm),
         (comm, remain_dims, newcomm), comm, newcomm)
F_CREATE(Graph_create, K_GRAPH,
         (MPI_Comm comm_old, int nnodes, const int indx[], const int edges[], int reorder,
          MPI_Comm *comm_graph),
         (comm_old, nnodes, indx, edges, reorder, comm_graph), comm_old, comm_graph)
F_CREATE(Dist_graph_create, K_GRAPH,
         (MPI_Comm comm_old, int n, const int sources[], const int degrees[],
          const int destinations[], const int weights[], MPI_Info info, int reorder,
          MPI_Comm *comm_dist_graph),
         (comm_old, n, sources, degrees, destinations, weights, info, reorder, comm_dist_graph),
         comm_old, comm_dist_graph)
F_CREATE(Dist_graph_create_adjacent, K_GRAPH,
         (MPI_Comm comm_old, int indegree, const int sources[], const int sourceweights[],
          int outdegree, const int destinations[], const int destweights[], MPI_Info info,
          int reorder, MPI_Comm *comm_dist_graph),
         (comm_old, indegree, sources, sourceweights, outdegree, destinations, destweights, info,
          reorder, comm_dist_graph),
         comm_old, comm_dist_graph)
F_CREATE(Intercomm_create, K_INTER,
         (MPI_Comm local_comm, int local_leader, MPI_Comm peer_comm, int remote_leader, int tag,
          MPI_Comm *newintercomm),
         (local_comm, local_leader, peer_comm, remote_leader, tag, newintercomm), local_comm,
         newintercomm)
F_CREATE(Intercomm_merge, K_MERGE, (MPI_Comm intercomm, int high, MPI_Comm *newintracomm),
         (intercomm, high, newintracomm), intercomm, newintracomm)

/* Counted on the communicator freed; its record stays, flagged FREED, and
 * its handle is forgotten (MPI reuses handles). */
int MPI_Comm_free(MPI_Comm *comm) {
    MPI_Comm h = *comm;
    int rec_ = tp_active();
    tp_call c_ = {rec_ ? tp_index(h) : tp_find(TP_BITS(h)), 0};
    int priv_ = tp_private(c_.comm);
    rec_ = rec_ && !priv_;
    if (rec_) c_.t0 = tp_ticks();
    int op_ = tp_enter(rec_ ? OP_Comm_free + 1 : 0, c_.comm, priv_);
    int rc_ = PMPI_Comm_free(comm);
    tp_leave(op_, priv_);
    if (rec_) tp_end(&c_, OP_Comm_free, tp_ticks(), 0, -1);
    if (rc_ == MPI_SUCCESS) tp_freed(c_.comm, h);
    return rc_;
}

/* -- windows and files: calls on one are counted on the communicator it was
 * made over (its record), learnt at creation whether recording or not. Their
 * handles share the communicators' map under a tag of their own. */
#define TP_WIN_KEY(w) (TP_BITS(w) ^ (1ull << 62))
#define TP_FILE_KEY(f) (TP_BITS(f) ^ (1ull << 63))

static void tp_bind(uint64_t key, int32_t comm) {
    if (comm < 0) return;
    pthread_mutex_lock(&g_comm_mu);
    tp_map(key, comm);
    pthread_mutex_unlock(&g_comm_mu);
}

static void tp_unbind(uint64_t key) {
    pthread_mutex_lock(&g_comm_mu);
    if (tp_find(key) >= 0) tp_map(key, -1);
    pthread_mutex_unlock(&g_comm_mu);
}

/* A window or file made over COMM: counted on it when recording; its handle
 * (*OUT) bound to it whenever the call succeeds. */
#define F_BIND(NAME, OP, PARAMS, ARGS, COMM, KEY)                                                \
    int MPI_##NAME PARAMS {                                                                      \
        tp_call c_ = {tp_index(COMM), 0};                                                        \
        int priv_ = tp_private(c_.comm), rec_ = tp_active() && !priv_;                            \
        if (rec_) c_.t0 = tp_ticks();                                                            \
        int op_ = tp_enter(rec_ ? (OP) + 1 : 0, c_.comm, priv_);                                 \
        int rc_ = PMPI_##NAME ARGS;                                                              \
        tp_leave(op_, priv_);                                                                    \
        if (rec_) tp_end(&c_, OP, tp_ticks(), 0, -1);                                            \
        if (rc_ == MPI_SUCCESS) tp_bind(KEY, c_.comm);                                           \
        return rc_;                                                                              \
    }
/* Its end: counted on its communicator, the handle forgotten (MPI reuses them). */
#define F_UNBIND(NAME, T, KEY)                                                                   \
    int MPI_##NAME(T *h) {                                                                       \
        uint64_t key_ = KEY(*h);                                                                 \
        tp_call c_ = {tp_find(key_), 0};                                                         \
        int priv_ = tp_private(c_.comm), rec_ = tp_active() && !priv_;                            \
        if (rec_) c_.t0 = tp_ticks();                                                            \
        int op_ = tp_enter(rec_ ? OP_##NAME + 1 : 0, c_.comm, priv_);                            \
        int rc_ = PMPI_##NAME(h);                                                                \
        tp_leave(op_, priv_);                                                                    \
        if (rec_) tp_end(&c_, OP_##NAME, tp_ticks(), 0, -1);                                     \
        if (rc_ == MPI_SUCCESS) tp_unbind(key_);                                                 \
        return rc_;                                                                              \
    }

#define F_WIN_NEW(SFX, CT, DT, NAME, BASE_P, BASE_A)                                               \
    F_BIND(NAME##SFX, OP_##NAME, (MPI_Aint size, DT disp_unit, MPI_Info info, MPI_Comm comm, BASE_P,         \
                       MPI_Win *win),                                                             \
           (size, disp_unit, info, comm, BASE_A, win), comm, TP_WIN_KEY(*win))
#define F_WIN_CREATE(SFX, CT, DT)                                                                  \
    F_BIND(Win_create##SFX, OP_Win_create, (void *base, MPI_Aint size, DT disp_unit, MPI_Info info, MPI_Comm comm, \
                             MPI_Win *win),                                                       \
           (base, size, disp_unit, info, comm, win), comm, TP_WIN_KEY(*win))
F_WIN_CREATE(, int, int) TP_MPI4(F_WIN_CREATE(_c, MPI_Count, MPI_Aint))
F_WIN_NEW(, int, int, Win_allocate, void *baseptr, baseptr)
TP_MPI4(F_WIN_NEW(_c, MPI_Count, MPI_Aint, Win_allocate, void *baseptr, baseptr))
F_WIN_NEW(, int, int, Win_allocate_shared, void *baseptr, baseptr)
TP_MPI4(F_WIN_NEW(_c, MPI_Count, MPI_Aint, Win_allocate_shared, void *baseptr, baseptr))
F_BIND(Win_create_dynamic, OP_Win_create_dynamic, (MPI_Info info, MPI_Comm comm, MPI_Win *win), (info, comm, win), comm,
       TP_WIN_KEY(*win))
F_UNBIND(Win_free, MPI_Win, TP_WIN_KEY)
F_BIND(File_open, OP_File_open, (MPI_Comm comm, const char *filename, int amode, MPI_Info info, MPI_File *fh),
       (comm, filename, amode, info, fh), comm, TP_FILE_KEY(*fh))
F_UNBIND(File_close, MPI_File, TP_FILE_KEY)

#define TP_WIN(w) tp_find(TP_WIN_KEY(w))
#define TP_FILE(f) tp_find(TP_FILE_KEY(f))

/* One-sided communication: the origin buffer's bytes; data put into the
 * target (Put, the accumulates, Fetch_and_op, Compare_and_swap) is a
 * message to it in the matrix, data fetched (Get, Rget) is not. */
#define F_RMA(SFX, CT, DT, NAME, R, PEER)                                                          \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                  \
            (const void *origin_addr, CT origin_count, MPI_Datatype origin_datatype,               \
             int target_rank, MPI_Aint target_disp, CT target_count,                               \
             MPI_Datatype target_datatype, MPI_Win win R##_P),                                     \
            (origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count,   \
             target_datatype, win R##_A),                                                          \
            TP_WIN(win), , tp_nb(origin_count, origin_datatype), PEER, )
#define F_GET(SFX, CT, DT, NAME, R)                                                                \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                  \
            (void *origin_addr, CT origin_count, MPI_Datatype origin_datatype, int target_rank,    \
             MPI_Aint target_disp, CT target_count, MPI_Datatype target_datatype,                  \
             MPI_Win win R##_P),                                                                   \
            (origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count,   \
             target_datatype, win R##_A),                                                          \
            TP_WIN(win), , tp_nb(origin_count, origin_datatype), -1, )
#define F_ACC(SFX, CT, DT, NAME, R)                                                                \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                  \
            (const void *origin_addr, CT origin_count, MPI_Datatype origin_datatype,               \
             int target_rank, MPI_Aint target_disp, CT target_count,                               \
             MPI_Datatype target_datatype, MPI_Op op, MPI_Win win R##_P),                          \
            (origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count,   \
             target_datatype, op, win R##_A),                                                      \
            TP_WIN(win), , tp_nb(origin_count, origin_datatype), tp_peer(c_.comm, target_rank), )
#define F_GET_ACC(SFX, CT, DT, NAME, R)                                                            \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                  \
            (const void *origin_addr, CT origin_count, MPI_Datatype origin_datatype,               \
             void *result_addr, CT result_count, MPI_Datatype result_datatype, int target_rank,     \
             MPI_Aint target_disp, CT target_count, MPI_Datatype target_datatype, MPI_Op op,       \
             MPI_Win win R##_P),                                                                   \
            (origin_addr, origin_count, origin_datatype, result_addr, result_count,                \
             result_datatype, target_rank, target_disp, target_count, target_datatype, op,         \
             win R##_A),                                                                           \
            TP_WIN(win), , tp_nb(origin_count, origin_datatype), tp_peer(c_.comm, target_rank), )
#define F_PUT(SFX, CT, DT, NAME, R) F_RMA(SFX, CT, DT, NAME, R, tp_peer(c_.comm, target_rank))
TP_BOTH(F_PUT, Put, BL) TP_BOTH(F_PUT, Rput, NB)
TP_BOTH(F_GET, Get, BL) TP_BOTH(F_GET, Rget, NB)
TP_BOTH(F_ACC, Accumulate, BL) TP_BOTH(F_ACC, Raccumulate, NB)
TP_BOTH(F_GET_ACC, Get_accumulate, BL) TP_BOTH(F_GET_ACC, Rget_accumulate, NB)
TP_WRAP(Fetch_and_op, OP_Fetch_and_op,
        (const void *origin_addr, void *result_addr, MPI_Datatype datatype, int target_rank,
         MPI_Aint target_disp, MPI_Op op, MPI_Win win),
        (origin_addr, result_addr, datatype, target_rank, target_disp, op, win), TP_WIN(win), ,
        tp_nb(1, datatype), tp_peer(c_.comm, target_rank), )
TP_WRAP(Compare_and_swap, OP_Compare_and_swap,
        (const void *origin_addr, const void *compare_addr, void *result_addr,
         MPI_Datatype datatype, int target_rank, MPI_Aint target_disp, MPI_Win win),
        (origin_addr, compare_addr, result_addr, datatype, target_rank, target_disp, win),
        TP_WIN(win), , tp_nb(1, datatype), tp_peer(c_.comm, target_rank), )

/* Synchronisation: 0 bytes. */
#define F_SYNC(NAME, PARAMS, ARGS) TP_WRAP(NAME, OP_##NAME, PARAMS, ARGS, TP_WIN(win), , 0, -1, )
F_SYNC(Win_fence, (int assert, MPI_Win win), (assert, win))
F_SYNC(Win_lock, (int lock_type, int rank, int assert, MPI_Win win), (lock_type, rank, assert, win))
F_SYNC(Win_unlock, (int rank, MPI_Win win), (rank, win))
F_SYNC(Win_lock_all, (int assert, MPI_Win win), (assert, win))
F_SYNC(Win_unlock_all, (MPI_Win win), (win))
F_SYNC(Win_flush, (int rank, MPI_Win win), (rank, win))
F_SYNC(Win_flush_all, (MPI_Win win), (win))
F_SYNC(Win_flush_local, (int rank, MPI_Win win), (rank, win))
F_SYNC(Win_flush_local_all, (MPI_Win win), (win))
F_SYNC(Win_start, (MPI_Group group, int assert, MPI_Win win), (group, assert, win))
F_SYNC(Win_complete, (MPI_Win win), (win))
F_SYNC(Win_post, (MPI_Group group, int assert, MPI_Win win), (group, assert, win))
F_SYNC(Win_wait, (MPI_Win win), (win))

/* MPI-IO: a read counts the bytes read (from the status), a write or a
 * nonblocking read the bytes of the buffer; not in the matrix. */
#define F_FREAD(SFX, CT, DT, NAME, W)                                                     \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                  \
            (MPI_File fh, TP_##W##_P void *buf, CT count, MPI_Datatype datatype, MPI_Status *status),    \
            (fh, TP_##W##_A buf, count, datatype, status), TP_FILE(fh), TP_LOCAL_STATUS,                 \
            tp_status_bytes(status, datatype), -1, )
#define F_FWRITE(SFX, CT, DT, NAME, W)                                                    \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                  \
            (MPI_File fh, TP_##W##_P const void *buf, CT count, MPI_Datatype datatype,                   \
             MPI_Status *status),                                                                  \
            (fh, TP_##W##_A buf, count, datatype, status), TP_FILE(fh), , tp_nb(count, datatype), -1, )
#define F_FIREAD(SFX, CT, DT, NAME, W)                                                    \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                  \
            (MPI_File fh, TP_##W##_P void *buf, CT count, MPI_Datatype datatype, MPI_Request *request),  \
            (fh, TP_##W##_A buf, count, datatype, request), TP_FILE(fh), , tp_nb(count, datatype), -1, )
#define F_FIWRITE(SFX, CT, DT, NAME, W)                                                   \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                  \
            (MPI_File fh, TP_##W##_P const void *buf, CT count, MPI_Datatype datatype,                   \
             MPI_Request *request),                                                                \
            (fh, TP_##W##_A buf, count, datatype, request), TP_FILE(fh), , tp_nb(count, datatype), -1, )
/* W: AT for the explicit-offset forms, NO for the others (pasted as TP_##W##_P, TP_##W##_A). */
#define TP_AT_P MPI_Offset offset,
#define TP_AT_A offset,
#define TP_NO_P
#define TP_NO_A
#define TP_FILE_IO(FAM, NAME, NAME_AT, NAME_ALL, NAME_AT_ALL)                                      \
    TP_BOTH(FAM, NAME, NO) TP_BOTH(FAM, NAME_AT, AT) TP_BOTH(FAM, NAME_ALL, NO)                     \
    TP_BOTH(FAM, NAME_AT_ALL, AT)
TP_FILE_IO(F_FREAD, File_read, File_read_at, File_read_all, File_read_at_all)
TP_FILE_IO(F_FWRITE, File_write, File_write_at, File_write_all, File_write_at_all)
TP_FILE_IO(F_FIREAD, File_iread, File_iread_at, File_iread_all, File_iread_at_all)
TP_FILE_IO(F_FIWRITE, File_iwrite, File_iwrite_at, File_iwrite_all, File_iwrite_at_all)
TP_BOTH(F_FREAD, File_read_shared, NO) TP_BOTH(F_FREAD, File_read_ordered, NO)
TP_BOTH(F_FWRITE, File_write_shared, NO) TP_BOTH(F_FWRITE, File_write_ordered, NO)
TP_WRAP(File_sync, OP_File_sync, (MPI_File fh), (fh), TP_FILE(fh), , 0, -1, )

/* -- persistent requests: the init call counts its buffer's bytes; each
 * Start of it counts them again, on its communicator, and a send's message
 * goes to the matrix then. Requests are remembered process-wide (any thread
 * may start one) until MPI_Request_free. */
typedef struct {
    uint64_t key;      /* 0: empty */
    int32_t comm, peer;
    int64_t bytes;
} tp_preq;
#define TP_PREQS (1u << 12)
static tp_preq g_preqs[TP_PREQS];
static unsigned g_npreqs;          /* live and freed slots (key != 0) */
static pthread_mutex_t g_preq_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_flag g_warned_preqs = ATOMIC_FLAG_INIT;

/* Under g_preq_mu: the slot of `key`, or the free one where it would go. */
static tp_preq *tp_preq_slot(uint64_t key) {
    unsigned i = tp_mix(key) & (TP_PREQS - 1);
    while (g_preqs[i].key != 0 && g_preqs[i].key != key) i = (i + 1) & (TP_PREQS - 1);
    return &g_preqs[i];
}

static void tp_preq_put(MPI_Request req, int32_t comm, int32_t peer, int64_t bytes) {
    pthread_mutex_lock(&g_preq_mu);
    tp_preq *p = tp_preq_slot(TP_BITS(req));
    if (p->key == 0 && 4 * (g_npreqs + 1) > 3 * TP_PREQS) {
        tp_warn_once(&g_warned_preqs, "too many persistent requests, later ones are counted "
                                      "at Start without their communicator and bytes");
    } else {
        g_npreqs += p->key == 0;
        *p = (tp_preq){TP_BITS(req), comm, peer, bytes};
    }
    pthread_mutex_unlock(&g_preq_mu);
}

/* What was remembered of `req` (comm -1 and no bytes if nothing). A freed
 * request keeps its slot, marked comm -2, for MPI to reuse the handle. */
static tp_preq tp_preq_get(MPI_Request req) {
    tp_preq out = {0, -1, -1, 0};
    pthread_mutex_lock(&g_preq_mu);
    tp_preq *p = g_npreqs ? tp_preq_slot(TP_BITS(req)) : NULL;
    if (p && p->key != 0 && p->comm != -2) out = *p;
    pthread_mutex_unlock(&g_preq_mu);
    return out;
}

int MPI_Request_free(MPI_Request *request) {
    if (*request != MPI_REQUEST_NULL && atomic_load_explicit(&g_on, memory_order_relaxed)) {
        pthread_mutex_lock(&g_preq_mu);
        tp_preq *p = g_npreqs ? tp_preq_slot(TP_BITS(*request)) : NULL;
        if (p && p->key != 0) p->comm = -2;
        pthread_mutex_unlock(&g_preq_mu);
    }
    return PMPI_Request_free(request);
}

#define F_SEND_INIT(SFX, CT, DT, NAME)                                                              \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                   \
            (const void *buf, CT count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,    \
             MPI_Request *request),                                                                 \
            (buf, count, datatype, dest, tag, comm, request), tp_index(comm), ,                     \
            tp_nb(count, datatype), -1,                                                             \
            if (rc_ == MPI_SUCCESS) tp_preq_put(*request, c_.comm, tp_peer(c_.comm, dest),           \
                                                tp_nb(count, datatype)))
TP_BOTH(F_SEND_INIT, Send_init) TP_BOTH(F_SEND_INIT, Ssend_init) TP_BOTH(F_SEND_INIT, Rsend_init)
TP_BOTH(F_SEND_INIT, Bsend_init)
#define F_RECV_INIT(SFX, CT, DT, NAME)                                                              \
    TP_WRAP(NAME##SFX, OP_##NAME,                                                                   \
            (void *buf, CT count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,        \
             MPI_Request *request),                                                                 \
            (buf, count, datatype, source, tag, comm, request), tp_index(comm), ,                   \
            tp_nb(count, datatype), -1,                                                             \
            if (rc_ == MPI_SUCCESS) tp_preq_put(*request, c_.comm, -1, tp_nb(count, datatype)))
TP_BOTH(F_RECV_INIT, Recv_init)

/* The request is looked up before the call: COMM stores it for BYTES and PEER. */
static _Thread_local tp_preq tp_started;
TP_WRAP(Start, OP_Start, (MPI_Request *request), (request),
        (tp_started = tp_preq_get(*request)).comm, tp_preq p_ = tp_started, p_.bytes, p_.peer, )

/* Startall: one call, on the requests' communicator if they share one; each
 * started send's message in the matrix. */
int MPI_Startall(int count, MPI_Request array_of_requests[]) {
    if (!tp_active() || count <= 0) return PMPI_Startall(count, array_of_requests);
    tp_preq one[16], *p = count <= 16 ? one : malloc(sizeof(tp_preq) * (size_t)count);
    if (!p) return PMPI_Startall(count, array_of_requests);
    int64_t bytes = 0;
    int32_t comm = -1;
    for (int i = 0; i < count; i++) {
        p[i] = tp_preq_get(array_of_requests[i]);
        bytes += p[i].bytes;
        comm = i == 0 || p[i].comm == comm ? p[i].comm : -1;
    }
    tp_call c_ = {comm, 0};
    int priv_ = tp_private(comm);
    if (priv_) {
        if (p != one) free(p);
        TP_SKIPPED(1, PMPI_Startall(count, array_of_requests));
    }
    int op_ = tp_enter(OP_Startall + 1, comm, 0);
    c_.t0 = tp_ticks();
    int rc_ = PMPI_Startall(count, array_of_requests);
    int64_t t1_ = tp_ticks();
    tp_leave(op_, 0);
    if (rc_ == MPI_SUCCESS) {
        struct tp_thread *t = tls.thread ? tls.thread : tp_register();
        int32_t node = tp_node();
        if (t) {
            tp_lock(t);
            for (int i = 0; i < count; i++)
                if (p[i].peer >= 0)
                    tp_add(&t->peers, (uint64_t)(uint32_t)node << 32 | (uint32_t)p[i].comm,
                           (uint64_t)p[i].peer, 1, p[i].bytes, 0);
            tp_unlock(t);
        }
    }
    tp_end(&c_, OP_Startall, t1_, rc_ == MPI_SUCCESS ? bytes : 0, -1);
    if (p != one) free(p);
    return rc_;
}
