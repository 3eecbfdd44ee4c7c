// Python twin: tinyprof/runtime/profiler.py, tinyprof/runtime/lifecycle.py; identity: tests/native/test_vectors.py
//
// The public API's out-of-line part (tinyprof.hpp): Profiler, flush(),
// snapshot(), and the flush at MPI_Finalize. Defined here once, in the file
// that defines TINYPROF_IMPLEMENTATION.
#pragma once

#include <mpi.h>

#include "../tinyprof.hpp"
#include "capture.hpp"
#include "clocksync.hpp"
#include "event_map.hpp"
#include "mpi_flush.hpp"
#include "session.hpp"
#include "settings.hpp"
#include "snapshots.hpp"

#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace TinyProf {
namespace detail {

extern const int define_TINYPROF_IMPLEMENTATION_in_exactly_one_file = 1;

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

// Flush at MPI_Finalize: MPI deletes MPI_COMM_SELF's attributes first thing in
// MPI_Finalize, while MPI still works, on every rank: a safe collective point.
inline void hook_finalize(Registry& reg) {
    if (reg.finalize_keyval != MPI_KEYVAL_INVALID || !mpi_live()) return;
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, on_finalize, &reg.finalize_keyval, nullptr);
    MPI_Comm_set_attr(MPI_COMM_SELF, reg.finalize_keyval, nullptr);
}

#ifdef TINYPROF_SMPI
// SMPI deletes no attribute at MPI_Finalize (and MPI_Initialized is 0 after
// it): the flush comes from here, which deletes MPI_COMM_SELF's attribute as
// MPI_Finalize should, while MPI still works (event_map.hpp). Not inline:
// defined once, in the implementation.
int finalize_under_smpi() {
    const int keyval = registry().finalize_keyval;
    if (keyval != MPI_KEYVAL_INVALID) MPI_Comm_delete_attr(MPI_COMM_SELF, keyval);
    return PMPI_Finalize();
}
}  // namespace detail
}  // namespace TinyProf

// MPI_Finalize from files without this header, through MPI's profiling
// interface: SMPI declares MPI_Finalize weak for such wrappers.
#undef MPI_Finalize
extern "C" int MPI_Finalize() { return TinyProf::detail::finalize_under_smpi(); }
#define MPI_Finalize() ::TinyProf::detail::finalize_under_smpi()

namespace TinyProf {
namespace detail {
#endif

// Called under the registry's lock.
inline void start_trace(Registry& reg, std::int64_t limit) {
    reg.settings.trace = true;
    reg.settings.trace_limit = limit;
    trace_limit.store(limit);
    if (reg.mpi_capture) mpi_lib()->trace(static_cast<std::size_t>(limit));
    reg.syncs.clear();
    sync_trace_clock(reg);
}

// Changes the settings under the registry's lock: the snapshot thread reads them.
template <class Change>
inline void change_settings(Change&& change) {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mutex);
    change(reg.settings);
}

// Rank 0 marks the run in its output directory (or, `mark` false, takes the
// mark back from a directory the run leaves). Before MPI_Init a rank
// knows its rank from the launcher only; rank 0's run id is final from the
// start (the others adopt it), so rank 0 may mark it at once.
inline void mark_run(const Registry& reg, bool mark = true) {
    int rank = 0;
    if (mpi_live()) {
        MPI_Comm_rank(reg.settings.comm, &rank);
    } else {
        for (const char* var : {"PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK"})
            if (const char* text = std::getenv(var)) {
                rank = std::atoi(text);
                break;
            }
    }
    if (rank != 0) return;
    if (mark)
        format::mark_run(reg.settings.outdir, reg.settings.name, reg.run_id);
    else
        format::unmark_run(reg.settings.outdir, reg.settings.name, reg.run_id);
}

// TinyProf::metadata: checked here, written from the next write on.
inline void set_metadata(std::string_view key, meta::Value value) {
    const std::string why = meta::problem(key, value);
    if (!why.empty()) throw std::invalid_argument("tinyprof: " + why);
    change_settings([&](Settings& s) {
        if (s.metadata.size() >= meta::kMaxEntries && !s.metadata.count(std::string(key)))
            throw std::invalid_argument("tinyprof: more than " + std::to_string(meta::kMaxEntries) +
                                        " metadata keys");
        s.metadata[std::string(key)] = std::move(value);
    });
}

}  // namespace detail

void metadata(std::string_view key, std::string_view value) { detail::set_metadata(key, std::string(value)); }
void metadata(std::string_view key, std::int64_t value) { detail::set_metadata(key, value); }
void metadata(std::string_view key, double value) { detail::set_metadata(key, value); }

