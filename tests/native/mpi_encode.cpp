// Prints the `mpi` section payload of the rows read from stdin, through the
// header's encoder: the codec identity tests (test_mpi_capture.py,
// test_transport.py) compare it with tinyprof/format/mpi_section.py's encode.
// One row a line, fields separated by spaces, `-` for NONE (or no member):
//   comm <name> <size> <created> <member,member,...>
//   op <rank> <line> <comm> <op> <bucket> <calls> <bytes> <time>
//   peer <rank> <line> <comm> <peer> <messages> <bytes>
//   transport <rank>|<line>|<op>|<ucp>|<protocol>|<transport>|<calls>|<bytes>   (empty line: NONE)
//   ucx <rank> <state>
#include <tinyprof/detail/mpi_section.hpp>

#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace mp = TinyProf::detail::mpisection;

static std::int64_t number(const std::string& text) {
    return text == "-" || text.empty() ? mp::kNone : std::stoll(text);
}

static std::vector<std::int32_t> members(const std::string& text) {
    std::vector<std::int32_t> out;
    if (text == "-") return out;
    std::stringstream items(text);
    for (std::string item; std::getline(items, item, ',');) out.push_back(std::stoi(item));
    return out;
}

int main() {
    std::vector<mp::Comm> comms;
    std::vector<mp::OpRow> ops;
    std::vector<mp::PeerRow> peers;
    std::vector<mp::TransportRow> transport;
    std::vector<mp::StateRow> ucx;
    for (std::string line; std::getline(std::cin, line);) {
        std::istringstream in(line);
        std::string kind, a, b, c, d, e, f, g, h;
        in >> kind;
        if (kind == "transport") {
            std::vector<std::string> v;
            std::stringstream fields(line.substr(kind.size() + 1));
            for (std::string item; std::getline(fields, item, '|');) v.push_back(item);
            v.resize(8);
            transport.push_back({number(v[0]), number(v[1]), v[2], v[3], v[4], v[5], number(v[6]), number(v[7])});
            continue;
        }
        in >> a >> b;
        if (kind == "ucx") {
            ucx.push_back({number(a), b});
            continue;
        }
        in >> c >> d;
        if (kind == "comm") {
            comms.push_back({a, number(b), mp::encode_members(members(d)), number(c)});
        } else if (kind == "op") {
            in >> e >> f >> g >> h;
            ops.push_back({number(a), number(b), number(c), d, number(e), number(f), number(g), number(h)});
        } else {
            in >> e >> f;
            peers.push_back({number(a), number(b), number(c), number(d), number(e), number(f)});
        }
    }
    std::cout << mp::encode(comms, ops, peers, transport, ucx);
    return 0;
}
