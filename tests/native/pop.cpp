// The compute-then-sync program of the POP tests in C++, as tests/_pop_app.py
// is in Python: `pop OUTDIR MODE UNIT`. Rank r of P computes (1 + r/(P-1))
// UNIT seconds (a sleep: wall time, as the profile measures it), then meets
// the others in a barrier. MODE "balance": once, in main<compute then
// main<sync; "growing": 4 steps main<step, step k computing (1 + k r/(P-1))
// UNIT, with a snapshot after each (kept: keep "all"). A fourth argument
// "single" initialises MPI at MPI_THREAD_SINGLE (per-rank snapshots),
// "multiple" (the default) at MPI_THREAD_MULTIPLE (aggregated ones).
// Traced: "pipeline", a token from rank 0 to P-1, each rank computing UNIT
// with it (pure serialization); "transfer", every rank computes UNIT, then
// sends 16 MB to its right neighbour and receives as much from its left
// one, 8 times (pure transfer).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <tinyprof/tinyprof.hpp>

namespace {

void compute(double seconds) {
    TINYPROF_REGION("compute");
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

void compute_then_sync(double seconds) {
    compute(seconds);
    TINYPROF_REGION("sync");
    MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

int main(int argc, char** argv) {
    int provided = 0;
    const bool single = argc == 5 && std::string(argv[4]) == "single";
    MPI_Init_thread(&argc, &argv, single ? MPI_THREAD_SINGLE : MPI_THREAD_MULTIPLE, &provided);
    if (argc != 4 && argc != 5) {
        std::fprintf(stderr, "usage: pop OUTDIR MODE UNIT [single|multiple]\n");
        return 2;
    }
    const std::string mode = argv[2];
    const double unit = std::atof(argv[3]);
    int status = 0;
    {
        TinyProf::Profiler prof("pop", 3600);
        prof.set_outdir(argv[1]).set_keep("all");
        int rank = 0, size = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        const double share = size > 1 ? double(rank) / (size - 1) : 0.0;
        const bool traced = mode == "pipeline" || mode == "transfer";
        if (traced) prof.set_trace(2000000);
        std::vector<double> out(traced ? 2 << 20 : 0, 1.0), got(out.size(), 0.0);   // 16 MB, touched
        MPI_Barrier(MPI_COMM_WORLD);      // outside every event: the ranks start main together
        {
            TINYPROF_REGION("main");
            if (mode == "balance") {
                compute_then_sync(unit * (1 + share));
            } else if (mode == "pipeline") {
                double token = 0;
                if (rank > 0) MPI_Recv(&token, 1, MPI_DOUBLE, rank - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                compute(unit);
                if (rank < size - 1) MPI_Send(&token, 1, MPI_DOUBLE, rank + 1, 0, MPI_COMM_WORLD);
            } else if (mode == "transfer") {
                compute(unit);
                TINYPROF_REGION("exchange");
                const int n = static_cast<int>(out.size());
                for (int i = 0; i < 8; ++i)
                    MPI_Sendrecv(out.data(), n, MPI_DOUBLE, (rank + 1) % size, 0, got.data(), n, MPI_DOUBLE,
                                 (rank + size - 1) % size, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                for (int k = 0; k < 4 && status == 0; ++k) {
                    {
                        TINYPROF_REGION("step", 1);
                        compute_then_sync(unit * (1 + k * share));
                    }
                    if (!TinyProf::snapshot(120)) {
                        std::printf("rank %d: snapshot %d did not end\n", rank, k + 1);
                        status = 3;
                    }
                }
            }
        }
        TinyProf::flush();
    }
    MPI_Finalize();
    return status;
}
