// The workload of benchmarks/scale.py (and tests/native/test_scale.py), built
// with SimGrid's smpicxx and run under smpirun at thousands of simulated ranks:
// the real header, a realistic mix of callpaths, flushed at MPI_Finalize.
//
//     scale_workload OUTDIR ITERATIONS AGGREGATORS MODE
//
// AGGREGATORS 0: the default, max(1, P / 16). MODE `finalize`: the profile is
// written at MPI_Finalize; `timed`: by TinyProf::flush() before it, and rank 0
// prints one JSON line: the simulated time (MPI_Wtime, max over ranks) of the
// flush's parts (local: this rank's data collected; sync, aggregate, write:
// the three phases) and phase 1's receive buffer (max and sum over ranks);
// `snapshots`: as `finalize`, with a Profiler asking for snapshots every
// second and one asked for at once (SMPI has none: TinyProf::snapshot() is false).
//
// Per rank (r of P), under the common root `main`, ITERATIONS times:
//   - common: `step` (loop 1) with `compute/k` (k < 4, loop 1), `halo` (loop 2);
//   - non-common: `variant{r % 4}` (every rank, four kinds, loop 1);
//     `rare{r}` with a child `io` on every 64th rank (one callpath per such rank).
// The clock is injected (+1 per read), so every value is exact: a leaf lasts
// 1 ns, `step` 2 * 4 + 1 = 9 ns, `main` one more than the reads inside it. MPI
// capture is off (no libtinyprof_mpi).
#define TINYPROF_IMPLEMENTATION
#include <tinyprof/tinyprof.hpp>

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

std::int64_t ticks = 0;        // privatised per simulated rank, as all globals under SMPI

std::int64_t tick() { return ++ticks; }

void record(int rank, int iterations) {
    static const char* const kCompute[] = {"compute/0", "compute/1", "compute/2", "compute/3"};
    const std::string variant = "variant" + std::to_string(rank % 4);
    const std::string rare = "rare" + std::to_string(rank);
    TinyProf::Event main_event("main");
    for (int i = 0; i < iterations; ++i) {
        {
            TinyProf::Event step("step", 1, "");
            for (const char* k : kCompute) TinyProf::Event compute(k, 1, "");
        }
        { TinyProf::Event halo("halo", 2, ""); }
        { TinyProf::Event v(variant, false, 1, ""); }
        if (rank % 64 == 0) {
            TinyProf::Event r(rare, false, 1, "");
            TinyProf::Event io("io", 1, "");
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 5) {
        std::fprintf(stderr, "usage: %s OUTDIR ITERATIONS AGGREGATORS finalize|timed|snapshots\n", argv[0]);
        return 2;
    }
    const std::string mode = argv[4];
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    TinyProf::set_clock(tick);
    TinyProf::Profiler prof("scale", mode == "snapshots" ? 1 : 0);
    prof.set_outdir(argv[1]);
    if (std::atoi(argv[3]) > 0) prof.set_aggregators(std::atoi(argv[3]));
    record(rank, std::atoi(argv[2]));
    if (mode == "snapshots" && TinyProf::snapshot(0)) std::printf("rank %d: a snapshot was taken\n", rank);
    if (mode == "timed") {
        TinyProf::flush();
        const auto& reg = TinyProf::detail::registry();
        double parts[4];
        for (int i = 0; i < 4; ++i) parts[i] = reg.flush_marks[static_cast<std::size_t>(i) + 1] - reg.flush_marks[i];
        double total = reg.flush_marks[4] - reg.flush_marks[0];
        const auto buffer = static_cast<unsigned long long>(reg.sync_received);
        unsigned long long buffer_max = 0, buffer_sum = 0;
        MPI_Reduce(rank == 0 ? MPI_IN_PLACE : parts, parts, 4, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(rank == 0 ? MPI_IN_PLACE : &total, &total, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(&buffer, &buffer_max, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(&buffer, &buffer_sum, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0)
            std::printf("{\"local\": %.9f, \"sync\": %.9f, \"aggregate\": %.9f, \"write\": %.9f, "
                        "\"flush\": %.9f, \"sync_received_max\": %llu, \"sync_received_sum\": %llu}\n",
                        parts[0], parts[1], parts[2], parts[3], total, buffer_max, buffer_sum);
    }
    MPI_Finalize();
    return 0;
}
