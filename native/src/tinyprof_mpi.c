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
 */
#define _GNU_SOURCE
#include "tinyprof/tinyprof_mpi.h"
#include "tinyprof_internal.h"

#include <mpi.h>

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

/* ------------------------------------------------------ communicators */

/* A communicator's record. Immutable once published, except `flags`
 * (FREED) and `children` (under g_comm_mu). Records never move. */
typedef struct {
    char name[256];
    int32_t size;          /* local group size */
    int32_t nmembers;      /* entries of members (1 for self-like: the own rank) */
    int32_t *members;      /* world ranks in rank order */
    int64_t created;       /* node current at creation */
    int64_t children;      /* communicators created from this one so far (non-private) */
    atomic_int flags;      /* TP_COMM_* */
    int inter;             /* an intercommunicator: no peer matrix, root rules differ */
    MPI_Comm handle;       /* of a private one, for tp_ucx_learn: */
    uint32_t epoch;        /* and its creation epoch */
} tp_comm;

#define TP_CHUNK 512
#define TP_MAX_CHUNKS 256  /* 131072 communicators */
static tp_comm *g_chunks[TP_MAX_CHUNKS];
static atomic_int g_ncomms;
static pthread_mutex_t g_comm_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_flag g_warned_comms = ATOMIC_FLAG_INIT;

static inline tp_comm *tp_rec(int32_t i) { return &g_chunks[i / TP_CHUNK][i % TP_CHUNK]; }

/* Handle -> record index: fixed open addressing, lock-free readers, writers
 * under g_comm_mu. A key is never removed: freeing sets its index to -1, and
 * the same handle, when MPI reuses it, takes its slot again. */
#define TP_MAP_SIZE (1u << 14)
static struct {
    _Atomic uint64_t key;
    atomic_int idx;
} g_map[TP_MAP_SIZE];
static unsigned g_map_used;
static int g_map_full;

static inline int32_t tp_find(uint64_t k) {
    for (uint32_t i = tp_mix(k) & (TP_MAP_SIZE - 1);; i = (i + 1) & (TP_MAP_SIZE - 1)) {
        uint64_t s = atomic_load_explicit(&g_map[i].key, memory_order_acquire);
        if (s == k) return atomic_load_explicit(&g_map[i].idx, memory_order_acquire);
        if (s == 0) return -1;
    }
}

/* Under g_comm_mu. Returns 0, or -1 when the map is full (warned once). */
static int tp_map(uint64_t k, int32_t idx) {
    uint32_t i = tp_mix(k) & (TP_MAP_SIZE - 1);
    while (g_map[i].key != 0 && g_map[i].key != k) i = (i + 1) & (TP_MAP_SIZE - 1);
    if (g_map[i].key == 0) {
        if (4 * (g_map_used + 1) > 3 * TP_MAP_SIZE) {
            g_map_full = 1;
            tp_warn_once(&g_warned_comms, "too many communicators, later ones are not named");
            return -1;
        }
        g_map_used++;
        atomic_store_explicit(&g_map[i].idx, idx, memory_order_release);
        atomic_store_explicit(&g_map[i].key, k, memory_order_release);
    } else {
        atomic_store_explicit(&g_map[i].idx, idx, memory_order_release);
    }
    return 0;
}

/* Under g_comm_mu: append a record (name, size and members filled by the caller). */
static tp_comm *tp_new_record(int32_t *idx) {
    int n = atomic_load(&g_ncomms);
    if (n >= TP_CHUNK * TP_MAX_CHUNKS) {
        tp_warn_once(&g_warned_comms, "too many communicators, later ones are not named");
        return NULL;
    }
    if (!g_chunks[n / TP_CHUNK] && !(g_chunks[n / TP_CHUNK] = calloc(TP_CHUNK, sizeof(tp_comm)))) {
        tp_warn_once(&g_warned_oom, "out of memory, some MPI calls are not counted");
        return NULL;
    }
    *idx = n;
    return tp_rec(n);
}

/* Publish the record made by tp_new_record and map its handle. */
static void tp_publish(int32_t idx, MPI_Comm c) {
    atomic_store_explicit(&g_ncomms, idx + 1, memory_order_release);
    tp_map(TP_BITS(c), idx);
}

