// Prints the `trace` block of the rows read from stdin, through the header's
// encoder: the codec identity test (test_trace.py) compares it with
// the Python side's make_block + encode (tinyprof/format/trace_section.py). One row a line, fields
// separated by spaces, `-` for NONE:
//   rank <r> <local0> <offset0> <local1> <offset1> <error> <dropped events> <dropped calls>
//   comm <name>
//   ev <tid> <line> <start> <dur>
//   call <tid> <line> <start> <dur> <op> <comm> <bytes> <root>
//   ep <call> <kind> <peer> <tag> <bytes> <comm>
#include <tinyprof/detail/trace_section.hpp>

#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace tr = TinyProf::detail::trace;

static std::int64_t number(const std::string& text) { return text == "-" ? tr::kNone : std::stoll(text); }

int main() {
    std::int64_t rank = 0, dropped_events = 0, dropped_calls = 0;
    tr::Clock clock{};
    std::vector<std::string> comms;
    std::vector<tr::EventRow> events;
    std::vector<tr::CallRow> calls;
    std::vector<tr::Endpoint> eps;
    for (std::string line; std::getline(std::cin, line);) {
        std::istringstream in(line);
        std::string kind;
        in >> kind;
        std::vector<std::string> f;
        for (std::string x; in >> x;) f.push_back(x);
        if (kind == "rank") {
            rank = number(f[0]);
            clock = {number(f[1]), number(f[2]), number(f[3]), number(f[4]), number(f[5])};
            dropped_events = number(f[6]);
            dropped_calls = number(f[7]);
        } else if (kind == "comm") {
            comms.push_back(f[0]);
        } else if (kind == "ev") {
            events.push_back({number(f[0]), number(f[1]), number(f[2]), number(f[3])});
        } else if (kind == "call") {
            calls.push_back({number(f[0]), number(f[1]), number(f[2]), number(f[3]), f[4], number(f[5]),
                             number(f[6]), number(f[7])});
        } else {
            eps.push_back({number(f[0]), number(f[1]), number(f[2]), number(f[3]), number(f[4]), number(f[5])});
        }
    }
    std::cout << tr::encode_block(rank, clock, events, calls, eps, comms, dropped_events, dropped_calls);
    return 0;
}
