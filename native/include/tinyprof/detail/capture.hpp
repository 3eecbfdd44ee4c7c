// Python twin: tinyprof/runtime/capture.py; identity: tests/native/test_mpi_capture.py
//
// MPI capture (docs/native.md, "MPI communication"): libtinyprof_mpi counts
// MPI calls under the current node; this rank's tables, read at a flush,
// become its part of the `mpi` section, which each file's aggregator merges.
#pragma once

#include <mpi.h>

#include "../tinyprof_mpi.h"
#include "event_map.hpp"
#include "mpi_section.hpp"
#include "session.hpp"
#include "settings.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace TinyProf {
namespace detail {

// The source function of tinyprof_mpi.h: a plain read of the thread-local.
inline std::int32_t current_node_id() noexcept { return current_node; }

// libtinyprof_mpi's interface (tinyprof_mpi.h), looked up with dlsym when the
// program is linked with the library or has it preloaded: no link-time dependency.
struct MpiLib {
    decltype(&tinyprof_mpi_set_source) set_source;
    decltype(&tinyprof_mpi_enable) enable;
    decltype(&tinyprof_mpi_pause) pause;
    decltype(&tinyprof_mpi_ops) ops;
    decltype(&tinyprof_mpi_peers) peers;
    decltype(&tinyprof_mpi_free) release;   // not `free`: SMPI defines free(x) as a macro
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
// Not inline, as registry().
const MpiLib* mpi_lib() {
    static const MpiLib* const lib = []() -> const MpiLib* {
        decltype(&tinyprof_mpi_abi) abi = nullptr;
        if (!lookup("tinyprof_mpi_abi", abi)) return nullptr;
        static MpiLib l;
        const int found = abi();
        if (found != TINYPROF_MPI_ABI ||
            !(lookup("tinyprof_mpi_set_source", l.set_source) && lookup("tinyprof_mpi_enable", l.enable) &&
              lookup("tinyprof_mpi_pause", l.pause) && lookup("tinyprof_mpi_ops", l.ops) &&
              lookup("tinyprof_mpi_peers", l.peers) && lookup("tinyprof_mpi_free", l.release) &&
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
    const MpiLib* lib = mpi_lib();
    if (lib == nullptr) {
        if (env_flag("TINYPROF_MPI", false))        // asked for, not only by default
            warn("TINYPROF_MPI=1 but libtinyprof_mpi is not loaded (link -ltinyprof_mpi before -lmpi, "
                 "or LD_PRELOAD it): no MPI capture");
        return false;
    }
    if (!env_flag("TINYPROF_MPI", true)) return false;
    lib->set_source(&current_node_id);
    lib->enable(1);
    return true;
}

// TINYPROF_UCX=1 (or on, true, yes): the transport view's state, "unused"
// (hooked: "used" once a UCP operation is counted) or "unavailable"; "" off.
inline std::string start_ucx(bool capture) {
    if (!env_flag("TINYPROF_UCX", false)) return "";
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
        lib.release(records);
        lib.release(strings);
    }
    t.ops = take_records(lib.ops, TP_OP_FIELDS, lib.release);
    t.peers = take_records(lib.peers, TP_PEER_FIELDS, lib.release);
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
    // `moved`: the file's line of each line of `part` (a snapshot's part,
    // whose lines are the rank's entries: the Python side's assemble.moved);
    // none: they are the file's already.
    void add_rank(std::int64_t rank, std::string_view part, const std::vector<int>* moved = nullptr) {
        auto line = [moved](std::string_view f) {
            const std::int64_t i = parse_int(f);
            return moved == nullptr || i == mpisection::kNone ? i : std::int64_t{(*moved)[static_cast<std::size_t>(i)]};
        };
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
            if (added) comms_.push_back({std::string(f[0]), parse_int(f[1]), std::string(f[2]), line(f[3])});
            at.push_back(it->second);
        }
        auto comm = [&](std::string_view c) {
            const std::int64_t i = parse_int(c);
            return i == mpisection::kNone ? i : at[static_cast<std::size_t>(i)];
        };
        for (std::size_t i = 1 + ncomms; i < 1 + ncomms + nops; ++i) {
            const auto f = split(lines[i], '|');
            ops_.push_back({rank, line(f[0]), comm(f[1]), std::string(f[2]), parse_int(f[3]), parse_int(f[4]),
                            parse_int(f[5]), parse_int(f[6])});
        }
        const std::size_t peers_end = 1 + ncomms + nops + npeers;
        for (std::size_t i = 1 + ncomms + nops; i < peers_end; ++i) {
            const auto f = split(lines[i], '|');
            peers_.push_back({rank, line(f[0]), comm(f[1]), parse_int(f[2]), parse_int(f[3]), parse_int(f[4])});
        }
        for (std::size_t i = peers_end; i + 1 < lines.size(); ++i) {
            const auto f = split(lines[i], '|');
            transport_.push_back({rank, line(f[0]), std::string(f[1]), std::string(f[2]), std::string(f[3]),
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

}  // namespace detail
}  // namespace TinyProf
