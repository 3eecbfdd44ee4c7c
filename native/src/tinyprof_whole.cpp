// libtinyprof_whole: the whole-program profile of an unchanged MPI binary
// (docs/native.md, "Unchanged binaries"). libtinyprof_mpi, preloaded, loads it
// at MPI_Init and calls tinyprof_whole_start, then tinyprof_whole_finish at
// MPI_Finalize. It is the C++ header's implementation with a Profiler and one
// region named after the program, as `python -m tinyprof` runs a script. Built
// with hidden symbols (but these two), so that an annotated program's own copy
// of the implementation and this one never bind to each other.
#define TINYPROF_IMPLEMENTATION
#include <tinyprof/tinyprof.hpp>

#include <cerrno>
#include <cstdlib>
#include <exception>
#include <string>

namespace {

TinyProf::Profiler* profiler = nullptr;
TinyProf::Event* region = nullptr;

std::string env(const char* name, std::string fallback) {
    const char* value = std::getenv(name);
    return value && *value ? value : fallback;
}

}  // namespace

// The profiler and the program's region, on the thread that initialised MPI
// (after MPI_Init: collective, as a Profiler is). TINYPROF_NAME and
// TINYPROF_OUTDIR name the profile and its directory, as --name and -o do for
// `python -m tinyprof`. Returns 0, or -1 after saying why it does not profile.
extern "C" __attribute__((visibility("default"))) int tinyprof_whole_start() noexcept {
    const std::string program = program_invocation_short_name;
    try {
        const std::string name = env("TINYPROF_NAME", program);
        profiler = new TinyProf::Profiler(name);
        profiler->set_outdir(env("TINYPROF_OUTDIR", name + ".tinyprof"));
        region = new TinyProf::Event(program);
        return 0;
    } catch (const std::exception& e) {
        TinyProf::detail::warn(std::string("no whole-program profile: ") + e.what());
        return -1;
    }
}

// Closes the region and writes the profile (collective), before MPI_Finalize.
// A profile that cannot be written is reported; the program goes on.
extern "C" __attribute__((visibility("default"))) void tinyprof_whole_finish() noexcept {
    delete region;
    delete profiler;            // flushes, and warns if it cannot write
    region = nullptr;
    profiler = nullptr;
}

// The program has a profiler of its own (libtinyprof_mpi saw it set its
// source): this one writes nothing, now or at MPI_Finalize.
extern "C" __attribute__((visibility("default"))) void tinyprof_whole_cancel() noexcept {
    TinyProf::detail::Registry& reg = TinyProf::detail::registry();
    std::lock_guard<std::mutex> lock(reg.mutex);
    try {
        TinyProf::detail::mark_run(reg, false);
    } catch (const std::exception&) {
    }
    reg.profiler = nullptr;
}
