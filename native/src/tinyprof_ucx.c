/* tinyprof_ucx.c: the transport view of libtinyprof_mpi (docs/mpi.md#transports).
 *
 * When enabled (tinyprof_ucx_enable), the GOT entries through which libmpi
 * calls the UCP operations below are pointed at wrappers here; disabled, they
 * point at libucp again, so `ucx=False` costs nothing. A wrapper counts the
 * operation under the caller's current callpath node and the MPI call in
 * progress on its thread (mpi_wrappers.c sets it), per endpoint and exact
 * message size; at the flush, tinyprof_ucx_rows classifies each size with the
 * protocol selection table UCX itself keeps for the endpoint
 * (ucp_ep_print_info; ucx_classify.c, included at the end), captured here
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

/* The classification, a part of this unit: see its top. */
#include "ucx_classify.c"
