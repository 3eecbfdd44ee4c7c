// Test program: events recorded by worker threads (each thread its own stack
// and tree, merged at flush). argv[1]: output directory.
#include <tinyprof/tinyprof.hpp>

#include <thread>

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    TinyProf::Profiler prof("threads");
    prof.set_outdir(argv[1]);
    for (int x = 0; x < 2; ++x) {
        TinyProf::Event main_event("main");
        std::vector<std::thread> workers;
        for (int t = 0; t < 4; ++t) {
            workers.emplace_back([t] {
                TinyProf::Event task("task");              // a root event of this thread
                for (int i = 0; i < 100 + t; ++i) TinyProf::Event step("step", 1, "");
                TinyProf::Event sum("sum", 2, "");         // summed over threads too
            });
        }
        for (auto& w : workers) w.join();
        TinyProf::Event after("after");
    }
    TinyProf::flush();
    MPI_Finalize();
    return 0;
}
