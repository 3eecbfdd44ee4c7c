// Python twin: tinyprof/annotate/pyevent.py, tinyprof/annotate/metrics.py; identity: tests/native/test_vectors.py
//
// The event map and the annotation hot path: one Node per callpath, per
// thread. Every file that annotates includes this, so it holds only what
// Event's enter and exit run; their cold paths (a thread's first event, a new
// node, the first root event, metric values parsed) are declared here and
// compiled once, in cold_path.hpp.
//
// Only the thread that owns a tree writes it; a flush in another thread may
// read it at any time. Values go into append-only logs whose sizes are
// published with release stores (the reader loads them with acquire, then
// reads no further); structural changes (a new node, a new chunk) take the
// tree's mutex, which the reader holds while it walks the tree. The hot
// path therefore takes no lock in steady state.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace TinyProf {

using ClockFn = std::int64_t (*)();

namespace detail {

inline std::int64_t steady_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The process-wide state the hot path reads is declared here and defined once,
// in the implementation (cold_path.hpp), never as inline variables: GCC makes
// those (and function-local statics of inline functions) STB_GNU_UNIQUE, one
// object per process across every copy of the program the dynamic linker
// loads, so under SimGrid SMPI, which loads a copy per simulated rank, all
// ranks shared one registry. The thread-local ones are `__thread`: constant
// initialised, so reading them needs no TLS wrapper call in other files.
//
// Under SimGrid SMPI (smpicxx includes its smpi_helpers.h in every file) each
// simulated rank is an actor of one process, on the simulator's one thread,
// with one thread of its own: there the per-thread state is a plain global,
// which SMPI makes per rank, whether it gives each rank a copy of the program
// (smpi/privatization:dlopen) or of its data segment only (mmap: a
// `__thread` variable would then be one for every rank).
//
// And there a call to MPI_Finalize() in a file that includes this header
// calls tinyprof's, which flushes first: SMPI runs no attribute callback in
// MPI_Finalize, and under mmap it resolves a program's own MPI_Finalize to
// SMPI's (the implementation's wrapper covers the other files under dlopen).
// mpi.h comes first, so that its declaration is not rewritten.
#if defined(SMPI_HELPERS_H)
#define TINYPROF_SMPI 1
#define TINYPROF_PER_THREAD
#include <mpi.h>
namespace TinyProf {
namespace detail {
int finalize_under_smpi();
}  // namespace detail
}  // namespace TinyProf
#define MPI_Finalize() ::TinyProf::detail::finalize_under_smpi()
#else
#define TINYPROF_PER_THREAD __thread
#endif

// Tests inject deterministic timings here (set_clock); nullptr is the real clock.
extern ClockFn clock_override;

inline std::int64_t now() noexcept { return clock_override ? clock_override() : steady_ns(); }

// An append-only sequence in chunks of growing size: one writer (the owner),
// readers under the tree's mutex. Published slots never move.
template <class T>
class Log {
  public:
    // The slot to fill, then publish(); a new chunk under `mutex` when full.
    T& next(std::mutex& mutex) {
        if (cursor_ == end_) grow(mutex);
        return *cursor_;
    }
    void publish() noexcept {
        ++cursor_;
        size_.store(size_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    }
    std::size_t size() const noexcept { return size_.load(std::memory_order_acquire); }
    // The last published slot: the owner's only (size() > 0).
    T& back() noexcept { return cursor_[-1]; }

    // The owner's newest slot for which match(slot) holds, searching back
    // while more(slot) holds; nullptr if none.
    template <class Match, class More>
    T* find_recent(Match&& match, More&& more) noexcept {
        for (auto c = chunks_.rbegin(); c != chunks_.rend(); ++c) {
            T* begin = c->first.get();
            for (T* slot = c == chunks_.rbegin() ? cursor_ : begin + c->second; slot != begin;) {
                --slot;
                if (!more(*slot)) return nullptr;
                if (match(*slot)) return slot;
            }
        }
        return nullptr;
    }

    // f(slot) for the first n slots (n <= an earlier size()); the reader
    // holds the tree's mutex, so the chunk list stays put.
    template <class F>
    void for_each(std::size_t n, F&& f) const {
        for (const auto& [data, capacity] : chunks_)
            for (std::size_t i = 0; i < capacity && n > 0; ++i, --n) f(data[i]);
    }

  private:
    static constexpr std::size_t kFirst = 4, kLargest = 4096;

    void grow(std::mutex& mutex) {
        const std::size_t doubled = chunks_.empty() ? kFirst : 2 * chunks_.back().second;
        const std::size_t capacity = doubled < kLargest ? doubled : kLargest;
        auto chunk = std::make_unique<T[]>(capacity);
        cursor_ = chunk.get();
        end_ = cursor_ + capacity;
        std::lock_guard<std::mutex> lock(mutex);
        chunks_.emplace_back(std::move(chunk), capacity);
    }

    std::vector<std::pair<std::unique_ptr<T[]>, std::size_t>> chunks_;
    T* cursor_ = nullptr;
    T* end_ = nullptr;
    std::atomic<std::size_t> size_{0};
};

// Where an execution's occurrences start in a node's times.
struct ExecStart {
    std::int64_t exec;
    std::size_t first;
};

// A metric value of one occurrence (inconsistent) or of the node (consistent).
struct MetricValue {
    std::size_t occurrence;
    std::size_t slot;
    std::atomic<double> value;      // loop 2 sums into it after it is published
};

// The id of the calling thread's current node, kept by Event for the MPI
// library (tinyprof_mpi_set_source): one TLS store per enter and exit. Node
// ids (0: the root of every tree, outside any event) are unique in the
// process, never reused.
extern TINYPROF_PER_THREAD std::int32_t current_node;

// A wide node's children by name: opaque here (cold_path.hpp), so that
// annotating files need no hash map.
struct ChildIndex;
struct DropIndex {
    void operator()(ChildIndex* index) const;
};

struct Node {
    std::string name;
    Node* parent;
    std::int32_t id = 0;
    int loop;
    bool common;
    std::vector<std::unique_ptr<Node>> children;          // in order of first entry
    std::unique_ptr<ChildIndex, DropIndex> index;       // many children
    Node* last = nullptr;                                  // the child found last time
    Log<std::atomic<std::int64_t>> times;  // one per occurrence (loop 2: one per execution)
    Log<ExecStart> execs;                  // on change of execution only
    std::int64_t last_exec = -1;
    Log<MetricValue> consistent;           // the first value of each consistent key
    Log<MetricValue> metrics;              // inconsistent values, in occurrence order

