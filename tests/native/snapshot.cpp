// Test program: snapshots by explicit triggers (the period is an hour), then
// a job killed by SIGKILL, as by a scheduler, in the middle of an execution.
//     snapshot OUTDIR LEVEL KEEP
// LEVEL: multiple | funneled (MPI_Init_thread's request) | none (no MPI);
// KEEP: last | all. Rank r records (k * (r + 1)) % 4 steps of `main<step`
// (loop 1, metric `it`: the step's number) in one execution, and odd ranks
// one more, empty, execution, before its k-th trigger, k = 1..4.
#include <tinyprof/tinyprof.hpp>

#include <csignal>
#include <cstdio>
#include <string>

int main(int argc, char** argv) {
    if (argc != 4) return 2;
    const std::string level = argv[2];
    int rank = 0, provided = 0;
    if (level != "none") {
        MPI_Init_thread(&argc, &argv, level == "multiple" ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED,
                        &provided);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    }
    TinyProf::Profiler prof("snap", 3600, "it:1");
    prof.set_outdir(argv[1]).set_aggregators(2).set_keep(argv[3]);
    int counted = 0;
    for (int k = 1; k <= 4; ++k) {
        const int n = (k * (rank + 1)) % 4;
        {
            TinyProf::Event main_event("main");
            for (int i = counted; i < counted + n; ++i)
                TinyProf::Event step("step", 1, "it:" + std::to_string(i));
        }
        counted += n;
        if (rank % 2) TinyProf::Event extra("main");     // odd ranks run one more execution
        if (!TinyProf::snapshot(60)) {
            std::fprintf(stderr, "snapshot %d did not end\n", k);
            return 3;
        }
    }
    if (level != "none") MPI_Barrier(MPI_COMM_WORLD);
    TinyProf::Event open_event("main");      // killed inside an execution
    std::raise(SIGKILL);
    return 0;
}
