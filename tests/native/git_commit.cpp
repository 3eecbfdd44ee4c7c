// Test driver: prints the commit that the C++ run metadata would record for
// each directory argument (one line each, empty for none); the Python twin is
// tinyprof.runtime.metadata.git_commit (tests/native/test_native_metadata.py).
#include <tinyprof/detail/metadata.hpp>

#include <iostream>

int main(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) std::cout << TinyProf::detail::meta::git_commit(argv[i]) << "\n";
}
