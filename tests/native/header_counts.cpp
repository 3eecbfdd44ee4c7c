// tests/mpi/exact_counts.py's traffic from C++ through the header, built with each
// MPI's mpicxx and linked with that MPI's libtinyprof_mpi (test_mpi_builds.py):
// in "main", 5 Sendrecv of 100 doubles around COMM_WORLD's ring, 3 in-place
// Allreduce of 4 doubles and 2 Bcast of 16 ints; the profile goes to argv[1].
#include <tinyprof/tinyprof.hpp>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    {
        TinyProf::Profiler prof("counts");
        prof.set_outdir(argv[1]);
        int rank = 0, size = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        double out[100] = {}, in[100] = {}, sum[4] = {1, 1, 1, 1};
        int bcast[16] = {};
        {
            TINYPROF_REGION("main");
            for (int i = 0; i < 5; ++i)
                MPI_Sendrecv(out, 100, MPI_DOUBLE, (rank + 1) % size, 0, in, 100, MPI_DOUBLE,
                             (rank + size - 1) % size, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (int i = 0; i < 3; ++i) MPI_Allreduce(MPI_IN_PLACE, sum, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            for (int i = 0; i < 2; ++i) MPI_Bcast(bcast, 16, MPI_INT, 0, MPI_COMM_WORLD);
        }
        TinyProf::flush();
    }
    MPI_Finalize();
    return 0;
}
