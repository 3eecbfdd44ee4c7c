// Python twin: tinyprof/runtime/assemble.py, tinyprof/format/encoding.py (encode_file); identity: tests/native/test_vectors.py
//
// One assembler of file contents, for the flush and the snapshots alike: the
// name table, the header, the events table, the sections and the end line.
#pragma once

#include "../tinyprof.hpp"   // TINYPROF_VERSION
#include "capture.hpp"
#include "collect.hpp"
#include "encoding.hpp"
#include "settings.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace TinyProf {
namespace detail {

// Names in order of first use along the entries, and each entry's name id.
inline std::vector<std::string> name_table(const Callpaths& paths, std::vector<std::size_t>* ids_out) {
    std::vector<std::string> names;
    std::unordered_map<std::string_view, std::size_t> ids;
    for (const auto& n : paths.name) {
        const auto it = ids.try_emplace(n, names.size()).first;
        if (it->second == names.size()) names.push_back(n);
        if (ids_out) ids_out->push_back(it->second);
    }
    return names;
}

struct FileHeader {
    int nranks, first, count, index, nfiles;
    std::vector<std::int64_t> executions;
};

// Which set a file belongs to: the `run` and `set <kind> N` lines
// (`set flush N`, `set snapshot K`).
struct SetId {
    std::uint64_t run;
    std::int64_t number;
    const char* kind = "flush";
    std::int64_t over = -1;           // a delta snapshot's base (`set snapshot K over J`)
};

// A section of a file: its name and payload.
using Sections = std::vector<std::pair<std::string, std::string>>;

// The whole file (the Python side's encode_file), format version 3.
// fields(r, i) is rank first+r's field of callpath i; `sections` follow.
template <class Fields>
inline std::string encode_file(const Settings& s, const SetId& set, const FileHeader& h,
                               const Callpaths& paths, const std::vector<std::string>& consistent,
                               Fields&& fields, const Sections& sections = {}) {
    std::vector<std::size_t> ids;
    const auto names = name_table(paths, &ids);
    std::string out = "tinyprof 3\nname " + format::escape(s.name) + "\nrun " + format::hex16(set.run) +
                      "\nset " + set.kind + " " + std::to_string(set.number) +
                      (set.over < 0 ? std::string() : " over " + std::to_string(set.over)) + "\nnranks " +
                      std::to_string(h.nranks) + "\nranks " + std::to_string(h.first) + " " +
                      std::to_string(h.count) + "\nfile " + std::to_string(h.index) + " " +
                      std::to_string(h.nfiles) + "\nunit ns\nmetrics ";
    for (std::size_t k = 0; k < s.metrics.size(); ++k)
        out += (k ? " " : "") + format::escape(s.metrics[k].first, true) +
               (s.metrics[k].second ? ":0" : ":1");
    out += "\ncreated " + format::created_now() + "\nversion " TINYPROF_VERSION "\nexecutions " +
           format::rle(h.executions) + "\nnames " + std::to_string(names.size()) + "\n";
    for (const auto& n : names) out += format::escape(n) + "\n";
    out += "events " + std::to_string(paths.size()) + "\n";
    for (std::size_t i = 0; i < paths.size(); ++i) {
        if (paths.parent[i] >= 0) out += std::to_string(paths.parent[i]) + ":";
        out += std::to_string(ids[i]) + "|" + std::to_string(paths.loop[i]) + "|";
        out += consistent[i];
        for (int r = 0; r < h.count; ++r) {
            out += '|';
            out += fields(r, i);
        }
        out += '\n';
    }
    for (const auto& [name, payload] : sections)
        out += "section " + name + " " + std::to_string(payload.size()) + "\n" + payload + "\n";
    if (h.index == 0 && !s.meta.empty())      // the run's metadata: file 0's last section (SetLabel.tail)
        out += "section meta " + std::to_string(s.meta.size()) + "\n" + s.meta + "\n";
    char end[16];
    std::snprintf(end, sizeof end, "end %08x\n", static_cast<unsigned>(format::crc32(out)));
    return out + end;
}

// A callpath's consistent field from its ranks' (lowest rank first): per
// metric, the lowest rank's value.
inline std::string merge_consistent(const std::vector<std::string_view>& ranks) {
    std::vector<std::string_view> merged;
    for (std::string_view given : ranks) {
        for (std::size_t k = 0; !given.empty(); ++k) {
            const auto comma = given.find(',');
            const auto token = given.substr(0, comma);
            if (k == merged.size()) merged.push_back(token);
            else if (merged[k].empty()) merged[k] = token;
            given = comma == std::string_view::npos ? std::string_view{} : given.substr(comma + 1);
        }
    }
    std::string out;
    for (std::size_t k = 0; k < merged.size(); ++k) {
        if (k) out += ',';
        out += merged[k];
    }
    return out;
}


// The file of `parts` (consecutive ranks, lowest first), as the Python side's
// assemble: the union of their callpaths in order of first
// appearance, the lowest rank's loop mode (mode 2 gives way) and consistent
// values; the listed rank fields in the event lines, or for a delta
// (set.over >= 0) in a `delta` section; the parts' `mpi` sections merged
// into the file's, their lines moved to the file's.
inline std::string assemble(const Settings& s, const SetId& set, FileHeader h, const std::vector<Part>& parts) {
    Callpaths paths;
    std::vector<std::vector<int>> line_of(parts.size());
    for (std::size_t r = 0; r < parts.size(); ++r) {
        const Part& p = parts[r];
        for (std::size_t i = 0; i < p.name.size(); ++i)
            line_of[r].push_back(paths.add(p.parent[i] < 0 ? -1 : line_of[r][static_cast<std::size_t>(p.parent[i])],
                                           p.name[i], p.loop[i]));
    }
    std::vector<std::vector<std::string_view>> field(parts.size(), std::vector<std::string_view>(paths.size()));
    std::vector<std::vector<std::string_view>> given(paths.size(), std::vector<std::string_view>(parts.size()));
    std::vector<std::tuple<std::size_t, std::size_t, std::int64_t, std::string_view>> splices;  // line, r, keep, bytes
    for (std::size_t r = 0; r < parts.size(); ++r) {
        h.executions.push_back(parts[r].executions);
        for (std::size_t i = 0; i < line_of[r].size(); ++i) {
            const auto line = static_cast<std::size_t>(line_of[r][i]);
            given[line][r] = parts[r].consistent[i];
            if (!parts[r].listed[i]) continue;
            if (set.over >= 0) splices.emplace_back(line, r, parts[r].keep[i], parts[r].field[i]);
            else field[r][line] = parts[r].field[i];
        }
    }
    std::vector<std::string> consistent;
    for (const auto& g : given) consistent.push_back(merge_consistent(g));
    Sections sections;
    MpiFile mpi;
    bool captured = false;
    for (std::size_t r = 0; r < parts.size(); ++r) {
        if (parts[r].mpi.empty()) continue;
        mpi.add_rank(h.first + static_cast<std::int64_t>(r), parts[r].mpi, &line_of[r]);
        captured = true;
    }
    if (captured) sections.emplace_back("mpi", mpi.payload());
    if (set.over >= 0) {        // the delta section (docs/format.md): rows, then their bytes
        std::sort(splices.begin(), splices.end());
        std::string payload = "fields " + std::to_string(splices.size()) + "\n";
        for (const auto& [line, r, keep, bytes] : splices)
            payload += std::to_string(line) + "|" + std::to_string(h.first + static_cast<int>(r)) + "|" +
                       std::to_string(keep) + "|" + std::to_string(bytes.size()) + "\n";
        for (const auto& splice : splices) payload += std::get<3>(splice);
        sections.emplace_back("delta", std::move(payload));
    }
    return encode_file(s, set, h, paths, consistent,
                       [&](int r, std::size_t i) { return field[static_cast<std::size_t>(r)][i]; }, sections);
}

}  // namespace detail
}  // namespace TinyProf
