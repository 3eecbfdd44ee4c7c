// Test program: periodic snapshots at the end of each execution, then a job
// killed by MPI_Abort in the middle of the 4th execution.
// argv[1]: output directory, argv[2]: snapshot interval in seconds.
#include <tinyprof/tinyprof.hpp>

#include <cstdlib>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    TinyProf::Profiler prof("snap", std::atof(argv[2]));
    prof.set_outdir(argv[1]);
    for (int x = 0; x < 3; ++x) {
        TinyProf::Event main_event("main");
        TinyProf::Event work("work");
    }
    TinyProf::Event main_event("main");
    TinyProf::Event work("work");
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) MPI_Abort(MPI_COMM_WORLD, 3);
    MPI_Barrier(MPI_COMM_WORLD);
    return 0;
}
