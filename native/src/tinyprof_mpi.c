/* tinyprof_mpi.c: libtinyprof_mpi, tinyprof's PMPI library.
 *
 * Every wrapped MPI_X / MPI_X_c records (calls, bytes, time) into the calling
 * thread's own table under (node, communicator, op, size bucket), and sends
 * add (messages, bytes) under (node, communicator, destination world rank).
 * Interface: native/include/tinyprof/tinyprof_mpi.h. Rules: docs/mpi.md.
 *
 * Hot path of a wrapper: one branch when recording is off or the thread is
 * paused; else a lock-free handle lookup, two clock (TSC) reads, the source
 * function and an uncontended per-thread lock. No allocation except when a
 * table grows; nothing here ever calls into Python.
 *
 * Trace mode (tinyprof_mpi_trace) also appends one record per call, with
 * the messages it sent or completed, to the thread's own arrays: a few
 * more branches per call when on, one when off (docs/trace.md).
 *
 * One compilation unit in parts, included at the end in dependency order:
 * this file (ops, globals, the clock), mpi_tables.c (per-thread tables),
 * mpi_comms.c (communicators), mpi_trace.c (charging a call, trace mode),
 * mpi_wrappers.c (the MPI_X wrappers), mpi_control.c (the interface) and
 * mpi_whole.c (the whole-program profile). One unit keeps every function
 * static, so the compiler inlines the wrappers' hot path across the parts as
 * it did in one file. The rest of the library is compiled apart and shares
 * only tinyprof_internal.h: got_patch.c (GOT rewriting) and tinyprof_ucx.c
 * (the transport view).
 */
#define _GNU_SOURCE
#include "tinyprof/tinyprof_mpi.h"
#include "tinyprof_internal.h"

#include <mpi.h>

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

/* MPI-4's large-count `_c` entry points and Comm_idup_with_info, where the
 * headers declare MPI 4 (Open MPI 4.1 and 5.0 declare 3.1): an MPI-3 build
 * wraps the classic calls only. */
#if MPI_VERSION >= 4
#define TP_MPI4(...) __VA_ARGS__
#define TP_Type_size PMPI_Type_size_c
#define TP_Get_count PMPI_Get_count_c
typedef MPI_Count tp_count;
#else
#define TP_MPI4(...)
#define TP_Type_size PMPI_Type_size_x
#define TP_Get_count PMPI_Get_count     /* MPI-3 receives have int counts */
typedef int tp_count;
#endif

/* The MPI family whose ABI this library was built for, read from the file
 * by tinyprof/runtime/capture.py before it loads the library: one built for
 * another family kills the process that loads it. */
#if defined(MPI_ABI_VERSION)    /* the MPI-5 standard ABI (mpicc_abi): libmpi_abi */
#define TP_MPI_FAMILY "MPI ABI"
#elif defined(OMPI_MAJOR_VERSION)
#define TP_MPI_FAMILY "Open MPI"
#elif defined(MPICH_VERSION)   /* MPICH's ABI: MPICH, Intel MPI, MVAPICH, Cray MPICH */
#define TP_MPI_FAMILY "MPICH"
#else
#define TP_MPI_FAMILY "unknown"
#endif
__attribute__((used)) static const char tp_built_for[] = "tinyprof-mpi-family:" TP_MPI_FAMILY;

_Static_assert(sizeof(MPI_Comm) <= 8 && sizeof(MPI_Message) <= 8, "handles are hashed as 8 bytes");
_Static_assert(sizeof(int) == sizeof(int32_t), "MPI ranks are copied as int32");

/* ------------------------------------------------------------------ ops */

