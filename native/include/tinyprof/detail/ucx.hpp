// Python twin: tinyprof/runtime/ucx.py; identity: tests/native/test_transport.py
//
// The transport view's classification: the protocol and transport UCX
// selects for an operation, looked up in the protocol tables UCX printed for
// its endpoint (ucp_ep_print_info). docs/mpi.md, "Transports".
#pragma once

#include "../tinyprof_mpi.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace TinyProf {
namespace detail {

namespace ucx {

// TP_UCP_* names, in code order.
inline std::string op_name(int code) {
    static const char* const names[] = {"tag_send", "tag_send_sync", "tag_recv", "tag_msg_recv",
                                        "am_send",  "am_recv_data",  "put",      "get"};
    const int base = code & 15;
    return base < 8 ? names[base] : "ucp" + std::to_string(base);
}

// The start of the title of the table operation `code` is selected by, up to
// the memory part; "" for receives.
inline std::string title(int code) {
    static const char* const titles[] = {"tagged message by ucp_tag_send*",
                                         "synchronous tagged message by ucp_tag_send_sync*", nullptr, nullptr,
                                         "active message by ucp_am_send*", nullptr,
                                         "remote memory write by ucp_put*", "remote memory read by ucp_get*"};
    const int base = code & 15;
    if (base >= 8 || titles[base] == nullptr) return "";
    std::string out = titles[base];
    if (code & TP_UCP_REPLY) out += " with reply flag";
    std::string flags;
    if (code & TP_UCP_FAST) flags = "fast-completion";
    if (code & TP_UCP_MULTI) flags += std::string(flags.empty() ? "" : ",") + "multi";
    return flags.empty() ? out : out + "(" + flags + ")";
}

struct Range {
    double low, high;
    std::string protocol, transport;
};
using Tables = std::map<std::string, std::vector<Range>>;

inline std::string_view strip(std::string_view s, std::string_view chars) {
    const auto a = s.find_first_not_of(chars);
    if (a == std::string_view::npos) return {};
    return s.substr(a, s.find_last_not_of(chars) - a + 1);
}

// A size as UCX prints it: `93`, `256K`, `inf`; NaN if not one.
inline double size_of(std::string_view text) {
    if (text == "inf") return std::numeric_limits<double>::infinity();
    double unit = 1;
    if (!text.empty()) {
        const auto at = std::string_view("KMGT").find(text.back());
        if (at != std::string_view::npos) {
            unit = std::ldexp(1.0, 10 * static_cast<int>(at + 1));
            text.remove_suffix(1);
        }
    }
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < 0)
        return std::numeric_limits<double>::quiet_NaN();
    return static_cast<double>(v) * unit;
}

// The tables of a ucp_ep_print_info text, by title (without the configuration cell).
inline Tables parse_tables(std::string_view text) {
    Tables tables;
    std::vector<Range>* current = nullptr;
    while (!text.empty()) {
        const auto end = text.find('\n');
        const std::string_view line = text.substr(0, end);
        text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
        if (line.empty() || line[0] != '|') continue;
        std::vector<std::string_view> cells;
        std::string_view rest = strip(line, "|");
        while (true) {
            const auto bar = rest.find('|');
            cells.push_back(strip(rest.substr(0, bar), " \t\r\n\v\f"));
            if (bar == std::string_view::npos) break;
            rest.remove_prefix(bar + 1);
        }
        if (cells.size() == 2) {
            current = &tables[std::string(cells[1])];
        } else if (cells.size() == 3 && current != nullptr) {
            std::string_view protocol = cells[1];
            if (protocol.substr(0, 4) == "(?) ") protocol.remove_prefix(4);
            if (cells[0].empty() && !current->empty()) {      // a protocol's further lanes
                current->back().transport += ", " + std::string(cells[2]);
                continue;
            }
            const auto dots = cells[0].find("..");
            const std::string_view low = cells[0].substr(0, dots);
            const std::string_view high = dots == std::string_view::npos ? low : cells[0].substr(dots + 2);
            const double lo = size_of(low), hi = size_of(high.empty() ? low : high);
            if (!std::isnan(lo) && !std::isnan(hi))
                current->push_back({lo, hi, std::string(protocol), std::string(cells[2])});
        }
    }
    return tables;
}

// The (protocol, transport) UCX selects for operation `code` of `size` bytes
// from host memory; empty when not known.
inline std::pair<std::string, std::string> classify(const Tables& tables, int code, std::int64_t size) {
    const std::string head = title(code);
    if (head.empty() || (code & TP_UCP_NONCONTIG)) return {};
    for (const char* memory : {" from host memory", " into host memory"}) {
        // RMA titles go on with the remote memory (" to host"): the first in title order
        const std::string exact = head + memory;
        auto found = tables.find(exact);
        if (found == tables.end()) found = tables.lower_bound(exact + " ");
        if (found == tables.end() ||
            (found->first != exact && found->first.compare(0, exact.size() + 1, exact + " ") != 0))
            continue;
        for (const Range& r : found->second)
            if (r.low <= static_cast<double>(size) && static_cast<double>(size) <= r.high)
                return {r.protocol, r.transport};
    }
    return {};
}

}  // namespace ucx

}  // namespace detail
}  // namespace TinyProf