std::string flush() {
    detail::Tree& t = detail::tree();
    if (t.current != &t.root)
        throw std::logic_error("tinyprof: flush() called inside the open event '" +
                               t.current->name + "': flush outside every event");
    return detail::write_profile();
}

bool snapshot(double timeout) { return detail::snapshotter().request(timeout); }

Profiler::Profiler(std::string name, double frequency, std::string_view selfkeys) {
    if (!(frequency >= 0))
        throw std::invalid_argument("tinyprof: Profiler frequency must be >= 0 seconds");
    detail::Settings s;
    s.metrics = detail::parse_selfkeys(selfkeys);
    s.outdir = name + ".tinyprof";
    s.name = std::move(name);
    s.frequency = frequency;
    s.aggregators = detail::env_count<int>("TINYPROF_AGGREGATORS");
    if (const int chain = detail::env_count<int>("TINYPROF_CHAIN")) s.chain = chain;
    const char* meta_env = std::getenv("TINYPROF_METADATA");
    auto [entries, problems] = detail::meta::parse_env(meta_env ? meta_env : "");
    if (!problems.empty())      // the job's environment: warned, never thrown into the application
        detail::warn("TINYPROF_METADATA: " + problems[0] +
                     (problems.size() > 1 ? " (and " + std::to_string(problems.size() - 1) + " more)" : "") +
                     "; those items are left out");
    s.metadata = std::move(entries);
    s.auto_metadata = detail::env_flag("TINYPROF_AUTO_METADATA", true);
    detail::tree();       // registers this thread (outside the lock, which that takes)
    detail::stop_snapshots();                     // an earlier Profiler's
    detail::Registry& reg = detail::registry();
    const detail::MpiPause pause;
    {
        std::lock_guard<std::mutex> lock(reg.mutex);
        reg.settings = std::move(s);
        reg.start = std::time(nullptr);
        reg.warned.clear();
        reg.profiler = this;
        reg.mpi_capture = detail::start_capture();
        reg.ucx = detail::start_ucx(reg.mpi_capture);
        detail::hook_finalize(reg);
        detail::settle_run(reg, reg.settings.comm);   // rank 0's run id, while MPI is live
        detail::mark_run(reg);
        if (detail::env_flag("TINYPROF_TRACE", false)) {
            const auto limit = detail::env_count<std::int64_t>("TINYPROF_TRACE_LIMIT");
            detail::start_trace(reg, limit > 0 ? limit : 2000000);
        }
    }
    if (frequency > 0) detail::snapshotter().start(reg, reg.settings.comm);
}

Profiler& Profiler::set_trace(std::int64_t limit) {
    if (limit < 1) throw std::invalid_argument("tinyprof: trace limit must be >= 1");
    detail::Registry& reg = detail::registry();
    std::lock_guard<std::mutex> lock(reg.mutex);
    detail::start_trace(reg, limit);
    return *this;
}

Profiler& Profiler::set_outdir(std::string outdir) {
    detail::Registry& reg = detail::registry();
    std::lock_guard<std::mutex> lock(reg.mutex);
    detail::mark_run(reg, false);                 // the directory left: not this run's any more
    reg.settings.outdir = std::move(outdir);
    detail::mark_run(reg, true);
    return *this;
}

Profiler& Profiler::set_aggregators(int aggregators) {
    if (aggregators < 1) throw std::invalid_argument("tinyprof: aggregators must be >= 1");
    detail::change_settings([&](detail::Settings& s) { s.aggregators = aggregators; });
    return *this;
}

Profiler& Profiler::set_comm(MPI_Comm comm) {
    detail::change_settings([&](detail::Settings& s) { s.comm = comm; });
    detail::Registry& reg = detail::registry();
    if (reg.settings.frequency > 0) {
        const detail::MpiPause pause;
        detail::snapshotter().start(reg, comm);
    }
    return *this;
}

Profiler& Profiler::set_chain(int chain) {
    if (chain < 1) throw std::invalid_argument("tinyprof: chain must be >= 1");
    detail::change_settings([&](detail::Settings& s) { s.chain = chain; });
    return *this;
}

Profiler& Profiler::set_keep(std::string_view keep) {
    if (keep != "last" && keep != "all")
        throw std::invalid_argument("tinyprof: keep must be \"last\" or \"all\", not \"" + std::string(keep) + "\"");
    detail::change_settings([&](detail::Settings& s) { s.keep_last = keep == "last"; });
    return *this;
}

Profiler::~Profiler() {
    detail::Registry& reg = detail::registry();
    if (reg.profiler != this) return;
    detail::stop_snapshots();
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);       // under SMPI, MPI_Initialized is 0 after MPI_Finalize
    if (detail::mpi_live() || (!initialized && !finalized)) {
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

}  // namespace TinyProf
