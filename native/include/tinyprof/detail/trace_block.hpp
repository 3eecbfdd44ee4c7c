// Python twin: tinyprof/runtime/trace_block.py; identity: tests/native/test_native_trace.py
//
// Trace mode (docs/trace.md): what this rank traced, read at a flush, and its
// block of the `trace` section.
#pragma once

#include "../tinyprof_mpi.h"
#include "capture.hpp"
#include "event_map.hpp"
#include "session.hpp"
#include "trace_section.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace TinyProf {
namespace detail {

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
    for (Tree* t : trees(reg)) {
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
    lib->release(calls);
    lib->release(eps);
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

// This rank's block: nodes become the lines
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

}  // namespace detail
}  // namespace TinyProf
