/* A C program linked with -ltinyprof_mpi before -lmpi: a fixed workload on
 * every rank, then each rank writes what the library recorded to
 * <outdir>/rank<r>.txt for test_mpi_capture.py to check exactly.
 *
 *   comm|<index>|<name>|<size>|<members known>|<created>|<flags>|<members,...>
 *   op|<node>|<comm>|<op>|<bucket>|<calls>|<bytes>
 *   peer|<node>|<comm>|<peer>|<messages>|<bytes>
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "tinyprof/tinyprof_mpi.h"

static _Thread_local int32_t node;
static int32_t source(void) { return node; }

static void dump(const char *dir, int rank) {
    char path[4096], name[256];
    int64_t info[TP_COMM_FIELDS];
    int32_t members[4096];
    size_t n;
    snprintf(path, sizeof path, "%s/rank%d.txt", dir, rank);
    FILE *f = fopen(path, "w");
    if (!f) exit(2);
    for (int i = 0; i < tinyprof_mpi_comm_count(); i++) {
        tinyprof_mpi_comm_info(i, name, sizeof name, info);
        int m = tinyprof_mpi_comm_members(i, members, 4096);
        fprintf(f, "comm|%d|%s|%lld|%lld|%lld|%lld|", i, name, (long long)info[TP_COMM_SIZE],
                (long long)info[TP_COMM_MEMBERS], (long long)info[TP_COMM_CREATED],
                (long long)info[TP_COMM_FLAGS]);
        for (int j = 0; j < m; j++) fprintf(f, j ? ",%d" : "%d", (int)members[j]);
        fputc('\n', f);
    }
    int64_t *ops = tinyprof_mpi_ops(&n);
    for (size_t i = 0; i < n; i++) {
        const int64_t *r = ops + i * TP_OP_FIELDS;
        if (r[TP_OP_TIME] < 0) exit(3);
        fprintf(f, "op|%lld|%lld|%s|%lld|%lld|%lld\n", (long long)r[TP_OP_NODE], (long long)r[TP_OP_COMM],
                tinyprof_mpi_op_name((int)r[TP_OP_OP]), (long long)r[TP_OP_BUCKET],
                (long long)r[TP_OP_CALLS], (long long)r[TP_OP_BYTES]);
    }
    tinyprof_mpi_free(ops);
    int64_t *peers = tinyprof_mpi_peers(&n);
    for (size_t i = 0; i < n; i++) {
        const int64_t *r = peers + i * TP_PEER_FIELDS;
        fprintf(f, "peer|%lld|%lld|%lld|%lld|%lld\n", (long long)r[TP_PEER_NODE], (long long)r[TP_PEER_COMM],
                (long long)r[TP_PEER_PEER], (long long)r[TP_PEER_MESSAGES], (long long)r[TP_PEER_BYTES]);
    }
    tinyprof_mpi_free(peers);
    fclose(f);
}

int main(int argc, char **argv) {
    int rank, size, buf[64] = {0}, in[64] = {0}, counts[64] = {0}, displs[64] = {0};
    double x[3] = {1, 2, 3}, y[3];
    MPI_Comm sub, dup, mine;
    MPI_Request req;
    if (argc != 2 || tinyprof_mpi_abi() != TINYPROF_MPI_ABI) return 1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 64) MPI_Abort(MPI_COMM_WORLD, 1);
    tinyprof_mpi_set_source(source);
    MPI_Barrier(MPI_COMM_WORLD);  /* off: not counted */
    tinyprof_mpi_enable(1);

    node = 1;
    MPI_Isend(buf, 10, MPI_INT, (rank + 1) % size, 0, MPI_COMM_WORLD, &req);
    MPI_Recv(in, 10, MPI_INT, (rank + size - 1) % size, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    MPI_Send(buf, 3, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD);  /* 12 bytes, no peer */
    MPI_Allreduce(x, y, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &sub);
    MPI_Comm_dup(sub, &dup);
    MPI_Bcast(buf, 5, MPI_INT, 0, dup);
    MPI_Alltoall(buf, 1, MPI_INT, in, 1, MPI_INT, MPI_COMM_WORLD);
    for (int i = 0; i < size; i++) counts[i] = i + 1, displs[i] = i * (i + 1) / 2;
    MPI_Gatherv(buf, rank + 1, MPI_INT, rank == 0 ? in : NULL, counts, displs, MPI_INT, 0, MPI_COMM_WORLD);

    node = 2;
    MPI_Barrier(MPI_COMM_WORLD);
    tinyprof_mpi_pause(1);           /* tinyprof's own traffic: invisible */
    MPI_Allreduce(x, y, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Comm_dup(MPI_COMM_WORLD, &mine);
    tinyprof_mpi_pause(0);
    MPI_Allreduce(x, y, 3, MPI_DOUBLE, MPI_SUM, mine);  /* private communicator */
    MPI_Comm_free(&mine);
    MPI_Comm_free(&dup);
    tinyprof_mpi_enable(0);
    MPI_Barrier(MPI_COMM_WORLD);     /* off again */

    dump(argv[1], rank);
    MPI_Comm_free(&sub);
    MPI_Finalize();
    return 0;
}
