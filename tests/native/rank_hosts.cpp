// Test driver: prints the run metadata's `rank_hosts` text of the host names
// read from stdin, each ended by a NUL byte, through the header's encoder; the
// Python twin is tinyprof.format.hostlist.encode (tests/native/test_native_metadata.py).
#include <tinyprof/detail/metadata.hpp>

#include <iostream>
#include <string>
#include <vector>

int main() {
    std::vector<std::string> hosts;
    for (std::string name; std::getline(std::cin, name, '\0');) hosts.push_back(name);
    std::cout << TinyProf::detail::meta::rank_hosts(hosts);
}
