/* tinyprof_ucx.c: the transport view of libtinyprof_mpi (docs/mpi.md#transports).
 *
 * When enabled (tinyprof_ucx_enable), the GOT entries through which libmpi
 * calls the UCP operations below are pointed at wrappers here; disabled, they
 * point at libucp again, so `ucx=False` costs nothing. A wrapper counts the
 * operation under the caller's current callpath node and the MPI call in
 * progress on its thread (tinyprof_mpi.c sets it), per endpoint and exact
 * message size; at the flush, tinyprof_ucx_rows classifies each size with the
 * protocol selection table UCX itself keeps for the endpoint
 * (ucp_ep_print_info; "classification" below), captured here
 * the first time an endpoint is used for an operation variant, inside the
 * call, so under the MPI library's own locking.
 *
 * Receives are counted when they complete, with the length received, under
 * the node and MPI call that posted them (an Irecv stays the Irecv's, even
 * when a later Wait progresses it): the completion callback is wrapped.
 *
 * Only the UCP ABI used here is declared, as in UCX 1.20 (ucp.h; the
 * nbx request parameter is read only for the fields its mask names).
 */
#define _GNU_SOURCE
#include "tinyprof/tinyprof_mpi.h"
#include "tinyprof_internal.h"

#include <mpi.h>

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ UCP ABI */

typedef int8_t ucs_status_t;        /* a packed enum */
typedef void *ucs_status_ptr_t;
typedef void *ucp_ep_h;
typedef void *ucp_worker_h;
typedef void *ucp_rkey_h;
typedef uint64_t ucp_datatype_t;
typedef struct {
    uint64_t sender_tag;
    size_t length;
} tp_tag_recv_info;
typedef struct {
    void *buffer;
    size_t length;
} tp_iov;
typedef void (*tp_send_cb)(void *request, ucs_status_t status, void *user_data);
typedef void (*tp_recv_cb)(void *request, ucs_status_t status, const tp_tag_recv_info *info, void *user_data);
typedef void (*tp_am_recv_cb)(void *request, ucs_status_t status, size_t length, void *user_data);
typedef void (*tp_old_send_cb)(void *request, ucs_status_t status);
typedef struct {
    uint32_t op_attr_mask;
    uint32_t flags;
    void *request;
    union {
        tp_send_cb send;
        tp_recv_cb recv;
        void *recv_stream;
        tp_am_recv_cb recv_am;
    } cb;
    ucp_datatype_t datatype;
    void *user_data;
    void *reply_buffer;
    int memory_type;
    union {
        size_t *length;
        tp_tag_recv_info *tag_info;
    } recv_info;
    void *memh;
} tp_param;

#define F_CALLBACK (1u << 1)
#define F_USER_DATA (1u << 2)
#define F_DATATYPE (1u << 3)
#define F_FLAGS (1u << 4)
#define F_RECV_INFO (1u << 7)
#define F_FAST_CMPL (1u << 17)
#define F_MULTI_SEND (1u << 19)
#define AM_REPLY 1u                 /* UCP_AM_SEND_FLAG_REPLY */
#define DT_SHIFT 3
#define DT_CONTIG 0
#define DT_IOV 2
#define IS_ERR(p) ((uintptr_t)(p) >= (uintptr_t)(intptr_t)-100)   /* UCS_PTR_IS_ERR */
#define IS_PTR(p) ((uintptr_t)(p) - 1 < (uintptr_t)(intptr_t)-100 - 1)

/* ---------------------------------------------------------- endpoints */

/* Endpoint -> id (< TP_UCX_NOEP): fixed open addressing, lock-free readers,
 * writers under g_mu. Each id has the protocol tables UCX printed for it
 * (an index into g_texts: endpoints of one configuration share a text) and
 * which operation variants they are known to cover. */
#define TP_EP_SLOTS (1u << 17)
static struct {
    _Atomic uintptr_t key;
    atomic_int id;
} g_eps[TP_EP_SLOTS];
static int g_neps;
static atomic_int g_ep_text[TP_UCX_NOEP];
static _Atomic uint64_t g_ep_known[TP_UCX_NOEP];
#define TP_TEXTS 1024
static char *g_texts[TP_TEXTS];
static atomic_int g_ntexts;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_flag g_warned_eps = ATOMIC_FLAG_INIT;

static void (*r_ep_print_info)(ucp_ep_h, FILE *);

static inline uint32_t tp_hash(uintptr_t k) {
    k ^= k >> 31;
    k *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(k ^ (k >> 29)) & (TP_EP_SLOTS - 1);
}

/* The table lines of `ep`'s description ("+---" and "| ..." rows), or NULL. */
static char *tp_tables(ucp_ep_h ep) {
    char *raw = NULL, *out;
    size_t n = 0;
    FILE *f = open_memstream(&raw, &n);
    if (!f) return NULL;
    r_ep_print_info(ep, f);
    fclose(f);
    if (!raw || !(out = malloc(n + 1))) {
        free(raw);
        return NULL;
    }
    size_t k = 0;
    for (char *line = raw, *end; *line; line = end + (*end != 0)) {
        end = strchr(line, '\n');
        if (!end) end = line + strlen(line);
        char *p = line + (line[0] == '#' && line[1] == ' ' ? 2 : 0);
        if (*p == '|' || *p == '+') {
            memcpy(out + k, p, (size_t)(end - p));
            k += (size_t)(end - p);
            out[k++] = '\n';
        }
    }
    out[k] = 0;
    free(raw);
    return out;
}

