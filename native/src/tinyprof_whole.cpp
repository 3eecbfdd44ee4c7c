// libtinyprof_whole: the whole-program profile of an unchanged MPI binary
// (docs/native.md, "Unchanged binaries"). libtinyprof_mpi, preloaded, loads it
// at MPI_Init and calls tinyprof_whole_start, then tinyprof_whole_finish at
// MPI_Finalize (or tinyprof_whole_cancel when the program turns out to have a
// profiler of its own). It is the C++ header's implementation with a Profiler
// and one region named after the program, as `python -m tinyprof` runs a
// script. Built with every symbol hidden but these three, so that an annotated
// program's own copy of the implementation and this one never bind to each other.
#define TINYPROF_IMPLEMENTATION
#include <tinyprof/tinyprof.hpp>

#include <dlfcn.h>
#include <execinfo.h>
#include <limits.h>
#include <link.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

using TinyProf::detail::Node;

TinyProf::Profiler* profiler = nullptr;
TinyProf::Event* region = nullptr;
Node* region_node = nullptr;        // the program's region, in the tree of the thread that initialised MPI

// The source function: the thread's current node, the program's region for
// a thread outside any (every thread but the one that opened it).
std::int32_t whole_node() noexcept {
    const std::int32_t node = TinyProf::detail::current_node;
    return node != 0 ? node : region_node->id;
}

std::string env(const char* name, std::string fallback) {
    const char* value = std::getenv(name);
    return value && *value ? value : fallback;
}

// ----- Call sites (TINYPROF_SITES=K): each MPI call is charged to a node
// below the current one per frame of the K innermost frames of the program
// that lead to it (outermost first), named by return address at the call and
// resolved only when the profile is written.

int site_depth = 0;
void* (*wrapped_caller)() = nullptr;        // libtinyprof_mpi's tinyprof_mpi_caller, for depth 1
const void* own_bases[2];                   // libtinyprof_mpi's and this library's load addresses
std::mutex sites_mutex;
std::vector<std::pair<Node*, void*>> site_nodes;    // every site node, with its return address

// Whether frame `pc` is the program's: not in tinyprof nor in the MPI library
// (libmpi, libmpifort). Cached per thread; dladdr only for a new address.
bool programs(void* pc) {
    thread_local std::unordered_map<void*, bool> known;
    const auto [it, added] = known.try_emplace(pc, false);
    if (added) {
        Dl_info di;
        it->second = dladdr(pc, &di) == 0 || (di.dli_fbase != own_bases[0] && di.dli_fbase != own_bases[1] &&
                                              std::strstr(di.dli_fname, "/libmpi") == nullptr);
    }
    return it->second;
}

// The source function with call sites: the thread's current node, then a
// child per site frame. Never resolves a name: a new node is named by its
// return address until the flush.
std::int32_t site_node() noexcept {
    void* frames[16 + 8];
    void* sites[16];
    int k = 0;
    // depth 1: the wrapper's own return address when it is the program's (not
    // a Fortran binding's), without unwinding
    void* const caller = site_depth == 1 && wrapped_caller ? wrapped_caller() : nullptr;
    if (caller != nullptr && programs(caller)) {
        sites[k++] = caller;
    } else {
        // the unwinding's cost grows with the frames it walks: only as many as the
        // K sites need, after tinyprof's own three and a Fortran binding's few
        const int n = backtrace(frames, site_depth + 8);
        for (int i = 0; i < n && k < site_depth; ++i)
            if (programs(frames[i])) sites[k++] = frames[i];
    }
    TinyProf::detail::Tree& t = TinyProf::detail::tree();
    Node* node = t.current != &t.root ? t.current : region_node;
    thread_local std::map<std::pair<Node*, void*>, Node*> made;
    for (int j = k - 1; j >= 0; --j) {
        Node*& child = made[{node, sites[j]}];
        if (child == nullptr) {
            char name[24];
            std::snprintf(name, sizeof name, "%p", sites[j]);
            child = node->child(name, 0, true, t.mutex);
            const std::lock_guard<std::mutex> lock(sites_mutex);
            site_nodes.emplace_back(child, sites[j]);
        }
        node = child;
    }
    return node->id;
}

