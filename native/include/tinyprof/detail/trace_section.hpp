// Python twin: tinyprof/format/trace_section.py; identity: tests/native/test_native_trace.py
//
// The `trace` section (docs/format.md): one rank's block, the same bytes as
// the Python side's make_block + encode.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace TinyProf {
namespace detail {

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

}  // namespace detail
}  // namespace TinyProf
