/* tinyprof_mpi.h: the C interface of libtinyprof_mpi, tinyprof's PMPI library.
 *
 * The library wraps MPI calls (MPI_X and the MPI-4 large-count MPI_X_c) and
 * counts, per calling thread, calls, bytes and time per (callpath node,
 * communicator, operation, size bucket), and point-to-point messages and
 * bytes per (node, communicator, destination world rank). It names every
 * communicator it sees created. Design and rules: docs/mpi.md.
 *
 * Users of this interface: tinyprof's Python package (through ctypes, in
 * tinyprof/runtime/capture.py) and the C++ header tinyprof.hpp (through dlsym, so
 * the header keeps working when the library is not linked). Neither calls
 * it on the annotation hot path: the library asks the annotator for the
 * current node, through the source function, only when an MPI call is made.
 */
#ifndef TINYPROF_MPI_H
#define TINYPROF_MPI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever anything below changes meaning. */
#define TINYPROF_MPI_ABI 3

/* Fields of a record of tinyprof_mpi_ops(). */
enum { TP_OP_NODE, TP_OP_COMM, TP_OP_OP, TP_OP_BUCKET, TP_OP_CALLS, TP_OP_BYTES, TP_OP_TIME,
       TP_OP_FIELDS };
/* Fields of a record of tinyprof_mpi_peers(). */
enum { TP_PEER_NODE, TP_PEER_COMM, TP_PEER_PEER, TP_PEER_MESSAGES, TP_PEER_BYTES,
       TP_PEER_FIELDS };
/* Fields of a call record of tinyprof_mpi_trace_calls(). */
enum { TP_TR_TID, TP_TR_NODE, TP_TR_START, TP_TR_DUR, TP_TR_OP, TP_TR_COMM, TP_TR_BYTES, TP_TR_ROOT,
       TP_TR_FIELDS };
/* Fields of an endpoint record of tinyprof_mpi_trace_calls(). */
enum { TP_EP_CALL, TP_EP_KIND, TP_EP_PEER, TP_EP_TAG, TP_EP_BYTES, TP_EP_COMM, TP_EP_FIELDS };
#define TP_EP_SEND 0        /* the call sent a message */
#define TP_EP_RECV 1        /* the call completed the receive of a message */
/* Fields of tinyprof_mpi_comm_info()'s info array. */
enum { TP_COMM_SIZE, TP_COMM_MEMBERS, TP_COMM_CREATED, TP_COMM_FLAGS, TP_COMM_FIELDS };
/* Bits of TP_COMM_FLAGS. */
#define TP_COMM_SELFLIKE 1  /* COMM_SELF or derived from it: each rank alone, no member list */
#define TP_COMM_PRIVATE  2  /* created while paused (tinyprof's own): never shown, never counted */
#define TP_COMM_FREED    4  /* MPI_Comm_free'd; its record stays */

/* The annotator's current callpath node of the calling thread: 0 outside any
 * event (the root). Called once per captured MPI call, from any thread,
 * without the GIL: it must be a plain read of a thread-local. */
typedef int32_t (*tinyprof_mpi_source_fn)(void);

/* TINYPROF_MPI_ABI of the loaded library. */
int tinyprof_mpi_abi(void);

/* Where the current node comes from (NULL: every call is charged to node 0). */
void tinyprof_mpi_set_source(tinyprof_mpi_source_fn fn);

/* Recording on (1) or off (0), process-wide; off by default, so a linked or
 * preloaded library costs one branch per call until a profiler turns it on.
 * Communicators are named whether recording is on or off. */
void tinyprof_mpi_enable(int on);

/* The calling thread's MPI traffic is tinyprof's own while paused: not
 * counted, and communicators it creates are private (TP_COMM_PRIVATE), so no
 * later call on them is counted either, from any thread. Nests: pause(1)
 * increments, pause(0) decrements. Returns the new depth. */
int tinyprof_mpi_pause(int on);

/* Forget every count (not the communicators). */
void tinyprof_mpi_reset(void);

