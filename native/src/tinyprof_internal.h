/* tinyprof_internal.h: what the separately compiled parts of libtinyprof_mpi
 * share: tinyprof_mpi.c (the MPI wrappers and their state), tinyprof_ucx.c
 * (the transport view) and got_patch.c (GOT rewriting). Hidden: not part of
 * the library's interface (that is tinyprof/tinyprof_mpi.h). */
#ifndef TINYPROF_INTERNAL_H
#define TINYPROF_INTERNAL_H

#include <mpi.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* Print "tinyprof: MPI capture: <what>" to stderr the first time only. */
void tp_warn_once(atomic_flag *done, const char *what);

/* Whether the calling thread's UCP operations are counted now: 1 if so
 * (recording on, the thread not paused and not inside a call on a private
 * communicator), filling the thread's current node, the MPI op code + 1 of
 * the wrapped call in progress (0: none) and the epoch now; -1 inside a call
 * on a private communicator, filling the epoch of that communicator's
 * creation; 0 otherwise (not recording, or paused). Epochs count the private
 * communicators created so far: MPI reuses a freed communicator's context,
 * so a context is tinyprof's own from an epoch on, not for ever. */
int tp_ucx_context(int32_t *node, int *op, uint32_t *epoch);

/* Make tinyprof's own UCP traffic on private communicator `c` known as
 * such (called with the thread's skip count raised). */
void tp_ucx_learn(MPI_Comm c);

/* Count one UCP operation of `bytes` in the calling thread's table, under
 * `node` and `key` (TP_UCX_KEY), at message size `size` (< 2^40), on
 * communicator `family` (tinyprof_ucx.c: 0 unknown) at `epoch`. */
void tp_ucx_add(int32_t node, uint32_t key, uint64_t family, uint32_t epoch, uint64_t size, int64_t bytes);
#define TP_UCX_SIZE_BITS 40
#define TP_UCX_EPOCH_BITS 10        /* saturating: epochs past 1023 count as 1023 */

/* The UCP operations counted so far, summed over threads and without
 * tinyprof's own: tinyprof_ucx_rows's records, not classified yet (protocol
 * and transport 0). */
int64_t *tp_ucx_counts(size_t *n);

/* Whether operations on communicator `family` at `epoch` were tinyprof's
 * own: their rows are not shown. */
int tp_ucx_own(uint64_t family, uint32_t epoch);
#define TP_UCX_KEY(op1, ucp, ep) ((uint32_t)(op1) << 24 | (uint32_t)(ucp) << 16 | (uint32_t)(ep))

/* Rewrite the GOT entries of the loaded objects whose path contains `object`
 * (and not `skip`, if given; never this library) for imported functions named
 * `prefix`...: each entry becomes replace(name, current value, arg) unless
 * that returns NULL. Returns the entries rewritten, or -1 if no object matched. */
int tp_patch(const char *object, const char *skip, const char *prefix,
             void *(*replace)(const char *name, void *current, void *arg), void *arg);

#pragma GCC visibility pop

#endif /* TINYPROF_INTERNAL_H */
