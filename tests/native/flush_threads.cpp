// Test program: flushes again and again while worker threads record, then a
// final flush after joining them. Flush k writes OUTDIR/k, the last one
// OUTDIR/final; for each flush each rank prints "k rank lo hi": the tasks
// the workers had finished before it started and after it returned, which
// bound what that profile may hold. Without MPI given --no-mpi.
//
// The workers record while each flush runs, at most kBatch tasks each per
// flush: the recording overlaps the flushes and the data stays bounded.
//
//     flush_threads OUTDIR FLUSHES [--no-mpi]
#include <tinyprof/tinyprof.hpp>

#include <array>
#include <cstdio>
#include <string>
#include <thread>

namespace {

constexpr int kThreads = 4;
constexpr long kBatch = 10000;    // tasks per thread per flush, at most
constexpr int kLeaves = 2000;     // new callpaths keep appearing while flushes run

std::array<std::atomic<long>, kThreads> done{};
std::atomic<int> started{0};      // flushes begun
std::atomic<int> returned{0};     // flushes done

// Tasks while flush k runs, for every k < flushes. One task: a step, a
// loop-2 sum, and a leaf that is often a new node.
void work(int t, int flushes) {
    long i = 0;
    for (int k = 0; k < flushes; ++k) {
        while (started.load() <= k) std::this_thread::yield();
        for (long n = 0; n < kBatch && returned.load(std::memory_order_relaxed) <= k; ++n) {
            ++i;
            {
                TinyProf::Event task("task");
                { TinyProf::Event step("step", 1, "mem:1"); }
                { TinyProf::Event sum("sum", 2, "mem:2,tag:5"); }
                { TinyProf::Event leaf("n" + std::to_string((i / 4) % kLeaves)); }
            }
            done[static_cast<std::size_t>(t)].store(i, std::memory_order_release);
        }
    }
}

long finished() {
    long n = 0;
    for (const auto& d : done) n += d.load(std::memory_order_acquire);
    return n;
}

}  // namespace

int main(int argc, char** argv) {
    const bool mpi = !(argc > 3 && std::string(argv[3]) == "--no-mpi");
    int rank = 0;
    if (mpi) {
        int provided = 0;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    }
    TinyProf::Profiler prof("stress", 0, "tag:0,mem:1");
    { TinyProf::Event setup("setup"); }          // the first root event: one execution
    const std::string outdir = argv[1];
    const int flushes = std::atoi(argv[2]);
    std::vector<std::thread> workers;
    for (int t = 0; t < kThreads; ++t) workers.emplace_back(work, t, flushes);
    for (int k = 0; k < flushes; ++k) {
        prof.set_outdir(outdir + "/" + std::to_string(k));
        const long lo = finished();
        started = k + 1;
        TinyProf::flush();
        returned = k + 1;
        std::printf("%d %d %ld %ld\n", k, rank, lo, finished());
        std::fflush(stdout);
    }
    for (auto& w : workers) w.join();
    prof.set_outdir(outdir + "/final");
    TinyProf::flush();
    std::printf("final %d %ld %ld\n", rank, finished(), finished());
    if (mpi) MPI_Finalize();
    return 0;
}