/* Under g_mu: endpoint `id` now described by `text` (owned), shared with
 * endpoints of the same text. */
static void tp_set_text(int id, char *text) {
    int n = atomic_load(&g_ntexts), i = 0;
    while (i < n && strcmp(g_texts[i], text) != 0) i++;
    if (i < n) {
        free(text);
    } else if (n < TP_TEXTS) {
        g_texts[n] = text;
        atomic_store(&g_ntexts, n + 1);
    } else {
        free(text);
        return;
    }
    atomic_store(&g_ep_text[id], i + 1);
}

/* The id of `ep`, its tables captured for variant bit `bit` (after the
 * operation: UCX selects the protocols of a variant on its first use). */
static int tp_ep(ucp_ep_h ep, int bit) {
    uintptr_t k = (uintptr_t)ep;
    uint32_t i = tp_hash(k);
    int id = -1;
    for (;; i = (i + 1) & (TP_EP_SLOTS - 1)) {
        uintptr_t s = atomic_load_explicit(&g_eps[i].key, memory_order_acquire);
        if (s == k) {
            id = atomic_load_explicit(&g_eps[i].id, memory_order_acquire);
            break;
        }
        if (s == 0) break;
    }
    if (id >= 0 && (atomic_load_explicit(&g_ep_known[id], memory_order_relaxed) >> bit & 1)) return id;
    pthread_mutex_lock(&g_mu);
    if (id < 0) {
        for (i = tp_hash(k); g_eps[i].key != 0 && g_eps[i].key != k; i = (i + 1) & (TP_EP_SLOTS - 1)) {}
        if (g_eps[i].key == k) {
            id = g_eps[i].id;
        } else if (g_neps < TP_UCX_NOEP && (unsigned)g_neps < TP_EP_SLOTS / 2) {
            id = g_neps++;
            atomic_store_explicit(&g_eps[i].id, id, memory_order_release);
            atomic_store_explicit(&g_eps[i].key, k, memory_order_release);
        } else {
            tp_warn_once(&g_warned_eps, "more than 65535 UCX endpoints: later ones are counted without "
                                        "their protocols");
        }
    }
    if (id >= 0 && !(atomic_load(&g_ep_known[id]) >> bit & 1)) {
        char *text = tp_tables(ep);
        if (text) tp_set_text(id, text);
        atomic_fetch_or(&g_ep_known[id], (uint64_t)1 << bit);
    }
    pthread_mutex_unlock(&g_mu);
    return id >= 0 ? id : TP_UCX_NOEP;
}

/* ----------------------------------------------------- own traffic */

/* MPICH's ch4:ucx puts the communicator's context id in the top 16 bits of
 * a UCP tag; its lowest 3 bits tell point-to-point from collective traffic
 * and the sub-communicators of hierarchical collectives (MPIR_CONTEXT_SUFFIX
 * and _SUBCOMM), the rest (13 bits) is the communicator's. Counted tagged
 * operations keep it (TP_FAMILY), and the communicators of tinyprof's own
 * calls are learnt from the tagged operations those make, so that the
 * flush drops the ones MPICH's progress engine issued from an application's
 * call (the rounds of a nonblocking collective, the setting up of an
 * Idup'ed communicator), also when they came before the learning. MPI
 * reuses the context of a freed communicator: a context is tinyprof's from
 * its communicator's creation epoch on (tp_ucx_context), and forgotten when
 * a new profiler starts (the old one freed its communicators). */
static _Atomic uint32_t g_own[1 << 13];         /* per communicator: own from this epoch + 1 */
static int g_mpich;                             /* the layout is MPICH's: filter */
static atomic_int g_hooked;                     /* the wrappers are in libmpi's path */

/* The communicator part + 1 of a tagged operation's `tag`, 0 for others. */
#define TP_FAMILY(tagged, tag) ((tagged) && g_mpich ? ((uint64_t)(tag) >> 51) + 1 : 0)

/* Operations on `family` are tinyprof's own from `epoch` on. */
static void tp_learn(uint64_t family, uint32_t epoch) {
    if (!family) return;
    _Atomic uint32_t *since = &g_own[family - 1];
    uint32_t was = atomic_load_explicit(since, memory_order_relaxed);
    while ((was == 0 || epoch + 1 < was) &&
           !atomic_compare_exchange_weak_explicit(since, &was, epoch + 1, memory_order_relaxed,
                                                  memory_order_relaxed)) {}
}

int tp_ucx_own(uint64_t family, uint32_t epoch) {
    const uint32_t since = family ? atomic_load_explicit(&g_own[family - 1], memory_order_relaxed) : 0;
    const uint32_t latest = (1u << TP_UCX_EPOCH_BITS) - 1;
    return since && epoch >= (since - 1 < latest ? since - 1 : latest);
}

