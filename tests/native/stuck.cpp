// Test program: rank 0's application thread is stuck (in a blocking MPI
// receive, or a compute loop) until the others see snapshot 1 complete: its
// snapshot thread takes part meanwhile, and the other ranks go on.
//     stuck OUTDIR recv|compute
#include <tinyprof/tinyprof.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace fs = std::filesystem;

static void steps(int n, int first) {
    TinyProf::Event main_event("main");
    for (int i = first; i < first + n; ++i) TinyProf::Event step("step", 1, "it:" + std::to_string(i));
}

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    int provided = 0, rank = 0, size = 1;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const fs::path out = argv[1];
    const bool in_mpi = std::string(argv[2]) == "recv";
    {
        TinyProf::Profiler prof("st", 3600, "it:1");
        prof.set_outdir(out.string()).set_aggregators(2);
        steps(2, 0);
        TinyProf::snapshot(0);          // ask, and go on at once
        const fs::path flag = out / "seen";
        const auto guard = std::chrono::steady_clock::now() + std::chrono::seconds(120);   // a hang guard
        int status = 0;
        if (rank == 0) {
            if (in_mpi) {
                int token = 0;
                MPI_Recv(&token, 1, MPI_INT, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                volatile double x = 0;
                while (!fs::exists(flag) && std::chrono::steady_clock::now() < guard)
                    for (int i = 0; i < 100000; ++i) x = x + i;
            }
        } else {
            const int files = std::min(2, size);
            auto complete = [&] {
                for (int i = 0; i < files; ++i)
                    if (!fs::exists(out / "snapshots" / "000001" / ("st." + std::to_string(i) + "-of-" +
                                                                     std::to_string(files) + ".tp")))
                        return false;
                return true;
            };
            while (!complete() && std::chrono::steady_clock::now() < guard) {
                steps(1, 2);            // the application goes on meanwhile
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
            if (!complete()) {
                std::fprintf(stderr, "rank %d: no snapshot completed while rank 0 was stuck\n", rank);
                status = 1;
            }
            if (rank == 1) {
                std::ofstream(flag.string()).put('\n');
                int token = 1;
                if (in_mpi) MPI_Send(&token, 1, MPI_INT, 0, 7, MPI_COMM_WORLD);
            }
        }
        MPI_Allreduce(MPI_IN_PLACE, &status, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (status) MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
    return 0;
}
