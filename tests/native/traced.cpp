// A traced MPI program with known imbalance (test_trace.py): three steps in
// which the last rank computes 10x as long as the others before an
// Allreduce, then a token passed from rank to rank. Run with
// TINYPROF_TRACE=1 and libtinyprof_mpi preloaded. argv[1]: output directory.
#include <tinyprof/tinyprof.hpp>

#include <chrono>
#include <thread>

static void work(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    {
        TinyProf::Profiler prof("traced");
        prof.set_outdir(argv[1]);
        TinyProf::Event main_event("main");
        for (int step = 0; step < 3; ++step) {
            { TinyProf::Event e("solve"); work(rank == size - 1 ? 200 : 20); }
            TinyProf::Event e("exchange");
            double x = rank;
            MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        }
        int token = 0;
        if (rank > 0) {
            TinyProf::Event e("receive");
            MPI_Recv(&token, 1, MPI_INT, rank - 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        { TinyProf::Event e("work"); work(50); }
        if (rank < size - 1) {
            TinyProf::Event e("pass");
            MPI_Send(&token, 1, MPI_INT, rank + 1, 7, MPI_COMM_WORLD);
        }
    }
    MPI_Finalize();
    return 0;
}
