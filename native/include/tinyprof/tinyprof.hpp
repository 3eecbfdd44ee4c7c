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
// Files are the Python side's, byte for byte (docs/format.md, version 2); the flush is its
// three-phase flush (docs/flush.md). Usage, semantics and limits: docs/native.md.
#pragma once

#include <mpi.h>

#include "tinyprof_mpi.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
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

using ClockFn = std::int64_t (*)();

namespace detail {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

inline std::int64_t steady_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Tests inject deterministic timings here (set_clock); nullptr is the real clock.
inline ClockFn clock_override = nullptr;

inline std::int64_t now() noexcept { return clock_override ? clock_override() : steady_ns(); }

// ---------------------------------------------------------------------------
// The event map: one Node per callpath, per thread.
//
// Only the thread that owns a tree writes it; a flush in another thread may
// read it at any time. Values go into append-only logs whose sizes are
// published with release stores (the reader loads them with acquire, then
// reads no further); structural changes (a new node, a new chunk) take the
// tree's mutex, which the reader holds while it walks the tree. The hot
// path therefore takes no lock in steady state.

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
        const std::size_t capacity = chunks_.empty() ? kFirst : std::min(2 * chunks_.back().second, kLargest);
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

// Node ids for the MPI library's attribution (0: the root of every tree, outside
// any event): unique in the process, never reused.
inline std::atomic<std::int32_t> next_node_id{1};

// The id of the calling thread's current node, kept by Event for the MPI
// library (tinyprof_mpi_set_source): one TLS store per enter and exit.
inline thread_local std::int32_t current_node = 0;

// The source function of tinyprof_mpi.h: a plain read of the thread-local.
inline std::int32_t current_node_id() noexcept { return current_node; }

struct Node {
    std::string name;
    Node* parent;
    std::int32_t id = 0;
    int loop;
    bool common;
    std::vector<std::unique_ptr<Node>> children;          // in order of first entry
    std::unique_ptr<std::unordered_map<std::string_view, Node*>> index;  // many children
    Node* last = nullptr;                                  // the child found last time
    Log<std::atomic<std::int64_t>> times;  // one per occurrence (loop 2: one per execution)
    Log<ExecStart> execs;                  // on change of execution only
    std::int64_t last_exec = -1;
    Log<MetricValue> consistent;           // the first value of each consistent key
    Log<MetricValue> metrics;              // inconsistent values, in occurrence order

    Node(std::string_view n, Node* p, int l, bool c) : name(n), parent(p), loop(l), common(c) {}

    // Loops enter the same child again and again: check the last one first,
    // then a short linear search, and a hash map only for wide nodes.
    Node* child(std::string_view key, int new_loop, bool new_common, std::mutex& mutex) {
        if (last != nullptr && last->name == key) return last;
        Node* found = nullptr;
        if (index) {
            auto it = index->find(key);
            if (it != index->end()) found = it->second;
        } else {
            for (auto& c : children)
                if (c->name == key) { found = c.get(); break; }
        }
        if (found == nullptr) found = add(key, new_loop, new_common, mutex);
        last = found;
        return found;
    }

  private:
    static constexpr std::size_t kIndexFrom = 8;

    Node* add(std::string_view key, int new_loop, bool new_common, std::mutex& mutex) {
        auto made = std::make_unique<Node>(key, this, new_loop, new_common);
        made->id = next_node_id.fetch_add(1, std::memory_order_relaxed);
        Node* node = made.get();
        std::lock_guard<std::mutex> lock(mutex);
        children.push_back(std::move(made));
        if (index) {
            index->emplace(node->name, node);
        } else if (children.size() > kIndexFrom) {
            index = std::make_unique<std::unordered_map<std::string_view, Node*>>();
            for (auto& c : children) index->emplace(c->name, c.get());
        }
        return node;
    }
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
    std::int64_t tid = static_cast<std::int64_t>(syscall(SYS_gettid));   // the OS thread's
    Log<TraceRecord> trace;           // trace mode: its occurrences, in exit order
};

// Trace mode's cap on occurrences kept per process (0: off), and the counts.
inline std::atomic<std::int64_t> trace_limit{0};
inline std::atomic<std::int64_t> trace_kept{0};
inline std::atomic<std::int64_t> trace_dropped{0};

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

struct Settings {
    std::string name = "profile";
    double frequency = 0;
    bool trace = false;               // trace mode (docs/trace.md)
    std::int64_t trace_limit = 2000000;
    std::vector<std::pair<std::string, bool>> metrics;    // (key, consistent), in order
    std::string outdir = "profile.tinyprof";
    int aggregators = 0;              // 0: the default, max(1, P / 16)
    bool keep_last = true;            // snapshots: keep "last" (else "all")
    int chain = 32;                   // snapshots: deltas after the first full one (then doubling)
    MPI_Comm comm = MPI_COMM_WORLD;
};

struct Registry {
    std::mutex mutex;
    std::mutex flush_mutex;                     // one flush at a time
    std::vector<std::unique_ptr<Tree>> trees;   // in order of each thread's first event
    std::string first_root;                     // name of the first root event
    Settings settings;
    const void* profiler = nullptr;             // the active Profiler, if any
    std::uint64_t flushed_records = ~std::uint64_t{0};
    std::uint64_t run_id = 0;                   // the file's `run`, once per process
    bool run_drawn = false;
    bool run_agreed = false;                    // broadcast from rank 0 (or no MPI)
    std::int64_t flushes = 0;                   // the next flush's number (`set flush N`)
    int finalize_keyval = MPI_KEYVAL_INVALID;
    std::vector<std::string> warned;            // undeclared metric keys already reported
    std::map<std::pair<MPI_Comm, int>, MPI_Comm> groups;   // (comm, A) -> Split result
    bool mpi_capture = false;                   // libtinyprof_mpi records for us: files get `mpi`
    std::string ucx;                            // the transport view (TINYPROF_UCX): start_ucx's state
    bool mpi_comm_warned = false;
    std::vector<std::array<std::int64_t, 3>> syncs;   // trace clock: first and latest alignment
};

inline Registry& registry() {
    static Registry* r = new Registry();        // never destroyed: Events may outlive main
    return *r;
}

// The execution counter: -1 until the first root event, then bumped at each
// entry of that same root event (in any thread).
inline std::atomic<std::int64_t> execution{-1};
inline std::atomic<bool> have_first_root{false};
inline thread_local Tree* this_tree = nullptr;

inline Tree* register_thread() {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mutex);
    reg.trees.push_back(std::make_unique<Tree>());
    this_tree = reg.trees.back().get();
    return this_tree;
}

inline Tree& tree() {
    Tree* t = this_tree;
    return t != nullptr ? *t : *register_thread();
}