void tp_ucx_learn(MPI_Comm c) {
    /* A receive posted on its point-to-point context shows the communicator
     * to the wrapper (its collectives and sub-communicators share it) and is
     * withdrawn at once. Tag 32767 <= MPI_TAG_UB: never one of tinyprof's. */
    char byte;
    MPI_Request r;
    if (!atomic_load(&g_hooked) || !g_mpich ||
        PMPI_Irecv(&byte, 1, MPI_BYTE, MPI_ANY_SOURCE, 32767, c, &r) != MPI_SUCCESS)
        return;
    PMPI_Cancel(&r);
    PMPI_Wait(&r, MPI_STATUS_IGNORE);
}

/* ----------------------------------------------------------- counting */

/* Bytes the operation moves: contiguous or iov data (not generic, whose
 * packed size only the MPI library's pack callbacks know: 0). */
static int64_t tp_bytes(const void *buffer, size_t count, ucp_datatype_t dt, int *contig) {
    *contig = (dt & 7) == DT_CONTIG;
    if (*contig) return (int64_t)(count * (dt >> DT_SHIFT));
    if ((dt & 7) != DT_IOV) return 0;
    int64_t n = 0;
    for (size_t i = 0; i < count; i++) n += (int64_t)((const tp_iov *)buffer)[i].length;
    return n;
}

static ucp_datatype_t tp_dt(const tp_param *p) {
    return p && (p->op_attr_mask & F_DATATYPE) ? p->datatype : ((ucp_datatype_t)1 << DT_SHIFT | DT_CONTIG);
}

/* The variant bits of an operation with request parameter `p`. */
static int tp_variant(const tp_param *p) {
    uint32_t m = p ? p->op_attr_mask : 0;
    return (m & F_FAST_CMPL ? TP_UCP_FAST : 0) | (m & F_MULTI_SEND ? TP_UCP_MULTI : 0);
}

/* A send-side operation `ucp` of `bytes` (contig: classified) on `ep` completed or started. */
static void tp_sent(int32_t node, int op1, int ucp, ucp_ep_h ep, int64_t bytes, int contig, uint64_t family,
                    uint32_t epoch) {
    int id = TP_UCX_NOEP;
    if (contig)
        id = tp_ep(ep, (ucp & 7) * 8 + (ucp >> 4 & 7));
    else
        ucp |= TP_UCP_NONCONTIG;
    tp_ucx_add(node, TP_UCX_KEY(op1, ucp, id), family, epoch, (uint64_t)bytes, bytes);
}

/* ------------------------------------------------ wrapped completions */

/* A receive's own callback and what it was posted under. */
typedef struct {
    union {
        tp_recv_cb recv;
        tp_am_recv_cb recv_am;
    } cb;
    void *user_data;
    int32_t node;
    uint32_t key, epoch;
    uint64_t family;
} tp_recv_ctx;

static void tp_received(const tp_recv_ctx *c, size_t length) {
    tp_ucx_add(c->node, c->key, c->family, c->epoch, (uint64_t)length, (int64_t)length);
}

static void tp_recv_done(void *request, ucs_status_t status, const tp_tag_recv_info *info, void *arg) {
    tp_recv_ctx *c = arg;
    if (status == 0 && info) tp_received(c, info->length);
    if (c->cb.recv) c->cb.recv(request, status, info, c->user_data);
    free(c);
}

static void tp_am_recv_done(void *request, ucs_status_t status, size_t length, void *arg) {
    tp_recv_ctx *c = arg;
    if (status == 0) tp_received(c, length);
    if (c->cb.recv_am) c->cb.recv_am(request, status, length, c->user_data);
    free(c);
}

/* A receive about to be posted with `param`: `mine` is a copy whose
 * completion is counted; NULL when not counting (or out of memory). */
static tp_recv_ctx *tp_recv_begin(const tp_param *param, tp_param *mine, int ucp, int am, int tagged,
                                   uint64_t tag) {
    int32_t node;
    uint32_t epoch;
    int op1, counting = tp_ucx_context(&node, &op1, &epoch);
    uint64_t family = TP_FAMILY(tagged, tag);
    if (counting < 0) tp_learn(family, epoch);
    if (counting <= 0) return NULL;
    tp_recv_ctx *c = malloc(sizeof *c);
    if (!c) return NULL;
    *mine = *param;
    int has_cb = param->op_attr_mask & F_CALLBACK;
    if (am)
        c->cb.recv_am = has_cb ? param->cb.recv_am : NULL;
    else
        c->cb.recv = has_cb ? param->cb.recv : NULL;
    c->user_data = param->op_attr_mask & F_USER_DATA ? param->user_data : NULL;
    c->node = node;
    c->key = TP_UCX_KEY(op1, ucp, TP_UCX_NOEP);
    c->family = family;
    c->epoch = epoch;
    if (am)
        mine->cb.recv_am = tp_am_recv_done;
    else
        mine->cb.recv = tp_recv_done;
    mine->user_data = c;
    mine->op_attr_mask |= F_CALLBACK | F_USER_DATA;
    return c;
}

/* After posting: a receive completed in place has its length in the
 * caller's recv_info (or the whole buffer: `posted`); a failed one nothing. */
static void tp_recv_end(tp_recv_ctx *c, ucs_status_ptr_t s, const tp_param *param, int am, size_t posted) {
    if (!c || IS_PTR(s)) return;
    if (!IS_ERR(s)) {
        size_t n = posted;
        if (param->op_attr_mask & F_RECV_INFO)
            n = am ? *param->recv_info.length : param->recv_info.tag_info->length;
        tp_received(c, n);
    }
    free(c);
}

