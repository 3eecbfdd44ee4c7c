// A program whose MPI traffic test_mpi_capture.py counts itself: linked with
// libtinyprof_mpi, it writes a profile to argv[1] whose `mpi` section must
// hold exactly that traffic, and none of the header's own.
//
// Two executions of "main", each followed by a flush; per execution
// "setup" creates communicators (round 0: split of COMM_WORLD by parity and
// a dup of it; round 1: a dup of COMM_WORLD), then 3 iterations of "halo"
// (Sendrecv of 16 doubles around COMM_WORLD's ring; Isend/Irecv of 5 ints
// around the dup's ring, Waitall) and "reduce" (Allreduce of one double on
// the split; Bcast of 3 ints on COMM_WORLD in round 0, the world dup in
// round 1). A Barrier outside every event ends the run.
#include <tinyprof/tinyprof.hpp>

constexpr int kIterations = 3;

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    {
        TinyProf::Profiler prof("mpicap");
        prof.set_outdir(argv[1]);
        int rank = 0, size = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        MPI_Comm half = MPI_COMM_NULL, half_dup = MPI_COMM_NULL, world_dup = MPI_COMM_NULL;
        double halo_out[16] = {}, halo_in[16] = {};
        int ring_out[5] = {}, ring_in[5] = {}, bcast[3] = {1, 2, 3};
        for (int round = 0; round < 2; ++round) {
            {
                TINYPROF_REGION("main");
                {
                    TINYPROF_REGION("setup");
                    if (round == 0) {
                        MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
                        MPI_Comm_dup(half, &half_dup);
                    } else {
                        MPI_Comm_dup(MPI_COMM_WORLD, &world_dup);
                    }
                }
                int hrank = 0, hsize = 0;
                MPI_Comm_rank(half_dup, &hrank);
                MPI_Comm_size(half_dup, &hsize);
                for (int it = 0; it < kIterations; ++it) {
                    {
                        TINYPROF_REGION("halo");
                        MPI_Sendrecv(halo_out, 16, MPI_DOUBLE, (rank + 1) % size, 0, halo_in, 16, MPI_DOUBLE,
                                     (rank + size - 1) % size, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                        MPI_Request requests[2];
                        MPI_Irecv(ring_in, 5, MPI_INT, (hrank + hsize - 1) % hsize, 1, half_dup, &requests[0]);
                        MPI_Isend(ring_out, 5, MPI_INT, (hrank + 1) % hsize, 1, half_dup, &requests[1]);
                        MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
                    }
                    {
                        TINYPROF_REGION("reduce");
                        double x = rank, sum = 0;
                        MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, half);
                        MPI_Bcast(bcast, 3, MPI_INT, 0, round == 0 ? MPI_COMM_WORLD : world_dup);
                    }
                }
            }
            if (round == 1) MPI_Barrier(MPI_COMM_WORLD);
            TinyProf::flush();        // its own traffic must not be counted
        }
    }
    MPI_Finalize();
    return 0;
}
