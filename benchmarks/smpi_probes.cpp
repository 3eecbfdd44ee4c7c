// Probes of SimGrid SMPI itself, behind the configuration and the caveats of
// benchmarks/scale.py (docs/scaling.md): built with smpicxx, run by
//
//     .venv/bin/python benchmarks/scale.py --probe dup|charge|allreduce --ranks P[,P...]
//
// dup:       MPI_Comm_dup, then an allreduce on MPI_COMM_WORLD: the simulated
//            time of each, on rank 0 and on the last rank.
// charge:    200 lookups in a hash map of 200 strings between two MPI_Wtime, 10
//            times: the simulated time SMPI charges for the same work (its real
//            CPU time, measured while the simulator runs every rank in turn).
// allreduce: 4 allreduces of 4 int64, for the simulator's CPU (scale.py prints it).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char* probe = argc > 1 ? argv[1] : "";
    long values[4] = {rank, 0, 0, 0};
    if (std::strcmp(probe, "dup") == 0) {
        MPI_Allreduce(MPI_IN_PLACE, values, 4, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        MPI_Comm dup;
        MPI_Comm_dup(MPI_COMM_WORLD, &dup);
        const double t1 = MPI_Wtime();
        MPI_Allreduce(MPI_IN_PLACE, values, 4, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
        const double t2 = MPI_Wtime();
        if (rank == 0 || rank == size - 1)
            std::printf("rank %d: MPI_Comm_dup %.3f ms, the next allreduce %.3f ms\n", rank, (t1 - t0) * 1e3,
                        (t2 - t1) * 1e3);
    } else if (std::strcmp(probe, "charge") == 0) {
        std::unordered_map<std::string, long> map;
        for (int i = 0; i < 200; ++i) map["name" + std::to_string(i)] = i;
        double times[2] = {0, 0};   // the longest, the sum
        for (int repeat = 0; repeat < 10; ++repeat) {
            MPI_Barrier(MPI_COMM_WORLD);
            const double t0 = MPI_Wtime();
            long sum = 0;
            for (int i = 0; i < 200; ++i) sum += map["name" + std::to_string(i)];
            const double t = MPI_Wtime() - t0;
            values[1] += sum;
            times[0] = std::max(times[0], t);
            times[1] += t;
        }
        MPI_Reduce(rank == 0 ? MPI_IN_PLACE : times, times, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0)
            std::printf("200 lookups: mean %.1f us, longest %.1f us (maxima over ranks)\n",
                        times[1] / 10 * 1e6, times[0] * 1e6);
    } else if (std::strcmp(probe, "allreduce") == 0) {
        for (int i = 0; i < 4; ++i) MPI_Allreduce(MPI_IN_PLACE, values, 4, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
    } else {
        if (rank == 0) std::fprintf(stderr, "usage: %s dup|charge|allreduce\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    MPI_Finalize();
    return 0;
}