/* Every wrapped operation, in code order: the code is the record's TP_OP_OP. */
#define TP_OPS(X)                                                                            \
    X(Send) X(Ssend) X(Rsend) X(Bsend) X(Isend) X(Issend) X(Irsend) X(Ibsend) X(Recv)        \
    X(Irecv) X(Sendrecv) X(Sendrecv_replace) X(Probe) X(Iprobe) X(Mprobe) X(Improbe)          \
    X(Mrecv) X(Imrecv)                                                                       \
    X(Wait) X(Waitall) X(Waitany) X(Waitsome) X(Test) X(Testall) X(Testany) X(Testsome)      \
    X(Barrier) X(Bcast) X(Reduce) X(Allreduce) X(Gather) X(Gatherv) X(Scatter) X(Scatterv)   \
    X(Allgather) X(Allgatherv) X(Alltoall) X(Alltoallv) X(Alltoallw) X(Reduce_scatter)       \
    X(Reduce_scatter_block) X(Scan) X(Exscan)                                                \
    X(Ibarrier) X(Ibcast) X(Ireduce) X(Iallreduce) X(Igather) X(Igatherv) X(Iscatter)        \
    X(Iscatterv) X(Iallgather) X(Iallgatherv) X(Ialltoall) X(Ialltoallv) X(Ialltoallw)       \
    X(Ireduce_scatter) X(Ireduce_scatter_block) X(Iscan) X(Iexscan)                          \
    X(Comm_dup) X(Comm_dup_with_info) X(Comm_idup) X(Comm_idup_with_info) X(Comm_split)     \
    X(Comm_split_type) X(Comm_create) X(Comm_create_group) X(Cart_create) X(Cart_sub)        \
    X(Graph_create) X(Dist_graph_create) X(Dist_graph_create_adjacent) X(Intercomm_create)   \
    X(Intercomm_merge) X(Comm_free)                                                          \
    X(Put) X(Get) X(Accumulate) X(Get_accumulate) X(Fetch_and_op) X(Compare_and_swap)        \
    X(Rput) X(Rget) X(Raccumulate) X(Rget_accumulate)                                        \
    X(Win_create) X(Win_allocate) X(Win_allocate_shared) X(Win_create_dynamic) X(Win_free)   \
    X(Win_fence) X(Win_lock) X(Win_unlock) X(Win_lock_all) X(Win_unlock_all) X(Win_flush)    \
    X(Win_flush_all) X(Win_flush_local) X(Win_flush_local_all) X(Win_start) X(Win_complete)  \
    X(Win_post) X(Win_wait)                                                                  \
    X(File_open) X(File_close) X(File_read) X(File_read_at) X(File_read_all)                 \
    X(File_read_at_all) X(File_read_shared) X(File_read_ordered) X(File_write)               \
    X(File_write_at) X(File_write_all) X(File_write_at_all) X(File_write_shared)             \
    X(File_write_ordered) X(File_iread) X(File_iread_at) X(File_iread_all)                   \
    X(File_iread_at_all) X(File_iwrite) X(File_iwrite_at) X(File_iwrite_all)                 \
    X(File_iwrite_at_all) X(File_sync)                                                       \
    X(Send_init) X(Ssend_init) X(Rsend_init) X(Bsend_init) X(Recv_init) X(Start) X(Startall)

#define TP_OP_ENUM(name) OP_##name,
#define TP_OP_STRING(name) #name,
enum { TP_OPS(TP_OP_ENUM) TP_NOPS };
static const char *const tp_op_names[TP_NOPS] = {TP_OPS(TP_OP_STRING)};

/* Kinds of communicator creation: the `<kind>` of a derived name. */
enum { K_DUP, K_SPLIT, K_CREATE, K_CART, K_SUB, K_GRAPH, K_INTER, K_MERGE };
static const char *const tp_kind_names[] = {"dup", "split", "create", "cart",
                                            "sub", "graph", "inter", "merge"};

/* ------------------------------------------------------------ globals */

static atomic_int g_on;                               /* recording, process-wide */
static atomic_int g_whole;                            /* the whole-program profile is on */
static tinyprof_mpi_source_fn g_whole_source;         /* its source */
static atomic_uint g_epoch;                           /* private communicators created so far */
static _Atomic(tinyprof_mpi_source_fn) g_source;      /* current node, or NULL */

/* A growable array of int64 (trace records). */
typedef struct {
    int64_t *v;
    size_t n, cap;
} tp_vec;

/* Receive requests being traced: handle -> communicator record, per thread
 * (open addressing; state 0 empty, 1 live, 2 deleted). */
typedef struct {
    uint64_t key;
    int32_t comm;
    int32_t state;
} tp_req;