static MPI_Group g_world_group;
static int32_t g_world_rank;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Size, intercommunicator flag and members (world ranks of the local group)
 * of `c`; members malloc'ed (NULL if out of memory). Local calls only. */
static void tp_describe(MPI_Comm c, tp_comm *r) {
    MPI_Group g;
    int n = 0, inter = 0;
    PMPI_Comm_test_inter(c, &inter);
    PMPI_Comm_group(c, &g);
    PMPI_Group_size(g, &n);
    r->inter = inter;
    r->size = n;
    /* Input ranks in an array of their own: MPI forbids aliasing it with the
     * output, and Intel MPI then returns 0 or MPI_UNDEFINED. */
    int *ranks = malloc(sizeof(int) * (size_t)(n ? n : 1));
    r->members = ranks ? malloc(sizeof(int32_t) * (size_t)(n ? n : 1)) : NULL;
    r->nmembers = r->members ? n : 0;
    if (r->members) {
        for (int i = 0; i < n; i++) ranks[i] = i;
        PMPI_Group_translate_ranks(g, n, ranks, g_world_group, (int *)r->members);
    }
    free(ranks);
    PMPI_Group_free(&g);
}

static void tp_init(void) {
    int32_t idx;
    PMPI_Comm_rank(MPI_COMM_WORLD, &g_world_rank);
    PMPI_Comm_group(MPI_COMM_WORLD, &g_world_group);
    pthread_mutex_lock(&g_comm_mu);
    tp_comm *w = tp_new_record(&idx);   /* 0: COMM_WORLD */
    strcpy(w->name, "COMM_WORLD");
    tp_describe(MPI_COMM_WORLD, w);
    tp_publish(idx, MPI_COMM_WORLD);
    tp_comm *s = tp_new_record(&idx);   /* 1: COMM_SELF */
    strcpy(s->name, "COMM_SELF");
    tp_describe(MPI_COMM_SELF, s);
    atomic_store(&s->flags, TP_COMM_SELFLIKE);
    tp_publish(idx, MPI_COMM_SELF);
    pthread_mutex_unlock(&g_comm_mu);
}

/* Initialise once MPI is; 0 if it is not (yet, or any more). */
static int tp_ready(void) {
    int init = 0, fini = 0;
    PMPI_Initialized(&init);
    PMPI_Finalized(&fini);
    if (!init || fini) return 0;
    pthread_once(&g_once, tp_init);
    return 1;
}

/* A handle never seen created: a record named `comm<size>@<r0>` on first use. */
static int32_t tp_index_slow(MPI_Comm c) {
    int32_t idx = -1;
    if (c == MPI_COMM_NULL || TP_BITS(c) == 0) return -1;
    pthread_once(&g_once, tp_init);
    pthread_mutex_lock(&g_comm_mu);
    if ((idx = tp_find(TP_BITS(c))) < 0 && !g_map_full) {
        tp_comm *r = tp_new_record(&idx);
        if (r) {
            tp_describe(c, r);
            snprintf(r->name, sizeof r->name, "comm%d@%d", (int)r->size,
                     r->nmembers ? (int)r->members[0] : 0);
            tp_publish(idx, c);
        }
    }
    pthread_mutex_unlock(&g_comm_mu);
    return idx;
}

/* Record index of a communicator handle; -1 for MPI_COMM_NULL or untracked. */
static inline int32_t tp_index(MPI_Comm c) {
    int32_t idx = tp_find(TP_BITS(c));
    return idx >= 0 ? idx : tp_index_slow(c);
}

static inline int tp_private(int32_t idx) {
    return idx >= 0 && (atomic_load_explicit(&tp_rec(idx)->flags, memory_order_relaxed) & TP_COMM_PRIVATE);
}

/* Read the node now: the creating thread's current node. */
static inline int32_t tp_node(void) {
    tinyprof_mpi_source_fn f = atomic_load_explicit(&g_source, memory_order_relaxed);
    return f ? f() : 0;
}

