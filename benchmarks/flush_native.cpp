// The C++ side of benchmarks/flush.py: the same synthetic workload as
// tinyprof/_sweep.py (record, shape), recorded with TinyProf::Event, then
// REPEATS timed flushes into OUTDIR with A aggregators. A flush's time is
// the maximum over ranks after a barrier; rank 0 prints one JSON line with
// the median and the range over the repeats, in seconds.
//
//     flush_native OUTDIR CALLPATHS ITERATIONS AGGREGATORS REPEATS
#define TINYPROF_IMPLEMENTATION     // one file: the implementation compiled here
#include <tinyprof/tinyprof.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

constexpr int kLeaves = 9, kVariants = 4;      // as _sweep.LEAVES, _sweep.VARIANTS

// Kernel counts per group, then the variant's (-1: none): _sweep.shape.
std::vector<int> shape(int callpaths) {
    const int variant = (callpaths - 1) / 10;
    std::vector<int> groups;
    for (int left = callpaths - 1 - variant; left > 0; left -= groups.back() + 1)
        groups.push_back(std::min(kLeaves, left - 1));
    groups.push_back(variant - 1);
    return groups;
}

void record(int rank, int callpaths, int iterations) {
    std::vector<int> groups = shape(callpaths);
    const int variant = groups.back();
    groups.pop_back();
    const std::string name = "variant" + std::to_string(rank % kVariants);
    TinyProf::Event main_event("main");
    for (int i = 0; i < iterations; ++i) {
        for (std::size_t g = 0; g < groups.size(); ++g) {
            TinyProf::Event group("group" + std::to_string(g), 1, "");
            for (int leaf = 0; leaf < groups[g]; ++leaf)
                TinyProf::Event kernel("kernel" + std::to_string(leaf), 1, "");
        }
        if (variant >= 0) {
            TinyProf::Event v(name, false, 1, "");
            for (int leaf = 0; leaf < variant; ++leaf)
                TinyProf::Event kernel("kernel" + std::to_string(leaf), 1, "");
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 6) {
        std::fprintf(stderr, "usage: %s OUTDIR CALLPATHS ITERATIONS AGGREGATORS REPEATS\n", argv[0]);
        return 2;
    }
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const int repeats = std::atoi(argv[5]);
    {
        TinyProf::Profiler profiler("bench");
        profiler.set_outdir(argv[1]).set_aggregators(std::atoi(argv[4]));
        record(rank, std::atoi(argv[2]), std::atoi(argv[3]));
        std::vector<double> totals;
        for (int k = 0; k < repeats; ++k) {
            MPI_Barrier(MPI_COMM_WORLD);
            const double start = MPI_Wtime();
            TinyProf::flush();
            double mine = MPI_Wtime() - start, worst = 0;
            MPI_Reduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            totals.push_back(worst);
        }
        if (rank == 0) {
            std::vector<double> sorted = totals;
            std::sort(sorted.begin(), sorted.end());
            const std::size_t n = sorted.size();
            const double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
            std::printf("{\"median\": %.6f, \"range\": [%.6f, %.6f]}\n", median, sorted.front(),
                        sorted.back());
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }   // the destructor's flush finds nothing new: no write
    MPI_Finalize();
    return 0;
}
