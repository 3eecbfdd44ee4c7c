/* The cost of libtinyprof_mpi's wrappers in a C program, without Python:
 * MPI_Allreduce of one double and MPI_Sendrecv of one double with the
 * neighbour, on MPI_COMM_SELF at 1 rank and on MPI_COMM_WORLD at 2 ranks;
 * median of 9 runs of CALLS calls, recording off and on by turns.
 * `make bench-native` builds it twice, linked with -ltinyprof_mpi and not
 * linked, and runs both at 1 and 2 ranks (docs/performance.md). No callpath
 * source is set: every call is charged to node 0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { REPS = 9, CALLS = 50000 };

static MPI_Comm comm;
static int peer;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double run(int sendrecv) {
    double x = 1, y, t0 = now();
    for (int i = 0; i < CALLS; i++) {
        if (sendrecv)
            MPI_Sendrecv(&x, 1, MPI_DOUBLE, peer, 0, &y, 1, MPI_DOUBLE, peer, 0, comm, MPI_STATUS_IGNORE);
        else
            MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, comm);
    }
    return (now() - t0) / CALLS;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    comm = size == 1 ? MPI_COMM_SELF : MPI_COMM_WORLD;
    peer = size == 1 ? 0 : (rank + 1) % size;
    /* found only when linked: the program itself does not depend on the library */
    void (*enable)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "tinyprof_mpi_enable");
    int modes = enable ? 2 : 1;
    for (int sendrecv = 0; sendrecv < 2; sendrecv++) {
        double t[2][REPS];
        run(sendrecv);
        for (int r = 0; r < REPS; r++)
            for (int m = 0; m < modes; m++) {
                if (enable) enable(m);
                t[m][r] = run(sendrecv);
            }
        for (int m = 0; m < modes && rank == 0; m++) {
            qsort(t[m], REPS, sizeof(double), cmp);
            printf("%d rank(s), %-9s %-23s %7.1f ns per call\n", size,
                   sendrecv ? "Sendrecv" : "Allreduce",
                   !enable ? "not linked" : m ? "linked, recording on" : "linked, recording off",
                   t[m][REPS / 2]);
        }
    }
    MPI_Finalize();
    return 0;
}