/* After a successful creation of `c` from record `parent` (-1: untracked):
 * name it per docs/mpi.md. A call returning MPI_COMM_NULL still advances the
 * parent's count; a paused thread's communicators (or a private parent's)
 * are private and advance nothing. */
static void tp_created(int32_t parent, MPI_Comm c, int kind) {
    tp_comm d = {.size = 0};
    tp_comm *p = parent >= 0 ? tp_rec(parent) : NULL;
    int priv = tls.pause > 0 || (p && (atomic_load(&p->flags) & TP_COMM_PRIVATE));
    if (c != MPI_COMM_NULL) {
        if (kind == K_DUP && p) {   /* same group: no MPI call (an idup'ed handle is not usable yet) */
            d.size = p->size;
            d.inter = p->inter;
            d.members = malloc(sizeof(int32_t) * (size_t)(p->nmembers ? p->nmembers : 1));
            d.nmembers = d.members ? p->nmembers : 0;
            if (d.members) memcpy(d.members, p->members, sizeof(int32_t) * (size_t)d.nmembers);
        } else {
            tp_describe(c, &d);
        }
    }
    int32_t node = tp_node();
    pthread_mutex_lock(&g_comm_mu);
    int64_t k = (!priv && p) ? ++p->children : 0;
    int32_t idx;
    tp_comm *r = c != MPI_COMM_NULL && !g_map_full ? tp_new_record(&idx) : NULL;
    if (r) {
        int selflike = p && (atomic_load(&p->flags) & TP_COMM_SELFLIKE);
        int n = snprintf(r->name, sizeof r->name, "%s.%s%lld", p ? p->name : "comm", tp_kind_names[kind],
                         (long long)k);
        if (p && d.size < p->size && n >= 0 && (size_t)n < sizeof r->name)
            snprintf(r->name + n, sizeof r->name - (size_t)n, "@%d", d.nmembers ? (int)d.members[0] : 0);
        r->size = d.size;
        r->inter = d.inter;
        r->members = d.members;
        r->nmembers = d.nmembers;
        r->created = node;
        r->handle = c;
        if (priv) r->epoch = atomic_fetch_add(&g_epoch, 1) + 1;
        atomic_store(&r->flags, (priv ? TP_COMM_PRIVATE : 0) | (selflike ? TP_COMM_SELFLIKE : 0));
        tp_publish(idx, c);
    } else {
        free(d.members);
    }
    pthread_mutex_unlock(&g_comm_mu);
}

static void tp_freed(int32_t idx, MPI_Comm c) {
    if (idx < 0) return;
    pthread_mutex_lock(&g_comm_mu);
    atomic_fetch_or(&tp_rec(idx)->flags, TP_COMM_FREED);
    tp_map(TP_BITS(c), -1);
    pthread_mutex_unlock(&g_comm_mu);
}

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

/* -------------------------------------------------------------- patch */

#if defined(__x86_64__)
#define TP_R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define TP_R_GLOB_DAT R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define TP_R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define TP_R_GLOB_DAT R_AARCH64_GLOB_DAT
#endif

typedef struct {
    const char *object, *skip, *prefix;
    void *(*replace)(const char *name, void *current, void *arg);
    void *arg;
    const void *self_base;  /* our load address */
    int matched, rewritten;
} tp_patch_ctx;

#ifdef TP_R_JUMP_SLOT

/* Point the slot at `f`; a slot in the RELRO segment is made writable and
 * read-only again. Returns 0, or -1. */
static int tp_write_slot(void **slot, void *f, uintptr_t relro_lo, uintptr_t relro_hi) {
    uintptr_t page = (uintptr_t)slot & ~(uintptr_t)(sysconf(_SC_PAGESIZE) - 1);
    size_t len = (uintptr_t)(slot + 1) - page;
    int relro = (uintptr_t)slot >= relro_lo && (uintptr_t)slot < relro_hi;
    if (relro && mprotect((void *)page, len, PROT_READ | PROT_WRITE) != 0) return -1;
    __atomic_store_n(slot, f, __ATOMIC_RELEASE);
    if (relro) mprotect((void *)page, len, PROT_READ);
    return 0;
}

