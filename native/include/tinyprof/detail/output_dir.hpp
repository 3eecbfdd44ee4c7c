// Python twin: tinyprof/format/output_dir.py; identity: tests/native/test_programs.py (file names)
//
// The output directory: the files of a flush, `<outdir>/<stem>.<i>-of-<n>.tp`,
// and those of snapshot k in `<outdir>/snapshots/<k>/`, each written atomically.
#pragma once

#include "encoding.hpp"
#include "settings.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace TinyProf {
namespace detail {
namespace format {


// `<name>.<index>-of-<count>.tp`. Python keeps Unicode word characters too;
// here every non-ASCII character becomes '_' (one per code point), a name
// the Python reader and its file_name() agree with.
inline std::string file_name(std::string_view name, int index, int count) {
    std::string safe;
    for (const char ch : utf8_safe(name)) {
        const auto c = static_cast<unsigned char>(ch);
        if ((c & 0xC0) == 0x80) continue;       // UTF-8 continuation byte
        safe += (std::isalnum(c) && c < 0x80) || c == '_' || c == '.' || c == '+' || c == '-'
                    ? static_cast<char>(c) : '_';
    }
    if (safe.empty()) safe = "profile";
    std::string idx = std::to_string(index);
    const std::string cnt = std::to_string(count);
    if (idx.size() < cnt.size()) idx.insert(0, cnt.size() - idx.size(), '0');
    return safe + "." + idx + "-of-" + cnt + ".tp";
}

// The file count of `entry` if it is a file of set `stem`, else -1 (the
// Python reader's pattern `<name>.<index>-of-<count>.tp`).
inline int set_count(std::string_view entry, std::string_view stem) {
    auto all_digits = [](std::string_view s) {
        return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
    };
    if (entry.size() < 3 || entry.substr(entry.size() - 3) != ".tp") return -1;
    entry.remove_suffix(3);
    const auto of = entry.rfind("-of-");
    if (of == std::string_view::npos || !all_digits(entry.substr(of + 4))) return -1;
    const auto dot = entry.rfind('.', of);
    if (dot == std::string_view::npos || !all_digits(entry.substr(dot + 1, of - dot - 1)) ||
        entry.substr(0, dot) != stem)
        return -1;
    return std::atoi(std::string(entry.substr(of + 4)).c_str());
}

// A temporary file next to `path`, created exclusively (O_EXCL, O_NOFOLLOW)
// under a name nobody can predict: a symlink planted there cannot redirect
// the write. Its descriptor (-1 if none), its name in `tmp`.
// Not inline, as registry() (session.hpp): its counter is no GNU-unique symbol.
int create_temporary(const std::string& path, std::string& tmp) {
    static std::atomic<std::uint64_t> counter{0};
    std::uint64_t seed = static_cast<std::uint64_t>(
        std::chrono::steady_clock::now().time_since_epoch().count());
    try {
        std::random_device device;
        seed ^= (static_cast<std::uint64_t>(device()) << 32) ^ device();
    } catch (const std::exception&) {}      // no entropy source: O_EXCL still refuses a planted name
    for (int attempt = 0; attempt < 16; ++attempt) {
        char suffix[32];
        std::snprintf(suffix, sizeof suffix, "-%012llx", static_cast<unsigned long long>(
            (seed + 0x9E3779B97F4A7C15ull * ++counter) & 0xFFFFFFFFFFFFull));
        // The kernel's pid, not getpid(): SMPI makes that a per-rank call, which crashes
        // in the snapshot thread (simulated ranks share the pid; the suffix tells them apart).
        tmp = path + ".tmp" + std::to_string(::syscall(SYS_getpid)) + suffix;
        const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    return -1;
}

// One write to a temporary name, fsync, rename: readers never see half a file.
inline bool write_atomic(const std::string& path, const std::string& data) {
    std::string tmp;
    const int fd = create_temporary(path, tmp);
    if (fd < 0) return false;
    std::size_t done = 0;
    while (done < data.size()) {
        const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
        if (n < 0) break;
        done += static_cast<std::size_t>(n);
    }
    const bool ok = done == data.size() && ::fsync(fd) == 0;
    ::close(fd);
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
        ::unlink(tmp.c_str());
        return false;
    }
    return true;
}

// A run starting: if `outdir` exists (an earlier run's files may be there),
// `<outdir>/<stem>.run` names this run, so that a reader can tell when it
// left no complete profile (format/output_dir.py mark_run). A new directory needs
// no marker; a failure is left to the first write to report.
inline std::string run_marker(const std::string& outdir, std::string_view name) {
    std::string stem = file_name(name, 0, 1);
    stem.resize(stem.size() - std::string_view(".0-of-1.tp").size());
    return (std::filesystem::path(outdir) / (stem + ".run")).string();
}

inline void mark_run(const std::string& outdir, std::string_view name, std::uint64_t run) {
    std::error_code ec;
    if (std::filesystem::is_directory(outdir, ec))
        write_atomic(run_marker(outdir, name), "run " + hex16(run) + "\n");
}

// The marker of run `run` taken back (the run moved to another directory).
inline void unmark_run(const std::string& outdir, std::string_view name, std::uint64_t run) {
    const std::string path = run_marker(outdir, name);
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0) return;
    char buf[32];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    ::close(fd);
    if (n > 0 && std::string(buf, static_cast<std::size_t>(n)) == "run " + hex16(run) + "\n")
        ::unlink(path.c_str());
}

// The first four lines of `path` (its `tinyprof`, `name`, `run` and `set`
// lines), without their newlines; empty if it is not a regular file (a FIFO
// never blocks: O_NONBLOCK) or has fewer lines within 1 MiB.
inline std::vector<std::string> head_lines(const std::filesystem::path& path) {
    std::vector<std::string> lines;
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
    if (fd < 0) return lines;
    struct stat st;
    std::string data;
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        char buf[4096];
        ssize_t n;
        while (std::count(data.begin(), data.end(), '\n') < 4 && data.size() < (1u << 20) &&
               (n = ::read(fd, buf, sizeof buf)) > 0)
            data.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    std::size_t start = 0, end;
    while (lines.size() < 4 && (end = data.find('\n', start)) != std::string::npos) {
        lines.push_back(data.substr(start, end - start));
        start = end + 1;
    }
    if (lines.size() < 4) lines.clear();
    return lines;
}

}  // namespace format