/* Everything thread-local in one block: one TLS address computation per call. */
struct tp_tls {
    struct tp_thread *thread;   /* this thread's tables, registered on first record */
    int pause;                  /* tinyprof_mpi_pause depth */
    int op;                     /* op code + 1 of the wrapped call in progress (0: none), */
    int skip;                   /* > 0: inside a call on a private communicator, */
    void *caller;               /* return address of TP_WRAP's call being recorded, else NULL */
    uint32_t own_epoch;         /* created at this epoch; all for UCX (tp_ucx_context) */
    unsigned msg_next;          /* ring of Mprobe'd messages -> communicator, for Mrecv */
    unsigned msg_live;          /* bit i: msg[i] not consumed yet */
    uint64_t msg[8];
    int32_t msg_comm[8];
    /* trace mode: the current call's endpoints and root, until tp_end records them */
    tp_vec stage;               /* TP_EP_FIELDS - 1 values each: kind, peer, tag, bytes, comm */
    int32_t root1;              /* world rank of the root + 1; 0: none */
    int32_t tid;                /* gettid(), cached */
    tp_req *reqs;
    size_t reqs_cap, reqs_used; /* used: live and deleted slots */
};
static _Thread_local struct tp_tls tls;

void tp_warn_once(atomic_flag *done, const char *what) {
    if (!atomic_flag_test_and_set(done)) fprintf(stderr, "tinyprof: MPI capture: %s\n", what);
}

static inline int64_t tp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The clock of the wrappers. Where the TSC is invariant (x86-64: constant
 * rate, running in every state, the kernel's own clock source), calls are
 * timed in TSC ticks, a few ns a read against ~30 ns for clock_gettime on
 * these machines, and converted to ns when the tables are read, at the rate
 * measured against CLOCK_MONOTONIC since the library was loaded. Elsewhere
 * ticks are ns. */
static int g_tsc;
static int64_t g_tsc0, g_ns0;

static inline int64_t tp_ticks(void) {
#if defined(__x86_64__)
    if (g_tsc) return (int64_t)__rdtsc();
#endif
    return tp_now();
}

/* A CLOCK_MONOTONIC reading and the tick count at the same instant: ticks
 * read on both sides of it, kept from the tightest of a few tries. Two bare
 * reads in a row are now and then split by a preemption or an interrupt
 * (on an oversubscribed node, microseconds to milliseconds), which would
 * shift every traced call against the events by that much. */
static void tp_clock_pair(int64_t *ns, int64_t *ticks) {
    if (!g_tsc) {
        *ns = *ticks = tp_now();
        return;
    }
    int64_t best = INT64_MAX;
    for (int i = 0; i < 8; i++) {
        int64_t before = tp_ticks(), now = tp_now(), after = tp_ticks();
        if (after - before < best) {
            best = after - before;
            *ns = now;
            *ticks = before + (after - before) / 2;
        }
    }
}

__attribute__((constructor)) static void tp_clock_init(void) {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    g_tsc = __get_cpuid(0x80000007, &a, &b, &c, &d) && (d & (1u << 8));   /* invariant TSC */
#endif
    tp_clock_pair(&g_ns0, &g_tsc0);
}

/* Nanoseconds per tick, measured over the library's lifetime so far. */
static double tp_ns_per_tick(void) {
    if (!g_tsc) return 1.0;
    int64_t ns, ticks;
    tp_clock_pair(&ns, &ticks);
    ticks -= g_tsc0;
    ns -= g_ns0;
    return ticks > 0 && ns > 0 ? (double)ns / (double)ticks : 1.0;
}

/* A handle's bytes as a key (MPI_Comm is an int in MPICH, a pointer in Open MPI). */
#define TP_BITS(h) tp_bits(&(h), sizeof(h))
static inline uint64_t tp_bits(const void *h, size_t size) {
    uint64_t k = 0;
    memcpy(&k, h, size);
    return k;
}

static inline uint64_t tp_mix(uint64_t x) {
    x ^= x >> 31;
    x *= 0x9E3779B97F4A7C15ull;
    return x ^ (x >> 29);
}

/* The parts: see the top of this file. */
#include "mpi_tables.c"
#include "mpi_comms.c"
#include "mpi_trace.c"
#include "mpi_wrappers.c"
#include "mpi_control.c"
#include "mpi_whole.c"