/* ----------------------------------------------------------- wrappers */

static ucs_status_ptr_t (*r_tag_send_nbx)(ucp_ep_h, const void *, size_t, uint64_t, const tp_param *);
static ucs_status_ptr_t (*r_tag_send_sync_nbx)(ucp_ep_h, const void *, size_t, uint64_t, const tp_param *);
static ucs_status_ptr_t (*r_tag_recv_nbx)(ucp_worker_h, void *, size_t, uint64_t, uint64_t, const tp_param *);
static ucs_status_ptr_t (*r_tag_msg_recv_nbx)(ucp_worker_h, void *, size_t, void *, const tp_param *);
static ucs_status_ptr_t (*r_am_send_nbx)(ucp_ep_h, unsigned, const void *, size_t, const void *, size_t,
                                         const tp_param *);
static ucs_status_ptr_t (*r_am_send_nb)(ucp_ep_h, uint16_t, const void *, size_t, ucp_datatype_t,
                                        tp_old_send_cb, unsigned);
static ucs_status_ptr_t (*r_am_recv_data_nbx)(ucp_worker_h, void *, void *, size_t, const tp_param *);
static ucs_status_ptr_t (*r_put_nbx)(ucp_ep_h, const void *, size_t, uint64_t, ucp_rkey_h, const tp_param *);
static ucs_status_ptr_t (*r_get_nbx)(ucp_ep_h, void *, size_t, uint64_t, ucp_rkey_h, const tp_param *);
static ucs_status_ptr_t (*r_put_nb)(ucp_ep_h, const void *, size_t, uint64_t, ucp_rkey_h, tp_old_send_cb);
static ucs_status_ptr_t (*r_get_nb)(ucp_ep_h, void *, size_t, uint64_t, ucp_rkey_h, tp_old_send_cb);
static ucs_status_t (*r_put_nbi)(ucp_ep_h, const void *, size_t, uint64_t, ucp_rkey_h);
static ucs_status_t (*r_get_nbi)(ucp_ep_h, void *, size_t, uint64_t, ucp_rkey_h);
static ucs_status_t (*r_put)(ucp_ep_h, const void *, size_t, uint64_t, ucp_rkey_h);
static ucs_status_t (*r_get)(ucp_ep_h, void *, size_t, uint64_t, ucp_rkey_h);

/* Sends: call, then count what started (a request) or completed (UCS_OK).
 * TAGGED: a tag operation with tag TAG. */
#define TP_SEND(CALL, UCP, EP, BYTES_CONTIG, FAILED, TAGGED, TAG)                \
    int32_t node_;                                                               \
    uint32_t epoch_;                                                             \
    int op1_, contig_ = 1, counting_ = tp_ucx_context(&node_, &op1_, &epoch_);   \
    if (counting_ < 0) tp_learn(TP_FAMILY(TAGGED, TAG), epoch_);                 \
    if (counting_ <= 0) return CALL;                                             \
    __typeof__(CALL) s_ = CALL;                                                  \
    if (!(FAILED)) {                                                             \
        int64_t b_ = BYTES_CONTIG;                                               \
        tp_sent(node_, op1_, UCP, EP, b_, contig_, TP_FAMILY(TAGGED, TAG), epoch_); \
    }                                                                            \
    return s_;

static ucs_status_ptr_t w_tag_send_nbx(ucp_ep_h ep, const void *buf, size_t count, uint64_t tag,
                                       const tp_param *p) {
    TP_SEND(r_tag_send_nbx(ep, buf, count, tag, p), TP_UCP_TAG_SEND | tp_variant(p), ep,
            tp_bytes(buf, count, tp_dt(p), &contig_), IS_ERR(s_), 1, tag)
}

static ucs_status_ptr_t w_tag_send_sync_nbx(ucp_ep_h ep, const void *buf, size_t count, uint64_t tag,
                                            const tp_param *p) {
    TP_SEND(r_tag_send_sync_nbx(ep, buf, count, tag, p), TP_UCP_TAG_SEND_SYNC | tp_variant(p), ep,
            tp_bytes(buf, count, tp_dt(p), &contig_), IS_ERR(s_), 1, tag)
}

static ucs_status_ptr_t w_am_send_nbx(ucp_ep_h ep, unsigned id, const void *header, size_t hlen,
                                      const void *buf, size_t count, const tp_param *p) {
    int reply = p && (p->op_attr_mask & F_FLAGS) && (p->flags & AM_REPLY) ? TP_UCP_REPLY : 0;
    TP_SEND(r_am_send_nbx(ep, id, header, hlen, buf, count, p), TP_UCP_AM_SEND | tp_variant(p) | reply, ep,
            tp_bytes(buf, count, tp_dt(p), &contig_), IS_ERR(s_), 0, 0)
}

static ucs_status_ptr_t w_am_send_nb(ucp_ep_h ep, uint16_t id, const void *buf, size_t count,
                                     ucp_datatype_t dt, tp_old_send_cb cb, unsigned flags) {
    TP_SEND(r_am_send_nb(ep, id, buf, count, dt, cb, flags),
            TP_UCP_AM_SEND | (flags & AM_REPLY ? TP_UCP_REPLY : 0), ep, tp_bytes(buf, count, dt, &contig_),
            IS_ERR(s_), 0, 0)
}

