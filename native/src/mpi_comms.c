/* mpi_comms.c: communicator records, their handle map and their names
 * (docs/mpi.md).
 * Part of libtinyprof_mpi: included by tinyprof_mpi.c, whose includes,
 * ops and globals it uses; not compiled on its own. */

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
