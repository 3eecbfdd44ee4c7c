// Python twin: tinyprof/runtime/session.py; identity: tests/native/test_vectors.py
//
// The one owner of a run's mutable state: the registry of every thread's
// tree, the settings, the run id, the flush count, MPI's bookkeeping.
#pragma once

#include <mpi.h>

#include "event_map.hpp"
#include "settings.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace TinyProf {
namespace detail {

struct Registry {
    std::mutex mutex;
    std::mutex flush_mutex;                     // one flush at a time
    std::vector<std::unique_ptr<Tree>> trees;   // in order of each thread's first event
    Settings settings;
    const void* profiler = nullptr;             // the active Profiler, if any
    std::uint64_t flushed_records = ~std::uint64_t{0};
    std::uint64_t run_id = 0;                   // the file's `run`, once per process
    bool run_drawn = false;
    bool run_agreed = false;                    // broadcast from rank 0 (or no MPI)
    std::int64_t flushes = 0;                   // the next flush's number (`set flush N`)
    int finalize_keyval = MPI_KEYVAL_INVALID;
    std::vector<std::string> warned;            // undeclared metric keys already reported
    std::map<MPI_Comm, MPI_Comm> dups;          // comm -> the flush's MPI_Comm_dup of it
    bool mpi_capture = false;                   // libtinyprof_mpi records for us: files get `mpi`
    std::string ucx;                            // the transport view (TINYPROF_UCX): start_ucx's state
    bool mpi_comm_warned = false;
    std::vector<std::array<std::int64_t, 3>> syncs;   // trace clock: first and latest alignment
    std::time_t start = 0;                      // the Profiler's construction (rank 0's is written)
    std::vector<std::string> hosts;             // rank 0: every rank's host, gathered with the run id
    std::optional<std::string> mpi_library;     // MPI_Get_library_version, under MPI
    std::optional<meta::Entries> meta_auto;     // rank 0: the automatic keys, from its first write
    // The last flush under MPI, for benchmarks/scale.py: MPI_Wtime at its start, once this
    // rank's data is collected, and at the end of each phase; the bytes phase 1 received.
    std::array<double, 5> flush_marks{};
    std::size_t sync_received = 0;
};

// Not inline: defined once, in the implementation, so that its static is no
// GNU-unique symbol (event_map.hpp) and each SMPI rank has its own registry.
Registry& registry() {
    static Registry* r = new Registry();        // never destroyed: Events may outlive main
    return *r;
}

inline void warn(const std::string& text) { std::fprintf(stderr, "tinyprof: %s\n", text.c_str()); }

inline bool mpi_live() {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    return initialized && !finalized;
}

// Completes `request` without a long busy wait: when ranks outnumber cores, a
// rank in MPI's busy loop takes its share of a core from the ranks still at
// work (the aggregator above all). So after a short spin it sleeps between
// tests, longer each time up to 200 us: a collective progresses only while
// its ranks test, round by round, so naps of 1 ms made the flush slower.
inline void complete(MPI_Request request) {
    using std::chrono::microseconds;
    const auto spin_end = std::chrono::steady_clock::now() + microseconds(50);
    auto nap = microseconds(50);
    for (int done = 0;;) {
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        if (done) return;
        if (std::chrono::steady_clock::now() < spin_end) continue;
        std::this_thread::sleep_for(nap);
        nap = std::min(2 * nap, microseconds(200));
    }
}

// The collective MPI_<blocking>(args...), run as MPI_<nonblocking> then
// complete(). Under SMPI as MPI_<blocking>: each simulated rank has a core of
// its own, and SMPI's nonblocking collectives send point to point from every
// rank to every other, waited for one by one (a flush over 256 simulated ranks
// did not end in minutes), where its blocking ones use real MPI's algorithms
// (with smpi/coll-selector:mpich, as benchmarks/scale.py runs).
#ifdef TINYPROF_SMPI
#define TINYPROF_COLLECTIVE(nonblocking, blocking, ...) MPI_##blocking(__VA_ARGS__)
#else
#define TINYPROF_COLLECTIVE(nonblocking, blocking, ...)     \
    do {                                                    \
        MPI_Request tinyprof_request_;                      \
        MPI_##nonblocking(__VA_ARGS__, &tinyprof_request_); \
        ::TinyProf::detail::complete(tinyprof_request_);    \
    } while (0)
#endif

// Every thread's tree, listed under the registry's lock (trees are never removed).
inline std::vector<Tree*> trees(Registry& reg) {
    std::lock_guard<std::mutex> lock(reg.mutex);
    std::vector<Tree*> out;
    for (const auto& t : reg.trees) out.push_back(t.get());
    return out;
}

inline std::uint64_t total_records(Registry& reg) {
    std::lock_guard<std::mutex> lock(reg.mutex);
    std::uint64_t n = 0;
    for (const auto& t : reg.trees) n += t->records.load(std::memory_order_relaxed);
    return n;
}

inline std::int64_t executions_now() { return execution.load(std::memory_order_relaxed) + 1; }

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

// Rank 0 learns every rank's host name (MPI_Get_processor_name), for the
// run metadata; with the run id, at the same collective point.
inline void gather_hosts(Registry& reg, MPI_Comm comm) {
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int length = 0, rank = 0, size = 1;
    MPI_Get_processor_name(name, &length);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    std::vector<char> all(rank == 0 ? static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME : 0);
    TINYPROF_COLLECTIVE(Igather, Gather, name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                        MPI_CHAR, 0, comm);
    reg.hosts.clear();
    for (int r = 0; rank == 0 && r < size; ++r) {
        const char* at = all.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME;
        reg.hosts.emplace_back(at, strnlen(at, MPI_MAX_PROCESSOR_NAME));
    }
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    MPI_Get_library_version(version, &length);
    reg.mpi_library = std::string(version);
}

// Draws the run id once, and adopts rank 0's over `comm` the first time MPI
// is live here (collective then, at a point every rank reaches alike).
inline void settle_run(Registry& reg, MPI_Comm comm) {
    if (!reg.run_drawn) {
        reg.run_id = draw_run_id();
        reg.run_drawn = true;
    }
    if (!reg.run_agreed && mpi_live()) {
        TINYPROF_COLLECTIVE(Ibcast, Bcast, &reg.run_id, 1, MPI_UINT64_T, 0, comm);
        reg.run_agreed = true;
        gather_hosts(reg, comm);
    }
}

// The meta section rank 0 writes in file 0, in reg.settings.meta (called
// under the registry's lock before a write): the automatic keys, built once
// at the first write, then the settings' own (TINYPROF_METADATA's, then
// TinyProf::metadata's); empty on other ranks.
inline void refresh_meta(Registry& reg, int rank) {
    if (rank != 0) return;
    meta::Entries entries;
    if (reg.settings.auto_metadata) {
        if (!reg.meta_auto) {
            if (reg.hosts.empty()) reg.hosts.push_back(meta::local_hostname());
            try {
                reg.meta_auto = meta::automatic(reg.start, reg.hosts, reg.mpi_library);
            } catch (const std::exception& e) {     // the profiler never takes the application down
                warn(std::string("run metadata left out: ") + e.what());
                reg.meta_auto = meta::Entries();
            }
        }
        entries = *reg.meta_auto;
    }
    for (const auto& [key, value] : reg.settings.metadata) entries[key] = value;
    std::string payload = meta::encode(entries);
    if (payload != reg.settings.meta) reg.settings.meta = std::move(payload);   // a write may be reading it
}

}  // namespace detail
}  // namespace TinyProf
