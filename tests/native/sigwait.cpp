// Test program: an application that blocks SIGTERM and collects it later
// with sigwait() while tinyprof's snapshot thread runs: the signal is the
// application's, never the thread's (which would die of it).
//     sigwait OUTDIR
// It blocks SIGTERM, says "ready", reads a line (the signal comes meanwhile),
// then collects the pending signal.
#include <tinyprof/tinyprof.hpp>

#include <csignal>
#include <cstdio>
#include <pthread.h>

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    TinyProf::Profiler prof("sigwait", 3600);
    prof.set_outdir(argv[1]);
    { TinyProf::Event main_event("main"); }
    if (!TinyProf::snapshot(60)) return 3;      // the snapshot thread runs
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &term, nullptr);
    std::printf("ready\n");
    std::fflush(stdout);
    char line[16];
    if (!std::fgets(line, sizeof line, stdin)) return 5;
    int got = 0;
    if (sigwait(&term, &got) != 0) return 4;
    std::printf("got %d\n", got);
    return 0;
}