inline void enter_root(std::string_view name) {
    if (!have_first_root.load(std::memory_order_acquire)) {
        Registry& reg = registry();
        std::lock_guard<std::mutex> lock(reg.mutex);
        if (!have_first_root.load(std::memory_order_relaxed)) {
            reg.first_root = std::string(name);
            execution.store(0, std::memory_order_relaxed);
            have_first_root.store(true, std::memory_order_release);
            return;
        }
    }
    if (name == registry().first_root) execution.fetch_add(1, std::memory_order_relaxed);
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
// side's _eventmap.record_metrics: consistent keep the first value, loop-2
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

inline std::string_view trim(std::string_view s) {
    const char* ws = " \t\n\r\f\v";
    const auto b = s.find_first_not_of(ws);
    if (b == std::string_view::npos) return {};
    return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// An environment flag: 1, on, true or yes (any case).
inline bool env_flag(const char* name) {
    const char* text = std::getenv(name);
    std::string v(text ? trim(text) : std::string_view{});
    for (auto& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return v == "1" || v == "on" || v == "true" || v == "yes";
}

// Splits "a:0,b:1" style lists at commas, trimmed, empty items dropped.
template <class F>
inline void for_each_item(std::string_view list, F&& f) {
    while (true) {
        const auto comma = list.find(',');
        const auto item = trim(list.substr(0, comma));
        if (!item.empty()) f(item);
        if (comma == std::string_view::npos) return;
        list.remove_prefix(comma + 1);
    }
}

inline std::vector<std::pair<std::string, bool>> parse_selfkeys(std::string_view selfkeys) {
    std::vector<std::pair<std::string, bool>> keys;
    for_each_item(selfkeys, [&](std::string_view item) {
        const auto colon = item.rfind(':');
        const auto flag = colon == std::string_view::npos ? std::string_view{} : item.substr(colon + 1);
        if (colon == 0 || (flag != "0" && flag != "1"))
            throw std::invalid_argument("tinyprof: bad selfkeys item '" + std::string(item) +
                                        "': expected name:0 (consistent) or name:1 (inconsistent)");
        std::string name(item.substr(0, colon));
        bool taken = name == "time";
        for (const auto& k : keys) taken = taken || k.first == name;
        if (taken)
            throw std::invalid_argument("tinyprof: metric '" + name + "' declared twice (or reserved)");
        keys.emplace_back(std::move(name), flag == "0");
    });
    return keys;
}

inline double parse_double(std::string_view text, std::string_view event) {
    double v = 0;
    const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
    if (r.ec != std::errc() || r.ptr != text.data() + text.size())
        throw std::invalid_argument("tinyprof: Event '" + std::string(event) +
                                    "': metric value '" + std::string(text) + "' is not a number");
    return v;
}

// "tag:3,mem:4096" -> declared keys' slots and values, once per Event object.
inline std::vector<Metric> parse_values(std::string_view event, std::string_view selfvalues) {
    Registry& reg = registry();
    std::vector<Metric> out;
    for_each_item(selfvalues, [&](std::string_view item) {
        const auto colon = item.rfind(':');
        if (colon == std::string_view::npos || colon == 0)
            throw std::invalid_argument("tinyprof: Event '" + std::string(event) +
                                        "': bad selfvalues item '" + std::string(item) +
                                        "': expected key:value");
        const auto key = item.substr(0, colon);
        const double value = parse_double(trim(item.substr(colon + 1)), event);
        std::size_t slots[2] = {0, 0};                  // [inconsistent, consistent]
        for (const auto& [k, consistent] : reg.settings.metrics) {
            if (k == key) {
                out.push_back({consistent, slots[consistent], value});
                return;
            }
            ++slots[consistent];
        }
        std::lock_guard<std::mutex> lock(reg.mutex);
        for (const auto& w : reg.warned)
            if (w == key) return;
        reg.warned.emplace_back(key);
        std::fprintf(stderr, "tinyprof: metric '%.*s' (event '%.*s') is not declared in "
                     "Profiler(selfkeys); its values are not recorded\n",
                     static_cast<int>(key.size()), key.data(),
                     static_cast<int>(event.size()), event.data());
    });
    return out;
}

}  // namespace detail

// A profiled region, from construction to destruction (RAII). Not copyable
// or movable: each Event is one frame of its thread's stack of open events.
class Event {
  public:
    explicit Event(std::string_view name) : Event(name, true, 0, {}) {}
    Event(std::string_view name, bool is_common) : Event(name, is_common, 0, {}) {}
    Event(std::string_view name, int loop, std::string_view selfvalues)
        : Event(name, true, loop, selfvalues) {}
    // Event("x", "tag:1") would silently take the literal as is_common.
    template <std::size_t N>
    Event(std::string_view name, const char (&selfvalues)[N]) = delete;

    Event(std::string_view name, bool is_common, int loop, std::string_view selfvalues) {
        if (loop < 0 || loop > 2)
            throw std::invalid_argument("tinyprof: Event '" + std::string(name) +
                                        "': loop must be 0, 1 or 2");
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

    ~Event() {
        const std::int64_t end = detail::now();
        if (tree_->current != node_) {   // only a heap-allocated Event can get here
            std::fprintf(stderr, "tinyprof: event '%s' exited out of order (innermost open "
                         "event is '%s')\n", node_->name.c_str(), tree_->current->name.c_str());
            std::abort();
        }
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

// ---------------------------------------------------------------------------
// The file format (docs/format.md): the same bytes as tinyprof/_format.py.

namespace format {

// The length of the well-formed UTF-8 sequence at the start of `s` (as
// Python's strict decoder: no overlong form, surrogate or code point above
// U+10FFFF), or 0 if it is not one.
inline std::size_t utf8_length(std::string_view s) {
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
    const unsigned lead = byte(0);
    if (lead < 0x80) return 1;
    std::size_t n = 0;
    unsigned lo = 0x80, hi = 0xBF;          // the second byte's range
    if (lead >= 0xC2 && lead <= 0xDF) n = 2;
    else if (lead >= 0xE0 && lead <= 0xEF) n = 3, lo = lead == 0xE0 ? 0xA0 : 0x80, hi = lead == 0xED ? 0x9F : 0xBF;
    else if (lead >= 0xF0 && lead <= 0xF4) n = 4, lo = lead == 0xF0 ? 0x90 : 0x80, hi = lead == 0xF4 ? 0x8F : 0xBF;
    if (n == 0 || s.size() < n || byte(1) < lo || byte(1) > hi) return 0;
    for (std::size_t i = 2; i < n; ++i)
        if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
    return n;
}

// `text` as UTF-8: each byte that is not part of a well-formed sequence
// becomes the lone surrogate U+DC00+b in its 3-byte form (Python's
// surrogateescape, then surrogatepass), so any byte string reads back.
inline std::string utf8_safe(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    while (!text.empty()) {
        std::size_t n = utf8_length(text);
        if (n > 0) {
            out.append(text.substr(0, n));
        } else {
            const unsigned code = 0xDC00u + static_cast<unsigned char>(text[0]);
            out += static_cast<char>(0xE0 | (code >> 12));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (code & 0x3F));
            n = 1;
        }
        text.remove_prefix(n);
    }
    return out;
}

// CRC-32 (IEEE 802.3, reflected, as zlib.crc32) of `data`, for the end line.
inline std::uint32_t crc32(std::string_view data) {
    static const auto table = [] {
        std::array<std::uint32_t, 256> t{};
        for (std::uint32_t i = 0; i < 256; ++i) {
            std::uint32_t c = i;
            for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[i] = c;
        }
        return t;
    }();
    std::uint32_t c = 0xFFFFFFFFu;
    for (const char ch : data) c = table[(c ^ static_cast<unsigned char>(ch)) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

// A run id as the `run` line writes it: 16 lowercase hex digits.
inline std::string hex16(std::uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

// Text for the file (docs/format.md, "Escaping"), valid UTF-8 whatever the bytes.
inline std::string escape(std::string_view raw, bool key = false) {
    const std::string text = utf8_safe(raw);
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        switch (c) {
            case '%': out += "%25"; break;
            case '\n': out += "%0A"; break;
            case '\r': out += "%0D"; break;
            case ':': out += key ? "%3A" : ":"; break;
            case ',': out += key ? "%2C" : ","; break;
            case ' ': out += key ? "%20" : " "; break;
            default: out += c;
        }
    }
    return out;
}

// Canonical metric value text: Python's format_value, via the shortest
// round-trip digits of std::to_chars, laid out by the format's own rule
// (fixed for decimal exponents -4..15, else scientific without '+').
inline std::string format_value(double v) {
    if (v != v) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (v == std::trunc(v) && std::fabs(v) < 1e16) {
        if (v == 0) return std::signbit(v) ? "-0" : "0";
        return std::to_string(static_cast<long long>(v));
    }
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
    std::string_view s(buf, static_cast<std::size_t>(r.ptr - buf));  // [-]d[.ddd]e[+-]xx
    std::string out;
    if (s.front() == '-') {
        out += '-';
        s.remove_prefix(1);
    }
    const auto e = s.find('e');
    std::string digits(1, s[0]);
    if (e > 1) digits.append(s.substr(2, e - 2));
    const int exp = std::atoi(std::string(s.substr(e + 1)).c_str());
    const int n = static_cast<int>(digits.size());
    if (exp >= -4 && exp < 16) {
        if (exp < 0) out += "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
        else if (exp + 1 < n) out += digits.insert(static_cast<std::size_t>(exp + 1), ".");
        else out += digits + std::string(static_cast<std::size_t>(exp + 1 - n), '0');
    } else {
        out += digits[0];
        if (n > 1) out += "." + digits.substr(1);
        out += "e" + std::to_string(exp);
    }
    return out;
}

inline std::string created_now() {
    const char* stamp = std::getenv("SOURCE_DATE_EPOCH");
    bool digits = stamp != nullptr && *stamp != '\0';
    for (const char* p = stamp; digits && *p; ++p) digits = *p >= '0' && *p <= '9';
    const std::time_t secs = digits ? static_cast<std::time_t>(std::strtoll(stamp, nullptr, 10))
                                    : std::time(nullptr);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

inline std::string rle(const std::vector<std::int64_t>& counts) {
    std::string out;
    for (std::size_t i = 0; i < counts.size();) {
        std::size_t j = i;
        while (j < counts.size() && counts[j] == counts[i]) ++j;
        if (!out.empty()) out += ',';
        out += std::to_string(counts[i]);
        if (j - i > 1) out += "*" + std::to_string(j - i);
        i = j;
    }
    return out;
}

// `<name>.<index>-of-<count>.tp`. Python keeps Unicode word characters too;
// here every non-ASCII character becomes '_' (one per code point), a name
// the Python reader and its file_name() agree with.
inline std::string file_name(std::string_view name, int index, int count) {
    std::string safe;
    for (const char ch : utf8_safe(name)) {
        const auto c = static_cast<unsigned char>(ch);
        if ((c & 0xC0) == 0x80) continue;       // UTF-8 continuation byte
        safe += (std::isalnum(c) && c < 0x80) || c == '_' || c == '.' || c == '+' || c == '-'
                    ? static_cast<char>(c) : '_';
    }
    if (safe.empty()) safe = "profile";
    std::string idx = std::to_string(index);
    const std::string cnt = std::to_string(count);
    if (idx.size() < cnt.size()) idx.insert(0, cnt.size() - idx.size(), '0');
    return safe + "." + idx + "-of-" + cnt + ".tp";
}

// The file count of `entry` if it is a file of set `stem`, else -1 (the
// Python reader's pattern `<name>.<index>-of-<count>.tp`).
inline int set_count(std::string_view entry, std::string_view stem) {
    auto all_digits = [](std::string_view s) {
        return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
    };
    if (entry.size() < 3 || entry.substr(entry.size() - 3) != ".tp") return -1;
    entry.remove_suffix(3);
    const auto of = entry.rfind("-of-");
    if (of == std::string_view::npos || !all_digits(entry.substr(of + 4))) return -1;
    const auto dot = entry.rfind('.', of);
    if (dot == std::string_view::npos || !all_digits(entry.substr(dot + 1, of - dot - 1)) ||
        entry.substr(0, dot) != stem)
        return -1;
    return std::atoi(std::string(entry.substr(of + 4)).c_str());
}

// One write to a temporary name, fsync, rename: readers never see half a file.
inline bool write_atomic(const std::string& path, const std::string& data) {
    const std::string tmp = path + ".tmp" + std::to_string(getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return false;
    std::size_t done = 0;
    while (done < data.size()) {
        const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
        if (n < 0) break;
        done += static_cast<std::size_t>(n);
    }
    const bool ok = done == data.size() && ::fsync(fd) == 0;
    ::close(fd);
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
        ::unlink(tmp.c_str());
        return false;
    }
    return true;
}

}  // namespace format

// ---------------------------------------------------------------------------
// The `mpi` section's payload (docs/format.md): the same bytes as
// tinyprof/_mpisection.py's encode.

namespace mpisection {

constexpr std::int64_t kNone = -1;   // a line outside any event; a completion call's communicator

struct Comm {
    std::string name;
    std::int64_t size;
    std::string members;             // encode_members() of its world ranks; empty when self-like
    std::int64_t created;            // line of the callpath that created it, or kNone
};

struct OpRow {
    std::int64_t rank, line, comm;   // comm: index into the comms given to encode(), or kNone
    std::string op;
    std::int64_t bucket, calls, bytes, time;
};

struct PeerRow {
    std::int64_t rank, line, comm, peer, messages, bytes;
};

// The transport view (ucx): op is "" outside any MPI call, protocol and
// transport "" when not classified.
struct TransportRow {
    std::int64_t rank, line;
    std::string op, ucp, protocol, transport;
    std::int64_t calls, bytes;
};

struct StateRow {
    std::int64_t rank;
    std::string state;                // "used", "unused" or "unavailable"
};

// World ranks as `a`, `a-b` (step 1) and `a-b:s` items, greedy from the left.
inline std::string encode_members(const std::vector<std::int32_t>& m) {
    std::string out;
    const std::size_t n = m.size();
    for (std::size_t i = 0; i < n;) {
        const std::int64_t a = m[i], step = i + 1 < n ? std::int64_t{m[i + 1]} - a : 0;
        std::size_t j = i + 1;
        while (step > 0 && j < n && std::int64_t{m[j]} - m[j - 1] == step) ++j;
        if (!out.empty()) out += ',';
        out += std::to_string(a);
        if (step == 1 && j - i >= 2) {
            out += '-' + std::to_string(m[j - 1]);
        } else if (step >= 2 && j - i >= 3) {
            out += '-' + std::to_string(m[j - 1]) + ':' + std::to_string(step);
        } else {
            j = i + 1;
        }
        i = j;
    }
    return out;
}

inline std::string field(std::int64_t v) { return v == kNone ? std::string() : std::to_string(v); }

// The payload, everything sorted into the canonical order (comms by name,
// rows by key; kNone sorts first). The keys of rows must be distinct.
inline std::string encode(const std::vector<Comm>& comms, std::vector<OpRow> ops, std::vector<PeerRow> peers,
                          std::vector<TransportRow> transport = {}, std::vector<StateRow> ucx = {}) {
    std::vector<std::size_t> order(comms.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return comms[a].name < comms[b].name; });
    std::vector<std::int64_t> renamed(comms.size());
    for (std::size_t k = 0; k < order.size(); ++k) renamed[order[k]] = static_cast<std::int64_t>(k);
    auto rename = [&](std::int64_t c) { return c == kNone ? kNone : renamed[static_cast<std::size_t>(c)]; };
    std::string out = "comms " + std::to_string(comms.size()) + "\n";
    for (const std::size_t i : order) {
        const Comm& c = comms[i];
        out += c.name + "|" + std::to_string(c.size) + "|" + c.members + "|" + field(c.created) + "\n";
    }
    for (OpRow& r : ops) r.comm = rename(r.comm);
    std::stable_sort(ops.begin(), ops.end(), [](const OpRow& a, const OpRow& b) {
        return std::tie(a.rank, a.line, a.comm, a.op, a.bucket) < std::tie(b.rank, b.line, b.comm, b.op, b.bucket);
    });
    out += "ops " + std::to_string(ops.size()) + "\n";
    for (const OpRow& r : ops)
        out += std::to_string(r.rank) + "|" + field(r.line) + "|" + field(r.comm) + "|" + r.op + "|" +
               std::to_string(r.bucket) + "|" + std::to_string(r.calls) + "|" + std::to_string(r.bytes) +
               "|" + std::to_string(r.time) + "\n";
    for (PeerRow& r : peers) r.comm = rename(r.comm);
    auto key = [](const PeerRow& r) { return std::tie(r.rank, r.line, r.comm, r.peer, r.messages, r.bytes); };
    std::sort(peers.begin(), peers.end(), [&](const PeerRow& a, const PeerRow& b) { return key(a) < key(b); });
    out += "peers " + std::to_string(peers.size()) + "\n";
    for (const PeerRow& r : peers)
        out += std::to_string(r.rank) + "|" + field(r.line) + "|" + field(r.comm) + "|" + std::to_string(r.peer) +
               "|" + std::to_string(r.messages) + "|" + std::to_string(r.bytes) + "\n";
    if (transport.empty() && ucx.empty()) return out;
    std::sort(transport.begin(), transport.end(), [](const TransportRow& a, const TransportRow& b) {
        return std::tie(a.rank, a.line, a.op, a.ucp, a.protocol, a.transport) <
               std::tie(b.rank, b.line, b.op, b.ucp, b.protocol, b.transport);
    });
    out += "transport " + std::to_string(transport.size()) + "\n";
    for (const TransportRow& r : transport)
        out += std::to_string(r.rank) + "|" + field(r.line) + "|" + r.op + "|" + r.ucp + "|" + r.protocol + "|" +
               r.transport + "|" + std::to_string(r.calls) + "|" + std::to_string(r.bytes) + "\n";
    std::sort(ucx.begin(), ucx.end(), [](const StateRow& a, const StateRow& b) { return a.rank < b.rank; });
    out += "ucx " + std::to_string(ucx.size()) + "\n";
    for (const StateRow& r : ucx) out += std::to_string(r.rank) + "|" + r.state + "\n";
    return out;
}

}  // namespace mpisection

// ---------------------------------------------------------------------------
// The `trace` section (docs/format.md): one rank's block, the same bytes as
// tinyprof/_tracesection.py make_block + encode.

namespace trace {

constexpr std::int64_t kNone = -1;

struct Clock { std::int64_t local0, offset0, local1, offset1, error; };
struct EventRow { std::int64_t tid, line, start, dur; };
struct CallRow {
    std::int64_t tid, line, start, dur;
    std::string op;
    std::int64_t comm, bytes, root;          // comm indexes comm_names; kNone: none
};
struct Endpoint { std::int64_t call, kind, peer, tag, bytes, comm; };   // kind 0 send, 1 receive

inline std::string opt(std::int64_t v) { return v == kNone ? std::string() : std::to_string(v); }

// Row indices sorted by (start, thread, longer first), stably.
template <class Rows>
inline std::vector<std::size_t> order(const Rows& rows) {
    std::vector<std::size_t> idx(rows.size());
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
        const auto& x = rows[a];
        const auto& y = rows[b];
        return std::make_tuple(x.start, x.tid, -x.dur) < std::make_tuple(y.start, y.tid, -y.dur);
    });
    return idx;
}

// The encoded block of `rank`: events and calls in recording order, endpoints
// naming calls by that order; comm_names[i] names communicator i.
inline std::string encode_block(std::int64_t rank, const Clock& clock, const std::vector<EventRow>& events,
                                const std::vector<CallRow>& calls, std::vector<Endpoint> eps,
                                const std::vector<std::string>& comm_names, std::int64_t dropped_events,
                                std::int64_t dropped_calls) {
    std::vector<std::int64_t> threads;
    for (const auto& e : events) threads.push_back(e.tid);
    for (const auto& c : calls) threads.push_back(c.tid);
    std::sort(threads.begin(), threads.end());
    threads.erase(std::unique(threads.begin(), threads.end()), threads.end());
    auto thread = [&](std::int64_t tid) {
        return std::lower_bound(threads.begin(), threads.end(), tid) - threads.begin();
    };
    const auto ev = order(events), cl = order(calls);
    std::vector<std::size_t> new_index(calls.size());
    for (std::size_t k = 0; k < cl.size(); ++k) new_index[cl[k]] = k;
    for (auto& e : eps) e.call = static_cast<std::int64_t>(new_index[static_cast<std::size_t>(e.call)]);
    std::stable_sort(eps.begin(), eps.end(), [](const Endpoint& a, const Endpoint& b) { return a.call < b.call; });
    // communicators and ops in order of first use, endpoints after their call's
    std::map<std::int64_t, std::int64_t> used;
    std::vector<std::string> ops;
    std::vector<std::int64_t> op_of(calls.size());
    auto use = [&](std::int64_t c) {
        if (c != kNone) used.try_emplace(c, static_cast<std::int64_t>(used.size()));
    };
    std::size_t next_ep = 0;
    for (std::size_t k = 0; k < cl.size(); ++k) {
        const CallRow& c = calls[cl[k]];
        use(c.comm);
        for (; next_ep < eps.size() && eps[next_ep].call == static_cast<std::int64_t>(k); ++next_ep)
            use(eps[next_ep].comm);
        const auto found = std::find(ops.begin(), ops.end(), c.op);
        op_of[k] = found - ops.begin();
        if (found == ops.end()) ops.push_back(c.op);
    }
    std::vector<std::string> names(used.size());
    for (const auto& [c, i] : used) names[static_cast<std::size_t>(i)] = comm_names[static_cast<std::size_t>(c)];
    std::string out = "rank " + std::to_string(rank) + "\nclock " + std::to_string(clock.local0) + "|" +
                      std::to_string(clock.offset0) + "|" + std::to_string(clock.local1) + "|" +
                      std::to_string(clock.offset1) + "|" + std::to_string(clock.error) + "\nthreads " +
                      std::to_string(threads.size());
    for (const auto t : threads) out += "|" + std::to_string(t);
    out += "\ncomms " + std::to_string(names.size());
    for (const auto& n : names) out += "|" + n;
    out += "\nevents " + std::to_string(events.size()) + "|" + std::to_string(dropped_events) + "\n";
    std::int64_t last = 0;
    for (const std::size_t i : ev) {
        const EventRow& e = events[i];
        out += std::to_string(thread(e.tid)) + "|" + std::to_string(e.line) + "|" +
               std::to_string(e.start - last) + "|" + std::to_string(e.dur) + "\n";
        last = e.start;
    }
    out += "calls " + std::to_string(calls.size()) + "|" + std::to_string(dropped_calls) + "\n";
    last = 0;
    std::size_t ep = 0;
    for (std::size_t k = 0; k < cl.size(); ++k) {
        const CallRow& c = calls[cl[k]];
        out += std::to_string(thread(c.tid)) + "|" + opt(c.line) + "|" + std::to_string(c.start - last) + "|" +
               std::to_string(c.dur) + "|" + ops[static_cast<std::size_t>(op_of[k])] + "|" +
               opt(c.comm == kNone ? kNone : used[c.comm]) + "|" + std::to_string(c.bytes) + "|" + opt(c.root) + "|";
        for (bool first = true; ep < eps.size() && eps[ep].call == static_cast<std::int64_t>(k); ++ep, first = false) {
            const Endpoint& e = eps[ep];
            out += (first ? "" : ",") + std::string(e.kind == 0 ? "s" : "r") + std::to_string(e.peer) + ":" +
                   std::to_string(e.tag) + ":" + std::to_string(e.bytes) + ":" + std::to_string(used[e.comm]);
        }
        out += "\n";
        last = c.start;
    }
    return out;
}

}  // namespace trace

// ---------------------------------------------------------------------------
// The flush (docs/flush.md): local encoding, then the paper's three phases.

namespace detail {

// Callpaths as (parent entry, last name) pairs, each parent an earlier entry
// (-1 for a root callpath): every step of the flush is linear in the depth.
class Callpaths {
  public:
    std::vector<int> parent;
    std::vector<std::string> name;
    std::vector<int> loop;

    std::size_t size() const { return name.size(); }

    // The entry of (up, n), or -1.
    int find(int up, std::string_view n) const {
        const auto it = index_.find(key(up, n));
        return it == index_.end() ? -1 : it->second;
    }

    // The entry of (up, n), appended if new. Python's merge_loop: the first
    // loop mode wins, but mode 2 gives way to 0 or 1.
    int add(int up, std::string_view n, int l) {
        const auto [it, added] = index_.try_emplace(key(up, n), static_cast<int>(size()));
        if (added) {
            parent.push_back(up);
            name.emplace_back(n);
            loop.push_back(l);
        } else if (loop[static_cast<std::size_t>(it->second)] == 2) {
            loop[static_cast<std::size_t>(it->second)] = l;
        }
        return it->second;
    }

  private:
    static std::string key(int up, std::string_view n) {
        std::string k(sizeof up, '\0');
        std::memcpy(k.data(), &up, sizeof up);
        k.append(n);
        return k;
    }
    std::unordered_map<std::string, int> index_;
};

// What a rank field held at a snapshot that a delta builds on (the Python
// side's _assemble.Base): the occurrences written for good (all but the
// newest, which may still change), the bytes they take, the bytes of the rest.
struct FieldBase {
    std::size_t count = 0, length = 0;
    std::string tail;
};
using Bases = std::unordered_map<std::string, FieldBase>;   // by callpath (length-prefixed names)

// This process's callpaths, all threads merged, and its values of each.
struct Local {
    Callpaths paths;
    std::vector<bool> common;              // the first tree's is_common hint
    std::vector<std::string> field;        // this rank's values: exec;exec of occ+occ
    // With a base (snapshots): `field` holds the bytes that follow the first
    // keep[i] bytes of the base's field, and listed[i] says they differ from
    // what the base holds there. Without one, keep is 0 and listed non-empty.
    std::vector<std::size_t> keep;
    std::vector<bool> listed;
    std::vector<std::string> consistent;   // consistent metrics in header order
    std::vector<int> entry_of_node;        // node id -> entry, -1 for the roots (and unseen ids)
};

struct Occurrence {
    std::int64_t exec;
    std::int64_t time;
    std::vector<double> metrics;   // per inconsistent key
};

inline double nan_sum(double a, double b) { return a != a ? b : b != b ? a : a + b; }

// The rank field of one callpath (the Python side's encode_rank_field), or
// with `from` > 0 its occurrences from `from` to `to` with the separator
// before the first: appended to the field of occ[0, from), it gives the
// field of occ[0, to) (incremental snapshots encode only new values).
inline std::string encode_field(const std::vector<Occurrence>& occ, std::size_t from, std::size_t to) {
    std::string out;
    for (std::size_t i = from; i < to; ++i) {
        if (i > 0 && occ[i].exec == occ[i - 1].exec)
            out += '+';
        else            // one ';' per execution it moves on, past those without values
            out.append(static_cast<std::size_t>(occ[i].exec - (i > 0 ? occ[i - 1].exec : 0)), ';');
        out += std::to_string(occ[i].time);
        std::size_t used = occ[i].metrics.size();
        while (used > 0 && occ[i].metrics[used - 1] != occ[i].metrics[used - 1]) --used;
        for (std::size_t k = 0; k < used; ++k) {
            out += ',';
            if (occ[i].metrics[k] == occ[i].metrics[k]) out += format::format_value(occ[i].metrics[k]);
        }
    }
    return out;
}

// The values `node` has published, read under its tree's mutex: its
// occurrences appended to `occ`, its consistent values where still missing.
// The size of times is read first: executions are published before their
// first time, metric values after their time.
inline void read_node(const Node& node, std::size_t ninc, std::vector<Occurrence>& occ,
                      std::vector<std::optional<double>>& consistent) {
    const std::size_t n = node.times.size();
    std::vector<ExecStart> starts;
    node.execs.for_each(node.execs.size(), [&](const ExecStart& e) {
        if (e.first < n) starts.push_back(e);
    });
    const std::size_t base = occ.size();
    std::size_t i = 0, k = 0;
    if (!starts.empty()) {
        node.times.for_each(n, [&](const std::atomic<std::int64_t>& t) {
            while (k + 1 < starts.size() && starts[k + 1].first <= i) ++k;
            occ.push_back({starts[k].exec, t.load(std::memory_order_relaxed), std::vector<double>(ninc, kNaN)});
            ++i;
        });
    }
    node.metrics.for_each(node.metrics.size(), [&](const MetricValue& v) {
        if (v.occurrence < i && v.slot < ninc)
            occ[base + v.occurrence].metrics[v.slot] = v.value.load(std::memory_order_relaxed);
    });
    node.consistent.for_each(node.consistent.size(), [&](const MetricValue& v) {
        if (v.slot < consistent.size() && !consistent[v.slot])
            consistent[v.slot] = v.value.load(std::memory_order_relaxed);
    });
}

// Every thread's tree merged into one list of callpaths (each tree in
// pre-order, the first registered first), each encoded at once. Occurrences
// of one execution keep thread order; loop-2 callpaths sum them into one.
// Each tree is read under its mutex, so its thread may go on recording.
// With `base`, the fields are relative to it and `now` gets the new base.
inline Local collect_local(Registry& reg, const Bases* base = nullptr, Bases* now = nullptr) {
    std::size_t ninc = 0, ncons = 0;
    for (const auto& m : reg.settings.metrics) ++(m.second ? ncons : ninc);
    std::vector<Tree*> trees;
    {
        std::lock_guard<std::mutex> lock(reg.mutex);
        for (const auto& t : reg.trees) trees.push_back(t.get());
    }
    Local local;
    std::vector<std::string> keys;         // with a base: each callpath's key in it
    std::vector<const Tree*> first_tree;   // the first tree with each callpath
    std::vector<bool> merged;              // ... and whether another one has it too
    std::vector<std::vector<Occurrence>> occ;
    std::vector<std::vector<std::optional<double>>> consistent;
    for (Tree* t : trees) {
        std::lock_guard<std::mutex> lock(t->mutex);
        std::vector<std::pair<const Node*, int>> stack;
        for (auto it = t->root.children.rbegin(); it != t->root.children.rend(); ++it)
            stack.emplace_back(it->get(), -1);
        while (!stack.empty()) {
            const auto [node, up] = stack.back();
            stack.pop_back();
            const int i = local.paths.add(up, node->name, node->loop);
            const auto at = static_cast<std::size_t>(i);
            const auto id = static_cast<std::size_t>(node->id);
            if (id >= local.entry_of_node.size()) local.entry_of_node.resize(id + 1, -1);
            local.entry_of_node[id] = i;
            if (at == occ.size()) {
                occ.emplace_back();
                consistent.emplace_back(ncons);
                local.common.push_back(node->common);
                merged.push_back(false);
                first_tree.push_back(t);
            }
            merged[at] = merged[at] || first_tree[at] != t;
            read_node(*node, ninc, occ[at], consistent[at]);
            for (auto it = node->children.rbegin(); it != node->children.rend(); ++it)
                stack.emplace_back(it->get(), i);
        }
    }
    for (std::size_t i = 0; i < occ.size(); ++i) {
        std::vector<Occurrence>& o = occ[i];
        if (trees.size() > 1) {
            std::stable_sort(o.begin(), o.end(),
                             [](const Occurrence& a, const Occurrence& b) { return a.exec < b.exec; });
            if (local.paths.loop[i] == 2) {
                std::vector<Occurrence> sums;
                for (auto& x : o) {
                    if (!sums.empty() && sums.back().exec == x.exec) {
                        sums.back().time += x.time;
                        for (std::size_t k = 0; k < ninc; ++k)
                            sums.back().metrics[k] = nan_sum(sums.back().metrics[k], x.metrics[k]);
                    } else {
                        sums.push_back(std::move(x));
                    }
                }
                o = std::move(sums);
            }
        }
        std::string cons;
        for (std::size_t k = 0; k < ncons; ++k) {
            if (k > 0) cons += ',';
            if (consistent[i][k]) cons += format::format_value(*consistent[i][k]);
        }
        while (!cons.empty() && cons.back() == ',') cons.pop_back();
        if (base == nullptr) {
            local.field.push_back(encode_field(o, 0, o.size()));
            local.keep.push_back(0);
            local.listed.push_back(!local.field.back().empty());
        } else {        // the Python side's rank_part, field by field
            const int up = local.paths.parent[i];
            keys.push_back((up < 0 ? std::string() : keys[static_cast<std::size_t>(up)]) +
                           std::to_string(local.paths.name[i].size()) + ":" + local.paths.name[i]);
            // Occurrences merged from several threads' trees may fall before
            // those already written (an earlier execution's): such a field
            // is written whole (kept from nothing), never spliced wrong.
            const auto was = base->find(keys[i]);
            const FieldBase old = was == base->end() || merged[i] ? FieldBase() : was->second;
            const std::size_t n = o.size(), from = std::min(old.count, n);
            const std::size_t stable = std::max(n > 0 ? n - 1 : 0, from);
            std::string text = encode_field(o, from, stable);
            const std::string rest = encode_field(o, stable, n);
            const bool changed = !text.empty() || rest != old.tail;
            (*now)[keys[i]] = {stable, old.length + text.size(), rest};
            local.field.push_back(changed ? text + rest : std::string());
            local.keep.push_back(old.length);
            local.listed.push_back(changed);
        }
        local.consistent.push_back(std::move(cons));
        o = std::vector<Occurrence>();
    }
    return local;
}

// Names in order of first use along the entries, and each entry's name id.
inline std::vector<std::string> name_table(const Callpaths& paths, std::vector<std::size_t>* ids_out) {
    std::vector<std::string> names;
    std::unordered_map<std::string_view, std::size_t> ids;
    for (const auto& n : paths.name) {
        const auto it = ids.try_emplace(n, names.size()).first;
        if (it->second == names.size()) names.push_back(n);
        if (ids_out) ids_out->push_back(it->second);
    }
    return names;
}

struct FileHeader {
    int nranks, first, count, index, nfiles;
    std::vector<std::int64_t> executions;
};

// Which set a file belongs to: the `run` and `set <kind> N` lines
// (`set flush N`, `set snapshot K`).
struct SetId {
    std::uint64_t run;
    std::int64_t number;
    const char* kind = "flush";
    std::int64_t over = -1;           // a delta snapshot's base (`set snapshot K over J`)
};

// A section of a file: its name and payload.
using Sections = std::vector<std::pair<std::string, std::string>>;

// The whole file (the Python side's encode_file), format version 2.
// fields(r, i) is rank first+r's field of callpath i; `sections` follow.
template <class Fields>
inline std::string encode_file(const Settings& s, const SetId& set, const FileHeader& h,
                               const Callpaths& paths, const std::vector<std::string>& consistent,
                               Fields&& fields, const Sections& sections = {}) {
    std::vector<std::size_t> ids;
    const auto names = name_table(paths, &ids);
    std::string out = "tinyprof 2\nname " + format::escape(s.name) + "\nrun " + format::hex16(set.run) +
                      "\nset " + set.kind + " " + std::to_string(set.number) +
                      (set.over < 0 ? std::string() : " over " + std::to_string(set.over)) + "\nnranks " +
                      std::to_string(h.nranks) + "\nranks " + std::to_string(h.first) + " " +
                      std::to_string(h.count) + "\nfile " + std::to_string(h.index) + " " +
                      std::to_string(h.nfiles) + "\nunit ns\nmetrics ";
    for (std::size_t k = 0; k < s.metrics.size(); ++k)
        out += (k ? " " : "") + format::escape(s.metrics[k].first, true) +
               (s.metrics[k].second ? ":0" : ":1");
    out += "\ncreated " + format::created_now() + "\nversion " TINYPROF_VERSION "\nexecutions " +
           format::rle(h.executions) + "\nnames " + std::to_string(names.size()) + "\n";
    for (const auto& n : names) out += format::escape(n) + "\n";
    out += "events " + std::to_string(paths.size()) + "\n";
    for (std::size_t i = 0; i < paths.size(); ++i) {
        if (paths.parent[i] >= 0) out += std::to_string(paths.parent[i]) + ":";
        out += std::to_string(ids[i]) + "|" + std::to_string(paths.loop[i]) + "|";
        out += consistent[i];
        for (int r = 0; r < h.count; ++r) {
            out += '|';
            out += fields(r, i);
        }
        out += '\n';
    }
    for (const auto& [name, payload] : sections)
        out += "section " + name + " " + std::to_string(payload.size()) + "\n" + payload + "\n";
    char end[16];
    std::snprintf(end, sizeof end, "end %08x\n", static_cast<unsigned>(format::crc32(out)));
    return out + end;
}

inline void warn(const std::string& text) { std::fprintf(stderr, "tinyprof: %s\n", text.c_str()); }

inline bool write_file(const Settings& s, const FileHeader& h, const std::string& data) {
    const std::string path =
        (std::filesystem::path(s.outdir) / format::file_name(s.name, h.index, h.nfiles)).string();
    std::error_code ec;
    std::filesystem::create_directories(s.outdir, ec);
    if (!format::write_atomic(path, data)) {
        warn("cannot write profile file " + path + ": " + std::strerror(errno) +
             "; the profile is incomplete");
        return false;
    }
    return true;
}

// Files of older sets of this profile whose file count is not `count`.
inline std::vector<std::filesystem::path> stale_sets(const Settings& s, int count) {
    std::vector<std::filesystem::path> out;
    std::string stem = format::file_name(s.name, 0, 1);
    stem.resize(stem.size() - std::string_view(".0-of-1.tp").size());
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(s.outdir, ec)) {
        const int c = format::set_count(entry.path().filename().string(), stem);
        if (c >= 0 && c != count) out.push_back(entry.path());
    }
    return out;
}

inline void remove_stale(const Settings& s, int count) {
    for (const auto& p : stale_sets(s, count)) {
        std::error_code ec;
        std::filesystem::remove(p, ec);
    }
}

// -- MPI capture (docs/native.md, "MPI communication") ------------------------------

// libtinyprof_mpi's interface (tinyprof_mpi.h), looked up with dlsym when the
// program is linked with the library or has it preloaded: no link-time dependency.
struct MpiLib {
    decltype(&tinyprof_mpi_set_source) set_source;
    decltype(&tinyprof_mpi_enable) enable;
    decltype(&tinyprof_mpi_pause) pause;
    decltype(&tinyprof_mpi_ops) ops;
    decltype(&tinyprof_mpi_peers) peers;
    decltype(&tinyprof_mpi_free) free;
    decltype(&tinyprof_mpi_comm_count) comm_count;
    decltype(&tinyprof_mpi_comm_info) comm_info;
    decltype(&tinyprof_mpi_comm_members) comm_members;
    decltype(&tinyprof_mpi_op_name) op_name;
    decltype(&tinyprof_mpi_trace) trace;
    decltype(&tinyprof_mpi_trace_calls) trace_calls;
    decltype(&tinyprof_ucx_enable) ucx_enable;     // null in a library without the transport view
    decltype(&tinyprof_ucx_rows) ucx_rows;
    decltype(&tinyprof_ucx_op_name) ucx_op_name;
};

template <class F>
inline bool lookup(const char* symbol, F& f) {
    void* p = dlsym(RTLD_DEFAULT, symbol);
    f = reinterpret_cast<F>(p);
    return p != nullptr;
}

// The loaded library if its ABI is this header's, else nullptr (another ABI
// warns, once per process).
inline const MpiLib* mpi_lib() {
    static const MpiLib* const lib = []() -> const MpiLib* {
        decltype(&tinyprof_mpi_abi) abi = nullptr;
        if (!lookup("tinyprof_mpi_abi", abi)) return nullptr;
        static MpiLib l;
        const int found = abi();
        if (found != TINYPROF_MPI_ABI ||
            !(lookup("tinyprof_mpi_set_source", l.set_source) && lookup("tinyprof_mpi_enable", l.enable) &&
              lookup("tinyprof_mpi_pause", l.pause) && lookup("tinyprof_mpi_ops", l.ops) &&
              lookup("tinyprof_mpi_peers", l.peers) && lookup("tinyprof_mpi_free", l.free) &&
              lookup("tinyprof_mpi_comm_count", l.comm_count) && lookup("tinyprof_mpi_comm_info", l.comm_info) &&
              lookup("tinyprof_mpi_comm_members", l.comm_members) && lookup("tinyprof_mpi_op_name", l.op_name) &&
              lookup("tinyprof_mpi_trace", l.trace) && lookup("tinyprof_mpi_trace_calls", l.trace_calls))) {
            warn("the loaded libtinyprof_mpi has ABI " + std::to_string(found) + ", this header needs " +
                 std::to_string(TINYPROF_MPI_ABI) + " (rebuild it with this tinyprof): no MPI capture");
            return nullptr;
        }
        if (!(lookup("tinyprof_ucx_enable", l.ucx_enable) && lookup("tinyprof_ucx_rows", l.ucx_rows) &&
              lookup("tinyprof_ucx_op_name", l.ucx_op_name)))
            l.ucx_enable = nullptr;
        return &l;
    }();
    return lib;
}

// The calling thread's MPI traffic is tinyprof's own while one is alive: not
// counted, and the communicators it creates are private.
class MpiPause {
  public:
    MpiPause() : lib_(mpi_lib()) {
        if (lib_) lib_->pause(1);
    }
    ~MpiPause() {
        if (lib_) lib_->pause(0);
    }
    MpiPause(const MpiPause&) = delete;
    MpiPause& operator=(const MpiPause&) = delete;

  private:
    const MpiLib* lib_;
};

// Turns recording on, charged to this header's current nodes, when the
// library is loaded, unless TINYPROF_MPI=0. Returns whether it did.
inline bool start_capture() {
    const char* env = std::getenv("TINYPROF_MPI");
    const std::string_view wanted = env ? trim(env) : std::string_view{};
    const MpiLib* lib = mpi_lib();
    if (lib == nullptr) {
        if (wanted == "1")
            warn("TINYPROF_MPI=1 but libtinyprof_mpi is not loaded (link -ltinyprof_mpi before -lmpi, "
                 "or LD_PRELOAD it): no MPI capture");
        return false;
    }
    if (wanted == "0") return false;
    lib->set_source(&current_node_id);
    lib->enable(1);
    return true;
}

// TINYPROF_UCX=1 (or on, true, yes): the transport view's state, "unused"
// (hooked: "used" once a UCP operation is counted) or "unavailable"; "" off.
inline std::string start_ucx(bool capture) {
    if (!env_flag("TINYPROF_UCX")) return "";
    const MpiLib* lib = capture ? mpi_lib() : nullptr;
    if (lib == nullptr) {
        warn("TINYPROF_UCX=1 but MPI capture is off (libtinyprof_mpi not loaded, or TINYPROF_MPI=0): "
             "no transport view");
        return "";
    }
    if (lib->ucx_enable == nullptr || lib->ucx_enable(1) <= 0) {
        warn("TINYPROF_UCX=1 but this MPI does not call UCX: no transport view");
        return "unavailable";
    }
    return "unused";
}

// The library's counts and communicators, read before the event map so that
// every node they name is in it. Nodes and lines are still node ids here.
struct MpiTables {
    std::vector<std::int64_t> ops, peers;      // TP_OP_FIELDS, TP_PEER_FIELDS per record
    std::vector<mpisection::Comm> comms;       // the non-private ones; `created` a node id
    std::vector<std::int64_t> comm_at;         // library index -> index in comms, or kNone
    std::string ucx;                           // the transport view's state; "" off
    std::vector<std::int64_t> transport;       // TP_UCX_FIELDS per record, classified by the library
    std::string strings;                       // their protocols and transports (TP_UCX_PROTOCOL: offsets)
};

inline std::vector<std::int64_t> take_records(std::int64_t* (*read)(std::size_t*), std::size_t width,
                                              void (*release)(void*)) {
    std::size_t n = 0;
    std::int64_t* records = read(&n);
    std::vector<std::int64_t> out(records, records + n * width);
    release(records);
    return out;
}

inline MpiTables read_mpi(const MpiLib& lib, const std::string& ucx_state) {
    MpiTables t;
    t.ucx = ucx_state;
    if (!ucx_state.empty() && lib.ucx_enable != nullptr) {
        std::size_t n = 0, len = 0;
        char* strings = nullptr;
        std::int64_t* records = lib.ucx_rows(&n, &strings, &len);
        t.transport.assign(records, records + n * TP_UCX_FIELDS);
        if (strings != nullptr) t.strings.assign(strings, len);
        lib.free(records);
        lib.free(strings);
    }
    t.ops = take_records(lib.ops, TP_OP_FIELDS, lib.free);
    t.peers = take_records(lib.peers, TP_PEER_FIELDS, lib.free);
    const int n = lib.comm_count();
    for (int i = 0; i < n; ++i) {
        char name[256];
        std::int64_t info[TP_COMM_FIELDS];
        t.comm_at.push_back(mpisection::kNone);
        if (lib.comm_info(i, name, sizeof name, info) != 0 || (info[TP_COMM_FLAGS] & TP_COMM_PRIVATE)) continue;
        std::vector<std::int32_t> members(static_cast<std::size_t>(std::max<std::int64_t>(info[TP_COMM_MEMBERS], 0)));
        const int known = lib.comm_members(i, members.data(), members.size());
        members.resize(static_cast<std::size_t>(std::clamp<std::int64_t>(known, 0, info[TP_COMM_MEMBERS])));
        t.comm_at.back() = static_cast<std::int64_t>(t.comms.size());
        name[sizeof name - 1] = '\0';
        t.comms.push_back({name, info[TP_COMM_SIZE], mpisection::encode_members(members), info[TP_COMM_CREATED]});
    }
    return t;
}

inline std::int64_t parse_int(std::string_view text) {
    if (text.empty()) return mpisection::kNone;
    std::int64_t v = 0;
    std::from_chars(text.data(), text.data() + text.size(), v);
    return v;
}

inline std::vector<std::string_view> split(std::string_view text, char sep) {
    std::vector<std::string_view> out;
    while (true) {
        const auto at = text.find(sep);
        out.push_back(text.substr(0, at));
        if (at == std::string_view::npos) return out;
        text.remove_prefix(at + 1);
    }
}

// This rank's part of its file's section, for the aggregator: a line
// `<comms> <ops> <peers> <transport> <ucx state or ->`, then
// `name|size|members|created`, `line|comm|op|bucket|calls|bytes|time`,
// `line|comm|peer|messages|bytes` and `line|op|ucp|protocol|transport|calls|bytes`
// lines; comm indexes this rank's comms. Nodes become the lines `line_of`
// gives them (kNone if unknown); rows the lines merge are summed.
template <class LineOf>
inline std::string encode_rank_mpi(const MpiLib& lib, const MpiTables& t, LineOf&& line_of) {
    auto comm = [&](std::int64_t c) {
        return c < 0 || c >= static_cast<std::int64_t>(t.comm_at.size()) ? mpisection::kNone
                                                                           : t.comm_at[static_cast<std::size_t>(c)];
    };
    std::map<std::tuple<std::int64_t, std::int64_t, std::string, std::int64_t>, std::array<std::int64_t, 3>> ops;
    for (std::size_t i = 0; i < t.ops.size(); i += TP_OP_FIELDS) {
        const std::int64_t* r = &t.ops[i];
        const char* op = lib.op_name(static_cast<int>(r[TP_OP_OP]));
        if (op == nullptr || (r[TP_OP_COMM] >= 0 && comm(r[TP_OP_COMM]) == mpisection::kNone)) continue;
        auto& sum = ops[{line_of(r[TP_OP_NODE]), comm(r[TP_OP_COMM]), op, r[TP_OP_BUCKET]}];
        for (int k = 0; k < 3; ++k) sum[static_cast<std::size_t>(k)] += r[TP_OP_CALLS + k];
    }
    std::map<std::array<std::int64_t, 3>, std::array<std::int64_t, 2>> peers;
    for (std::size_t i = 0; i < t.peers.size(); i += TP_PEER_FIELDS) {
        const std::int64_t* r = &t.peers[i];
        if (comm(r[TP_PEER_COMM]) == mpisection::kNone && r[TP_PEER_COMM] >= 0) continue;
        auto& sum = peers[{line_of(r[TP_PEER_NODE]), comm(r[TP_PEER_COMM]), r[TP_PEER_PEER]}];
        sum[0] += r[TP_PEER_MESSAGES];
        sum[1] += r[TP_PEER_BYTES];
    }
    std::map<std::tuple<std::int64_t, std::string, std::string, std::string, std::string>,
             std::array<std::int64_t, 2>> transport;
    for (std::size_t i = 0; i < t.transport.size(); i += TP_UCX_FIELDS) {
        const std::int64_t* r = &t.transport[i];
        const char* op = r[TP_UCX_OP] >= 0 ? lib.op_name(static_cast<int>(r[TP_UCX_OP])) : "";
        const char* protocol = t.strings.c_str() + r[TP_UCX_PROTOCOL];
        const char* link = t.strings.c_str() + r[TP_UCX_TRANSPORT];
        auto& sum = transport[{line_of(r[TP_UCX_NODE]), op ? op : "", lib.ucx_op_name(static_cast<int>(r[TP_UCX_UCP])),
                               protocol, link}];
        sum[0] += r[TP_UCX_CALLS];
        sum[1] += r[TP_UCX_BYTES];
    }
    const std::string state = t.ucx.empty() ? "-" : !transport.empty() ? "used" : t.ucx;
    using mpisection::field;
    std::string out = std::to_string(t.comms.size()) + " " + std::to_string(ops.size()) + " " +
                      std::to_string(peers.size()) + " " + std::to_string(transport.size()) + " " + state + "\n";
    for (const auto& c : t.comms)
        out += c.name + "|" + std::to_string(c.size) + "|" + c.members + "|" + field(line_of(c.created)) + "\n";
    for (const auto& [k, v] : ops)
        out += field(std::get<0>(k)) + "|" + field(std::get<1>(k)) + "|" + std::get<2>(k) + "|" +
               std::to_string(std::get<3>(k)) + "|" + std::to_string(v[0]) + "|" + std::to_string(v[1]) + "|" +
               std::to_string(v[2]) + "\n";
    for (const auto& [k, v] : peers)
        out += field(k[0]) + "|" + field(k[1]) + "|" + std::to_string(k[2]) + "|" + std::to_string(v[0]) + "|" +
               std::to_string(v[1]) + "\n";
    for (const auto& [k, v] : transport)
        out += field(std::get<0>(k)) + "|" + std::get<1>(k) + "|" + std::get<2>(k) + "|" + std::get<3>(k) + "|" +
               std::get<4>(k) + "|" + std::to_string(v[0]) + "|" + std::to_string(v[1]) + "\n";
    return out;
}

// One file's section, built from its ranks' encode_rank_mpi parts in rank
// order: a communicator is described by the lowest rank that knows it.
class MpiFile {
  public:
    void add_rank(std::int64_t rank, std::string_view part) {
        std::vector<std::string_view> lines = split(part, '\n');
        const auto counts = split(lines[0], ' ');
        const auto ncomms = static_cast<std::size_t>(parse_int(counts[0]));
        const auto nops = static_cast<std::size_t>(parse_int(counts[1]));
        const auto npeers = static_cast<std::size_t>(parse_int(counts[2]));
        if (counts[4] != "-") ucx_.push_back({rank, std::string(counts[4])});
        std::vector<std::int64_t> at;              // this rank's comm index -> the file's
        for (std::size_t i = 1; i <= ncomms; ++i) {
            const auto f = split(lines[i], '|');
            const auto [it, added] = index_.try_emplace(std::string(f[0]), static_cast<std::int64_t>(comms_.size()));
            if (added) comms_.push_back({std::string(f[0]), parse_int(f[1]), std::string(f[2]), parse_int(f[3])});
            at.push_back(it->second);
        }
        auto comm = [&](std::string_view c) {
            const std::int64_t i = parse_int(c);
            return i == mpisection::kNone ? i : at[static_cast<std::size_t>(i)];
        };
        for (std::size_t i = 1 + ncomms; i < 1 + ncomms + nops; ++i) {
            const auto f = split(lines[i], '|');
            ops_.push_back({rank, parse_int(f[0]), comm(f[1]), std::string(f[2]), parse_int(f[3]), parse_int(f[4]),
                            parse_int(f[5]), parse_int(f[6])});
        }
        const std::size_t peers_end = 1 + ncomms + nops + npeers;
        for (std::size_t i = 1 + ncomms + nops; i < peers_end; ++i) {
            const auto f = split(lines[i], '|');
            peers_.push_back({rank, parse_int(f[0]), comm(f[1]), parse_int(f[2]), parse_int(f[3]), parse_int(f[4])});
        }
        for (std::size_t i = peers_end; i + 1 < lines.size(); ++i) {
            const auto f = split(lines[i], '|');
            transport_.push_back({rank, parse_int(f[0]), std::string(f[1]), std::string(f[2]), std::string(f[3]),
                                  std::string(f[4]), parse_int(f[5]), parse_int(f[6])});
        }
    }

    std::string payload() const { return mpisection::encode(comms_, ops_, peers_, transport_, ucx_); }

  private:
    std::vector<mpisection::Comm> comms_;
    std::unordered_map<std::string, std::int64_t> index_;
    std::vector<mpisection::OpRow> ops_;
    std::vector<mpisection::PeerRow> peers_;
    std::vector<mpisection::TransportRow> transport_;
    std::vector<mpisection::StateRow> ucx_;
};

// -- trace mode ------------------------------------------------------------------

inline bool mpi_live() {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    return initialized && !finalized;
}


// What this rank traced so far, read before the event map (as MpiTables):
// occurrences (tid, node, start, dur) of every thread and the library's calls.
struct TraceData {
    std::vector<std::array<std::int64_t, 4>> events;
    std::int64_t dropped_events = 0;
    std::vector<std::int64_t> calls, eps;      // TP_TR_FIELDS, TP_EP_FIELDS per record
    std::int64_t dropped_calls = 0;
    std::vector<std::string> comm_name;        // library record -> name; "" for private ones
    std::vector<std::string> op_name;          // library op code -> name
};

inline TraceData read_trace(Registry& reg, const MpiLib* lib) {
    TraceData d;
    std::vector<Tree*> trees;
    {
        std::lock_guard<std::mutex> lock(reg.mutex);
        for (const auto& t : reg.trees) trees.push_back(t.get());
    }
    for (Tree* t : trees) {
        std::lock_guard<std::mutex> lock(t->mutex);
        t->trace.for_each(t->trace.size(), [&](const TraceRecord& r) {
            d.events.push_back({t->tid, r.node, r.start, r.dur});
        });
    }
    d.dropped_events = trace_dropped.load(std::memory_order_relaxed);
    if (lib == nullptr) return d;
    std::size_t ncalls = 0, nep = 0;
    std::int64_t* eps = nullptr;
    std::int64_t* calls = lib->trace_calls(&ncalls, &eps, &nep, &d.dropped_calls);
    d.calls.assign(calls, calls + ncalls * TP_TR_FIELDS);
    d.eps.assign(eps, eps + nep * TP_EP_FIELDS);
    lib->free(calls);
    lib->free(eps);
    for (int i = 0, n = lib->comm_count(); i < n; ++i) {
        char name[256];
        std::int64_t info[TP_COMM_FIELDS];
        const bool shown = lib->comm_info(i, name, sizeof name, info) == 0 && !(info[TP_COMM_FLAGS] & TP_COMM_PRIVATE);
        name[sizeof name - 1] = '\0';
        d.comm_name.push_back(shown ? name : "");
    }
    for (std::size_t i = 0; i < d.calls.size(); i += TP_TR_FIELDS) {
        const auto op = static_cast<std::size_t>(d.calls[i + TP_TR_OP]);
        while (d.op_name.size() <= op) {
            const char* text = lib->op_name(static_cast<int>(d.op_name.size()));
            d.op_name.push_back(text ? text : "Op" + std::to_string(d.op_name.size()));
        }
    }
    return d;
}

// This rank's block (tinyprof/_tracerank.py): nodes become the lines
// `line_of` gives them; occurrences of nodes without one are left out;
// communicators are named, the same name once.
template <class LineOf>
inline std::string encode_trace(std::int64_t rank, const std::vector<std::array<std::int64_t, 3>>& syncs,
                                const TraceData& d, LineOf&& line_of) {
    const auto& a = syncs.front();
    const auto& b = syncs.back();
    const trace::Clock clock{a[0], a[1], b[0], b[1], std::max(a[2], b[2])};
    std::vector<trace::EventRow> events;
    for (const auto& [tid, node, start, dur] : d.events) {
        const std::int64_t line = line_of(node);
        if (line != trace::kNone) events.push_back({tid, line, start, dur});
    }
    std::vector<std::string> names;
    std::vector<std::int64_t> position(d.comm_name.size(), trace::kNone);
    for (std::size_t i = 0; i < d.comm_name.size(); ++i) {
        if (d.comm_name[i].empty()) continue;
        const auto found = std::find(names.begin(), names.end(), d.comm_name[i]);
        position[i] = found - names.begin();
        if (found == names.end()) names.push_back(d.comm_name[i]);
    }
    auto comm = [&](std::int64_t c) {
        return c >= 0 && c < static_cast<std::int64_t>(position.size()) ? position[static_cast<std::size_t>(c)]
                                                                        : trace::kNone;
    };
    std::vector<trace::CallRow> calls;
    for (std::size_t i = 0; i < d.calls.size(); i += TP_TR_FIELDS) {
        const std::int64_t* r = &d.calls[i];
        calls.push_back({r[TP_TR_TID], line_of(r[TP_TR_NODE]), r[TP_TR_START], r[TP_TR_DUR],
                         d.op_name[static_cast<std::size_t>(r[TP_TR_OP])], comm(r[TP_TR_COMM]), r[TP_TR_BYTES],
                         r[TP_TR_ROOT]});
    }
    std::vector<trace::Endpoint> eps;
    for (std::size_t i = 0; i < d.eps.size(); i += TP_EP_FIELDS) {
        const std::int64_t* e = &d.eps[i];
        if (comm(e[TP_EP_COMM]) != trace::kNone)
            eps.push_back({e[TP_EP_CALL], e[TP_EP_KIND], e[TP_EP_PEER], e[TP_EP_TAG], e[TP_EP_BYTES],
                           comm(e[TP_EP_COMM])});
    }
    return trace::encode_block(rank, clock, events, calls, std::move(eps), names, d.dropped_events,
                               d.dropped_calls);
}

// Clock alignment to rank 0's (tinyprof/_clocksync.py, docs/trace.md#clocks):
// Cristian's algorithm over a binomial tree. {local, offset, error} in ns.
inline std::array<std::int64_t, 3> sync_clock(MPI_Comm comm) {
    constexpr int kExchanges = 8, kTag = 7401;
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    std::int64_t offset = 0, error = 0, ping = 0, pong[2] = {0, 0};
    for (int step = 1; step < size; step *= 2) {
        if (rank < step && rank + step < size) {                  // answer a child
            const int child = rank + step;
            for (int k = 0; k < kExchanges; ++k) {
                MPI_Recv(&ping, 1, MPI_INT64_T, child, kTag, comm, MPI_STATUS_IGNORE);
                pong[0] = steady_ns();
                MPI_Send(pong, 1, MPI_INT64_T, child, kTag, comm);
            }
            pong[0] = offset;
            pong[1] = error;
            MPI_Send(pong, 2, MPI_INT64_T, child, kTag, comm);
        } else if (step <= rank && rank < 2 * step) {             // ask the parent
            const int parent = rank - step;
            std::int64_t best_rtt = -1, best = 0;
            for (int k = 0; k < kExchanges; ++k) {
                const std::int64_t t0 = steady_ns();
                MPI_Send(&ping, 1, MPI_INT64_T, parent, kTag, comm);
                MPI_Recv(pong, 1, MPI_INT64_T, parent, kTag, comm, MPI_STATUS_IGNORE);
                const std::int64_t t1 = steady_ns();
                if (best_rtt < 0 || t1 - t0 < best_rtt) {
                    best_rtt = t1 - t0;
                    best = pong[0] - (t0 + t1) / 2;    // Python's floor division: times are positive
                }
            }
            MPI_Recv(pong, 2, MPI_INT64_T, parent, kTag, comm, MPI_STATUS_IGNORE);
            offset = pong[0] + best;
            error = pong[1] + (best_rtt + 1) / 2;
        }
    }
    return {steady_ns(), offset, error};
}

// Trace mode: align the clock (collective over the profiler's communicator
// while MPI is live), keeping the first and the latest alignment.
inline void sync_trace_clock(Registry& reg) {
    const MpiPause pause;
    const auto now = mpi_live() ? sync_clock(reg.settings.comm) : std::array<std::int64_t, 3>{steady_ns(), 0, 0};
    if (reg.syncs.empty()) reg.syncs.push_back(now);
    else reg.syncs = {reg.syncs.front(), now};
}

// -- phase 1: event synchronisation ------------------------------------------

// Entries `sent` of `paths` as int64s; names not in `base` follow as bytes.
// Layout: [new names, paths, len of each new name..., (loop, parent, name
// id) per path...] then the new names' bytes. `parent` is ref[] of the
// parent entry: its index in the sender's list (shared prefix first), -1 at
// the root.
inline std::string encode_paths(const Callpaths& paths, const std::vector<std::size_t>& sent,
                                const std::vector<std::int64_t>& ref,
                                const std::vector<std::string>& base) {
    std::unordered_map<std::string_view, std::int64_t> ids;
    for (std::size_t i = 0; i < base.size(); ++i) ids.emplace(base[i], static_cast<std::int64_t>(i));
    std::vector<std::string_view> fresh;
    std::vector<std::int64_t> ints;
    for (const std::size_t i : sent) {
        const auto [it, added] = ids.try_emplace(paths.name[i], static_cast<std::int64_t>(ids.size()));
        if (added) fresh.push_back(paths.name[i]);
        const int up = paths.parent[i];
        ints.insert(ints.end(), {paths.loop[i], up < 0 ? -1 : ref[static_cast<std::size_t>(up)], it->second});
    }
    std::vector<std::int64_t> head{static_cast<std::int64_t>(fresh.size()),
                                   static_cast<std::int64_t>(sent.size())};
    for (const auto n : fresh) head.push_back(static_cast<std::int64_t>(n.size()));
    head.insert(head.end(), ints.begin(), ints.end());
    std::string out(reinterpret_cast<const char*>(head.data()), head.size() * sizeof(std::int64_t));
    for (const auto n : fresh) out += n;
    return out;
}

// Adds the callpaths of one encode_paths buffer to `global`, whose first
// `nprefix` entries are the sender's shared prefix.
inline void merge_paths(const char* buf, const std::vector<std::string>& base, std::size_t nprefix,
                        Callpaths& global) {
    auto at = [buf](std::size_t i) {
        std::int64_t v;
        std::memcpy(&v, buf + 8 * i, 8);
        return v;
    };
    const auto nnew = static_cast<std::size_t>(at(0)), npaths = static_cast<std::size_t>(at(1));
    std::vector<std::string_view> names(base.begin(), base.end());
    std::size_t pos = 8 * (2 + nnew + 3 * npaths);
    for (std::size_t k = 0; k < nnew; ++k) {
        const auto len = static_cast<std::size_t>(at(2 + k));
        names.emplace_back(buf + pos, len);
        pos += len;
    }
    std::vector<int> to_global(nprefix);       // sender's list index -> entry of `global`
    for (std::size_t k = 0; k < nprefix; ++k) to_global[k] = static_cast<int>(k);
    for (std::size_t p = 0, k = 2 + nnew; p < npaths; ++p, k += 3) {
        const std::int64_t up = at(k + 1);
        to_global.push_back(global.add(up < 0 ? -1 : to_global[static_cast<std::size_t>(up)],
                                       names[static_cast<std::size_t>(at(k + 2))], static_cast<int>(at(k))));
    }
}

// 63-bit FNV-1a of the entries (loop, parent, name): ranks compare lists cheaply.
inline std::int64_t digest(const Callpaths& paths) {
    std::uint64_t h = 1469598103934665603ull;
    auto mix = [&h](std::string_view bytes) {
        for (const char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    };
    for (std::size_t i = 0; i < paths.size(); ++i) {
        mix(std::to_string(paths.loop[i]) + " " + std::to_string(paths.parent[i]) + " " +
            std::to_string(paths.name[i].size()) + ":");
        mix(paths.name[i]);
    }
    return static_cast<std::int64_t>(h >> 1);
}

// The callpaths of all ranks, in order, with their loop modes. Ranks that
// agree on the ordered list of common callpaths exchange only their other
// callpaths; any disagreement exchanges every callpath.
inline Callpaths synchronise(MPI_Comm comm, const Local& local) {
    const Callpaths& paths = local.paths;
    const std::size_t n = paths.size();
    std::vector<bool> is_common(n);
    std::vector<std::size_t> common, others, all(n);
    for (std::size_t i = 0; i < n; ++i) {
        const int up = paths.parent[i];
        is_common[i] = local.common[i] && (up < 0 || is_common[static_cast<std::size_t>(up)]);
        (is_common[i] ? common : others).push_back(i);
        all[i] = i;
    }
    std::vector<std::int64_t> ref(n), same(n);   // index in the sender's list: partial, full
    for (std::size_t k = 0; k < common.size(); ++k) ref[common[k]] = static_cast<std::int64_t>(k);
    for (std::size_t k = 0; k < others.size(); ++k)
        ref[others[k]] = static_cast<std::int64_t>(common.size() + k);
    for (std::size_t i = 0; i < n; ++i) same[i] = static_cast<std::int64_t>(i);
    Callpaths prefix;
    for (const std::size_t i : common) {
        const int up = paths.parent[i];
        prefix.add(up < 0 ? -1 : static_cast<int>(ref[static_cast<std::size_t>(up)]), paths.name[i],
                   paths.loop[i]);
    }
    std::vector<std::string> base = name_table(prefix, nullptr);
    const std::string partial = encode_paths(paths, others, ref, base), full = encode_paths(paths, all, same, {});
    const std::int64_t nc = static_cast<std::int64_t>(common.size()), d = digest(prefix);
    std::int64_t stats[6] = {nc, -nc, d, -d, -static_cast<std::int64_t>(partial.size()),
                             -static_cast<std::int64_t>(full.size())};
    MPI_Allreduce(MPI_IN_PLACE, stats, 6, MPI_INT64_T, MPI_MIN, comm);
    const bool hints_hold = stats[0] == -stats[1] && stats[2] == -stats[3];
    const std::string& payload = hints_hold ? partial : full;
    const auto size = static_cast<std::size_t>(-(hints_hold ? stats[4] : stats[5]));
    if (!hints_hold) {
        prefix = Callpaths();
        base.clear();
    }
    const std::size_t nprefix = prefix.size();
    int nranks = 0;
    MPI_Comm_size(comm, &nranks);
    std::string send(size, '\0');
    std::memcpy(send.data(), payload.data(), payload.size());
    std::vector<char> recv(size * static_cast<std::size_t>(nranks));
    MPI_Allgather(send.data(), static_cast<int>(size), MPI_BYTE, recv.data(), static_cast<int>(size),
                  MPI_BYTE, comm);
    std::vector<std::string_view> seen;        // ranks alike send alike: decode each once
    for (int r = 0; r < nranks; ++r) {
        const std::string_view mine(recv.data() + size * static_cast<std::size_t>(r), size);
        bool again = false;
        for (const auto& s : seen) again = again || s == mine;
        if (again) continue;
        seen.push_back(mine);
        merge_paths(mine.data(), base, nprefix, prefix);
    }
    return prefix;
}

// Each entry of `local` as its entry of `global` (which holds them all).
inline std::vector<int> entries_in(const Callpaths& local, const Callpaths& global) {
    std::vector<int> g(local.size());
    for (std::size_t i = 0; i < local.size(); ++i) {
        const int up = local.parent[i];
        g[i] = global.find(up < 0 ? -1 : g[static_cast<std::size_t>(up)], local.name[i]);
    }
    return g;
}

// -- phase 2: aggregation -------------------------------------------------------

struct Group { int index, first, size; };

// Ranks form `naggs` contiguous groups whose sizes differ by at most one;
// the first rank of each is its aggregator (Python: _mpi.group_of).
inline Group group_of(int rank, int nranks, int naggs) {
    const int small = nranks / naggs, extra = nranks % naggs;
    const int edge = extra * (small + 1);
    const int index = rank < edge ? rank / (small + 1) : extra + (rank - edge) / small;
    return {index, index * small + std::min(index, extra), small + (index < extra ? 1 : 0)};
}

inline int aggregator_count(const Settings& s, int nranks) {
    int wanted = s.aggregators > 0 ? s.aggregators : nranks / 16;
    return std::min(std::max(1, wanted), nranks);
}

constexpr std::size_t kRowHead = 32;   // int64 (end of the fields, executions, end of mpi, used length)

// This rank's row: the head, then with consistent metrics one consistent
// field per callpath each followed by '|', then one rank field per callpath
// joined by '|'; empty where this rank lacks the callpath; then this
// rank's parts of the `mpi` and `trace` sections, if any. `at[g]` is the
// local entry of global entry g, or -1.
inline std::string encode_row(const std::vector<int>& at, const Local& local, bool with_consistent,
                              std::int64_t executions, const std::string& mpi, const std::string& trace) {
    std::string row(kRowHead, '\0');
    if (with_consistent) {
        for (const int i : at) {
            if (i >= 0) row += local.consistent[static_cast<std::size_t>(i)];
            row += '|';
        }
    }
    for (std::size_t g = 0; g < at.size(); ++g) {
        if (g) row += '|';
        if (at[g] >= 0) row += local.field[static_cast<std::size_t>(at[g])];
    }
    const std::int64_t fields_end = static_cast<std::int64_t>(row.size());
    row += mpi;
    const std::int64_t mpi_end = static_cast<std::int64_t>(row.size());
    row += trace;
    const std::int64_t head[4] = {fields_end, executions, mpi_end, static_cast<std::int64_t>(row.size())};
    std::memcpy(row.data(), head, kRowHead);
    return row;
}

// One gathered row split at its '|' bytes.
struct Row {
    std::int64_t executions = 0;
    std::vector<std::string_view> fields;   // consistent fields first, if any
    std::string_view mpi;                   // this rank's part of the `mpi` section, or empty
    std::string_view trace;                 // this rank's block of the `trace` section, or empty
};

inline Row split_row(const char* data) {
    std::int64_t head[4];
    std::memcpy(head, data, kRowHead);
    Row row;
    row.executions = head[1];
    row.mpi = std::string_view(data + head[0], static_cast<std::size_t>(head[2] - head[0]));
    row.trace = std::string_view(data + head[2], static_cast<std::size_t>(head[3] - head[2]));
    std::string_view rest(data + kRowHead, static_cast<std::size_t>(head[0]) - kRowHead);
    while (true) {
        const auto bar = rest.find('|');
        row.fields.push_back(rest.substr(0, bar));
        if (bar == std::string_view::npos) break;
        rest.remove_prefix(bar + 1);
    }
    return row;
}

// A callpath's consistent field from its ranks' (lowest rank first): per
// metric, the lowest rank's value.
inline std::string merge_consistent(const std::vector<std::string_view>& ranks) {
    std::vector<std::string_view> merged;
    for (std::string_view given : ranks) {
        for (std::size_t k = 0; !given.empty(); ++k) {
            const auto comma = given.find(',');
            const auto token = given.substr(0, comma);
            if (k == merged.size()) merged.push_back(token);
            else if (merged[k].empty()) merged[k] = token;
            given = comma == std::string_view::npos ? std::string_view{} : given.substr(comma + 1);
        }
    }
    std::string out;
    for (std::size_t k = 0; k < merged.size(); ++k) {
        if (k) out += ',';
        out += merged[k];
    }
    return out;
}

inline MPI_Comm group_comm(Registry& reg, MPI_Comm comm, int naggs, int index) {
    auto key = std::make_pair(comm, naggs);
    auto it = reg.groups.find(key);
    if (it == reg.groups.end()) {
        int rank = 0;
        MPI_Comm_rank(comm, &rank);
        MPI_Comm group;
        MPI_Comm_split(comm, index, rank, &group);
        it = reg.groups.emplace(key, group).first;
    }
    return it->second;
}

// -- the flush -------------------------------------------------------------------

inline std::int64_t executions_now() { return execution.load(std::memory_order_relaxed) + 1; }

// The sections of a file from its ranks' rows (first rank `first`): `mpi`
// if any of them captured, `trace` (their blocks in rank order) if any traced.
inline Sections file_sections(const std::vector<Row>& rows, int first) {
    MpiFile file;
    bool any = false;
    std::string trace;
    for (std::size_t r = 0; r < rows.size(); ++r) {
        trace += rows[r].trace;
        if (rows[r].mpi.empty()) continue;
        file.add_rank(first + static_cast<std::int64_t>(r), rows[r].mpi);
        any = true;
    }
    Sections out;
    if (any) out.emplace_back("mpi", file.payload());
    if (!trace.empty()) out.emplace_back("trace", std::move(trace));
    return out;
}

// One process, no MPI: one file of one rank, without `mpi` section (its rows
// would name world ranks of a run that is not this file's).
inline void flush_single(const Registry& reg, const SetId& set, const Local& local, const TraceData& traced) {
    const Settings& s = reg.settings;
    const FileHeader h{1, 0, 1, 0, 1, {executions_now()}};
    Sections sections;
    if (s.trace && !reg.syncs.empty())
        sections.emplace_back("trace", encode_trace(0, reg.syncs, traced, [&](std::int64_t node) {
            const auto id = static_cast<std::size_t>(node);
            return node > 0 && id < local.entry_of_node.size() && local.entry_of_node[id] >= 0
                       ? std::int64_t{local.entry_of_node[id]} : trace::kNone;
        }));
    const std::string data = encode_file(s, set, h, local.paths, local.consistent,
                                         [&](int, std::size_t i) -> const std::string& { return local.field[i]; },
                                         sections);
    if (write_file(s, h, data)) remove_stale(s, 1);
}

// The `mpi` section's rows name world ranks: it fits a flush over all of
// MPI_COMM_WORLD in its order only (else a warning, once).
inline bool flushes_world(Registry& reg, MPI_Comm comm) {
    int same = MPI_UNEQUAL;
    MPI_Comm_compare(comm, MPI_COMM_WORLD, &same);
    if (same == MPI_IDENT || same == MPI_CONGRUENT) return true;
    if (!reg.mpi_comm_warned)
        warn("the profiler's communicator is not MPI_COMM_WORLD: files get no mpi section");
    reg.mpi_comm_warned = true;
    return false;
}

// `lib` (nullptr: no capture) counted `tables`, and trace mode kept
// `traced`, before `local` was collected.
inline void flush_mpi(Registry& reg, const SetId& set, const Local& local, const MpiLib* lib,
                      const MpiTables& tables, const TraceData& traced) {
    const Settings& s = reg.settings;
    MPI_Comm comm = s.comm;
    const Callpaths paths = synchronise(comm, local);
    std::vector<int> at(paths.size(), -1);
    const std::vector<int> mine = entries_in(local.paths, paths);
    for (std::size_t i = 0; i < mine.size(); ++i) at[static_cast<std::size_t>(mine[i])] = static_cast<int>(i);
    auto line_of = [&](std::int64_t node) {
        const auto id = static_cast<std::size_t>(node);
        const int entry = node > 0 && id < local.entry_of_node.size() ? local.entry_of_node[id] : -1;
        return entry < 0 ? mpisection::kNone : std::int64_t{mine[static_cast<std::size_t>(entry)]};
    };
    std::string mpi;
    if (lib != nullptr && flushes_world(reg, comm)) mpi = encode_rank_mpi(*lib, tables, line_of);

    int nranks = 0, rank = 0;
    MPI_Comm_size(comm, &nranks);
    MPI_Comm_rank(comm, &rank);
    const std::string trace = s.trace && !reg.syncs.empty() ? encode_trace(rank, reg.syncs, traced, line_of)
                                                            : std::string();
    const int naggs = aggregator_count(s, nranks);
    const Group g = group_of(rank, nranks, naggs);
    MPI_Comm group = group_comm(reg, comm, naggs, g.index);
    bool with_consistent = false;
    for (const auto& m : s.metrics) with_consistent = with_consistent || m.second;
    std::string row = encode_row(at, local, with_consistent, executions_now(), mpi, trace);
    std::int64_t width = static_cast<std::int64_t>(row.size());
    MPI_Allreduce(MPI_IN_PLACE, &width, 1, MPI_INT64_T, MPI_MAX, group);
    row.resize(static_cast<std::size_t>(width), '\0');
    int group_rank = 0;
    MPI_Comm_rank(group, &group_rank);
    std::vector<char> rows(group_rank == 0 ? static_cast<std::size_t>(width * g.size) : 0);
    MPI_Gather(row.data(), static_cast<int>(width), MPI_BYTE, rows.data(), static_cast<int>(width),
               MPI_BYTE, 0, group);
    row = std::string();

    std::int64_t state[2] = {1, 1};    // [file written, no older set to remove]
    if (group_rank == 0) {
        std::vector<Row> split;
        for (int r = 0; r < g.size; ++r) split.push_back(split_row(rows.data() + width * r));
        const std::size_t offset = with_consistent ? paths.size() : 0;
        std::vector<std::string> consistent(paths.size());
        std::vector<std::string_view> given(split.size());
        for (std::size_t i = 0; with_consistent && i < paths.size(); ++i) {
            for (std::size_t r = 0; r < split.size(); ++r) given[r] = split[r].fields[i];
            consistent[i] = merge_consistent(given);
        }
        FileHeader h{nranks, g.first, g.size, g.index, naggs, {}};
        for (const auto& r : split) h.executions.push_back(r.executions);
        const std::string data = encode_file(s, set, h, paths, consistent,
                                             [&](int r, std::size_t i) { return split[static_cast<std::size_t>(r)].fields[offset + i]; },
                                             file_sections(split, g.first));
        state[0] = write_file(s, h, data);
        if (rank == 0 && state[0]) state[1] = stale_sets(s, naggs).empty();
    }
    MPI_Allreduce(MPI_IN_PLACE, state, 2, MPI_INT64_T, MPI_MIN, comm);
    if (state[0] && !state[1]) {
        if (rank == 0) remove_stale(s, naggs);
        MPI_Barrier(comm);     // no rank returns, and reads, before the old set is gone
    }
}

inline std::uint64_t total_records(Registry& reg) {
    std::lock_guard<std::mutex> lock(reg.mutex);
    std::uint64_t n = 0;
    for (const auto& t : reg.trees) n += t->records.load(std::memory_order_relaxed);
    return n;
}

// A run id: TINYPROF_RUN_ID if set (16 lowercase hex digits, for
// reproducible files), else 64 random bits.
inline std::uint64_t draw_run_id() {
    const char* text = std::getenv("TINYPROF_RUN_ID");
    if (text != nullptr && *text != '\0') {
        const std::string_view v(text);
        if (v.size() == 16 && v.find_first_not_of("0123456789abcdef") == std::string_view::npos)
            return std::strtoull(text, nullptr, 16);
        warn("TINYPROF_RUN_ID must be 16 lowercase hex digits, not '" + std::string(v) +
             "'; using a random run id");
    }
    try {
        std::random_device device;
        return (static_cast<std::uint64_t>(device()) << 32) ^ device();
    } catch (const std::exception&) {      // no entropy source: the clock and pid differ per run
        const std::uint64_t golden = 0x9E3779B97F4A7C15u;
        return static_cast<std::uint64_t>(steady_ns()) * golden ^ static_cast<std::uint64_t>(getpid());
    }
}

// Draws the run id once, and adopts rank 0's over `comm` the first time MPI
// is live here (collective then, at a point every rank reaches alike).
inline void settle_run(Registry& reg, MPI_Comm comm) {
    if (!reg.run_drawn) {
        reg.run_id = draw_run_id();
        reg.run_drawn = true;
    }
    if (!reg.run_agreed && mpi_live()) {
        MPI_Bcast(&reg.run_id, 1, MPI_UINT64_T, 0, comm);
        reg.run_agreed = true;
    }
}

inline int on_finalize(MPI_Comm, int, void*, void*);

// The work of flush(). Events still open (at MPI_Finalize) appear with the
// values they had so far; other threads may go on recording meanwhile.
inline std::string write_profile() {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.flush_mutex);
    const MpiPause pause;
    settle_run(reg, reg.settings.comm);
    const SetId set{reg.run_id, reg.flushes++};
    const std::uint64_t records = total_records(reg);   // all of these are in `local`
    const MpiLib* lib = reg.mpi_capture && mpi_live() ? mpi_lib() : nullptr;
    const MpiTables tables = lib ? read_mpi(*lib, reg.ucx) : MpiTables();   // every node named is in `local`
    if (reg.settings.trace && mpi_live()) sync_trace_clock(reg);
    const TraceData traced = reg.settings.trace ? read_trace(reg, lib) : TraceData();
    const Local local = collect_local(reg);
    if (mpi_live()) flush_mpi(reg, set, local, lib, tables, traced);
    else flush_single(reg, set, local, traced);
    reg.flushed_records = records;
    return reg.settings.outdir;
}

// Flush at MPI_Finalize: MPI deletes MPI_COMM_SELF's attributes first thing in
// MPI_Finalize, while MPI still works, on every rank: a safe collective point.
inline void hook_finalize(Registry& reg) {
    if (reg.finalize_keyval != MPI_KEYVAL_INVALID || !mpi_live()) return;
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, on_finalize, &reg.finalize_keyval, nullptr);
    MPI_Comm_set_attr(MPI_COMM_SELF, reg.finalize_keyval, nullptr);
}

// -- snapshots (docs/native.md, "Snapshots") -------------------------------------

// One rank's share of a snapshot file, as it sends it to its aggregator:
// executions, then per callpath (pre-order) its parent position (-1: a
// root), loop mode, whether its field is listed, the bytes kept from the
// base's field, name, consistent metrics and rank field (Local's).
inline void put(std::string& out, std::int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
inline void put(std::string& out, std::string_view v) {
    put(out, static_cast<std::int64_t>(v.size()));
    out.append(v);
}

inline std::string encode_part(const Local& local, std::int64_t executions) {
    std::string out;
    put(out, executions);
    put(out, static_cast<std::int64_t>(local.paths.size()));
    for (std::size_t i = 0; i < local.paths.size(); ++i) {
        put(out, local.paths.parent[i]);
        put(out, local.paths.loop[i]);
        put(out, static_cast<std::int64_t>(local.listed[i]));
        put(out, static_cast<std::int64_t>(local.keep[i]));
        put(out, local.paths.name[i]);
        put(out, local.consistent[i]);
        put(out, local.field[i]);
    }
    return out;
}

// A part read back: views into the received bytes.
struct Part {
    std::int64_t executions = 0;
    std::vector<int> parent, loop, listed;
    std::vector<std::int64_t> keep;
    std::vector<std::string_view> name, consistent, field;
};

inline Part decode_part(std::string_view in) {
    auto number = [&in]() {
        std::int64_t v;
        std::memcpy(&v, in.data(), sizeof v);
        in.remove_prefix(sizeof v);
        return v;
    };
    auto text = [&]() {
        const auto n = static_cast<std::size_t>(number());
        const std::string_view v = in.substr(0, n);
        in.remove_prefix(n);
        return v;
    };
    Part p;
    p.executions = number();
    for (std::int64_t i = number(); i > 0; --i) {
        p.parent.push_back(static_cast<int>(number()));
        p.loop.push_back(static_cast<int>(number()));
        p.listed.push_back(static_cast<int>(number()));
        p.keep.push_back(number());
        p.name.push_back(text());
        p.consistent.push_back(text());
        p.field.push_back(text());
    }
    return p;
}

// The file of `parts` (consecutive ranks, lowest first), as the Python side's
// _assemble.assemble: the union of their callpaths in order of first
// appearance, the lowest rank's loop mode (mode 2 gives way) and consistent
// values; the listed rank fields in the event lines, or for a delta
// (set.over >= 0) in a `delta` section.
inline std::string assemble(const Settings& s, const SetId& set, FileHeader h, const std::vector<Part>& parts) {
    Callpaths paths;
    std::vector<std::vector<int>> line_of(parts.size());
    for (std::size_t r = 0; r < parts.size(); ++r) {
        const Part& p = parts[r];
        for (std::size_t i = 0; i < p.name.size(); ++i)
            line_of[r].push_back(paths.add(p.parent[i] < 0 ? -1 : line_of[r][static_cast<std::size_t>(p.parent[i])],
                                           p.name[i], p.loop[i]));
    }
    std::vector<std::vector<std::string_view>> field(parts.size(), std::vector<std::string_view>(paths.size()));
    std::vector<std::vector<std::string_view>> given(paths.size(), std::vector<std::string_view>(parts.size()));
    std::vector<std::tuple<std::size_t, std::size_t, std::int64_t, std::string_view>> splices;  // line, r, keep, bytes
    for (std::size_t r = 0; r < parts.size(); ++r) {
        h.executions.push_back(parts[r].executions);
        for (std::size_t i = 0; i < line_of[r].size(); ++i) {
            const auto line = static_cast<std::size_t>(line_of[r][i]);
            given[line][r] = parts[r].consistent[i];
            if (!parts[r].listed[i]) continue;
            if (set.over >= 0) splices.emplace_back(line, r, parts[r].keep[i], parts[r].field[i]);
            else field[r][line] = parts[r].field[i];
        }
    }
    std::vector<std::string> consistent;
    for (const auto& g : given) consistent.push_back(merge_consistent(g));
    Sections sections;
    if (set.over >= 0) {        // the delta section (docs/format.md): rows, then their bytes
        std::sort(splices.begin(), splices.end());
        std::string payload = "fields " + std::to_string(splices.size()) + "\n";
        for (const auto& [line, r, keep, bytes] : splices)
            payload += std::to_string(line) + "|" + std::to_string(h.first + static_cast<int>(r)) + "|" +
                       std::to_string(keep) + "|" + std::to_string(bytes.size()) + "\n";
        for (const auto& splice : splices) payload += std::get<3>(splice);
        sections.emplace_back("delta", std::move(payload));
    }
    return encode_file(s, set, h, paths, consistent,
                       [&](int r, std::size_t i) { return field[static_cast<std::size_t>(r)][i]; }, sections);
}

inline std::filesystem::path snapshot_dir(const Settings& s, std::int64_t k) {
    char number[24];
    std::snprintf(number, sizeof number, "%06lld", static_cast<long long>(k));
    return std::filesystem::path(s.outdir) / "snapshots" / number;
}

// Numbers of the snapshot directories, complete or not, oldest first.
inline std::vector<std::int64_t> snapshot_numbers(const Settings& s) {
    std::vector<std::int64_t> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(s.outdir) / "snapshots", ec)) {
        const std::string n = e.path().filename().string();
        if (!n.empty() && n.find_first_not_of("0123456789") == std::string::npos) out.push_back(std::stoll(n));
    }
    std::sort(out.begin(), out.end());
    return out;
}

class Stopped : public std::exception {};

// This process's snapshots (docs/native.md, "Snapshots"): a helper thread
// that, at time start + k * frequency (or at once when asked), cuts this
// rank's data and either sends it to its group's aggregator with
// nonblocking point-to-point messages on a duplicate of the profiler's
// communicator, the aggregator writing one file of A, then agrees with one
// nonblocking allreduce that snapshot k is complete and which number comes
// next (MPI_THREAD_MULTIPLE); or writes this rank's own file of the set
// with no MPI call (no MPI, or a lower thread level). The application's
// threads never wait for another rank.
class Snapshotter {
  public:
    // Collective over `comm` while MPI is live: agrees on the start time and
    // duplicates `comm` for aggregated snapshots.
    void start(Registry& reg, MPI_Comm comm) {
        halt();
        free_comm();
        std::lock_guard<std::mutex> lock(mutex_);
        reg_ = &reg;
        frequency_ = reg.settings.frequency;
        stop_ = exited_ = false;
        stopped_.store(false);
        wanted_ = false;
        last_ = 0;
        base_.clear();
        over_ = -1;
        deltas_ = fulls_ = 0;
        chain_.clear();
        start_ = wall();
        rank_ = 0;
        size_ = 1;
        if (mpi_live()) {
            MPI_Comm_rank(comm, &rank_);
            MPI_Comm_size(comm, &size_);
            MPI_Bcast(&start_, 1, MPI_DOUBLE, 0, comm);
            int level = MPI_THREAD_SINGLE;
            MPI_Query_thread(&level);
            if (level == MPI_THREAD_MULTIPLE) {
                MPI_Comm_dup(comm, &comm_);
            } else if (rank_ == 0) {
                warn("MPI thread level is below MPI_THREAD_MULTIPLE: each rank writes its own snapshot "
                     "file (P files per snapshot, no MPI call)");
            }
        }
        thread_ = std::thread([this] { loop(); });
    }

    // A snapshot now, besides the periodic ones: whether one that cut this
    // rank's data after the call ended within `timeout` seconds.
    bool request(double timeout) {
        std::unique_lock<std::mutex> lock(mutex_);
        if (!thread_.joinable() || stop_ || exited_) return false;
        const std::int64_t target = cuts_;
        wanted_ = true;
        changed_.notify_all();
        changed_.wait_for(lock, std::chrono::duration<double>(timeout),
                          [&] { return ended_ > target || stop_ || exited_; });
        return ended_ > target;
    }

    // Stops the helper: it makes no MPI call after this returns, and is
    // joined unless a snapshot in progress takes longer than kStopTimeout.
    void halt() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_ = true;
            changed_.notify_all();
        }
        stopped_.store(true);
        if (!thread_.joinable()) return;
        if (mpi_mutex_.try_lock_for(kStopTimeout)) mpi_mutex_.unlock();   // none in flight, none after
        std::unique_lock<std::mutex> lock(mutex_);
        if (changed_.wait_for(lock, kStopTimeout, [&] { return exited_; })) {
            lock.unlock();
            thread_.join();
        } else {
            thread_.detach();
            pending_ = true;        // it may still hold requests: never free its communicator
        }
    }

    // After halt(), while MPI is live: frees the duplicate unless requests on
    // it were left pending (MPI_Finalize frees it then).
    void free_comm() {
        if (comm_ != MPI_COMM_NULL && !pending_ && !thread_.joinable() && mpi_live()) MPI_Comm_free(&comm_);
        comm_ = MPI_COMM_NULL;
        pending_ = false;
    }

  private:
    static constexpr std::chrono::seconds kStopTimeout{5};
    static constexpr int kSize = 11, kData = 12;   // message tags: a part's size, its bytes

    static double wall() {
        return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    }

    Settings settings() {
        std::lock_guard<std::mutex> lock(reg_->mutex);
        return reg_->settings;
    }

    void loop() {
        const MpiPause pause;     // its MPI traffic is tinyprof's, never the application's
        std::int64_t k = 1;
        try {
            while (true) {
                {
                    std::unique_lock<std::mutex> lock(mutex_);
                    // At most a year ahead: a huge frequency must not overflow the clock.
                    const double at = std::min(start_ + static_cast<double>(k) * frequency_, wall() + 3.2e7);
                    const auto due = std::chrono::system_clock::time_point(
                        std::chrono::duration_cast<std::chrono::system_clock::duration>(
                            std::chrono::duration<double>(at)));
                    changed_.wait_until(lock, due, [&] { return stop_ || wanted_; });
                    if (stop_) break;
                    wanted_ = false;
                    ++cuts_;
                }
                k = comm_ != MPI_COMM_NULL ? aggregated(k) : per_rank(k);
                std::lock_guard<std::mutex> lock(mutex_);
                ++ended_;
                changed_.notify_all();
            }
        } catch (const Stopped&) {
        } catch (const std::exception& e) {       // the profiler never takes the application down
            warn(std::string("snapshots stopped: ") + e.what());
        }
        std::lock_guard<std::mutex> lock(mutex_);
        exited_ = true;
        changed_.notify_all();
    }

    // The number of the newest periodic snapshot due by now.
    std::int64_t due(double f) const { return static_cast<std::int64_t>(std::floor((wall() - start_) / f)); }

    // Per rank: this rank's file of snapshot k (or of the next one due, if
    // later); snapshots in between that other ranks started get it too,
    // labelled as theirs, so that they complete (ranks skip numbers apart).
    std::int64_t per_rank(std::int64_t k) {
        const Settings s = settings();
        k = std::max(k, due(frequency_));
        const bool full = full_next(s);
        Bases now;
        const std::string part = cut(full, now);
        const std::vector<Part> parts{decode_part(part)};
        const FileHeader h{size_, rank_, 1, rank_, size_, {}};
        const std::int64_t over = full ? -1 : over_;
        for (const std::int64_t j : snapshot_numbers(s))
            if (last_ < j && j < k && over < j)
                write(s, j, assemble(s, {reg_->run_id, j, "snapshot", over}, h, parts), rank_, size_);
        if (write(s, k, assemble(s, {reg_->run_id, k, "snapshot", over}, h, parts), rank_, size_)) {
            last_ = k;
            commit(k, now, full);
            if (s.keep_last && rank_ == 0) prune(s, size_);
        }
        return k + 1;
    }

    // This rank's part of a snapshot: whole, or since the last complete one
    // (base_); `now` gets what its fields then hold.
    std::string cut(bool full, Bases& now) {
        const Bases none;
        const Local local = collect_local(*reg_, full ? &none : &base_, &now);
        return encode_part(local, executions_now());     // after the cut: never fewer than the fields hold
    }

    // Deltas before the next full snapshot: `chain` after the first full
    // one, twice as many after each later one (the Python side's
    // chain_length: full ones rewrite all the data, so they come
    // geometrically spaced, and all snapshots write a few times the data).
    std::int64_t chain_length(const Settings& s) const {
        return std::int64_t{s.chain} << std::min(std::max(fulls_ - 1, std::int64_t{0}), std::int64_t{40});
    }

    // Whether the next snapshot is full: nothing complete to build on, or the
    // chain is long enough. (Numbers only grow here, unlike the Python side's
    // take(k), so no delta could be over a later snapshot.)
    bool full_next(const Settings& s) const { return over_ < 0 || deltas_ >= chain_length(s); }

    // Snapshot k is complete: the next delta builds on it.
    void commit(std::int64_t k, Bases& now, bool full) {
        base_ = std::move(now);
        over_ = k;
        deltas_ = full ? 0 : deltas_ + 1;
        fulls_ += full;
        if (full) chain_.clear();
        chain_.push_back(k);
    }

    // Snapshot k, aggregated; the number of the next one, agreed by all ranks.
    // Full, or a delta over the last complete one: every rank decides alike
    // from what all agreed.
    std::int64_t aggregated(std::int64_t k) {
        const Settings s = settings();
        const bool full = full_next(s);
        Bases now;
        const std::string part = cut(full, now);
        const int naggs = aggregator_count(s, size_);
        const Group g = group_of(rank_, size_, naggs);
        std::int64_t agreed[2] = {1, 0};     // MIN: every file written, the latest next number
        if (rank_ != g.first) {
            const std::int64_t n = static_cast<std::int64_t>(part.size());
            exchange([&] {
                std::vector<MPI_Request> r(2);
                MPI_Isend(&n, 1, MPI_INT64_T, g.first, kSize, comm_, &r[0]);
                MPI_Isend(part.data(), static_cast<int>(n), MPI_BYTE, g.first, kData, comm_, &r[1]);
                return r;
            });
        } else {
            std::vector<std::int64_t> sizes(static_cast<std::size_t>(g.size));
            exchange([&] {
                std::vector<MPI_Request> r(sizes.size() - 1);
                for (int i = 1; i < g.size; ++i)
                    MPI_Irecv(&sizes[static_cast<std::size_t>(i)], 1, MPI_INT64_T, g.first + i, kSize, comm_,
                              &r[static_cast<std::size_t>(i - 1)]);
                return r;
            });
            std::vector<std::string> received(sizes.size());
            exchange([&] {
                std::vector<MPI_Request> r(sizes.size() - 1);
                for (int i = 1; i < g.size; ++i) {
                    auto& b = received[static_cast<std::size_t>(i)];
                    b.resize(static_cast<std::size_t>(sizes[static_cast<std::size_t>(i)]));
                    MPI_Irecv(b.data(), static_cast<int>(b.size()), MPI_BYTE, g.first + i, kData, comm_,
                              &r[static_cast<std::size_t>(i - 1)]);
                }
                return r;
            });
            std::vector<Part> parts{decode_part(part)};
            for (int i = 1; i < g.size; ++i) parts.push_back(decode_part(received[static_cast<std::size_t>(i)]));
            const FileHeader h{size_, g.first, g.size, g.index, naggs, {}};
            agreed[0] = write(s, k, assemble(s, {reg_->run_id, k, "snapshot", full ? -1 : over_}, h, parts),
                              g.index, naggs);
        }
        agreed[1] = -std::max(k + 1, due(frequency_) + 1);
        exchange([&] {
            std::vector<MPI_Request> r(1);
            MPI_Iallreduce(MPI_IN_PLACE, agreed, 2, MPI_INT64_T, MPI_MIN, comm_, &r[0]);
            return r;
        });
        last_ = k;
        if (agreed[0]) {
            commit(k, now, full);
            if (s.keep_last && rank_ == 0) remove_older(s, chain_);
        }
        return -agreed[1];
    }

    bool write(const Settings& s, std::int64_t k, const std::string& data, int index, int nfiles) {
        const auto dir = snapshot_dir(s, k);
        const std::string path = (dir / format::file_name(s.name, index, nfiles)).string();
        std::error_code ec;
        std::filesystem::create_directories(dir, ec);
        if (format::write_atomic(path, data)) return true;
        const int error = errno;
        std::lock_guard<std::mutex> lock(mutex_);
        if (!write_warned_)
            warn("cannot write snapshot file " + path + ": " + std::strerror(error) +
                 "; the next snapshot holds its data");
        write_warned_ = true;
        return false;
    }

    // keep "last": removes the snapshots older than the newest of `chain`
    // (a complete snapshot and those it builds on) that are not in it.
    static void remove_older(const Settings& s, const std::vector<std::int64_t>& chain) {
        for (const std::int64_t j : snapshot_numbers(s)) {
            std::error_code ec;
            if (j < chain.back() && std::find(chain.begin(), chain.end(), j) == chain.end())
                std::filesystem::remove_all(snapshot_dir(s, j), ec);
        }
    }

    // Per rank, where each rank's files follow its own chain: keep "last"
    // below the newest complete snapshot, read from the files' `set` lines.
    static void prune(const Settings& s, int nfiles) {
        const auto numbers = snapshot_numbers(s);
        for (auto k = numbers.rbegin(); k != numbers.rend(); ++k) {
            std::vector<std::int64_t> chain;
            if (!chain_of(s, *k, nfiles, chain)) continue;
            std::sort(chain.begin(), chain.end());
            return remove_older(s, chain);
        }
    }

    // Whether snapshot k is complete: all its files there, and those of the
    // snapshots their deltas build on (added to `chain`, with k).
    static bool chain_of(const Settings& s, std::int64_t k, int nfiles, std::vector<std::int64_t>& chain) {
        if (std::find(chain.begin(), chain.end(), k) != chain.end()) return true;
        chain.push_back(k);
        for (int i = 0; i < nfiles; ++i) {
            std::ifstream in(snapshot_dir(s, k) / format::file_name(s.name, i, nfiles), std::ios::binary);
            std::string line;
            for (int n = 0; n < 4 && std::getline(in, line); ++n) {}   // line 4: `set snapshot K [over J]`
            if (!in) return false;
            const auto over = line.find(" over ");
            if (over != std::string::npos &&
                !chain_of(s, std::strtoll(line.c_str() + over + 6, nullptr, 10), nfiles, chain))
                return false;
        }
        return true;
    }

    // Posts requests (post()) and sleep-polls them until done: no busy wait
    // while other ranks are late. Each MPI call happens under mpi_mutex_ and
    // only while not stopped, so none follows halt(); then Stopped (the
    // requests stay pending: cancelling a collective is erroneous).
    template <class Post>
    void exchange(Post&& post) {
        std::vector<MPI_Request> requests;
        bool posted = false;
        auto nap = std::chrono::microseconds(500);
        while (true) {
            {
                std::lock_guard<std::timed_mutex> lock(mpi_mutex_);
                if (stopped_.load()) {
                    pending_ = pending_ || posted;
                    throw Stopped();
                }
                if (!posted) {
                    requests = post();
                    posted = true;
                } else {
                    int done = 0;
                    MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
                    if (done) return;
                }
            }
            std::this_thread::sleep_for(nap);
            nap = std::min(2 * nap, std::chrono::microseconds(20000));
        }
    }

    Registry* reg_ = nullptr;
    std::thread thread_;
    std::mutex mutex_;                     // guards what follows, up to mpi_mutex_
    std::condition_variable changed_;      // wanted_, stop_, ended_ or exited_ changed
    bool stop_ = false, exited_ = false, wanted_ = false, write_warned_ = false;
    std::int64_t cuts_ = 0, ended_ = 0;    // snapshots begun (data cut) and ended
    std::timed_mutex mpi_mutex_;           // held by the helper around each MPI call
    std::atomic<bool> stopped_{false};
    bool pending_ = false;                 // requests on comm_ left pending by halt()
    MPI_Comm comm_ = MPI_COMM_NULL;        // aggregated: tinyprof's duplicate
    double start_ = 0;                     // rank 0's wall clock at start (s)
    double frequency_ = 0;                 // the period (s)
    int rank_ = 0, size_ = 1;
    std::int64_t last_ = 0;                // per rank: the newest number written
    // What this rank's fields held at the last complete snapshot (over_, -1:
    // none), deltas since the last full one, full ones so far, the chain.
    Bases base_;
    std::int64_t over_ = -1, deltas_ = 0, fulls_ = 0;
    std::vector<std::int64_t> chain_;
};