/* Make the loaded shared objects whose path contains `object` call the
 * library's MPI_* wrappers instead of libmpi's, by rewriting their GOT
 * entries: how Python captures mpi4py's calls whenever a profiler starts,
 * even after MPI was initialised and without LD_PRELOAD. Returns the
 * number of entries rewritten, or -1 if none could be. */
int tinyprof_mpi_patch(const char *object);

/* Counts so far, summed over threads, as `*n` records of TP_OP_FIELDS
 * (resp. TP_PEER_FIELDS) int64 each, in no particular order; NULL with
 * *n == 0 when there is none. The caller frees them with tinyprof_mpi_free.
 * TP_OP_COMM and TP_PEER_COMM are indices for tinyprof_mpi_comm_info, -1
 * for completion calls (Wait*, Test*), which name no communicator. Time is
 * in nanoseconds. TP_PEER_PEER is the destination's rank in MPI_COMM_WORLD. */
int64_t *tinyprof_mpi_ops(size_t *n);
int64_t *tinyprof_mpi_peers(size_t *n);
void tinyprof_mpi_free(void *records);

/* Trace mode: also keep every recorded call, up to `limit` calls in the
 * process (later ones are only counted as dropped); 0 turns it off (the
 * default). tinyprof_mpi_reset forgets the trace too. */
void tinyprof_mpi_trace(size_t limit);

/* The calls traced so far (not consumed), in no particular order:
 * *ncalls records of TP_TR_FIELDS int64, and in *endpoints *nep records of
 * TP_EP_FIELDS (TP_EP_CALL indexes the returned calls), the messages each
 * call sent (TP_EP_SEND: to world rank TP_EP_PEER, with its tag and bytes)
 * or completed (TP_EP_RECV: from world rank TP_EP_PEER with the actual tag
 * and bytes, in Recv, Sendrecv, Mrecv, or the Wait or Test call that completed an
 * Irecv/Imrecv posted on the same thread), on communicator TP_EP_COMM (as
 * TP_OP_COMM; the call's own, which a Wait does not name). TP_TR_TID is the OS thread id,
 * TP_TR_NODE the source function's node, TP_TR_START and TP_TR_DUR are
 * CLOCK_MONOTONIC nanoseconds, TP_TR_COMM as TP_OP_COMM, TP_TR_ROOT the world
 * rank of a rooted collective's root (-1 otherwise). *dropped: calls not
 * kept. Both arrays are freed with tinyprof_mpi_free; NULL when none. */
int64_t *tinyprof_mpi_trace_calls(size_t *ncalls, int64_t **endpoints, size_t *nep, int64_t *dropped);

/* Communicators seen so far, indexed from 0 (0: COMM_WORLD, 1: COMM_SELF). */
int tinyprof_mpi_comm_count(void);

/* Communicator `i`: its name (NUL-terminated, truncated to `cap` bytes) and
 * info[TP_COMM_FIELDS]: size, number of members known (0 for self-like),
 * the node current when it was created (0 for the predefined ones), flags.
 * Returns 0, or -1 if there is no such communicator. */
int tinyprof_mpi_comm_info(int i, char *name, size_t cap, int64_t info[TP_COMM_FIELDS]);

/* The world ranks of communicator `i` in its rank order, up to `cap` of
 * them into `out`. Returns the number of members known, or -1. */
int tinyprof_mpi_comm_members(int i, int32_t *out, size_t cap);

/* Name of operation code `op` as in the profile ("Allreduce", "Isend"), or NULL. */
const char *tinyprof_mpi_op_name(int op);

/* The op code of the counted MPI call that thread `thread` (its pthread_self(),
 * Python's thread id) is inside now, or -1: none, or not counted (recording
 * off, the thread paused, a private communicator). Lock-free, from any
 * thread: how the sampler tells a thread waiting in MPI (docs/unannotated.md).
 * Added after interface 3 was out: look it up, an older library lacks it. */
int tinyprof_mpi_in_call(uint64_t thread);

/* ----- The transport view (docs/mpi.md#transports): which UCX protocol and
 * transport carried each callpath's MPI traffic. Added in interface 2;
 * interface 3 classifies in the library: tinyprof_ucx_rows gives each row
 * its protocol and transport, tinyprof_ucx_classify and tinyprof_ucx_op_name
 * are new. Nothing above changes. */

