// Test program: periodic snapshots at the end of each execution, then a job
// killed (SIGKILL, as by a scheduler) in the middle of the 4th execution.
// argv[1]: output directory, argv[2]: snapshot interval in seconds.
#include <tinyprof/tinyprof.hpp>

#include <csignal>
#include <cstdlib>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    TinyProf::Profiler prof("snap", std::atof(argv[2]));
    prof.set_outdir(argv[1]);
    for (int x = 0; x < 3; ++x) {
        TinyProf::Event main_event("main");
        TinyProf::Event work("work");
    }
    TinyProf::Event main_event("main");
    TinyProf::Event work("work");
    MPI_Barrier(MPI_COMM_WORLD);
    std::raise(SIGKILL);
    return 0;
}