inline Snapshotter& snapshotter() {
    static Snapshotter* s = new Snapshotter();   // never destroyed, as the registry
    return *s;
}

inline void stop_snapshots() {
    const MpiPause pause;
    snapshotter().halt();
    snapshotter().free_comm();
}

}  // namespace detail

// Writes everything recorded so far as one profile and returns the output
// directory. Collective over the profiler's communicator while MPI is
// initialised and not finalised (every rank must call it); otherwise one
// single-rank file. Call it outside every event of the calling thread;
// other threads may go on recording (what they publish before the flush
// reads their tree is in it). Each flush is a new set (`set flush N`); a
// later flush rewrites the profile with everything until then.
inline std::string flush() {
    detail::Tree& t = detail::tree();
    if (t.current != &t.root)
        throw std::logic_error("tinyprof: flush() called inside the open event '" +
                               t.current->name + "': flush outside every event");
    return detail::write_profile();
}

namespace detail {

// flush() unless no rank recorded anything since the last flush. Collective.
inline void flush_if_new() {
    Registry& reg = registry();
    const MpiPause pause;
    std::int64_t fresh = total_records(reg) != reg.flushed_records;
    if (mpi_live()) MPI_Allreduce(MPI_IN_PLACE, &fresh, 1, MPI_INT64_T, MPI_MAX, reg.settings.comm);
    if (fresh) write_profile();
}

}  // namespace detail