    Node(std::string_view n, Node* p, int l, bool c) : name(n), parent(p), loop(l), common(c) {}

    // Loops enter the same child again and again: check the last one first,
    // then a short linear search; the hash map of wide nodes and a new child
    // are out of line.
    Node* child(std::string_view key, int new_loop, bool new_common, std::mutex& mutex) {
        if (last != nullptr && last->name == key) return last;
        Node* found = nullptr;
        if (!index) {
            for (auto& c : children)
                if (c->name == key) { found = c.get(); break; }
        }
        last = found != nullptr ? found : lookup(key, new_loop, new_common, mutex);
        return last;
    }

  private:
    Node* lookup(std::string_view key, int new_loop, bool new_common, std::mutex& mutex);
};

// Trace mode: one occurrence (docs/trace.md).
struct TraceRecord {
    std::int32_t node;
    std::int64_t start, dur;
};

// One thread's call tree and open-event stack. The registry owns it, so its
// values outlive the thread and the flush can merge every thread's tree.
struct Tree {
    std::mutex mutex;                 // structural changes; held by the flush that reads
    Node root{"", nullptr, 0, true};
    Node* current = &root;
    std::atomic<std::uint64_t> records{0};   // events recorded, to skip a redundant flush
    std::int64_t tid = 0;             // the OS thread's (gettid)
    Log<TraceRecord> trace;           // trace mode: its occurrences, in exit order
};

// Trace mode's cap on occurrences kept per process (0: off), and the counts.
extern std::atomic<std::int64_t> trace_limit;
extern std::atomic<std::int64_t> trace_kept;
extern std::atomic<std::int64_t> trace_dropped;

inline void trace_record(Tree& t, std::int32_t node, std::int64_t start, std::int64_t dur) {
    if (trace_kept.fetch_add(1, std::memory_order_relaxed) >= trace_limit.load(std::memory_order_relaxed)) {
        trace_dropped.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    t.trace.next(t.mutex) = {node, start, dur};
    t.trace.publish();
}

struct Metric {
    bool consistent;
    std::size_t slot;                 // index among the keys of its kind
    double value;
};

// The execution counter: -1 until the first root event, then bumped at each
// entry of that same root event (in any thread).
extern std::atomic<std::int64_t> execution;
// The first root event's name, set once (never freed: Events may outlive main).
extern std::atomic<const std::string*> first_root;
extern TINYPROF_PER_THREAD Tree* this_tree;

// The cold paths, compiled once (cold_path.hpp).
Tree* register_thread();
// Makes `name` the first root event (execution 0) unless one is; whether it did.
bool set_first_root(std::string_view name);
// "tag:3,mem:4096" -> declared keys' slots and values, once per Event object.
std::vector<Metric> parse_values(std::string_view event, std::string_view selfvalues);
[[noreturn]] void bad_loop(std::string_view event);
[[noreturn]] void exited_out_of_order(const Node& node, const Node& innermost);

inline Tree& tree() {
    Tree* t = this_tree;
    return t != nullptr ? *t : *register_thread();
}

inline void enter_root(std::string_view name) {
    const std::string* first = first_root.load(std::memory_order_acquire);
    if (first == nullptr) {
        if (set_first_root(name)) return;
        first = first_root.load(std::memory_order_acquire);
    }
    if (name == *first) execution.fetch_add(1, std::memory_order_relaxed);
}

inline void record(Tree& t, Node& node, std::int64_t elapsed) {
    const std::int64_t e = execution.load(std::memory_order_relaxed);
    if (node.last_exec != e) {
        node.last_exec = e;
        node.execs.next(t.mutex) = {e, node.times.size()};
        node.execs.publish();           // before the time: a reader sees its execution
    } else if (node.loop == 2) {
        auto& sum = node.times.back();
        sum.store(sum.load(std::memory_order_relaxed) + elapsed, std::memory_order_relaxed);
        return;
    }
    node.times.next(t.mutex).store(elapsed, std::memory_order_relaxed);
    node.times.publish();
}

// The metric values of the occurrence just recorded on `node`, as the Python
// side's record_metrics: consistent keep the first value, loop-2
// inconsistent values are summed per execution, NaN means "not given".
inline void record_metrics(Tree& t, Node& node, const std::vector<Metric>& values) {
    const std::size_t index = node.times.size() - 1;
    for (const Metric& m : values) {
        if (m.consistent) {
            if (node.consistent.find_recent([&](const MetricValue& v) { return v.slot == m.slot; },
                                            [](const MetricValue&) { return true; }))
                continue;
            MetricValue& v = node.consistent.next(t.mutex);
            v.slot = m.slot;
            v.value.store(m.value, std::memory_order_relaxed);
            node.consistent.publish();
            continue;
        }
        if (m.value != m.value) continue;       // must not wipe a loop-2 sum
        MetricValue* given = node.metrics.find_recent(
            [&](const MetricValue& v) { return v.slot == m.slot; },
            [&](const MetricValue& v) { return v.occurrence == index; });
        if (given == nullptr) {
            MetricValue& v = node.metrics.next(t.mutex);
            v.occurrence = index;
            v.slot = m.slot;
            v.value.store(m.value, std::memory_order_relaxed);
            node.metrics.publish();
        } else {
            const double old = given->value.load(std::memory_order_relaxed);
            given->value.store(node.loop == 2 ? old + m.value : m.value, std::memory_order_relaxed);
        }
    }
}

}  // namespace detail
}  // namespace TinyProf