static int tp_patch_object(struct dl_phdr_info *info, size_t size, void *data) {
    tp_patch_ctx *ctx = data;
    uintptr_t base = info->dlpi_addr, relro_lo = 0, relro_hi = 0;
    const ElfW(Dyn) *dyn = NULL;
    (void)size;
    if (!info->dlpi_name || !strstr(info->dlpi_name, ctx->object) || (const void *)base == ctx->self_base ||
        (ctx->skip && strstr(info->dlpi_name, ctx->skip)))
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_DYNAMIC) dyn = (const ElfW(Dyn) *)(base + ph->p_vaddr);
        if (ph->p_type == PT_GNU_RELRO) {
            relro_lo = base + ph->p_vaddr;
            relro_hi = relro_lo + ph->p_memsz;
        }
    }
    if (!dyn) return 0;
    ctx->matched++;
    /* glibc relocates these d_ptr in place; an unrelocated one is an offset. */
#define TP_PTR(v) ((uintptr_t)(v) < base ? (uintptr_t)(v) + base : (uintptr_t)(v))
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const ElfW(Rela) *tabs[2] = {NULL, NULL};
    size_t sizes[2] = {0, 0};
    int rela = 1;
    for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_SYMTAB: symtab = (const ElfW(Sym) *)TP_PTR(d->d_un.d_ptr); break;
        case DT_STRTAB: strtab = (const char *)TP_PTR(d->d_un.d_ptr); break;
        case DT_JMPREL: tabs[0] = (const ElfW(Rela) *)TP_PTR(d->d_un.d_ptr); break;
        case DT_PLTRELSZ: sizes[0] = d->d_un.d_val; break;
        case DT_RELA: tabs[1] = (const ElfW(Rela) *)TP_PTR(d->d_un.d_ptr); break;
        case DT_RELASZ: sizes[1] = d->d_un.d_val; break;
        case DT_PLTREL: rela = d->d_un.d_val == DT_RELA; break;
        }
    }
#undef TP_PTR
    if (!symtab || !strtab || !rela) return 0;
    for (int t = 0; t < 2; t++) {
        for (size_t i = 0; tabs[t] && i < sizes[t] / sizeof(ElfW(Rela)); i++) {
            const ElfW(Rela) *r = &tabs[t][i];
            unsigned long type = ELF64_R_TYPE(r->r_info);
            if (type != TP_R_JUMP_SLOT && type != TP_R_GLOB_DAT) continue;
            const char *name = strtab + symtab[ELF64_R_SYM(r->r_info)].st_name;
            if (strncmp(name, ctx->prefix, strlen(ctx->prefix)) != 0) continue;
            void **slot = (void **)(base + r->r_offset), *f = ctx->replace(name, *slot, ctx->arg);
            if (f && *slot != f && tp_write_slot(slot, f, relro_lo, relro_hi) == 0) ctx->rewritten++;
        }
    }
    return 0;
}
#endif

int tp_patch(const char *object, const char *skip, const char *prefix,
             void *(*replace)(const char *, void *, void *), void *arg) {
#ifdef TP_R_JUMP_SLOT
    Dl_info di;
    tp_patch_ctx ctx = {.object = object, .skip = skip, .prefix = prefix, .replace = replace, .arg = arg};
    if (!object || !dladdr((void *)tp_patch, &di)) return -1;
    ctx.self_base = di.dli_fbase;
    dl_iterate_phdr(tp_patch_object, &ctx);
    return ctx.matched ? ctx.rewritten : -1;
#else
    (void)object, (void)skip, (void)prefix, (void)replace, (void)arg;
    return -1;
#endif
}

/* Our wrapper of `name`, or NULL if this library does not define it (dlsym
 * on our handle also searches our dependencies: libmpi's MPI_* are not ours). */
static void *tp_own(const char *name, void *current, void *self) {
    Dl_info di, me;
    void *f = dlsym(self, name);
    (void)current;
    return f && dladdr(f, &di) && dladdr((void *)tp_own, &me) && di.dli_fbase == me.dli_fbase ? f : NULL;
}