// A snapshot now, besides the periodic ones (a Profiler with frequency > 0):
// asks this rank's snapshot thread to take the next one at once and waits at
// most `timeout` seconds for it. Never collective for the calling thread:
// aggregated (MPI_THREAD_MULTIPLE), the snapshot ends when every rank took
// part (when they call this too, or when it falls due on them). Returns
// whether one that holds everything this rank recorded before the call ended.
inline bool snapshot(double timeout = 10.0) { return detail::snapshotter().request(timeout); }

// Replaces the nanosecond clock of the hot path (tests inject exact timings);
// nullptr restores std::chrono::steady_clock.
inline void set_clock(ClockFn clock) { detail::clock_override = clock; }

// The one-time, global settings of a run (paper Fig. 1 (3)): create it once,
// after MPI_Init, on every rank. It arranges a flush at MPI_Finalize; its
// destructor flushes if MPI is still live or was never used.
class Profiler {
  public:
    explicit Profiler(std::string name = "profile", double frequency = 0,
                      std::string_view selfkeys = "") {
        if (!(frequency >= 0))
            throw std::invalid_argument("tinyprof: Profiler frequency must be >= 0 seconds");
        detail::Settings s;
        s.metrics = detail::parse_selfkeys(selfkeys);
        s.outdir = name + ".tinyprof";
        s.name = std::move(name);
        s.frequency = frequency;
        s.aggregators = env_count("TINYPROF_AGGREGATORS");
        if (const int chain = env_count("TINYPROF_CHAIN")) s.chain = chain;
        detail::tree();       // registers this thread (outside the lock, which that takes)
        detail::stop_snapshots();                     // an earlier Profiler's
        detail::Registry& reg = detail::registry();
        const detail::MpiPause pause;
        {
            std::lock_guard<std::mutex> lock(reg.mutex);
            reg.settings = std::move(s);
            reg.warned.clear();
            reg.profiler = this;
            reg.mpi_capture = detail::start_capture();
            reg.ucx = detail::start_ucx(reg.mpi_capture);
            detail::hook_finalize(reg);
            detail::settle_run(reg, reg.settings.comm);   // rank 0's run id, while MPI is live
            if (detail::env_flag("TINYPROF_TRACE")) start_trace(reg, env_trace_limit());
        }
        if (frequency > 0) detail::snapshotter().start(reg, reg.settings.comm);
    }

