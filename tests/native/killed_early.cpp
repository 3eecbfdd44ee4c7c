// Test program: a run killed before it wrote anything, in an output
// directory an earlier run used: its run marker says so to the reader.
//     killed_early DEFAULT_DIR OUTDIR
// The Profiler starts in DEFAULT_DIR and moves to OUTDIR (set_outdir), which
// takes its mark back from DEFAULT_DIR.
#include <tinyprof/tinyprof.hpp>

#include <csignal>

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    TinyProf::Profiler prof("app");
    prof.set_outdir(argv[1]);
    prof.set_outdir(argv[2]);
    { TinyProf::Event main_event("main"); }
    std::raise(SIGKILL);
    return 0;
}
