/* An unannotated MPI program with known counts, built on the MPI-5 ABI (mpicc_abi) by
 * test_mpi_builds.py: per rank 5 Sendrecv of 100 doubles to the right, 3 Allreduce of 4
 * doubles, 2 Bcast of 16 ints. */
#include <mpi.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double out[100] = {0}, in[100], x[4] = {1, 1, 1, 1};
    int b[16] = {0};
    for (int i = 0; i < 5; i++)
        MPI_Sendrecv(out, 100, MPI_DOUBLE, (rank + 1) % size, 0, in, 100, MPI_DOUBLE, (rank + size - 1) % size, 0,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int i = 0; i < 3; i++) MPI_Allreduce(MPI_IN_PLACE, x, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < 2; i++) MPI_Bcast(b, 16, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