// Files of older sets of this profile whose file count is not `count`.
inline std::vector<std::filesystem::path> stale_sets(const Settings& s, int count) {
    std::vector<std::filesystem::path> out;
    std::string stem = format::file_name(s.name, 0, 1);
    stem.resize(stem.size() - std::string_view(".0-of-1.tp").size());
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(s.outdir, ec)) {
        const int c = format::set_count(entry.path().filename().string(), stem);
        if (c >= 0 && c != count) out.push_back(entry.path());
    }
    return out;
}

inline void remove_stale(const Settings& s, int count) {
    for (const auto& p : stale_sets(s, count)) {
        std::error_code ec;
        std::filesystem::remove(p, ec);
    }
}

inline std::filesystem::path snapshot_dir(const Settings& s, std::int64_t k) {
    char number[24];
    std::snprintf(number, sizeof number, "%06lld", static_cast<long long>(k));
    return std::filesystem::path(s.outdir) / "snapshots" / number;
}

// Numbers of the snapshot directories, complete or not, oldest first.
inline std::vector<std::int64_t> snapshot_numbers(const Settings& s) {
    std::vector<std::int64_t> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(s.outdir) / "snapshots", ec)) {
        const std::string n = e.path().filename().string();
        if (!n.empty() && n.find_first_not_of("0123456789") == std::string::npos) out.push_back(std::stoll(n));
    }
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace detail
}  // namespace TinyProf
