// Python twin: tinyprof/runtime/mpi_flush.py; identity: tests/native/test_vectors.py
//
// The flush (docs/flush.md): local encoding, then the paper's three phases
// under MPI (event synchronisation, aggregation, file I/O), or one file of
// one rank without it.
#pragma once

#include <mpi.h>

#include "assemble.hpp"
#include "capture.hpp"
#include "clocksync.hpp"
#include "collect.hpp"
#include "output_dir.hpp"
#include "session.hpp"
#include "settings.hpp"
#include "trace_block.hpp"
#include "trace_section.hpp"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

namespace TinyProf {
namespace detail {

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

// -- point to point, on tinyprof's duplicate of the communicator ---------------

// Message tags: a size (int64), then its bytes with the next tag.
constexpr int kTreeTag = 21, kRowTag = 23;

// Completes `requests` (blocking under SMPI, as TINYPROF_COLLECTIVE).
inline void finish(std::vector<MPI_Request>& requests) {
#ifdef TINYPROF_SMPI
    MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
#else
    for (const MPI_Request r : requests) complete(r);
#endif
    requests.clear();
}

inline void send_bytes(MPI_Comm comm, int dest, int tag, const std::string& bytes) {
    const std::int64_t size = static_cast<std::int64_t>(bytes.size());
    std::vector<MPI_Request> sent(2);
    MPI_Isend(&size, 1, MPI_INT64_T, dest, tag, comm, &sent[0]);
    MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, dest, tag + 1, comm, &sent[1]);
    finish(sent);
}

// What each of `sources` sent with send_bytes, in their order.
inline std::vector<std::string> recv_bytes(MPI_Comm comm, const std::vector<int>& sources, int tag) {
    std::vector<std::int64_t> sizes(sources.size());
    std::vector<MPI_Request> requests(sources.size());
    for (std::size_t i = 0; i < sources.size(); ++i)
        MPI_Irecv(&sizes[i], 1, MPI_INT64_T, sources[i], tag, comm, &requests[i]);
    finish(requests);
    std::vector<std::string> out(sources.size());
    requests.resize(sources.size());
    for (std::size_t i = 0; i < sources.size(); ++i) {
        out[i].resize(static_cast<std::size_t>(sizes[i]));
        MPI_Irecv(out[i].data(), static_cast<int>(sizes[i]), MPI_BYTE, sources[i], tag + 1, comm, &requests[i]);
    }
    finish(requests);
    return out;
}

// tinyprof's own duplicate of `comm`, made at its first flush, for the flush's
// point-to-point messages: they never match the application's receives. Its
// collectives stay on `comm`. Under SMPI, `comm` itself: there MPI_Comm_dup
// copies the group on every rank (P^2 in the one simulator process) and
// leaves the ranks up to 0.3 s of simulated time apart at 4,096 ranks
// (docs/scaling.md); the tags keep the flush's messages apart from the
// application's, except from receives of any tag.
inline MPI_Comm private_comm(Registry& reg, MPI_Comm comm) {
#ifdef TINYPROF_SMPI
    (void)reg;
    return comm;
#else
    auto it = reg.dups.find(comm);
    if (it == reg.dups.end()) {
        MPI_Comm dup;
        MPI_Comm_dup(comm, &dup);
        it = reg.dups.emplace(comm, dup).first;
    }
    return it->second;
#endif
}

// The callpaths of all ranks, in order, with their loop modes. Ranks that
// agree on the ordered list of common callpaths exchange only their other
// callpaths; any disagreement exchanges every callpath. The lists are merged
// up a binomial tree (rank r merges those of ranks r + 1, r + 2, r + 4, ...,
// below its lowest set bit: ranks r to r + 2^k - 1 in order, so the result
// is every rank's list in rank order, each callpath at its first occurrence),
// then rank 0 broadcasts the whole list. A rank holds distinct callpaths only,
// never one payload per rank. Messages go on `own`, tinyprof's duplicate of
// `comm`. `held`: the bytes this rank received.
inline Callpaths synchronise(MPI_Comm comm, MPI_Comm own, const Local& local, std::size_t& held) {
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
    Callpaths shared;
    for (const std::size_t i : common) {
        const int up = paths.parent[i];
        shared.add(up < 0 ? -1 : static_cast<int>(ref[static_cast<std::size_t>(up)]), paths.name[i],
                   paths.loop[i]);
    }
    std::vector<std::string> base = name_table(shared, nullptr);
    const std::int64_t nc = static_cast<std::int64_t>(common.size()), d = digest(shared);
    std::int64_t stats[4] = {nc, -nc, d, -d};
    TINYPROF_COLLECTIVE(Iallreduce, Allreduce, MPI_IN_PLACE, stats, 4, MPI_INT64_T, MPI_MIN, comm);
    const bool hints_hold = stats[0] == -stats[1] && stats[2] == -stats[3];
    Callpaths merged = shared;
    if (hints_hold) {
        merge_paths(encode_paths(paths, others, ref, base).data(), base, shared.size(), merged);
    } else {
        shared = merged = Callpaths();
        base.clear();
        merge_paths(encode_paths(paths, all, same, {}).data(), base, 0, merged);
    }
    const std::size_t nprefix = shared.size();
    auto tail = [&] {               // the entries past the shared prefix, as encode_paths
        std::vector<std::size_t> sent(merged.size() - nprefix);
        std::vector<std::int64_t> self(merged.size());
        for (std::size_t i = 0; i < sent.size(); ++i) sent[i] = nprefix + i;
        for (std::size_t i = 0; i < self.size(); ++i) self[i] = static_cast<std::int64_t>(i);
        return encode_paths(merged, sent, self, base);
    };
    int nranks = 0, rank = 0;
    MPI_Comm_size(comm, &nranks);
    MPI_Comm_rank(comm, &rank);
    std::vector<int> children;
    for (int step = 1; step < nranks && !(rank & step); step <<= 1)
        if (rank + step < nranks) children.push_back(rank + step);
    held = 0;
    for (const std::string& list : recv_bytes(own, children, kTreeTag)) {
        held += list.size();
        merge_paths(list.data(), base, nprefix, merged);
    }
    if (rank > 0) send_bytes(own, rank & (rank - 1), kTreeTag, tail());
    std::string whole = rank == 0 ? tail() : std::string();
    std::int64_t size = static_cast<std::int64_t>(whole.size());
    TINYPROF_COLLECTIVE(Ibcast, Bcast, &size, 1, MPI_INT64_T, 0, comm);
    whole.resize(static_cast<std::size_t>(size));
    TINYPROF_COLLECTIVE(Ibcast, Bcast, whole.data(), static_cast<int>(size), MPI_BYTE, 0, comm);
    if (rank == 0) return merged;
    held += whole.size();
    merge_paths(whole.data(), base, nprefix, shared);
    return shared;
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

// -- the flush -------------------------------------------------------------------

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
    MPI_Comm comm = s.comm, own = private_comm(reg, comm);
    const Callpaths paths = synchronise(comm, own, local, reg.sync_received);
    reg.flush_marks[2] = MPI_Wtime();
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
    bool with_consistent = false;
    for (const auto& m : s.metrics) with_consistent = with_consistent || m.second;
    std::string row = encode_row(at, local, with_consistent, executions_now(), mpi, trace);
    std::vector<std::string> rows;      // the aggregator: its group's rows, in rank order
    if (rank != g.first) {
        send_bytes(own, g.first, kRowTag, row);
    } else {
        std::vector<int> others(static_cast<std::size_t>(g.size - 1));
        for (int r = 1; r < g.size; ++r) others[static_cast<std::size_t>(r - 1)] = g.first + r;
        rows = recv_bytes(own, others, kRowTag);
        rows.insert(rows.begin(), std::move(row));
    }
    row = std::string();
    reg.flush_marks[3] = MPI_Wtime();

    std::int64_t state[2] = {1, 1};    // [file written, no older set to remove]
    if (rank == g.first) {
        std::vector<Row> split;
        for (const std::string& r : rows) split.push_back(split_row(r.data()));
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
    TINYPROF_COLLECTIVE(Iallreduce, Allreduce, MPI_IN_PLACE, state, 2, MPI_INT64_T, MPI_MIN, comm);
    if (state[0] && !state[1]) {
        if (rank == 0) remove_stale(s, naggs);
        TINYPROF_COLLECTIVE(Ibarrier, Barrier, comm);     // no rank returns, and reads, before the old set is gone
    }
    reg.flush_marks[4] = MPI_Wtime();
}

// The work of flush(). Events still open (at MPI_Finalize) appear with the
// values they had so far; other threads may go on recording meanwhile.
inline std::string write_profile() {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.flush_mutex);
    const MpiPause pause;
    settle_run(reg, reg.settings.comm);
    const bool live = mpi_live();
    {
        int rank = 0;
        if (live) MPI_Comm_rank(reg.settings.comm, &rank);
        std::lock_guard<std::mutex> settings_lock(reg.mutex);
        refresh_meta(reg, rank);
    }
    if (live) reg.flush_marks[0] = MPI_Wtime();
    const SetId set{reg.run_id, reg.flushes++};
    const std::uint64_t records = total_records(reg);   // all of these are in `local`
    const MpiLib* lib = reg.mpi_capture && live ? mpi_lib() : nullptr;
    const MpiTables tables = lib ? read_mpi(*lib, reg.ucx) : MpiTables();   // every node named is in `local`
    if (reg.settings.trace && live) sync_trace_clock(reg);
    const TraceData traced = reg.settings.trace ? read_trace(reg, lib) : TraceData();
    const Local local = collect_local(reg);
    if (live) reg.flush_marks[1] = MPI_Wtime();
    if (live) flush_mpi(reg, set, local, lib, tables, traced);
    else flush_single(reg, set, local, traced);
    reg.flushed_records = records;
    return reg.settings.outdir;
}

// flush() unless no rank recorded anything since the last flush. Collective.
inline void flush_if_new() {
    Registry& reg = registry();
    const MpiPause pause;
    std::int64_t fresh = total_records(reg) != reg.flushed_records;
    if (mpi_live()) {
        TINYPROF_COLLECTIVE(Iallreduce, Allreduce, MPI_IN_PLACE, &fresh, 1, MPI_INT64_T, MPI_MAX, reg.settings.comm);
    }
    if (fresh) write_profile();
}

}  // namespace detail
}  // namespace TinyProf
