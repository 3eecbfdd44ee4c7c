// tinyprof: always-on, annotation-based profiling for MPI applications (C++17).
//
// Header-only; depends only on MPI. The API is the paper's Listing 1:
//
//     TinyProf::Profiler prof("heat", 5, "tag:0,mem:1");   // once, after MPI_Init
//     { TinyProf::Event e("main");                          // RAII region
//       { TinyProf::Event c("compute", 1, ""); ... }        // loop mode 1
//       { TinyProf::Event x("comm", 2, "tag:2,mem:4096"); } // loop mode 2, metrics
//     }
//     TinyProf::flush();                                     // collective under MPI
//
// The implementation compiles once: in exactly one file of the program,
//
//     #define TINYPROF_IMPLEMENTATION
//     #include <tinyprof/tinyprof.hpp>
//
// or by linking the CMake target tinyprof::tinyprof. Every other file that
// includes this header compiles only the annotation hot path.
//
// Files are the Python side's, byte for byte (docs/format.md, version 3); the flush is its
// three-phase flush (docs/flush.md). Usage, semantics and limits: docs/native.md.
#pragma once

// Only MPI's C API is used here. Open MPI 4.1's mpi.h adds its C++ bindings
// (unless OMPI_SKIP_MPICXX), which warn under -Wextra's -Wcast-function-type:
// not in the files of a program that includes this header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wcast-function-type"
#include <mpi.h>
#pragma GCC diagnostic pop

#include "detail/event_map.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

// The tinyprof release this header belongs to: written on each file's
// `version` line, and equal to tinyprof/_version.py (the tests check it).
#define TINYPROF_VERSION "0.1.0"

#define TINYPROF_CONCAT_(a, b) a##b
#define TINYPROF_CONCAT(a, b) TINYPROF_CONCAT_(a, b)
// A region lasting to the end of the enclosing scope, with the arguments of
// any Event constructor: TINYPROF_REGION("solve"); TINYPROF_REGION("it", 1, "");
#define TINYPROF_REGION(...) \
    ::TinyProf::Event TINYPROF_CONCAT(tinyprof_region_, __LINE__)(__VA_ARGS__)

namespace TinyProf {

// A profiled region, from construction to destruction (RAII). Not copyable
// or movable: each Event is one frame of its thread's stack of open events.
// Enter and exit are the hot path (detail/event_map.hpp), always inlined: left
// to the compiler's budget, a call site would pay a call and its register saves.
class Event {
  public:
    explicit Event(std::string_view name) : Event(name, true, 0, {}) {}
    Event(std::string_view name, bool is_common) : Event(name, is_common, 0, {}) {}
    Event(std::string_view name, int loop, std::string_view selfvalues)
        : Event(name, true, loop, selfvalues) {}
    // Event("x", "tag:1") would silently take the literal as is_common.
    template <std::size_t N>
    Event(std::string_view name, const char (&selfvalues)[N]) = delete;

    [[gnu::always_inline]] Event(std::string_view name, bool is_common, int loop, std::string_view selfvalues) {
        if (loop < 0 || loop > 2) detail::bad_loop(name);
        if (!selfvalues.empty()) values_ = detail::parse_values(name, selfvalues);
        detail::Tree& t = detail::tree();
        detail::Node* parent = t.current;
        node_ = parent->child(name, loop, is_common, t.mutex);
        if (parent == &t.root) detail::enter_root(name);
        t.current = node_;
        detail::current_node = node_->id;
        tree_ = &t;
        start_ = detail::now();
    }

    [[gnu::always_inline]] ~Event() {
        const std::int64_t end = detail::now();
        if (tree_->current != node_)     // only a heap-allocated Event can get here
            detail::exited_out_of_order(*node_, *tree_->current);
        tree_->current = node_->parent;
        detail::current_node = node_->parent->id;
        detail::record(*tree_, *node_, end - start_);
        if (detail::trace_limit.load(std::memory_order_relaxed) != 0)
            detail::trace_record(*tree_, node_->id, start_, end - start_);
        tree_->records.store(tree_->records.load(std::memory_order_relaxed) + 1,
                             std::memory_order_relaxed);
        if (!values_.empty()) detail::record_metrics(*tree_, *node_, values_);
    }

    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;

