// Test program: event names that are arbitrary bytes, not all valid UTF-8,
// each entered once inside "main"; the profile is named "prof\xff".
//
//     names OUTDIR HEXNAME...      (each name's bytes in hex)
#include <tinyprof/tinyprof.hpp>

#include <string>

int main(int argc, char** argv) {
    TinyProf::Profiler prof("prof\xff");
    prof.set_outdir(argv[1]);
    TinyProf::Event main_event("main");
    for (int a = 2; a < argc; ++a) {
        const std::string hex = argv[a];
        std::string name;
        for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
            name += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
        TinyProf::Event e(name);
    }
    return 0;      // ~Profiler flushes (no MPI): "main" is still open then
}