    // Trace mode (docs/trace.md), as TINYPROF_TRACE=1 and TINYPROF_TRACE_LIMIT:
    // keep every occurrence's start and, with MPI capture, every MPI call, up to
    // `limit` of each per process. Aligns the clocks: collective under MPI.
    Profiler& set_trace(std::int64_t limit = 2000000) {
        if (limit < 1) throw std::invalid_argument("tinyprof: trace limit must be >= 1");
        detail::Registry& reg = detail::registry();
        std::lock_guard<std::mutex> lock(reg.mutex);
        start_trace(reg, limit);
        return *this;
    }

    // Output directory, default `<name>.tinyprof`.
    Profiler& set_outdir(std::string outdir) {
        return with_settings([&](detail::Settings& s) { s.outdir = std::move(outdir); });
    }
    // Number of files (aggregators) of an MPI flush or snapshot, clamped to [1, P].
    Profiler& set_aggregators(int aggregators) {
        if (aggregators < 1) throw std::invalid_argument("tinyprof: aggregators must be >= 1");
        return with_settings([&](detail::Settings& s) { s.aggregators = aggregators; });
    }
    // The communicator to flush over (default MPI_COMM_WORLD). With
    // frequency > 0, collective over it: snapshots restart on it.
    Profiler& set_comm(MPI_Comm comm) {
        with_settings([&](detail::Settings& s) { s.comm = comm; });
        detail::Registry& reg = detail::registry();
        if (reg.settings.frequency > 0) {
            const detail::MpiPause pause;
            detail::snapshotter().start(reg, comm);
        }
        return *this;
    }
    // Delta snapshots after the first full one (default 32, or
    // TINYPROF_CHAIN); each later full one is followed by twice as many.
    Profiler& set_chain(int chain) {
        if (chain < 1) throw std::invalid_argument("tinyprof: chain must be >= 1");
        return with_settings([&](detail::Settings& s) { s.chain = chain; });
    }
    // Which snapshots stay on disk: "last" (default), the newest complete
    // one; "all", every one (for a history of the run).
    Profiler& set_keep(std::string_view keep) {
        if (keep != "last" && keep != "all")
            throw std::invalid_argument("tinyprof: keep must be \"last\" or \"all\", not \"" + std::string(keep) + "\"");
        return with_settings([&](detail::Settings& s) { s.keep_last = keep == "last"; });
    }

