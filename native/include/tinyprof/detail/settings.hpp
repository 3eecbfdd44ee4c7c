// Python twin: tinyprof/runtime/settings.py, tinyprof/_env.py (flag: env_flag); identity: tests/native/test_vectors.py
//
// The settings of a run: the Profiler's arguments, the environment variables
// that change them, and the rules derived from them (the aggregator count and
// groups).
#pragma once

#include <mpi.h>

#include "metadata.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace TinyProf {
namespace detail {

struct Settings {
    std::string name = "profile";
    double frequency = 0;
    bool trace = false;               // trace mode (docs/trace.md)
    std::int64_t trace_limit = 2000000;
    std::vector<std::pair<std::string, bool>> metrics;    // (key, consistent), in order
    std::string outdir = "profile.tinyprof";
    int aggregators = 0;              // 0: the default, max(1, P / 16)
    bool keep_last = true;            // snapshots: keep "last" (else "all")
    int chain = 32;                   // snapshots: deltas after the first full one (then doubling)
    MPI_Comm comm = MPI_COMM_WORLD;
    meta::Entries metadata;           // TINYPROF_METADATA's, then TinyProf::metadata's
    bool auto_metadata = true;        // TINYPROF_AUTO_METADATA=0: no automatic keys
    std::string meta;                 // the meta section that file 0 gets (rank 0; refresh_meta)
};

inline std::string_view trim(std::string_view s) {
    const char* ws = " \t\n\r\f\v";
    const auto b = s.find_first_not_of(ws);
    if (b == std::string_view::npos) return {};
    return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// A boolean environment variable, read as Python's tinyprof/_env.py flag()
// reads it (docs/api.md): on with 1, on, true or yes, off with 0, off, false
// or no (any case and spacing), `fallback` when unset or empty; any other
// value warns and is `fallback`. It keeps no record of warnings (a function's
// static would be one object for every rank under SimGrid SMPI): a Profiler
// reads each variable once, at its start.
inline bool env_flag(const char* name, bool fallback) {
    const char* text = std::getenv(name);
    std::string v(text ? trim(text) : std::string_view{});
    for (auto& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (v == "1" || v == "on" || v == "true" || v == "yes") return true;
    if (v == "0" || v == "off" || v == "false" || v == "no") return false;
    if (!v.empty())
        std::fprintf(stderr, "tinyprof: %s='%.40s' is neither on (1, on, true, yes) nor off (0, off, false, no); "
                     "taken as %s\n", name, std::string(trim(text)).c_str(), fallback ? "on" : "off");
    return fallback;
}

// Environment variable `name` as an integer >= 1, or 0 if unset.
template <class Int>
inline Int env_count(const char* name) {
    const char* text = std::getenv(name);
    if (text == nullptr || trim(text).empty()) return 0;
    const std::string_view v = trim(text);
    Int n = 0;
    const auto r = std::from_chars(v.data(), v.data() + v.size(), n);
    if (r.ec != std::errc() || r.ptr != v.data() + v.size() || n < 1)
        throw std::invalid_argument(std::string("tinyprof: ") + name + " must be an integer >= 1, not '" +
                                    std::string(v) + "'");
    return n;
}

// Splits "a:0,b:1" style lists at commas, trimmed, empty items dropped.
template <class F>
inline void for_each_item(std::string_view list, F&& f) {
    while (true) {
        const auto comma = list.find(',');
        const auto item = trim(list.substr(0, comma));
        if (!item.empty()) f(item);
        if (comma == std::string_view::npos) return;
        list.remove_prefix(comma + 1);
    }
}

inline std::vector<std::pair<std::string, bool>> parse_selfkeys(std::string_view selfkeys) {
    std::vector<std::pair<std::string, bool>> keys;
    for_each_item(selfkeys, [&](std::string_view item) {
        const auto colon = item.rfind(':');
        const auto flag = colon == std::string_view::npos ? std::string_view{} : item.substr(colon + 1);
        if (colon == 0 || (flag != "0" && flag != "1"))
            throw std::invalid_argument("tinyprof: bad selfkeys item '" + std::string(item) +
                                        "': expected name:0 (consistent) or name:1 (inconsistent)");
        std::string name(item.substr(0, colon));
        bool taken = name == "time";
        for (const auto& k : keys) taken = taken || k.first == name;
        if (taken)
            throw std::invalid_argument("tinyprof: metric '" + name + "' declared twice (or reserved)");
        keys.emplace_back(std::move(name), flag == "0");
    });
    return keys;
}

inline int aggregator_count(const Settings& s, int nranks) {
    int wanted = s.aggregators > 0 ? s.aggregators : nranks / 16;
    return std::min(std::max(1, wanted), nranks);
}

struct Group { int index, first, size; };

// Ranks form `naggs` contiguous groups whose sizes differ by at most one;
// the first rank of each is its aggregator (the Python side's group_of).
inline Group group_of(int rank, int nranks, int naggs) {
    const int small = nranks / naggs, extra = nranks % naggs;
    const int edge = extra * (small + 1);
    const int index = rank < edge ? rank / (small + 1) : extra + (rank - edge) / small;
    return {index, index * small + std::min(index, extra), small + (index < extra ? 1 : 0)};
}

}  // namespace detail
}  // namespace TinyProf
