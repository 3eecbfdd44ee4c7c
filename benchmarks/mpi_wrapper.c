/* The cost of libtinyprof_mpi's wrappers in a C program, without Python:
 * MPI_Allreduce of one double on MPI_COMM_SELF, 200,000 calls, median of 9,
 * recording off and on by turns. `make bench-native` builds it twice, linked
 * with -ltinyprof_mpi and not linked, and runs both (docs/performance.md).
 * No callpath source is set: every call is charged to node 0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { REPS = 9, CALLS = 200000 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double run(void) {
    double x = 1, y, t0 = now();
    for (int i = 0; i < CALLS; i++) MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_SELF);
    return (now() - t0) / CALLS;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    /* found only when linked: the program itself does not depend on the library */
    void (*enable)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "tinyprof_mpi_enable");
    int modes = enable ? 2 : 1;
    double t[2][REPS];
    run();
    for (int r = 0; r < REPS; r++)
        for (int m = 0; m < modes; m++) {
            if (enable) enable(m);
            t[m][r] = run();
        }
    for (int m = 0; m < modes; m++) {
        qsort(t[m], REPS, sizeof(double), cmp);
        printf("%-24s %6.1f ns per MPI_Allreduce\n",
               !enable ? "not linked:" : m ? "linked, recording on:" : "linked, recording off:", t[m][REPS / 2]);
    }
    MPI_Finalize();
    return 0;
}