    ~Profiler() {
        detail::Registry& reg = detail::registry();
        if (reg.profiler != this) return;
        detail::stop_snapshots();
        int initialized = 0;
        MPI_Initialized(&initialized);
        if (detail::mpi_live() || !initialized) {
            try {
                detail::flush_if_new();
            } catch (const std::exception& e) {
                detail::warn(std::string("profile not written: ") + e.what());
            }
        }
        if (reg.mpi_capture) {                              // recording lasts while a profiler does
            detail::mpi_lib()->trace(0);
            detail::mpi_lib()->enable(0);
            if (reg.ucx == "unused") detail::mpi_lib()->ucx_enable(0);
        }
        detail::trace_limit.store(0);
        reg.profiler = nullptr;
    }

    Profiler(const Profiler&) = delete;
    Profiler& operator=(const Profiler&) = delete;

  private:
    // Changes the settings under the registry's lock: the snapshot thread reads them.
    template <class Change>
    Profiler& with_settings(Change&& change) {
        detail::Registry& reg = detail::registry();
        std::lock_guard<std::mutex> lock(reg.mutex);
        change(reg.settings);
        return *this;
    }

    static void start_trace(detail::Registry& reg, std::int64_t limit) {
        reg.settings.trace = true;
        reg.settings.trace_limit = limit;
        detail::trace_limit.store(limit);
        if (reg.mpi_capture) detail::mpi_lib()->trace(static_cast<std::size_t>(limit));
        reg.syncs.clear();
        detail::sync_trace_clock(reg);
    }