/* Fields of a record of tinyprof_ucx_rows(). */
enum { TP_UCX_NODE, TP_UCX_OP, TP_UCX_UCP, TP_UCX_EP, TP_UCX_SIZE, TP_UCX_CALLS, TP_UCX_BYTES,
       TP_UCX_PROTOCOL, TP_UCX_TRANSPORT, TP_UCX_FIELDS };
/* TP_UCX_UCP: the UCP operation (low 4 bits) and the variant bits UCX selects
 * protocols by. */
enum { TP_UCP_TAG_SEND, TP_UCP_TAG_SEND_SYNC, TP_UCP_TAG_RECV, TP_UCP_TAG_MSG_RECV, TP_UCP_AM_SEND,
       TP_UCP_AM_RECV_DATA, TP_UCP_PUT, TP_UCP_GET };
#define TP_UCP_FAST 16          /* UCP_OP_ATTR_FLAG_FAST_CMPL */
#define TP_UCP_MULTI 32         /* UCP_OP_ATTR_FLAG_MULTI_SEND */
#define TP_UCP_REPLY 64         /* an active message sent with UCP_AM_SEND_FLAG_REPLY */
#define TP_UCP_NONCONTIG 128    /* data not contiguous: bytes 0, protocol not classified */
/* TP_UCX_EP of receives (the sender chose the protocol), and of endpoints past the 65535th. */
#define TP_UCX_NOEP 0xffff

/* Redirect (1) or stop redirecting (0) the loaded objects' calls of the UCP
 * operations to the library's counting wrappers (GOT rewriting, as
 * tinyprof_mpi_patch). Counting follows tinyprof_mpi_enable and pause.
 * Returns the entries rewritten (0 when no loaded object calls UCP: UCX is
 * not the path of this MPI), or -1 when libucp is not in the process. */
int tinyprof_ucx_enable(int on);

/* UCP operations counted so far, summed over threads, each classified:
 * `*n` records of TP_UCX_FIELDS int64 (NULL when none). TP_UCX_OP is the op
 * code (tinyprof_mpi_op_name) of the MPI call the operation was made in, -1
 * outside any; TP_UCX_SIZE its message size. TP_UCX_PROTOCOL and
 * TP_UCX_TRANSPORT are the byte offsets in *strings (*len bytes) of the
 * NUL-terminated protocol and transport UCX selects for the row's endpoint,
 * operation and size (tinyprof_ucx_classify on the endpoint's tables), both
 * "" when not known (receives, non-contiguous data, no table or row).
 * Both arrays are freed with tinyprof_mpi_free; NULL when none. */
int64_t *tinyprof_ucx_rows(size_t *n, char **strings, size_t *len);

/* The protocol and transport UCX selects for UCP operation `ucp` (as
 * TP_UCX_UCP) of `size` bytes from host memory, looked up in `tables`,
 * protocol selection tables as ucp_ep_print_info and UCX_PROTO_INFO=y print
 * them (other lines are skipped; NULL: no tables): the table of that
 * operation and variant, the row whose size range holds `size`. Copied
 * NUL-terminated into protocol[cap] and transport[cap], truncated to fit,
 * both "" when not known. Returns 0 when not known, else the longer one's
 * length + 1 (more than `cap`: truncated); -1 out of memory. */
int tinyprof_ucx_classify(const char *tables, int ucp, int64_t size, char *protocol, char *transport,
                          size_t cap);

/* Name of UCP operation `ucp` (as TP_UCX_UCP; variant bits ignored) as in
 * the profile: "tag_send", "tag_send_sync", "tag_recv", "tag_msg_recv",
 * "am_send", "am_recv_data", "put", "get"; "ucp<N>" past them. */
const char *tinyprof_ucx_op_name(int ucp);

/* The protocol selection tables UCX printed for endpoint `ep` of the rows
 * (ucp_ep_print_info, table lines only), or NULL if none were captured. */
const char *tinyprof_ucx_tables(int ep);

#ifdef __cplusplus
}
#endif
#endif /* TINYPROF_MPI_H */