static ucs_status_ptr_t w_put_nbx(ucp_ep_h ep, const void *buf, size_t count, uint64_t addr, ucp_rkey_h rkey,
                                  const tp_param *p) {
    TP_SEND(r_put_nbx(ep, buf, count, addr, rkey, p), TP_UCP_PUT | tp_variant(p), ep,
            tp_bytes(buf, count, tp_dt(p), &contig_), IS_ERR(s_), 0, 0)
}

static ucs_status_ptr_t w_get_nbx(ucp_ep_h ep, void *buf, size_t count, uint64_t addr, ucp_rkey_h rkey,
                                  const tp_param *p) {
    TP_SEND(r_get_nbx(ep, buf, count, addr, rkey, p), TP_UCP_GET | tp_variant(p), ep,
            tp_bytes(buf, count, tp_dt(p), &contig_), IS_ERR(s_), 0, 0)
}

static ucs_status_ptr_t w_put_nb(ucp_ep_h ep, const void *buf, size_t len, uint64_t addr, ucp_rkey_h rkey,
                                 tp_old_send_cb cb) {
    TP_SEND(r_put_nb(ep, buf, len, addr, rkey, cb), TP_UCP_PUT, ep, (int64_t)len, IS_ERR(s_), 0, 0)
}

static ucs_status_ptr_t w_get_nb(ucp_ep_h ep, void *buf, size_t len, uint64_t addr, ucp_rkey_h rkey,
                                 tp_old_send_cb cb) {
    TP_SEND(r_get_nb(ep, buf, len, addr, rkey, cb), TP_UCP_GET, ep, (int64_t)len, IS_ERR(s_), 0, 0)
}

static ucs_status_t w_put_nbi(ucp_ep_h ep, const void *buf, size_t len, uint64_t addr, ucp_rkey_h rkey) {
    TP_SEND(r_put_nbi(ep, buf, len, addr, rkey), TP_UCP_PUT, ep, (int64_t)len, s_ < 0, 0, 0)
}

static ucs_status_t w_get_nbi(ucp_ep_h ep, void *buf, size_t len, uint64_t addr, ucp_rkey_h rkey) {
    TP_SEND(r_get_nbi(ep, buf, len, addr, rkey), TP_UCP_GET, ep, (int64_t)len, s_ < 0, 0, 0)
}

static ucs_status_t w_put(ucp_ep_h ep, const void *buf, size_t len, uint64_t addr, ucp_rkey_h rkey) {
    TP_SEND(r_put(ep, buf, len, addr, rkey), TP_UCP_PUT, ep, (int64_t)len, s_ < 0, 0, 0)
}

static ucs_status_t w_get(ucp_ep_h ep, void *buf, size_t len, uint64_t addr, ucp_rkey_h rkey) {
    TP_SEND(r_get(ep, buf, len, addr, rkey), TP_UCP_GET, ep, (int64_t)len, s_ < 0, 0, 0)
}

/* Receives: posted with a copy of `p` whose completion is counted. */
#define TP_RECV(REAL, UCP, AM, TAGGED, TAG, BUF, COUNT, ...)                      \
    tp_param mine_;                                                               \
    tp_recv_ctx *c_ = p ? tp_recv_begin(p, &mine_, UCP, AM, TAGGED, TAG) : NULL;  \
    if (!c_) return REAL(__VA_ARGS__, p);                                         \
    ucs_status_ptr_t s_ = REAL(__VA_ARGS__, &mine_);                              \
    int contig_;                                                                  \
    tp_recv_end(c_, s_, p, AM, (size_t)tp_bytes(BUF, COUNT, tp_dt(p), &contig_)); \
    return s_;

static ucs_status_ptr_t w_tag_recv_nbx(ucp_worker_h w, void *buf, size_t count, uint64_t tag, uint64_t mask,
                                       const tp_param *p) {
    TP_RECV(r_tag_recv_nbx, TP_UCP_TAG_RECV, 0, 1, tag, buf, count, w, buf, count, tag, mask)
}

static ucs_status_ptr_t w_tag_msg_recv_nbx(ucp_worker_h w, void *buf, size_t count, void *msg,
                                           const tp_param *p) {
    TP_RECV(r_tag_msg_recv_nbx, TP_UCP_TAG_MSG_RECV, 0, 0, 0, buf, count, w, buf, count, msg)
}

static ucs_status_ptr_t w_am_recv_data_nbx(ucp_worker_h w, void *desc, void *buf, size_t count,
                                           const tp_param *p) {
    TP_RECV(r_am_recv_data_nbx, TP_UCP_AM_RECV_DATA, 1, 0, 0, buf, count, w, desc, buf, count)
}

/* -------------------------------------------------------------- patch */