    static std::int64_t env_trace_limit() {
        const char* text = std::getenv("TINYPROF_TRACE_LIMIT");
        if (text == nullptr || detail::trim(text).empty()) return 2000000;
        const std::string_view v = detail::trim(text);
        std::int64_t n = 0;
        const auto r = std::from_chars(v.data(), v.data() + v.size(), n);
        if (r.ec != std::errc() || r.ptr != v.data() + v.size() || n < 1)
            throw std::invalid_argument("tinyprof: TINYPROF_TRACE_LIMIT must be an integer >= 1, not '" +
                                        std::string(v) + "'");
        return n;
    }

    // Environment variable `name` as an integer >= 1, or 0 if unset.
    static int env_count(const char* name) {
        const char* text = std::getenv(name);
        if (text == nullptr || detail::trim(text).empty()) return 0;
        const std::string_view v = detail::trim(text);
        int n = 0;
        const auto r = std::from_chars(v.data(), v.data() + v.size(), n);
        if (r.ec != std::errc() || r.ptr != v.data() + v.size() || n < 1)
            throw std::invalid_argument(std::string("tinyprof: ") + name + " must be an integer >= 1, not '" +
                                        std::string(v) + "'");
        return n;
    }
};

namespace detail {

inline int on_finalize(MPI_Comm, int, void*, void*) {
    Registry& reg = registry();
    reg.finalize_keyval = MPI_KEYVAL_INVALID;
    if (reg.profiler == nullptr) return MPI_SUCCESS;
    stop_snapshots();           // first: its thread makes no MPI call after this
    try {
        flush_if_new();
    } catch (const std::exception& e) {
        warn(std::string("profile not written at MPI_Finalize: ") + e.what());
    }
    return MPI_SUCCESS;
}

}  // namespace detail

}  // namespace TinyProf
