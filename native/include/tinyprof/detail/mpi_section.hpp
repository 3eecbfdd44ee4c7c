// Python twin: tinyprof/format/mpi_section.py; identity: tests/native/test_mpi_capture.py, tests/native/test_transport.py
//
// The `mpi` section's payload (docs/format.md): the same bytes as the Python
// side's encode.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace TinyProf {
namespace detail {

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

}  // namespace detail
}  // namespace TinyProf