#define TP_HOOK(name) {"ucp_" #name, (void *)w_##name, (void **)&r_##name}
static const struct {
    const char *name;
    void *wrapper;
    void **real;
} g_hooks[] = {
    TP_HOOK(tag_send_nbx), TP_HOOK(tag_send_sync_nbx), TP_HOOK(tag_recv_nbx), TP_HOOK(tag_msg_recv_nbx),
    TP_HOOK(am_send_nbx),  TP_HOOK(am_send_nb),        TP_HOOK(am_recv_data_nbx), TP_HOOK(put_nbx),
    TP_HOOK(get_nbx),      TP_HOOK(put_nb),            TP_HOOK(get_nb),       TP_HOOK(put_nbi),
    TP_HOOK(get_nbi),      TP_HOOK(put),               TP_HOOK(get),
};
#define TP_NHOOKS (sizeof g_hooks / sizeof g_hooks[0])

static void *tp_hook_on(const char *name, void *current, void *arg) {
    (void)current, (void)arg;
    for (size_t i = 0; i < TP_NHOOKS; i++)
        if (strcmp(name, g_hooks[i].name) == 0) return *g_hooks[i].real ? g_hooks[i].wrapper : NULL;
    return NULL;
}

static void *tp_hook_off(const char *name, void *current, void *arg) {
    (void)arg;
    for (size_t i = 0; i < TP_NHOOKS; i++)
        if (strcmp(name, g_hooks[i].name) == 0 && current == g_hooks[i].wrapper) return *g_hooks[i].real;
    return NULL;
}

static int tp_find_ucp(struct dl_phdr_info *info, size_t size, void *out) {
    (void)size;
    if (info->dlpi_name && strstr(info->dlpi_name, "/libucp.so")) {
        *(void **)out = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
        return 1;
    }
    return 0;
}

/* libucp's own functions, once: 0, or -1 if libucp is not in the process. */
static int tp_resolve(void) {
    static int done;            /* under g_mu */
    if (done) return done;
    void *ucp = NULL;
    dl_iterate_phdr(tp_find_ucp, &ucp);
    r_ep_print_info = ucp ? (void (*)(ucp_ep_h, FILE *))dlsym(ucp, "ucp_ep_print_info") : NULL;
    if (!r_ep_print_info) return done = -1;
    for (size_t i = 0; i < TP_NHOOKS; i++) *g_hooks[i].real = dlsym(ucp, g_hooks[i].name);
    return done = 1;
}

int tinyprof_ucx_enable(int on) {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;        /* callable before MPI_Init */
    if (PMPI_Get_library_version(version, &len) == MPI_SUCCESS) g_mpich = strstr(version, "MPICH") != NULL;
    pthread_mutex_lock(&g_mu);
    if (on)
        for (size_t i = 0; i < sizeof g_own / sizeof g_own[0]; i++) atomic_store(&g_own[i], 0);
    int n = tp_resolve() < 0 ? -1 : tp_patch("", "/libuc", "ucp_", on ? tp_hook_on : tp_hook_off, NULL);
    atomic_store(&g_hooked, on && n > 0);
    pthread_mutex_unlock(&g_mu);
    return n < 0 ? -1 : n;
}

const char *tinyprof_ucx_tables(int ep) {
    int t = ep >= 0 && ep < TP_UCX_NOEP ? atomic_load(&g_ep_text[ep]) : 0;
    return t > 0 ? g_texts[t - 1] : NULL;
}

/* ----------------------------------------------------- classification */

/* Which protocol and transport UCX selects for an operation: the row of the
 * endpoint's table for the operation and variant whose size range holds the
 * operation's size. The one implementation: tinyprof's Python package and
 * C++ header read the rows classified (tinyprof_ucx_rows). The tables are
 * read as UCX 1.20 prints them: `| <context> | <title> |` starts a table (a
 * title printed again goes on with it), `| <low>..<high> | <protocol> |
 * <transport> |` is a row (sizes with binary units K M G T, or `inf`; a
 * protocol's "(?) " mark dropped), a row with no sizes adds a lane to the
 * row before it; any other line is skipped, and so is a row whose sizes do
 * not read (as Python's int() would read them). */

/* Operation names, in TP_UCP_* order, then "ucp<N>". */
static const char *const g_ucp_names[16] = {
    "tag_send", "tag_send_sync", "tag_recv", "tag_msg_recv", "am_send", "am_recv_data", "put", "get",
    "ucp8",     "ucp9",          "ucp10",    "ucp11",        "ucp12",   "ucp13",        "ucp14", "ucp15"};

/* Titles of the tables operations are selected by, up to the variant
 * (src/ucp/proto/proto.c); NULL for receives, whose sender selects. */
static const char *const g_titles[8] = {
    "tagged message by ucp_tag_send*", "synchronous tagged message by ucp_tag_send_sync*", NULL, NULL,
    "active message by ucp_am_send*",  NULL, "remote memory write by ucp_put*", "remote memory read by ucp_get*"};

/* A size bound, wide enough to hold any printed size without losing its
 * order against an int64_t size: larger ones saturate at TP_HUGE. */
__extension__ typedef __int128 tp_bound;
#define TP_HUGE ((tp_bound)1 << 80)
#define TP_INF ((tp_bound)1 << 126)

typedef struct {
    tp_bound low, high;
    char *protocol, *transport;
    int64_t at;                 /* tinyprof_ucx_rows: offset of protocol, transport in its strings; -1 */
} tp_range;

typedef struct {
    char *title;
    tp_range *rows;
    size_t n, cap;
} tp_ptable;