int tinyprof_mpi_patch(const char *object) {
    Dl_info di;
    void *self;
    if (!object || !dladdr((void *)tinyprof_mpi_patch, &di) ||
        !(self = dlopen(di.dli_fname, RTLD_LAZY | RTLD_NOLOAD)))
        return -1;
    int n = tp_patch(object, NULL, "MPI_", tp_own, self);
    dlclose(self);
    return n;
}

/* ------------------------------------------------------------ whole program
 *
 * Preloaded (LD_PRELOAD) into a program that starts no profiler of its own,
 * the library profiles the whole program (docs/native.md, "Unchanged
 * binaries"): MPI_Init loads libtinyprof_whole.so from this library's
 * directory (the C++ implementation, kept out of this library so that
 * Python's capture loads no C++), which opens one region named after the
 * program and starts capture; MPI_Finalize closes the region and flushes,
 * while MPI still works. A profiler of the program's own (an annotated C++
 * program, tinyprof in Python) shows itself by setting its source: the
 * whole-program profile then stands down before writing anything, and what
 * it counted is forgotten, so that nothing is profiled twice. */

static void (*g_whole_finish)(void), (*g_whole_cancel)(void);

static void tp_whole_stand_down(void) {
    if (!atomic_exchange(&g_whole, 0)) return;
    g_whole_cancel();
    tinyprof_mpi_reset();
    pthread_mutex_lock(&g_comm_mu);     /* created under the region: the program's own nodes have other ids */
    for (int i = 0; i < atomic_load(&g_ncomms); i++) tp_rec(i)->created = 0;
    pthread_mutex_unlock(&g_comm_mu);
}

/* Whether LD_PRELOAD names this library (the program was not linked with it). */
static int tp_preloaded(const char *self) {
    const char *list = getenv("LD_PRELOAD"), *base = strrchr(self, '/');
    base = base ? base + 1 : self;
    size_t n = strlen(base);
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, ": ");
        if (len >= n && memcmp(p + len - n, base, n) == 0 && (len == n || p[len - n - 1] == '/')) return 1;
        p += len + (p[len] != '\0');
    }
    return 0;
}

/* TINYPROF=0 (or off, false, no, in any case and spacing): tinyprof off, as in Python. */
static int tp_off(void) {
    const char *v = getenv("TINYPROF");
    char word[8] = "";
    if (v) sscanf(v, " %7s", word);
    for (char *c = word; *c; c++) *c = (char)(*c | 0x20);
    return !strcmp(word, "0") || !strcmp(word, "off") || !strcmp(word, "false") || !strcmp(word, "no");
}

static void tp_whole_start(void) {
    static atomic_flag warned = ATOMIC_FLAG_INIT;
    Dl_info me;
    if (tp_off() || atomic_load(&g_source) || atomic_load(&g_whole) || !dladdr((void *)tp_whole_start, &me) ||
        !tp_preloaded(me.dli_fname))
        return;
    char path[4096];
    const char *slash = strrchr(me.dli_fname, '/');
    int dir = slash ? (int)(slash - me.dli_fname + 1) : 0;
    snprintf(path, sizeof path, "%.*slibtinyprof_whole.so", dir, me.dli_fname);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    int (*start)(void) = h ? (int (*)(void))dlsym(h, "tinyprof_whole_start") : NULL;
    g_whole_finish = h ? (void (*)(void))dlsym(h, "tinyprof_whole_finish") : NULL;
    g_whole_cancel = h ? (void (*)(void))dlsym(h, "tinyprof_whole_cancel") : NULL;
    if (!start || !g_whole_finish || !g_whole_cancel) {
        char what[4200];
        snprintf(what, sizeof what, "preloaded, but %s: no whole-program profile", h ? "libtinyprof_whole.so is "
                 "not tinyprof's" : dlerror());
        tp_warn_once(&warned, what);
        return;
    }
    if (start() != 0) return;       /* it said why */
    g_whole_source = atomic_load(&g_source);
    atomic_store(&g_whole, 1);
}

int MPI_Init(int *argc, char ***argv) {
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) tp_whole_start();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) tp_whole_start();
    return rc;
}

int MPI_Finalize(void) {
    if (atomic_exchange(&g_whole, 0)) g_whole_finish();
    return PMPI_Finalize();
}
