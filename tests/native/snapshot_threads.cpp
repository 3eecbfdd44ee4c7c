// Test program: a delta snapshot after another thread's occurrences were
// merged in before this thread's newer one (one callpath, two trees):
// snapshot 2 must read back as the flush that follows it. No MPI.
//     snapshot_threads OUTDIR
#include <tinyprof/tinyprof.hpp>

#include <thread>

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    TinyProf::Profiler prof("thr", 3600);
    prof.set_outdir(argv[1]).set_keep("all");
    {
        TinyProf::Event main_event("main");             // execution 0
        { TinyProf::Event work("work"); }
        std::thread([] {                                // execution 1, in a second tree
            TinyProf::Event other("main");
            { TinyProf::Event work("work"); }
            { TinyProf::Event work("work"); }
        }).join();
        if (!TinyProf::snapshot(60)) return 3;          // main<work: A1; B1 + B2
        { TinyProf::Event work("work"); }               // A2, execution 1: before B1 once merged
    }
    if (!TinyProf::snapshot(60)) return 3;
    TinyProf::flush();
    return 0;
}