typedef struct {
    tp_ptable *v;
    size_t n, cap;
} tp_ptables;

static void tp_ptables_free(tp_ptables *t) {
    for (size_t i = 0; i < t->n; i++) {
        for (size_t k = 0; k < t->v[i].n; k++) {
            free(t->v[i].rows[k].protocol);
            free(t->v[i].rows[k].transport);
        }
        free(t->v[i].rows);
        free(t->v[i].title);
    }
    free(t->v);
    free(t);
}

/* White space and line breaks as Python's str.strip() and splitlines() see ASCII. */
static int tp_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }
static int tp_newline(char c) { return c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e); }
static int tp_digit(char c) { return c >= '0' && c <= '9'; }

/* [a, b) without surrounding white space, NUL-terminated in place. */
static char *tp_strip(char *a, char *b) {
    while (a < b && tp_space(*a)) a++;
    while (b > a && tp_space(b[-1])) b--;
    *b = 0;
    return a;
}

/* A size as UCX prints it, `93`, `256K`, `inf`, into *out: 1, or 0 if not one. */
static int tp_size(const char *text, tp_bound *out) {
    static const char units[] = "KMGT";
    size_t n = strlen(text), i = 0;
    if (strcmp(text, "inf") == 0) {
        *out = TP_INF;
        return 1;
    }
    const char *unit = n ? strchr(units, text[n - 1]) : NULL;
    if (unit) n--;
    while (i < n && tp_space(text[i])) i++;
    while (n > i && tp_space(text[n - 1])) n--;
    int negative = i < n && text[i] == '-';
    if (i < n && (text[i] == '-' || text[i] == '+')) i++;
    if (i == n || !tp_digit(text[i])) return 0;
    tp_bound v = 0;
    for (; i < n; i++) {
        if (text[i] == '_' && i + 1 < n && tp_digit(text[i + 1])) continue;    /* 1_000 */
        if (!tp_digit(text[i])) return 0;
        v = v * 10 + (text[i] - '0');
        if (v > TP_HUGE) v = TP_HUGE;
    }
    v *= (tp_bound)1 << (unit ? 10 * (unit - units + 1) : 0);
    *out = negative ? -v : v;
    return 1;
}

static tp_ptable *tp_table_named(tp_ptables *t, const char *title) {
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->v[i].title, title) == 0) return &t->v[i];
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 16;
        tp_ptable *v = realloc(t->v, cap * sizeof *v);
        if (!v) return NULL;
        t->v = v;
        t->cap = cap;
    }
    tp_ptable *out = &t->v[t->n];
    *out = (tp_ptable){strdup(title), NULL, 0, 0};
    if (!out->title) return NULL;
    t->n++;
    return out;
}

/* Row `span | protocol | transport` into `table`: 0, or -1 out of memory. */
static int tp_add_range(tp_ptable *table, char *span, const char *protocol, const char *transport) {
    if (!*span && table->n) {                       /* a protocol's further lanes */
        tp_range *last = &table->rows[table->n - 1];
        size_t had = strlen(last->transport), more = strlen(transport);
        char *joined = realloc(last->transport, had + more + 3);
        if (!joined) return -1;
        memcpy(joined + had, ", ", 2);
        memcpy(joined + had + 2, transport, more + 1);
        last->transport = joined;
        return 0;
    }
    if (strncmp(protocol, "(?) ", 4) == 0) protocol += 4;
    char *dots = strstr(span, "..");
    const char *high = dots ? dots + 2 : "";
    if (dots) *dots = 0;
    tp_range r = {0, 0, NULL, NULL, -1};
    if (!tp_size(span, &r.low) || !tp_size(*high ? high : span, &r.high)) return 0;
    if (table->n == table->cap) {
        size_t cap = table->cap ? 2 * table->cap : 8;
        tp_range *rows = realloc(table->rows, cap * sizeof *rows);
        if (!rows) return -1;
        table->rows = rows;
        table->cap = cap;
    }
    r.protocol = strdup(protocol);
    r.transport = strdup(transport);
    if (!r.protocol || !r.transport) {
        free(r.protocol);
        free(r.transport);
        return -1;
    }
    table->rows[table->n++] = r;
    return 0;
}

/* The tables of a ucp_ep_print_info text (NULL: none); NULL out of memory. */
static tp_ptables *tp_parse(const char *text) {
    tp_ptables *t = calloc(1, sizeof *t);
    char *copy = strdup(text ? text : "");
    if (!t || !copy) {
        free(copy);
        free(t);
        return NULL;
    }
    tp_ptable *current = NULL;
    int ok = 1;
    for (char *line = copy, *next; ok && *line; line = next) {
        char *end = line;
        while (*end && !tp_newline(*end)) end++;
        next = end + (*end != 0);
        if (*line != '|') continue;
        char *a = line, *b = end, *cell[3] = {NULL, NULL, NULL};
        while (a < b && *a == '|') a++;             /* the line without its outer bars, */
        while (b > a && b[-1] == '|') b--;
        size_t cells = 0;
        for (char *c = a;; c++) {                   /* cut at the others */
            if (c < b && *c != '|') continue;
            char *from = a;
            a = c + 1;
            if (cells < 3) cell[cells] = tp_strip(from, c);
            cells++;
            if (c >= b) break;
        }
        if (cells == 2)
            ok = (current = tp_table_named(t, cell[1])) != NULL;
        else if (cells == 3 && current)
            ok = tp_add_range(current, cell[0], cell[1], cell[2]) == 0;
    }
    free(copy);
    if (!ok) {
        tp_ptables_free(t);
        return NULL;
    }
    return t;
}

