// Test helper: prints the canonical text of each double (hex bit pattern per line).
#include <tinyprof/detail/encoding.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

namespace format = TinyProf::detail::format;

int main(int, char** argv) {
    std::ifstream in(argv[1]);
    std::string line;
    while (std::getline(in, line)) {
        const std::uint64_t bits = std::stoull(line, nullptr, 16);
        double v;
        std::memcpy(&v, &bits, sizeof v);
        std::cout << format::format_value(v) << '\n';
    }
    return 0;
}