// `function (object+0xoffset)`: the exported function holding the call
// (dladdr: a -rdynamic executable's or a library's; `?` for a static one) and
// the call's address in its object as linked (pc - load bias: what
// `addr2line -e object 0xoffset` takes, PIE or not). Adds the object to
// `objects` (its name in the site names -> its file).
std::string site_name(void* pc, std::map<std::string, std::string>& objects) {
    Dl_info di;
    link_map* map = nullptr;
    const auto at = reinterpret_cast<std::uintptr_t>(pc) - 1;     // inside the call instruction
    if (dladdr1(pc, &di, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0 || map == nullptr)
        return "? (" + std::to_string(at) + ")";
    const char* slash = std::strrchr(di.dli_fname, '/');
    const std::string object = slash ? slash + 1 : di.dli_fname;
    const std::string file = *map->l_name ? map->l_name : "/proc/self/exe";      // "": the executable
    const auto [it, added] = objects.try_emplace(object, file);
    if (!added && it->second != file) it->second.clear();     // two objects of one name: neither resolved
    char offset[24];
    std::snprintf(offset, sizeof offset, "+0x%zx", static_cast<std::size_t>(at - map->l_addr));
    return std::string(di.dli_sname ? di.dli_sname : "?") + " (" + object + offset + ")";
}

// The run metadata's `site_objects`: a line `name<TAB>size<TAB>mtime_ns<TAB>path`
// per object the sites are in (rank 0's: it writes the metadata), so that the
// reader resolves the offsets to lines with addr2line, and only in the same
// file (docs/native.md, "Unchanged binaries").
void describe_objects(const std::map<std::string, std::string>& objects) {
    std::string lines;
    for (const auto& [object, file] : objects) {
        char path[PATH_MAX];
        struct stat st;
        if (file.empty() || realpath(file.c_str(), path) == nullptr || stat(path, &st) != 0 ||
            object.find_first_of("\t\n\r") != std::string::npos || std::strpbrk(path, "\n\r") != nullptr)
            continue;
        const long long mtime = static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
        lines += object + "\t" + std::to_string(static_cast<long long>(st.st_size)) + "\t" + std::to_string(mtime) +
                 "\t" + path + "\n";
    }
    if (!lines.empty()) TinyProf::metadata("site_objects", lines);
}

// The source of the capture the Profiler started: whole_node, or
// site_node with TINYPROF_SITES=K.
void set_source() {
    const TinyProf::detail::MpiLib* lib = TinyProf::detail::mpi_lib();
    site_depth = std::min(std::atoi(env("TINYPROF_SITES", "0").c_str()), 16);
    Dl_info di;
    if (site_depth > 0) {
        own_bases[0] = dladdr(reinterpret_cast<void*>(lib->enable), &di) ? di.dli_fbase : nullptr;
        own_bases[1] = dladdr(reinterpret_cast<void*>(&site_node), &di) ? di.dli_fbase : nullptr;
        wrapped_caller = reinterpret_cast<void* (*)()>(dlsym(RTLD_DEFAULT, "tinyprof_mpi_caller"));
    }
    lib->set_source(site_depth > 0 ? &site_node : &whole_node);
}

// Names the site nodes, before the flush writes them, and describes their objects.
void name_sites() {
    const std::lock_guard<std::mutex> lock(sites_mutex);
    if (site_nodes.empty()) return;
    std::map<std::string, std::string> objects;
    for (const auto& [node, pc] : site_nodes) node->name = site_name(pc, objects);
    describe_objects(objects);
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
        try {
            profiler->set_outdir(env("TINYPROF_OUTDIR", name + ".tinyprof"));
        } catch (const std::exception&) {   // its run marker (rank 0 only): the flush reports the directory
        }
        region = new TinyProf::Event(program);
        region_node = TinyProf::detail::tree().current;
        if (TinyProf::detail::registry().mpi_capture) set_source();
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
    try {
        name_sites();
    } catch (const std::exception&) {       // out of memory, a value too long: sites unnamed or unresolvable
    }
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