/* The row UCX selects for operation `ucp` of `size` bytes from host memory
 * in `t`, or NULL: in the table of the operation and variant "from" (sends)
 * or "into" (gets) host memory; RMA titles go on with the remote memory
 * (" to host"): the first such title in byte order. */
static tp_range *tp_select(const tp_ptables *t, int ucp, int64_t size) {
    const int op = ucp & 15, fast = ucp & TP_UCP_FAST, multi = ucp & TP_UCP_MULTI;
    const char *base = op < 8 ? g_titles[op] : NULL;
    if (!base || (ucp & TP_UCP_NONCONTIG)) return NULL;
    static const char *const memories[] = {" from host memory", " into host memory"};
    for (int m = 0; m < 2; m++) {
        char name[256];
        const size_t len = (size_t)snprintf(name, sizeof name, "%s%s%s%s%s%s%s%s", base,
                                            ucp & TP_UCP_REPLY ? " with reply flag" : "", fast || multi ? "(" : "",
                                            fast ? "fast-completion" : "", fast && multi ? "," : "",
                                            multi ? "multi" : "", fast || multi ? ")" : "", memories[m]);
        const tp_ptable *found = NULL;
        int exact = 0;
        for (size_t i = 0; i < t->n && !exact; i++) {
            const char *title = t->v[i].title;
            if ((exact = strcmp(title, name) == 0) ||
                (strncmp(title, name, len) == 0 && title[len] == ' ' && (!found || strcmp(title, found->title) < 0)))
                found = &t->v[i];
        }
        for (size_t k = 0; found && k < found->n; k++)
            if (found->rows[k].low <= size && size <= found->rows[k].high) return &found->rows[k];
    }
    return NULL;
}

const char *tinyprof_ucx_op_name(int ucp) { return g_ucp_names[ucp & 15]; }

static size_t tp_copy(char *to, const char *from, size_t cap) {
    const size_t n = strlen(from);
    if (cap) {
        const size_t k = n < cap ? n : cap - 1;
        memcpy(to, from, k);
        to[k] = 0;
    }
    return n;
}

int tinyprof_ucx_classify(const char *tables, int ucp, int64_t size, char *protocol, char *transport,
                          size_t cap) {
    tp_ptables *t = tp_parse(tables);
    if (!t) return -1;
    const tp_range *r = tp_select(t, ucp, size);
    const size_t p = tp_copy(protocol, r ? r->protocol : "", cap), k = tp_copy(transport, r ? r->transport : "", cap);
    tp_ptables_free(t);
    return r ? (int)(p > k ? p : k) + 1 : 0;
}

/* Appends `s` with its NUL to the strings being built: its offset, or -1. */
static int64_t tp_append(char **buf, size_t *len, size_t *cap, const char *s) {
    const size_t n = strlen(s) + 1;
    if (*len + n > *cap) {
        size_t want = *cap ? *cap : 256;
        while (want < *len + n) want *= 2;
        char *grown = realloc(*buf, want);
        if (!grown) return -1;
        *buf = grown;
        *cap = want;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    return (int64_t)(*len - n);
}

int64_t *tinyprof_ucx_rows(size_t *n, char **strings, size_t *len) {
    int64_t *rows = tp_ucx_counts(n);
    tp_ptables *parsed[TP_TEXTS] = {0};           /* by text: endpoints of one configuration share it */
    char *buf = NULL;
    size_t used = 0, cap = 0;
    int ok = rows && tp_append(&buf, &used, &cap, "") == 0;
    for (size_t i = 0; ok && i < *n; i++) {
        int64_t *r = rows + i * TP_UCX_FIELDS;
        const int ep = (int)r[TP_UCX_EP];
        const int text = ep >= 0 && ep < TP_UCX_NOEP ? atomic_load(&g_ep_text[ep]) : 0;
        if (text > 0 && !parsed[text - 1]) ok = (parsed[text - 1] = tp_parse(g_texts[text - 1])) != NULL;
        tp_range *range = ok && text > 0 ? tp_select(parsed[text - 1], (int)r[TP_UCX_UCP], r[TP_UCX_SIZE]) : NULL;
        if (range && range->at < 0) {
            const int64_t protocol = tp_append(&buf, &used, &cap, range->protocol);
            range->at = protocol < 0 ? -1 : protocol;
            ok = protocol >= 0 && tp_append(&buf, &used, &cap, range->transport) >= 0;
        }
        r[TP_UCX_PROTOCOL] = range ? range->at : 0;
        r[TP_UCX_TRANSPORT] = range ? range->at + (int64_t)strlen(range->protocol) + 1 : 0;
    }
    for (int i = 0; i < TP_TEXTS; i++)
        if (parsed[i]) tp_ptables_free(parsed[i]);
    if (!ok) {
        free(rows);
        free(buf);
        buf = NULL;
        rows = NULL;
        *n = used = 0;
    }
    *strings = buf;
    *len = used;
    return rows;
}