  private:
    detail::Tree* tree_;
    detail::Node* node_;
    std::int64_t start_;
    std::vector<detail::Metric> values_;
};

// Writes everything recorded so far as one profile and returns the output
// directory. Collective over the profiler's communicator while MPI is
// initialised and not finalised (every rank must call it); otherwise one
// single-rank file. Call it outside every event of the calling thread;
// other threads may go on recording (what they publish before the flush
// reads their tree is in it). Each flush is a new set (`set flush N`); a
// later flush rewrites the profile with everything until then.
std::string flush();

// A snapshot now, besides the periodic ones (a Profiler with frequency > 0):
// asks this rank's snapshot thread to take the next one at once and waits at
// most `timeout` seconds for it. Never collective for the calling thread:
// aggregated (MPI_THREAD_MULTIPLE), the snapshot ends when every rank took
// part (when they call this too, or when it falls due on them). Returns
// whether one that holds everything this rank recorded before the call ended.
bool snapshot(double timeout = 10.0);

// Run metadata (docs/api.md, "Run metadata"): a key/value pair written with
// the profile from the next flush or snapshot on, beside the keys recorded
// automatically and TINYPROF_METADATA's (a key given here wins). Call it on
// rank 0 (the one that writes it), after the Profiler: a new Profiler starts
// afresh. Keys match [A-Za-z_][A-Za-z0-9_.-]{0,63}; values are strings,
// 64-bit integers or doubles. A bad key or value throws std::invalid_argument.
void metadata(std::string_view key, std::string_view value);
void metadata(std::string_view key, std::int64_t value);
void metadata(std::string_view key, double value);
inline void metadata(std::string_view key, const char* value) { metadata(key, std::string_view(value)); }
void metadata(std::string_view key, bool value) = delete;     // say 0/1 or "yes"/"no"
template <class Int, std::enable_if_t<std::is_integral_v<Int> && !std::is_same_v<Int, bool>, int> = 0>
inline void metadata(std::string_view key, Int value) {
    if constexpr (std::is_unsigned_v<Int> && sizeof(Int) >= sizeof(std::int64_t))
        if (value > static_cast<Int>(INT64_MAX))
            throw std::invalid_argument("tinyprof: metadata '" + std::string(key) + "': an integer must fit in 64 bits");
    metadata(key, static_cast<std::int64_t>(value));
}

// Replaces the nanosecond clock of the hot path (tests inject exact timings);
// nullptr restores std::chrono::steady_clock.
inline void set_clock(ClockFn clock) { detail::clock_override = clock; }

// The one-time, global settings of a run (paper Fig. 1 (3)): create it once,
// after MPI_Init, on every rank. It arranges a flush at MPI_Finalize; its
// destructor flushes if MPI is still live or was never used.
class Profiler {
  public:
    explicit Profiler(std::string name = "profile", double frequency = 0, std::string_view selfkeys = "");

    // Trace mode (docs/trace.md), as TINYPROF_TRACE=1 and TINYPROF_TRACE_LIMIT:
    // keep every occurrence's start and, with MPI capture, every MPI call, up to
    // `limit` of each per process. Aligns the clocks: collective under MPI.
    Profiler& set_trace(std::int64_t limit = 2000000);
    // Output directory, default `<name>.tinyprof`.
    Profiler& set_outdir(std::string outdir);
    // Number of files (aggregators) of an MPI flush or snapshot, clamped to [1, P].
    Profiler& set_aggregators(int aggregators);
    // The communicator to flush over (default MPI_COMM_WORLD). With
    // frequency > 0, collective over it: snapshots restart on it.
    Profiler& set_comm(MPI_Comm comm);
    // Delta snapshots after the first full one (default 32, or
    // TINYPROF_CHAIN); each later full one is followed by twice as many.
    Profiler& set_chain(int chain);
    // Which snapshots stay on disk: "last" (default), the newest complete
    // one; "all", every one (for a history of the run).
    Profiler& set_keep(std::string_view keep);

    ~Profiler();

    Profiler(const Profiler&) = delete;
    Profiler& operator=(const Profiler&) = delete;
};

namespace detail {

// Defined by the implementation only: a program in which no file defines
// TINYPROF_IMPLEMENTATION (nor links tinyprof::tinyprof) fails to link with
// an undefined reference to this name, two such files with a duplicate one.
extern const int define_TINYPROF_IMPLEMENTATION_in_exactly_one_file;
[[gnu::used]] static const int* const link_check = &define_TINYPROF_IMPLEMENTATION_in_exactly_one_file;

}  // namespace detail
}  // namespace TinyProf

#ifdef TINYPROF_IMPLEMENTATION
#include "detail/cold_path.hpp"
#include "detail/profiler.hpp"
#endif
