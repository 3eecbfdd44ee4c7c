// Python twin: tinyprof/format/meta_section.py, tinyprof/format/hostlist.py, tinyprof/runtime/metadata.py, tinyprof/runtime/settings.py (parse_metadata); identity: tests/native/test_vectors.py
//
// The run metadata (docs/api.md, "Run metadata"): the `meta` section's
// payload (docs/format.md, "The meta section"), TINYPROF_METADATA, and the
// keys recorded automatically. Nothing here throws into or blocks the
// application but TinyProf::metadata's own argument checks.
#pragma once

#include "../tinyprof.hpp"   // TINYPROF_VERSION
#include "encoding.hpp"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <variant>
#include <vector>

namespace TinyProf {
namespace detail {
namespace meta {

using Value = std::variant<std::string, std::int64_t, double>;
using Entries = std::map<std::string, Value>;    // sorted by key, as the section

constexpr std::size_t kMaxEntries = 1024;
constexpr std::size_t kMaxValue = std::size_t{1} << 20;    // bytes of a value as written

inline std::string_view trim_ws(std::string_view s) {
    const char* ws = " \t\n\r\f\v";
    const auto b = s.find_first_not_of(ws);
    if (b == std::string_view::npos) return {};
    return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

inline bool good_key(std::string_view k) {
    if (k.empty() || k.size() > 64) return false;
    const auto alpha = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
    if (!alpha(k[0])) return false;
    for (char c : k)
        if (!alpha(c) && !(c >= '0' && c <= '9') && c != '.' && c != '-') return false;
    return true;
}

// Why key/value cannot be an entry; empty if it can (meta_section.problem).
inline std::string problem(std::string_view key, const Value& value) {
    if (!good_key(key))
        return "metadata key '" + format::escape(key) + "' must match [A-Za-z_][A-Za-z0-9_.-]* (at most 64 characters)";
    if (const auto* s = std::get_if<std::string>(&value); s && format::escape(*s).size() > kMaxValue)
        return "metadata '" + std::string(key) + "': the value is longer than " + std::to_string(kMaxValue) + " bytes";
    return {};
}

// The section's payload (meta_section.encode): `key|type|value` lines, by
// key; a string over the bound and the keys past kMaxEntries left out.
inline std::string encode(const Entries& entries) {
    std::string out;
    std::size_t n = 0;
    for (const auto& [key, value] : entries) {
        if (n == kMaxEntries) break;
        std::string text;
        if (const auto* s = std::get_if<std::string>(&value)) {
            text = format::escape(*s);
            if (text.size() > kMaxValue) continue;
            out += key + "|s|";
        } else if (const auto* i = std::get_if<std::int64_t>(&value)) {
            out += key + "|i|";
            text = std::to_string(*i);
        } else {
            out += key + "|f|";
            text = format::format_value(std::get<double>(value));
        }
        out += text + '\n';
        ++n;
    }
    return out;
}

inline int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// TINYPROF_METADATA (settings.parse_metadata): `key=value,...`, values
// percent-decoded; the entries, and the problems of the items left out.
inline std::pair<Entries, std::vector<std::string>> parse_env(std::string_view text) {
    Entries entries;
    std::vector<std::string> problems;
    while (true) {
        const auto comma = text.find(',');
        const std::string_view item = text.substr(0, comma);
        if (!item.empty()) {
            const auto eq = item.find('=');
            if (eq == std::string_view::npos) {
                problems.push_back("item '" + format::escape(item) + "' is not key=value");
            } else {
                const std::string key(item.substr(0, eq));
                const std::string_view raw = item.substr(eq + 1);
                std::string value;
                bool bad = false;
                for (std::size_t i = 0; i < raw.size(); ++i) {
                    if (raw[i] != '%') {
                        value += raw[i];
                    } else if (i + 2 < raw.size() && hex_digit(raw[i + 1]) >= 0 && hex_digit(raw[i + 2]) >= 0) {
                        value += static_cast<char>(hex_digit(raw[i + 1]) * 16 + hex_digit(raw[i + 2]));
                        i += 2;
                    } else {
                        bad = true;
                        break;
                    }
                }
                std::string why = bad ? "value of '" + format::escape(key) + "' has a '%' not followed by two hex digits"
                                      : problem(key, value);
                if (why.empty() && entries.count(key)) why = "key '" + key + "' given twice";
                if (why.empty()) entries.emplace(key, std::move(value));
                else problems.push_back(std::move(why));
            }
        }
        if (comma == std::string_view::npos) break;
        text.remove_prefix(comma + 1);
    }
    return {std::move(entries), std::move(problems)};
}

// A word of the command line as Python's shlex.quote writes it.
inline std::string shell_quote(std::string_view word) {
    if (word.empty()) return "''";
    bool safe = true;
    for (char c : word)
        safe = safe && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                        std::string_view("@%+=:,./_-").find(c) != std::string_view::npos);
    if (safe) return std::string(word);
    std::string out = "'";
    for (char c : word) out += c == '\'' ? std::string("'\"'\"'") : std::string(1, c);
    return out + "'";
}

inline std::string read_head(const std::filesystem::path& p, std::size_t most = 4096) {
    std::ifstream in(p, std::ios::binary);
    std::string text(most, '\0');
    in.read(text.data(), static_cast<std::streamsize>(most));
    text.resize(static_cast<std::size_t>(in.gcount()));
    return text;
}

// The process's command line, each argument quoted as shlex.join does.
inline std::string command_line() {
    const std::string raw = read_head("/proc/self/cmdline", std::size_t{1} << 20);
    std::string out;
    std::size_t start = 0;
    while (start < raw.size()) {
        auto end = raw.find('\0', start);
        if (end == std::string::npos) end = raw.size();
        out += (out.empty() ? "" : " ") + shell_quote(std::string_view(raw).substr(start, end - start));
        start = end + 1;
    }
    return out;
}

inline std::string first_line(const std::filesystem::path& p) {
    const std::string text = read_head(p);
    return std::string(trim_ws(std::string_view(text).substr(0, text.find('\n'))));
}

inline bool is_commit(std::string_view s) {
    if (s.size() != 40 && s.size() != 64) return false;
    for (char c : s)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    return true;
}

inline bool good_ref(std::string_view r) {
    if (r.size() < 6 || r.size() > 205 || r.substr(0, 5) != "refs/" || r.find("..") != std::string_view::npos)
        return false;
    for (char c : r)
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              std::string_view("_./+@-").find(c) != std::string_view::npos))
            return false;
    return true;
}

// The commit checked out in the git work tree holding `dir` (metadata.git_commit):
// HEAD, the refs and packed-refs read directly; empty when none.
inline std::string git_commit(std::filesystem::path dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path gitdir;
    dir = fs::absolute(dir, ec);
    if (ec) return {};
    for (;; dir = dir.parent_path()) {       // ec below: the path is not there, go up
        const fs::path dotgit = dir / ".git";
        if (fs::is_directory(dotgit, ec)) {
            gitdir = dotgit;
            break;
        }
        if (fs::is_regular_file(dotgit, ec)) {
            const std::string link = first_line(dotgit);
            if (link.rfind("gitdir: ", 0) != 0) return {};
            gitdir = dir / link.substr(8);
            break;
        }
        if (dir == dir.parent_path()) return {};
    }
    fs::path common = gitdir;
    if (fs::is_regular_file(gitdir / "commondir", ec)) common = gitdir / first_line(gitdir / "commondir");
    std::string head = first_line(gitdir / "HEAD");
    for (int hops = 0; hops < 5; ++hops) {
        if (is_commit(head)) return head;
        const std::string ref = head.rfind("ref: ", 0) == 0 ? head.substr(5) : std::string();
        if (!good_ref(ref)) return {};
        if (fs::is_regular_file(gitdir / ref, ec)) {
            head = first_line(gitdir / ref);
        } else if (fs::is_regular_file(common / ref, ec)) {
            head = first_line(common / ref);
        } else {
            std::ifstream packed(common / "packed-refs");
            for (std::string line; std::getline(packed, line);) {
                const std::string_view l = trim_ws(line);
                const auto space = l.find(' ');
                if (space != std::string_view::npos && l.substr(space + 1) == ref && is_commit(l.substr(0, space)))
                    return std::string(l.substr(0, space));
            }
            return {};
        }
    }
    return {};
}

// The directory of the program (/proc/self/exe), else the working directory.
inline std::filesystem::path app_directory() {
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? std::filesystem::current_path(ec) : exe.parent_path();
}

inline std::string local_hostname() {
    char name[256] = {};
    gethostname(name, sizeof name - 1);
    return name;
}

// The host of each rank as one line (format/hostlist.py's encode): runs of
// one name as NAME*N (NAME alone for one rank), joined by `,`; `%`, `,` and
// `*` in a name written %25, %2C, %2A. Empty when there is nothing to name:
// no rank, or an empty name.
inline std::string rank_hosts(const std::vector<std::string>& hosts) {
    std::string out;
    for (std::size_t i = 0; i < hosts.size();) {
        if (hosts[i].empty()) return {};
        std::size_t j = i + 1;
        while (j < hosts.size() && hosts[j] == hosts[i]) ++j;
        if (!out.empty()) out += ',';
        for (char c : hosts[i]) out += c == '%' ? "%25" : c == ',' ? "%2C" : c == '*' ? "%2A" : std::string(1, c);
        if (j - i > 1) out += '*' + std::to_string(j - i);
        i = j;
    }
    return out;
}

// The automatic keys (metadata.automatic): rank 0's start, every rank's host
// (rank order), the MPI library's version text (none without MPI).
inline Entries automatic(std::time_t start, const std::vector<std::string>& hosts,
                         const std::optional<std::string>& mpi_library) {
    const std::set<std::string> nodes(hosts.begin(), hosts.end());
    std::string joined;
    for (const auto& n : nodes) joined += (joined.empty() ? "" : ",") + n;
    std::tm tm{};
    gmtime_r(&start, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    Entries out{{"start", std::string(stamp)},
                {"command", command_line()},
                {"hostnames", joined},
                {"nranks", static_cast<std::int64_t>(hosts.size())},
                {"nodes", static_cast<std::int64_t>(nodes.size())},
                {"tinyprof", std::string(TINYPROF_VERSION)},
                {"writer", std::string("c++")}};
    std::string per_rank = rank_hosts(hosts);
    if (!per_rank.empty()) out["rank_hosts"] = std::move(per_rank);
    if (mpi_library) out["mpi_library"] = std::string(trim_ws(mpi_library->substr(0, mpi_library->find('\n'))));
    std::string commit = git_commit(app_directory());
    if (!commit.empty()) out["git"] = std::move(commit);
    return out;
}

}  // namespace meta
}  // namespace detail
}  // namespace TinyProf
