// Cost of one C++ Event enter+exit, side by side with the bare pair of clock
// reads it needs, in the same run (docs/performance.md, "Native C++
// annotation cost"). Built and run by `make bench` (or `make bench-native`).
//
// Every case runs once per repeat, the cases interleaved; each figure is the
// median over the repeats of the time per loop iteration.
#include <tinyprof/tinyprof.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>

namespace {

// Short repeats, many of them: on a shared machine a burst of load then
// spoils a few samples of every case rather than all samples of one.
constexpr int kIterations = 200000;
constexpr int kRepeats = 31;

std::int64_t sink = 0;

double ns_per_iteration(const std::function<void()>& loop) {
    const auto t0 = std::chrono::steady_clock::now();
    loop();
    const auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / kIterations;
}

struct Case {
    const char* name;
    std::function<void()> loop;
    std::vector<double> samples;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main() {
    std::vector<Case> cases = {
        {"two steady_clock reads (bare pair)", [] {
             for (int i = 0; i < kIterations; ++i) {
                 const std::int64_t a = TinyProf::detail::steady_ns();
                 const std::int64_t b = TinyProf::detail::steady_ns();
                 sink += b - a;
             }
         }, {}},
        {"Event enter+exit, nested in an open event", [] {
             TinyProf::Event outer("main");
             for (int i = 0; i < kIterations; ++i) TinyProf::Event e("x");
         }, {}},
        {"Event enter+exit, loop mode 2 (summed), nested", [] {
             TinyProf::Event outer("main");
             for (int i = 0; i < kIterations; ++i) TinyProf::Event e("sum", 2, "");
         }, {}},
        {"Event enter+exit, top level (new execution each)", [] {
             for (int i = 0; i < kIterations; ++i) TinyProf::Event e("main");
         }, {}},
    };
    for (int r = 0; r < kRepeats; ++r)
        for (auto& c : cases) c.samples.push_back(ns_per_iteration(c.loop));
    std::printf("%d repeats of %d iterations, ns per iteration\n", kRepeats, kIterations);
    std::printf("  %-50s %8s %8s %8s\n", "case", "median", "min", "max");
    for (const auto& c : cases) {
        const auto [lo, hi] = std::minmax_element(c.samples.begin(), c.samples.end());
        std::printf("  %-50s %8.1f %8.1f %8.1f\n", c.name, median(c.samples), *lo, *hi);
    }
    const double bare = median(cases[0].samples), nested = median(cases[1].samples);
    std::printf("ratio nested Event / bare clock pair: %.2f (goal <= 2)\n", nested / bare);
    return sink == 42;   // keeps the bare reads from being optimised away
}
